// vgpu_probe: a CUDA driver-API program the libvgpu integration tests run,
// with and without libvgpu.so preloaded, against the simulated driver. It
// executes the operations named on its command line in order and prints one
// line per result ("<op> <CUresult> [values]"), so a test can assert what an
// application would observe. Nothing here knows about libvgpu.
//
//   vgpu_probe init ctx:0 alloc:100 meminfo free ...
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <nvml.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "vgpu/region_layout.h"

// Entry points of ABIs older than cuda.h's current names, which drivers still
// export for programs built against older CUDA versions. Declared weak: a
// program built against an older libcuda would link them; here they resolve
// at run time to whatever provides them (nothing, for names the simulator
// does not export).
#undef cuCtxCreate
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuDeviceTotalMem
#undef cuMemGetInfo
#undef cuMemAlloc
#undef cuMemAllocPitch
#undef cuArrayCreate
#undef cuArray3DCreate
struct ArrayDescriptorV1 {  // CUDA_ARRAY_DESCRIPTOR before CUDA 3.2
  unsigned int Width, Height;
  CUarray_format Format;
  unsigned int NumChannels;
};
struct Array3DDescriptorV1 {
  unsigned int Width, Height, Depth;
  CUarray_format Format;
  unsigned int NumChannels, Flags;
};
extern "C" {
CUresult cuCtxCreate(CUcontext*, unsigned int, CUdevice) __attribute__((weak));
CUresult cuCtxDestroy(CUcontext) __attribute__((weak));
CUresult cuDevicePrimaryCtxRelease(CUdevice) __attribute__((weak));
CUresult cuDevicePrimaryCtxReset(CUdevice) __attribute__((weak));
CUresult cuDeviceTotalMem(unsigned int*, CUdevice) __attribute__((weak));
CUresult cuMemGetInfo(unsigned int*, unsigned int*) __attribute__((weak));
CUresult cuMemAlloc(unsigned int*, unsigned int) __attribute__((weak));
CUresult cuMemAllocPitch(unsigned int*, unsigned int*, unsigned int, unsigned int, unsigned int)
    __attribute__((weak));
CUresult cuArrayCreate(CUarray*, const ArrayDescriptorV1*) __attribute__((weak));
CUresult cuArray3DCreate(CUarray*, const Array3DDescriptorV1*) __attribute__((weak));
}

namespace {

constexpr size_t kMiB = 1 << 20;

// A legacy entry point reached one way: "direct" (the program's own linked
// reference), "dlsym" (through a libcuda handle), "next" (dlsym RTLD_NEXT)
// or "procaddr" (cuGetProcAddress at an old CUDA version).
template <typename F>
F legacy(const std::string& path, const char* name, F direct, int version) {
  if (path == "direct") return direct;
  if (path == "dlsym") {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW);
    return lib != nullptr ? reinterpret_cast<F>(dlsym(lib, name)) : nullptr;
  }
  if (path == "next") return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
  void* p = nullptr;
  CUdriverProcAddressQueryResult st{};
  if (cuGetProcAddress_v2(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS)
    return nullptr;
  return reinterpret_cast<F>(p);
}

using AllocFn = CUresult (*)(CUdeviceptr*, size_t);
using FreeFn = CUresult (*)(CUdeviceptr);
using InfoFn = CUresult (*)(size_t*, size_t*);

AllocFn g_alloc = &cuMemAlloc_v2;
FreeFn g_free = &cuMemFree_v2;
InfoFn g_info = &cuMemGetInfo_v2;

std::vector<CUdeviceptr> g_ptrs;
std::vector<CUmemGenericAllocationHandle> g_vmm;
std::vector<CUarray> g_arrays;
std::vector<CUmipmappedArray> g_mipmaps;
std::vector<CUdeviceptr> g_async;
CUcontext g_ctx = nullptr;
CUmemoryPool g_pool = nullptr;

// Graph memory: the graphs built by "graph"/"graphcapture" and their
// executables (the last one is "the" graph unless an index is given), the
// stream they run in, and how the graph entry points are reached ("graphpath").
std::vector<CUgraph> g_graphs;
std::vector<CUgraphExec> g_execs;
CUstream g_stream = nullptr;
struct GraphApi {
  decltype(&::cuGraphInstantiateWithFlags) instantiate = nullptr;
  decltype(&::cuGraphLaunch) launch = nullptr;
  decltype(&::cuGraphUpload) upload = nullptr;
  decltype(&::cuGraphExecDestroy) destroy = nullptr;
  decltype(&::cuDeviceGraphMemTrim) trim = nullptr;
} g_graph_api;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t c = s.find(':', start);
    out.push_back(s.substr(start, c - start));
    if (c == std::string::npos) return out;
    start = c + 1;
  }
}

unsigned long long num(const std::vector<std::string>& a, size_t i) {
  return i < a.size() ? strtoull(a[i].c_str(), nullptr, 10) : 0;
}

bool set_path(const std::string& how) {
  if (how == "direct") {
    g_alloc = &cuMemAlloc_v2;
    g_free = &cuMemFree_v2;
    g_info = &cuMemGetInfo_v2;
    return true;
  }
  if (how == "dlsym") {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return false;
    g_alloc = reinterpret_cast<AllocFn>(dlsym(lib, "cuMemAlloc_v2"));
    g_free = reinterpret_cast<FreeFn>(dlsym(lib, "cuMemFree_v2"));
    g_info = reinterpret_cast<InfoFn>(dlsym(lib, "cuMemGetInfo_v2"));
    return g_alloc && g_free && g_info;
  }
  if (how == "procaddr") {
    CUdriverProcAddressQueryResult st{};
    void* a = nullptr;
    void* f = nullptr;
    void* i = nullptr;
    if (cuGetProcAddress_v2("cuMemAlloc", &a, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS ||
        cuGetProcAddress_v2("cuMemFree", &f, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS ||
        cuGetProcAddress_v2("cuMemGetInfo", &i, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS)
      return false;
    g_alloc = reinterpret_cast<AllocFn>(a);
    g_free = reinterpret_cast<FreeFn>(f);
    g_info = reinterpret_cast<InfoFn>(i);
    return true;
  }
  return false;
}

// `name` looked up in the library `lib` into the function pointer `slot`
// (null when absent).
template <typename F>
void Resolve(void* lib, const char* name, F* slot) {
  *slot = reinterpret_cast<F>(dlsym(lib, name));
}

// The graph entry points libvgpu may intercept, reached "direct" (linked),
// through "dlsym" on a libcuda handle, or through "procaddr" (cuGetProcAddress).
bool set_graph_path(const std::string& how) {
  GraphApi api;
  if (how == "direct") {
    api = GraphApi{&cuGraphInstantiateWithFlags, &cuGraphLaunch, &cuGraphUpload, &cuGraphExecDestroy,
                   &cuDeviceGraphMemTrim};
  } else if (how == "dlsym") {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return false;
    Resolve(lib, "cuGraphInstantiateWithFlags", &api.instantiate);
    Resolve(lib, "cuGraphLaunch", &api.launch);
    Resolve(lib, "cuGraphUpload", &api.upload);
    Resolve(lib, "cuGraphExecDestroy", &api.destroy);
    Resolve(lib, "cuDeviceGraphMemTrim", &api.trim);
  } else if (how == "procaddr") {
    auto get = [](const char* name, auto* slot) {
      void* p = nullptr;
      CUdriverProcAddressQueryResult st{};
      if (cuGetProcAddress_v2(name, &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) == CUDA_SUCCESS)
        *slot = reinterpret_cast<std::remove_reference_t<decltype(*slot)>>(p);
    };
    get("cuGraphInstantiate", &api.instantiate);  // cuGraphInstantiateWithFlags from CUDA 12.0
    get("cuGraphLaunch", &api.launch);
    get("cuGraphUpload", &api.upload);
    get("cuGraphExecDestroy", &api.destroy);
    get("cuDeviceGraphMemTrim", &api.trim);
  } else {
    return false;
  }
  if (!api.instantiate || !api.launch || !api.upload || !api.destroy || !api.trim) return false;
  g_graph_api = api;
  return true;
}

void storm(unsigned threads, size_t chunk) {
  std::atomic<unsigned long long> granted{0};
  std::atomic<int> other_errors{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      cuCtxSetCurrent(g_ctx);
      for (;;) {
        CUdeviceptr p = 0;
        CUresult rc = g_alloc(&p, chunk);
        if (rc == CUDA_ERROR_OUT_OF_MEMORY) return;
        if (rc != CUDA_SUCCESS) {
          other_errors++;
          return;
        }
        granted += chunk;
      }
    });
  }
  for (auto& t : pool) t.join();
  printf("storm %llu %d\n", granted.load(), other_errors.load());
}

// NVML is optional for a CUDA program: loaded at run time, looked up with
// dlsym as monitoring code does.
struct Nvml {
  decltype(&nvmlInit_v2) init;
  decltype(&nvmlDeviceGetCount_v2) count;
  decltype(&nvmlDeviceGetHandleByIndex_v2) by_index;
  decltype(&nvmlDeviceGetHandleByUUID) by_uuid;
  decltype(&nvmlDeviceGetUUID) uuid;
  decltype(&nvmlDeviceGetMemoryInfo) memory;
  decltype(&nvmlDeviceGetMemoryInfo_v2) memory_v2;
};

Nvml* nvml() {
  static Nvml n{};
  static bool loaded = [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (lib == nullptr) return false;
    Resolve(lib, "nvmlInit_v2", &n.init);
    Resolve(lib, "nvmlDeviceGetCount_v2", &n.count);
    Resolve(lib, "nvmlDeviceGetHandleByIndex_v2", &n.by_index);
    Resolve(lib, "nvmlDeviceGetHandleByUUID", &n.by_uuid);
    Resolve(lib, "nvmlDeviceGetUUID", &n.uuid);
    Resolve(lib, "nvmlDeviceGetMemoryInfo", &n.memory);
    Resolve(lib, "nvmlDeviceGetMemoryInfo_v2", &n.memory_v2);
    return n.init && n.count && n.by_index && n.by_uuid && n.uuid && n.memory && n.memory_v2;
  }();
  return loaded ? &n : nullptr;
}

// Entry points the simulator may not have yet are found at run time, the way
// cudart finds every entry point; an absent one makes its operation print
// "<op> unsupported".
template <typename F>
F entry(const char* base) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult st{};
  if (cuGetProcAddress_v2(base, &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS) return nullptr;
  return reinterpret_cast<F>(p);
}

// The most recent handle of `held`, released with `release` and dropped;
// CUDA_ERROR_INVALID_VALUE when none is held.
template <typename Handle, typename Release>
CUresult ReleaseLast(std::vector<Handle>& held, Release release) {
  if (held.empty()) return CUDA_ERROR_INVALID_VALUE;
  const CUresult rc = release(held.back());
  held.pop_back();
  return rc;
}

// The current context's device, as a memory location.
CUmemLocation CurrentDeviceLocation() {
  CUmemLocation location{};
  location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUdevice d = 0;
  cuCtxGetDevice(&d);
  location.id = d;
  return location;
}

// What the driver says `handle` occupies on the current device, through
// `query` (a cu*GetMemoryRequirements entry point, null when absent); 0 when
// it cannot say.
template <typename Query, typename Handle>
size_t DriverMemoryRequirement(Query query, Handle handle) {
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  CUdevice dev = 0;
  cuCtxGetDevice(&dev);
  if (query == nullptr || query(&req, handle, dev) != CUDA_SUCCESS) return 0;
  return req.size;
}

#define ENTRY(name, base)                     \
  auto name = entry<decltype(&::name)>(base); \
  if (name == nullptr) {                      \
    printf("%s unsupported\n", op.c_str());   \
    fflush(stdout);                           \
    return 0;                                 \
  }

// What a hostile process of the container can do without libvgpu's code: map
// the container's region file (writable by the container) and change it with
// `edit`. Prints "<name> 0" when the region could be written, "<name> -1" if not.
void TamperWithRegion(const char* name, const std::function<void(tessera::vgpu::Region&)>& edit) {
  const char* path = getenv("TESSERA_REGION");
  if (path == nullptr) path = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
  int fd = path != nullptr ? open(path, O_RDWR) : -1;
  void* p = fd < 0 ? MAP_FAILED
                   : mmap(nullptr, sizeof(tessera::vgpu::Region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    printf("%s -1\n", name);
  } else {
    edit(*static_cast<tessera::vgpu::Region*>(p));
    munmap(p, sizeof(tessera::vgpu::Region));
    printf("%s 0\n", name);
  }
  if (fd >= 0) close(fd);
}

int run(const std::string& op_text) {
  std::vector<std::string> a = split(op_text);
  if (a.size() < 4) a.resize(4);
  const std::string op = a[0];
  if (op == "init") {
    printf("init %d\n", cuInit(0));
  } else if (op == "path") {
    printf("path %s %d\n", a[1].c_str(), set_path(a[1]) ? 0 : 1);
  } else if (op == "count") {
    int n = -1;
    CUresult rc = cuDeviceGetCount(&n);
    printf("count %d %d\n", rc, n);
  } else if (op == "uuid") {
    CUdevice d = 0;
    CUuuid u{};
    CUresult rc = cuDeviceGet(&d, static_cast<int>(num(a, 1)));
    if (rc == CUDA_SUCCESS) rc = cuDeviceGetUuid_v2(&u, d);
    const unsigned char* b = reinterpret_cast<const unsigned char*>(u.bytes);
    printf("uuid %d GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n", rc, b[0],
           b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  } else if (op == "totalmem") {
    CUdevice d = 0;
    size_t bytes = 0;
    CUresult rc = cuDeviceGet(&d, static_cast<int>(num(a, 1)));
    if (rc == CUDA_SUCCESS) rc = cuDeviceTotalMem_v2(&bytes, d);
    printf("totalmem %d %zu\n", rc, bytes);
  } else if (op == "ctx") {
    CUdevice d = 0;
    CUresult rc = cuDeviceGet(&d, static_cast<int>(num(a, 1)));
    if (rc == CUDA_SUCCESS) rc = cuDevicePrimaryCtxRetain(&g_ctx, d);
    if (rc == CUDA_SUCCESS) rc = cuCtxSetCurrent(g_ctx);
    printf("ctx %d\n", rc);
  } else if (op == "ctxcreate") {
    CUdevice d = 0;
    CUresult rc = cuDeviceGet(&d, static_cast<int>(num(a, 1)));
    if (rc == CUDA_SUCCESS) rc = cuCtxCreate_v4(&g_ctx, nullptr, 0, d);
    printf("ctxcreate %d\n", rc);
  } else if (op == "ctxdestroy") {
    printf("ctxdestroy %d\n", cuCtxDestroy_v2(g_ctx));
  } else if (op == "ctxrelease") {
    CUdevice d = 0;
    CUresult rc = cuDeviceGet(&d, static_cast<int>(num(a, 1)));
    if (rc == CUDA_SUCCESS) rc = cuDevicePrimaryCtxRelease_v2(d);
    printf("ctxrelease %d\n", rc);
  } else if (op == "alloc" || op == "allocb") {
    size_t bytes = op == "alloc" ? num(a, 1) * kMiB : num(a, 1);
    CUdeviceptr p = 0;
    CUresult rc = g_alloc(&p, bytes);
    if (rc == CUDA_SUCCESS) g_ptrs.push_back(p);
    printf("%s %d\n", op.c_str(), rc);
  } else if (op == "free") {
    printf("free %d\n", ReleaseLast(g_ptrs, g_free));
  } else if (op == "freeall") {
    int bad = 0;
    for (CUdeviceptr p : g_ptrs) bad += g_free(p) != CUDA_SUCCESS;
    g_ptrs.clear();
    printf("freeall %d\n", bad);
  } else if (op == "freebogus") {
    printf("freebogus %d\n", g_free(static_cast<CUdeviceptr>(0x1234560)));
  } else if (op == "meminfo") {
    size_t f = 0, t = 0;
    CUresult rc = g_info(&f, &t);
    printf("meminfo %d %zu %zu\n", rc, f, t);
  } else if (op == "pitch") {
    CUdeviceptr p = 0;
    size_t pitch = 0;
    ENTRY(cuMemAllocPitch_v2, "cuMemAllocPitch")
    CUresult rc = cuMemAllocPitch_v2(&p, &pitch, num(a, 1), num(a, 2), 4);
    if (rc == CUDA_SUCCESS) g_ptrs.push_back(p);
    printf("pitch %d %zu\n", rc, pitch);
  } else if (op == "managed") {
    CUdeviceptr p = 0;
    ENTRY(cuMemAllocManaged, "cuMemAllocManaged")
    CUresult rc = cuMemAllocManaged(&p, num(a, 1) * kMiB, CU_MEM_ATTACH_GLOBAL);
    if (rc == CUDA_SUCCESS) g_ptrs.push_back(p);
    printf("managed %d\n", rc);
  } else if (op == "host") {
    void* p = nullptr;
    CUresult rc = cuMemAllocHost_v2(&p, num(a, 1) * kMiB);
    printf("host %d\n", rc);
    if (rc == CUDA_SUCCESS) cuMemFreeHost(p);
  } else if (op == "vmm") {
    ENTRY(cuMemCreate, "cuMemCreate")
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = CurrentDeviceLocation();
    CUmemGenericAllocationHandle h = 0;
    CUresult rc = cuMemCreate(&h, num(a, 1) * kMiB, &prop, 0);
    if (rc == CUDA_SUCCESS) g_vmm.push_back(h);
    printf("vmm %d\n", rc);
  } else if (op == "vmmfree") {
    ENTRY(cuMemRelease, "cuMemRelease")
    printf("vmmfree %d\n", ReleaseLast(g_vmm, cuMemRelease));
  } else if (op == "array" || op == "array3d") {
    ENTRY(cuArrayCreate_v2, "cuArrayCreate")
    ENTRY(cuArray3DCreate_v2, "cuArray3DCreate")
    CUarray arr = nullptr;
    CUresult rc;
    if (op == "array") {
      CUDA_ARRAY_DESCRIPTOR d{};
      d.Width = num(a, 1);
      d.Height = num(a, 2);
      d.Format = CU_AD_FORMAT_FLOAT;
      d.NumChannels = 4;
      rc = cuArrayCreate_v2(&arr, &d);
    } else {
      CUDA_ARRAY3D_DESCRIPTOR d{};
      d.Width = num(a, 1);
      d.Height = num(a, 2);
      d.Depth = num(a, 3);
      d.Format = CU_AD_FORMAT_FLOAT;
      d.NumChannels = 4;
      rc = cuArray3DCreate_v2(&arr, &d);
    }
    const size_t required =
        rc != CUDA_SUCCESS
            ? 0
            : DriverMemoryRequirement(
                  entry<decltype(&::cuArrayGetMemoryRequirements)>("cuArrayGetMemoryRequirements"), arr);
    if (rc == CUDA_SUCCESS) g_arrays.push_back(arr);
    printf("%s %d %zu\n", op.c_str(), rc, required);
  } else if (op == "arrayfree") {
    ENTRY(cuArrayDestroy, "cuArrayDestroy")
    printf("arrayfree %d\n", ReleaseLast(g_arrays, cuArrayDestroy));
  } else if (op == "mipmap") {
    ENTRY(cuMipmappedArrayCreate, "cuMipmappedArrayCreate")
    CUDA_ARRAY3D_DESCRIPTOR d{};
    d.Width = num(a, 1);
    d.Height = num(a, 2);
    d.Format = CU_AD_FORMAT_FLOAT;
    d.NumChannels = 4;
    CUmipmappedArray m = nullptr;
    CUresult rc = cuMipmappedArrayCreate(&m, &d, static_cast<unsigned>(num(a, 3)));
    const size_t required =
        rc != CUDA_SUCCESS
            ? 0
            : DriverMemoryRequirement(entry<decltype(&::cuMipmappedArrayGetMemoryRequirements)>(
                                          "cuMipmappedArrayGetMemoryRequirements"),
                                      m);
    if (rc == CUDA_SUCCESS) g_mipmaps.push_back(m);
    printf("mipmap %d %zu\n", rc, required);
  } else if (op == "mipmapfree") {
    ENTRY(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy")
    printf("mipmapfree %d\n", ReleaseLast(g_mipmaps, cuMipmappedArrayDestroy));
  } else if (op == "async") {
    ENTRY(cuMemAllocAsync, "cuMemAllocAsync")
    CUdeviceptr p = 0;
    CUresult rc = cuMemAllocAsync(&p, num(a, 1) * kMiB, nullptr);
    if (rc == CUDA_SUCCESS) g_async.push_back(p);
    printf("async %d\n", rc);
  } else if (op == "asyncfree") {
    ENTRY(cuMemFreeAsync, "cuMemFreeAsync")
    ENTRY(cuStreamSynchronize, "cuStreamSynchronize")
    CUresult rc = ReleaseLast(g_async, [&](CUdeviceptr p) { return cuMemFreeAsync(p, nullptr); });
    if (rc == CUDA_SUCCESS) rc = cuStreamSynchronize(nullptr);
    printf("asyncfree %d\n", rc);
  } else if (op == "poolcreate") {
    // a pool on the current device that keeps freed memory (release threshold: all)
    ENTRY(cuMemPoolCreate, "cuMemPoolCreate")
    ENTRY(cuMemPoolSetAttribute, "cuMemPoolSetAttribute")
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = CurrentDeviceLocation();
    CUresult rc = cuMemPoolCreate(&g_pool, &props);
    cuuint64_t keep = ~0ull;
    if (rc == CUDA_SUCCESS) rc = cuMemPoolSetAttribute(g_pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
    printf("poolcreate %d\n", rc);
  } else if (op == "poolalloc") {
    ENTRY(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync")
    CUdeviceptr p = 0;
    CUresult rc = cuMemAllocFromPoolAsync(&p, num(a, 1) * kMiB, g_pool, nullptr);
    if (rc == CUDA_SUCCESS) g_async.push_back(p);
    printf("poolalloc %d\n", rc);
  } else if (op == "pooltrim") {
    ENTRY(cuMemPoolTrimTo, "cuMemPoolTrimTo")
    printf("pooltrim %d\n", cuMemPoolTrimTo(g_pool, 0));
  } else if (op == "globals") {
    // globals:<n>: module globals, memory the driver allocates without a cuMemAlloc
    static const char kImage[] = "tessera-probe-module";
    CUmodule mod = nullptr;
    CUresult rc = cuModuleLoadData(&mod, kImage);
    for (unsigned long long i = 0; rc == CUDA_SUCCESS && i < num(a, 1); ++i) {
      CUdeviceptr p = 0;
      size_t bytes = 0;
      std::string name = "global" + std::to_string(i);
      rc = cuModuleGetGlobal_v2(&p, &bytes, mod, name.c_str());
    }
    printf("globals %d\n", rc);
  } else if (op == "ipcexport") {
    // ipcexport:<file>: the last allocation's IPC handle, written to <file>
    ENTRY(cuIpcGetMemHandle, "cuIpcGetMemHandle")
    CUipcMemHandle h{};
    CUresult rc = g_ptrs.empty() ? CUDA_ERROR_INVALID_VALUE : cuIpcGetMemHandle(&h, g_ptrs.back());
    std::string tmp = a[1] + ".tmp";
    FILE* f = rc == CUDA_SUCCESS ? fopen(tmp.c_str(), "wb") : nullptr;
    if (f != nullptr) {
      fwrite(&h, sizeof(h), 1, f);
      fclose(f);
      rename(tmp.c_str(), a[1].c_str());
    }
    printf("ipcexport %d\n", rc);
  } else if (op == "ipcimport") {
    ENTRY(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle")
    CUipcMemHandle h{};
    FILE* f = fopen(a[1].c_str(), "rb");
    bool ok = f != nullptr && fread(&h, sizeof(h), 1, f) == 1;
    if (f != nullptr) fclose(f);
    CUdeviceptr p = 0;
    CUresult rc =
        ok ? cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) : CUDA_ERROR_INVALID_VALUE;
    printf("ipcimport %d\n", rc);
  } else if (op == "graphpath") {
    printf("graphpath %s %d\n", a[1].c_str(), set_graph_path(a[1]) ? 0 : 1);
  } else if (op == "graph" || op == "graphcapture") {
    // graph:<MiB>:<free|keep>[:<CUdevice>]: alloc node (on the current device, or the raw
    // CUdevice given) -> memset node [-> free node]; graphcapture:<MiB>: cuMemAllocAsync,
    // cuMemsetD8Async, cuMemFreeAsync captured. Both instantiate the graph: "<op> <rc> <stage>".
    ENTRY(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode")
    ENTRY(cuGraphAddMemFreeNode, "cuGraphAddMemFreeNode")
    if (g_graph_api.launch == nullptr) set_graph_path("direct");
    const char* stage = "stream";
    CUresult rc = g_stream != nullptr ? CUDA_SUCCESS : cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING);
    const size_t bytes = num(a, 1) * kMiB;
    CUgraph graph = nullptr;
    if (rc == CUDA_SUCCESS && op == "graph") {
      stage = "nodes";
      CUDA_MEM_ALLOC_NODE_PARAMS ap{};
      ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      ap.poolProps.location = CurrentDeviceLocation();
      if (!a[3].empty()) ap.poolProps.location.id = static_cast<int>(num(a, 3));
      ap.bytesize = bytes;
      CUgraphNode alloc = nullptr, set = nullptr, fin = nullptr;
      rc = cuGraphCreate(&graph, 0);
      if (rc == CUDA_SUCCESS) rc = cuGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &ap);
      CUDA_MEMSET_NODE_PARAMS ms{};
      ms.dst = ap.dptr;
      ms.value = 0x5A;
      ms.elementSize = 1;
      ms.width = 4096;
      ms.height = 1;
      if (rc == CUDA_SUCCESS) rc = cuGraphAddMemsetNode(&set, graph, &alloc, 1, &ms, g_ctx);
      if (rc == CUDA_SUCCESS && a[2] == "free") rc = cuGraphAddMemFreeNode(&fin, graph, &set, 1, ap.dptr);
    } else if (rc == CUDA_SUCCESS) {
      stage = "capture";
      CUdeviceptr p = 0;
      rc = cuStreamBeginCapture(g_stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
      if (rc == CUDA_SUCCESS) rc = cuMemAllocAsync(&p, bytes, g_stream);
      if (rc == CUDA_SUCCESS) rc = cuMemsetD8Async(p, 0x5A, 4096, g_stream);
      if (rc == CUDA_SUCCESS) rc = cuMemFreeAsync(p, g_stream);
      CUresult end = cuStreamEndCapture(g_stream, &graph);
      if (rc == CUDA_SUCCESS) rc = end;
    }
    CUgraphExec exec = nullptr;
    if (rc == CUDA_SUCCESS) {
      stage = "instantiate";
      rc = g_graph_api.instantiate(&exec, graph, 0);
    }
    if (rc == CUDA_SUCCESS) {
      g_graphs.push_back(graph);
      g_execs.push_back(exec);
    }
    printf("%s %d %s\n", op.c_str(), rc, stage);
  } else if (op == "graphlaunch" || op == "graphupload") {
    // graphlaunch[:<i>]: launch executable i (default: the last one) and wait for it;
    // graphupload[:<i>]: upload it
    size_t i = a[1].empty() ? g_execs.size() - 1 : num(a, 1);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (i < g_execs.size() && op == "graphupload") rc = g_graph_api.upload(g_execs[i], g_stream);
    if (i < g_execs.size() && op == "graphlaunch") {
      rc = g_graph_api.launch(g_execs[i], g_stream);
      if (rc == CUDA_SUCCESS) rc = cuStreamSynchronize(g_stream);
    }
    printf("%s %d\n", op.c_str(), rc);
  } else if (op == "graphtrim") {
    CUdevice d = 0;
    cuCtxGetDevice(&d);
    printf("graphtrim %d\n", g_graph_api.trim != nullptr ? g_graph_api.trim(d) : CUDA_ERROR_NOT_FOUND);
  } else if (op == "graphdestroy") {
    // graphdestroy: the last executable and its graph
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (!g_execs.empty()) {
      rc = g_graph_api.destroy(g_execs.back());
      if (rc == CUDA_SUCCESS) rc = cuGraphDestroy(g_graphs.back());
      g_execs.pop_back();
      g_graphs.pop_back();
    }
    printf("graphdestroy %d\n", rc);
  } else if (op == "graphattr") {
    // graphattr: the driver's graph memory figures, "graphattr <rc> <used> <reserved>"
    ENTRY(cuDeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute")
    CUdevice d = 0;
    cuCtxGetDevice(&d);
    cuuint64_t used = 0, reserved = 0;
    CUresult rc = cuDeviceGetGraphMemAttribute(d, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used);
    if (rc == CUDA_SUCCESS)
      rc = cuDeviceGetGraphMemAttribute(d, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved);
    printf("graphattr %d %llu %llu\n", rc, static_cast<unsigned long long>(used),
           static_cast<unsigned long long>(reserved));
  } else if (op == "storm") {
    storm(static_cast<unsigned>(num(a, 1)), num(a, 2) * kMiB);
  } else if (op == "nvml") {
    Nvml* n = nvml();
    if (n == nullptr) {
      printf("nvmlcount -1 0\n");
      fflush(stdout);
      return 0;
    }
    nvmlReturn_t rc = n->init();
    unsigned count = 0;
    if (rc == NVML_SUCCESS) rc = n->count(&count);
    printf("nvmlcount %d %u\n", rc, count);
    for (unsigned i = 0; rc == NVML_SUCCESS && i < count; ++i) {
      nvmlDevice_t h = nullptr;
      char uuid[96] = {};
      nvmlMemory_t m{};
      nvmlMemory_v2_t m2{};
      m2.version = nvmlMemory_v2;
      nvmlReturn_t r1 = n->by_index(i, &h);
      if (r1 == NVML_SUCCESS) r1 = n->uuid(h, uuid, sizeof(uuid));
      if (r1 == NVML_SUCCESS) r1 = n->memory(h, &m);
      nvmlReturn_t r2 = r1 == NVML_SUCCESS ? n->memory_v2(h, &m2) : r1;
      printf("nvmlmem %d %u %s %llu %llu %llu\n", r1, i, uuid, m.total, m.free, m.used);
      printf("nvmlmem2 %d %u %llu %llu %llu\n", r2, i, m2.total, m2.free, m2.used);
    }
  } else if (op == "nvmluuid") {
    Nvml* n = nvml();
    nvmlDevice_t h = nullptr;
    if (n != nullptr) n->init();
    printf("nvmluuid %d\n", n != nullptr ? n->by_uuid(a[1].c_str(), &h) : -1);
  } else if (op == "nvmlident" || op == "nvmlserial" || op == "nvmlpci") {
    // nvmlident:<index>: "nvmlident <rc> <serial> <busId>"; nvmlserial:<serial> and
    // nvmlpci:<v1|v2>:<busId>: "<op> <rc>" of the handle lookup by serial / PCI bus id
    Nvml* n = nvml();
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    auto sym = [&](const char* name) { return lib != nullptr ? dlsym(lib, name) : nullptr; };
    nvmlReturn_t rc = n == nullptr ? NVML_ERROR_LIBRARY_NOT_FOUND : n->init();
    nvmlDevice_t h = nullptr;
    if (op == "nvmlident") {
      using SerialFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned);
      using PciFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*);
      auto serial_fn = reinterpret_cast<SerialFn>(sym("nvmlDeviceGetSerial"));
      auto pci_fn = reinterpret_cast<PciFn>(sym("nvmlDeviceGetPciInfo_v3"));
      char serial[64] = "-";
      nvmlPciInfo_t pci{};
      if (rc == NVML_SUCCESS) rc = n->by_index(static_cast<unsigned>(num(a, 1)), &h);
      if (rc == NVML_SUCCESS)
        rc = serial_fn != nullptr ? serial_fn(h, serial, sizeof(serial)) : NVML_ERROR_FUNCTION_NOT_FOUND;
      if (rc == NVML_SUCCESS) rc = pci_fn != nullptr ? pci_fn(h, &pci) : NVML_ERROR_FUNCTION_NOT_FOUND;
      printf("nvmlident %d %s %s\n", rc, serial, pci.busId[0] != '\0' ? pci.busId : "-");
    } else {
      using ByFn = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
      const char* name = op == "nvmlserial" ? "nvmlDeviceGetHandleBySerial"
                         : a[1] == "v1"     ? "nvmlDeviceGetHandleByPciBusId"
                                            : "nvmlDeviceGetHandleByPciBusId_v2";
      auto by = reinterpret_cast<ByFn>(sym(name));
      // a bus id holds ':' itself: everything after "nvmlpci:<v>:"
      const std::string key = op == "nvmlserial" ? a[1] : op_text.substr(op.size() + a[1].size() + 2);
      if (rc == NVML_SUCCESS) rc = by != nullptr ? by(key.c_str(), &h) : NVML_ERROR_FUNCTION_NOT_FOUND;
      printf("%s %d\n", op.c_str(), rc);
    }
  } else if (op == "nvmlprocs") {
    // nvmlprocs:<api>:<index>:<capacity|null>: a running-process list of NVML device <index>
    // (api: c1/c2/c3 = nvmlDeviceGetComputeRunningProcesses[_v2|_v3], g1/g2/g3 the graphics ones),
    // looked up by name in libnvidia-ml as monitoring code does; prints
    // "nvmlprocs <rc> <count> <pid>=<usedGpuMemory> ..."
    Nvml* n = nvml();
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    const std::string& api = a[1];
    std::string name = std::string(api[0] == 'g' ? "nvmlDeviceGetGraphicsRunningProcesses"
                                                 : "nvmlDeviceGetComputeRunningProcesses") +
                       (api[1] == '1'   ? ""
                        : api[1] == '2' ? "_v2"
                                        : "_v3");
    void* fn = lib != nullptr ? dlsym(lib, name.c_str()) : nullptr;
    nvmlDevice_t h = nullptr;
    nvmlReturn_t rc = n == nullptr || fn == nullptr ? NVML_ERROR_FUNCTION_NOT_FOUND : n->init();
    if (rc == NVML_SUCCESS) rc = n->by_index(static_cast<unsigned>(num(a, 2)), &h);
    bool null_buffer = a[3] == "null";
    unsigned count = null_buffer ? 0 : static_cast<unsigned>(num(a, 3));
    std::vector<std::pair<unsigned, unsigned long long>> got;
    if (rc == NVML_SUCCESS && api[1] == '1') {
      using Fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned*, nvmlProcessInfo_v1_t*);
      std::vector<nvmlProcessInfo_v1_t> buf(count + 1);
      rc = reinterpret_cast<Fn>(fn)(h, &count, null_buffer ? nullptr : buf.data());
      for (unsigned i = 0; rc == NVML_SUCCESS && i < count; ++i)
        got.emplace_back(buf[i].pid, buf[i].usedGpuMemory);
    } else if (rc == NVML_SUCCESS && api[1] == '2') {
      using Fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned*, nvmlProcessInfo_v2_t*);
      std::vector<nvmlProcessInfo_v2_t> buf(count + 1);
      rc = reinterpret_cast<Fn>(fn)(h, &count, null_buffer ? nullptr : buf.data());
      for (unsigned i = 0; rc == NVML_SUCCESS && i < count; ++i)
        got.emplace_back(buf[i].pid, buf[i].usedGpuMemory);
    } else if (rc == NVML_SUCCESS) {
      using Fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*);
      std::vector<nvmlProcessInfo_t> buf(count + 1);
      rc = reinterpret_cast<Fn>(fn)(h, &count, null_buffer ? nullptr : buf.data());
      for (unsigned i = 0; rc == NVML_SUCCESS && i < count; ++i)
        got.emplace_back(buf[i].pid, buf[i].usedGpuMemory);
    }
    printf("nvmlprocs %d %u", rc, count);
    for (auto& [pid, mem] : got) printf(" %u=%llu", pid, mem);
    printf("\n");
  } else if (op == "procaddrlegacy") {
    // the CUDA 11.3-11.8 entry point, without symbolStatus
    using Legacy = CUresult (*)(const char*, void**, int, cuuint64_t);
    void* lib = dlopen("libcuda.so.1", RTLD_NOW);
    auto legacy = lib != nullptr ? reinterpret_cast<Legacy>(dlsym(lib, "cuGetProcAddress")) : nullptr;
    void* fn = nullptr;
    CUresult rc = legacy != nullptr ? legacy(a[1].c_str(), &fn, static_cast<int>(num(a, 2)), num(a, 3))
                                    : CUDA_ERROR_NOT_FOUND;
    Dl_info info{};
    bool named = fn != nullptr && dladdr(fn, &info) != 0;
    printf("procaddrlegacy %d %s %s\n", rc, named && info.dli_fname ? strrchr(info.dli_fname, '/') + 1 : "-",
           named && info.dli_sname ? info.dli_sname : "-");
  } else if (op == "procaddr") {
    // procaddr:<symbol>:<cudaVersion>:<flags> -> which object and symbol the answer is
    void* fn = nullptr;
    CUdriverProcAddressQueryResult st{};
    CUresult rc = cuGetProcAddress_v2(a[1].c_str(), &fn, static_cast<int>(num(a, 2)), num(a, 3), &st);
    Dl_info info{};
    bool named = fn != nullptr && dladdr(fn, &info) != 0;
    printf("procaddr %d %s %s\n", rc, named && info.dli_fname ? strrchr(info.dli_fname, '/') + 1 : "-",
           named && info.dli_sname ? info.dli_sname : "-");
  } else if (op == "dlsym" || op == "dlsymnext") {
    // dlsym:<symbol> through a libcuda handle; dlsymnext:<symbol> with RTLD_NEXT
    void* lib = op == "dlsym" ? dlopen(a[2].empty() ? "libcuda.so.1" : a[2].c_str(), RTLD_NOW) : RTLD_NEXT;
    void* fn = lib != nullptr ? dlsym(lib, a[1].c_str()) : nullptr;
    Dl_info info{};
    bool named = fn != nullptr && dladdr(fn, &info) != 0;
    const char* file = named && info.dli_fname ? strrchr(info.dli_fname, '/') : nullptr;
    printf("%s %s %s\n", op.c_str(), file ? file + 1 : (named ? info.dli_fname : "-"),
           named && info.dli_sname ? info.dli_sname : "-");
  } else if (op == "fork") {
    // fork:<MiB>: a child allocates and exits; the parent waits for it
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      CUdeviceptr p = 0;
      CUresult rc = cuInit(0);
      CUdevice d = 0;
      CUcontext c = nullptr;
      if (rc == CUDA_SUCCESS) rc = cuDeviceGet(&d, 0);
      if (rc == CUDA_SUCCESS) rc = cuDevicePrimaryCtxRetain(&c, d);
      if (rc == CUDA_SUCCESS) rc = cuCtxSetCurrent(c);
      if (rc == CUDA_SUCCESS) rc = cuMemAlloc_v2(&p, num(a, 1) * kMiB);
      printf("child %d\n", rc);
      fflush(stdout);
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("fork %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  } else if (op == "waitfile") {
    // waitfile:<path>: blocks until the file exists (a start barrier the test opens)
    while (access(a[1].c_str(), F_OK) != 0) usleep(1000);
  } else if (op == "lctx") {
    // lctx:<path>:<CUdevice>: legacy cuCtxCreate on a raw device handle (not a container ordinal)
    auto fn = legacy(a[1], "cuCtxCreate", &cuCtxCreate, 3000);
    if (fn == nullptr) {
      printf("lctx missing\n");
    } else {
      printf("lctx %d\n", fn(&g_ctx, 0, static_cast<CUdevice>(num(a, 2))));
    }
  } else if (op == "lctxdestroy") {
    auto fn = legacy(a[1], "cuCtxDestroy", &cuCtxDestroy, 3000);
    if (fn == nullptr) {
      printf("lctxdestroy missing\n");
    } else {
      printf("lctxdestroy %d\n", fn(g_ctx));
    }
  } else if (op == "lprimary") {
    // lprimary:<path>:<release|reset>:<CUdevice>: the CUDA 7.0-10.2 primary-context entry points
    auto fn = a[2] == "reset" ? legacy(a[1], "cuDevicePrimaryCtxReset", &cuDevicePrimaryCtxReset, 10000)
                              : legacy(a[1], "cuDevicePrimaryCtxRelease", &cuDevicePrimaryCtxRelease, 10000);
    if (fn == nullptr) {
      printf("lprimary missing\n");
    } else {
      printf("lprimary %d\n", fn(static_cast<CUdevice>(num(a, 3))));
    }
  } else if (op == "l32") {
    // l32:<path>:<name>: a pre-3.2 entry point with 32-bit sizes; "l32 <name> <rc|missing>"
    const std::string& name = a[2];
    unsigned int x = 0, y = 0;
    CUarray arr = nullptr;
    CUresult rc = CUDA_ERROR_NOT_FOUND;
    bool found = true;
    CUdevice dev = 0;
    cuCtxGetDevice(&dev);
    if (name == "cuMemAlloc") {
      auto fn = legacy(a[1], "cuMemAlloc", &cuMemAlloc, 3000);
      if ((found = fn != nullptr)) rc = fn(&x, 64 << 20);
    } else if (name == "cuMemAllocPitch") {
      auto fn = legacy(a[1], "cuMemAllocPitch", &cuMemAllocPitch, 3000);
      if ((found = fn != nullptr)) rc = fn(&x, &y, 4096, 4096, 4);
    } else if (name == "cuMemGetInfo") {
      auto fn = legacy(a[1], "cuMemGetInfo", &cuMemGetInfo, 3000);
      if ((found = fn != nullptr)) rc = fn(&x, &y);
    } else if (name == "cuDeviceTotalMem") {
      auto fn = legacy(a[1], "cuDeviceTotalMem", &cuDeviceTotalMem, 3000);
      if ((found = fn != nullptr)) rc = fn(&x, dev);
    } else if (name == "cuArrayCreate") {
      auto fn = legacy(a[1], "cuArrayCreate", &cuArrayCreate, 3000);
      ArrayDescriptorV1 d{1024, 1024, CU_AD_FORMAT_FLOAT, 4};
      if ((found = fn != nullptr)) rc = fn(&arr, &d);
    } else if (name == "cuArray3DCreate") {
      auto fn = legacy(a[1], "cuArray3DCreate", &cuArray3DCreate, 3000);
      Array3DDescriptorV1 d{256, 256, 16, CU_AD_FORMAT_FLOAT, 4, 0};
      if ((found = fn != nullptr)) rc = fn(&arr, &d);
    }
    if (found) {
      printf("l32 %s %d\n", name.c_str(), rc);
    } else {
      printf("l32 %s missing\n", name.c_str());
    }
  } else if (op == "busy") {
    // busy:<us>:<n>: n sim_busy kernels of <us> microseconds each, one after the other
    static const char kImage[] = "tessera-probe-module";
    CUmodule mod = nullptr;
    CUfunction fn = nullptr;
    CUresult rc = cuModuleLoadData(&mod, kImage);
    if (rc == CUDA_SUCCESS) rc = cuModuleGetFunction(&fn, mod, "sim_busy_probe");
    unsigned long long ns = num(a, 1) * 1000;
    void* params[] = {&ns};
    for (unsigned long long i = 0; rc == CUDA_SUCCESS && i < num(a, 2); ++i) {
      rc = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
      if (rc == CUDA_SUCCESS) rc = cuCtxSynchronize();
    }
    printf("busy %d\n", rc);
  } else if (op == "nvmlutil") {
    // nvmlutil:<index>: per-process utilisation of the last second; "nvmlutil <rc> <count> <pid>=<smUtil>
    // ..."
    Nvml* n = nvml();
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    using Fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlProcessUtilizationSample_t*, unsigned*, unsigned long long);
    auto fn = lib != nullptr ? reinterpret_cast<Fn>(dlsym(lib, "nvmlDeviceGetProcessUtilization")) : nullptr;
    nvmlDevice_t h = nullptr;
    nvmlReturn_t rc = n == nullptr || fn == nullptr ? NVML_ERROR_FUNCTION_NOT_FOUND : n->init();
    if (rc == NVML_SUCCESS) rc = n->by_index(static_cast<unsigned>(num(a, 1)), &h);
    unsigned count = 0;
    std::vector<nvmlProcessUtilizationSample_t> buf;
    if (rc == NVML_SUCCESS) {
      rc = fn(h, nullptr, &count, 0);  // how many
      if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
        buf.resize(count + 1);
        count = static_cast<unsigned>(buf.size());
        rc = fn(h, buf.data(), &count, 0);
      }
    }
    printf("nvmlutil %d %u", rc, count);
    for (unsigned i = 0; rc == NVML_SUCCESS && i < count; ++i) printf(" %u=%u", buf[i].pid, buf[i].smUtil);
    printf("\n");
  } else if (op == "pid") {
    printf("pid %d\n", static_cast<int>(getpid()));
  } else if (op == "clock") {
    // The wall clock, in ns since the epoch (a test times what follows from it).
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    printf("clock %lld\n", static_cast<long long>(ts.tv_sec) * 1000000000ll + ts.tv_nsec);
  } else if (op == "ready") {
    printf("ready\n");
  } else if (op == "hold") {
    printf("holding\n");
    fflush(stdout);
    for (;;) pause();
  } else if (op == "tamper") {
    // tamper:<limitMiB>[:slots]: write a larger memory_limit into every device
    // entry and zero the usage sums; with "slots", every process's usage too.
    TamperWithRegion("tamper", [&](tessera::vgpu::Region& region) {
      for (auto& d : region.devices) {
        if (d.uuid[0] == '\0') continue;
        d.memory_limit.store(num(a, 1) * kMiB);
        d.memory_used.store(0);
      }
      if (a[2] == "slots") {
        for (auto& slot : region.processes)
          for (auto& used : slot.memory_used) used.store(0);
      }
    });
  } else if (op == "ctamper") {
    // ctamper: the compute side of the same attack: lift every device's
    // core_quota_percent to 100 (unlimited), and make its budget and burst huge.
    TamperWithRegion("ctamper", [](tessera::vgpu::Region& region) {
      for (auto& d : region.devices) {
        if (d.uuid[0] == '\0') continue;
        d.core_quota_percent.store(100);
        d.budget_burst_ns.store(1ull << 50);
        d.budget_ns.store(INT64_C(1) << 50);
      }
    });
  } else if (op == "sleep") {
    usleep(static_cast<useconds_t>(num(a, 1) * 1000));
  } else {
    fprintf(stderr, "vgpu_probe: unknown operation %s\n", op.c_str());
    return 2;
  }
  fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  for (int i = 1; i < argc; ++i) {
    if (int rc = run(argv[i]); rc != 0) return rc;
  }
  return 0;
}
