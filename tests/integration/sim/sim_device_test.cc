// Device queries, contexts, memory capacity and copies against the simulated
// driver, as an ordinary driver-API client.
#include <cuda.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "sim_test_util.h"

namespace {

void DeviceQueries() {
  int version = 0;
  SIM_OK(cuDriverGetVersion(&version));
  SIM_CHECK_EQ(version, 13000);
  int count = 0;
  SIM_OK(cuDeviceGetCount(&count));
  SIM_CHECK_EQ(count, 2);
  CUdevice d0, d1;
  SIM_OK(cuDeviceGet(&d0, 0));
  SIM_OK(cuDeviceGet(&d1, 1));
  CUdevice bad;
  SIM_CHECK_EQ(cuDeviceGet(&bad, 2), CUDA_ERROR_INVALID_DEVICE);

  char name[128];
  SIM_OK(cuDeviceGetName(name, sizeof(name), d0));
  SIM_CHECK(std::string(name) == "NVIDIA A100-SXM4-40GB");
  SIM_OK(cuDeviceGetName(name, sizeof(name), d1));
  SIM_CHECK(std::string(name) == "NVIDIA H100 80GB HBM3");

  size_t total = 0;
  SIM_OK(cuDeviceTotalMem(&total, d0));
  SIM_CHECK_EQ(total, 40960ull << 20);

  int v = 0;
  SIM_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d0));
  SIM_CHECK_EQ(v, 108);
  SIM_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d1));
  SIM_CHECK_EQ(v, 9);
  SIM_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, d1));
  SIM_CHECK_EQ(v, 2048);
  SIM_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, d0));
  SIM_CHECK_EQ(v, 32);
  SIM_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d0));
  SIM_CHECK_EQ(v, 0);

  CUuuid u0, u1;
  SIM_OK(cuDeviceGetUuid(&u0, d0));
  SIM_OK(cuDeviceGetUuid(&u1, d1));
  SIM_CHECK(std::memcmp(u0.bytes, u1.bytes, 16) != 0);

  char bus[32];
  SIM_OK(cuDeviceGetPCIBusId(bus, sizeof(bus), d1));
  CUdevice by_bus = -1;
  SIM_OK(cuDeviceGetByPCIBusId(&by_bus, bus));
  SIM_CHECK_EQ(by_bus, d1);

  // cuGetProcAddress answers with the versioned ABI entry points.
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  SIM_OK(cuGetProcAddress("cuMemAlloc", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  SIM_CHECK(fn == reinterpret_cast<void*>(&cuMemAlloc_v2));
  SIM_OK(
      cuGetProcAddress("cuMemcpyHtoD", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
  SIM_CHECK(fn != nullptr && fn != reinterpret_cast<void*>(&cuMemcpyHtoD_v2));
  SIM_OK(cuGetProcAddress("cuCtxCreate", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  SIM_CHECK(fn == reinterpret_cast<void*>(&cuCtxCreate_v4));
  SIM_OK(cuGetProcAddress("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  SIM_CHECK(fn == reinterpret_cast<void*>(&cuLaunchKernel));
  SIM_CHECK_EQ(cuGetProcAddress("cuNoSuchFunction", &fn, 13000, 0, &status), CUDA_ERROR_NOT_FOUND);
  SIM_CHECK_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

void Contexts() {
  CUdevice d0;
  SIM_OK(cuDeviceGet(&d0, 0));
  CUcontext none = reinterpret_cast<CUcontext>(1);
  SIM_OK(cuCtxGetCurrent(&none));
  SIM_CHECK(none == nullptr);
  CUdeviceptr p;
  SIM_CHECK_EQ(cuMemAlloc(&p, 1024), CUDA_ERROR_INVALID_CONTEXT);

  // The primary context: retained, made current, its first use costs memory.
  CUcontext primary, again;
  SIM_OK(cuDevicePrimaryCtxRetain(&primary, d0));
  SIM_OK(cuDevicePrimaryCtxRetain(&again, d0));
  SIM_CHECK(primary == again);
  unsigned flags = 0;
  int active = 0;
  SIM_OK(cuDevicePrimaryCtxGetState(d0, &flags, &active));
  SIM_CHECK_EQ(active, 1);
  SIM_OK(cuCtxSetCurrent(primary));
  size_t free_b = 0, total_b = 0;
  SIM_OK(cuMemGetInfo(&free_b, &total_b));
  SIM_CHECK_EQ(total_b, 40960ull << 20);
  SIM_CHECK_EQ(total_b - free_b, 300ull << 20);  // default per-process context cost

  // A second context on the same device costs nothing more.
  CUcontext created;
  SIM_OK(cuCtxCreate(&created, nullptr, 0, d0));
  CUcontext cur;
  SIM_OK(cuCtxGetCurrent(&cur));
  SIM_CHECK(cur == created);
  CUdevice dev = -1;
  SIM_OK(cuCtxGetDevice(&dev));
  SIM_CHECK_EQ(dev, d0);
  SIM_OK(cuMemGetInfo(&free_b, &total_b));
  SIM_CHECK_EQ(total_b - free_b, 300ull << 20);
  SIM_OK(cuCtxSynchronize());
  SIM_OK(cuCtxPopCurrent(&cur));
  SIM_CHECK(cur == created);
  SIM_OK(cuCtxDestroy(created));
  SIM_CHECK_EQ(cuCtxPushCurrent(created), CUDA_ERROR_INVALID_CONTEXT);  // destroyed

  SIM_OK(cuDevicePrimaryCtxRelease(d0));
  SIM_OK(cuDevicePrimaryCtxRelease(d0));
  SIM_OK(cuDevicePrimaryCtxGetState(d0, &flags, &active));
  SIM_CHECK_EQ(active, 0);
}

void MemoryAndCopies() {
  simtest::UseDevice(0);

  // Round trips move real bytes.
  const size_t n = 3 << 20;
  std::vector<uint8_t> host(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<uint8_t>(i * 7 + 3);
  CUdeviceptr a, b;
  SIM_OK(cuMemAlloc(&a, n));
  SIM_OK(cuMemAlloc(&b, n));
  SIM_CHECK(a != b);
  SIM_OK(cuMemcpyHtoD(a, host.data(), n));
  SIM_OK(cuMemcpyDtoD(b, a, n));
  SIM_OK(cuMemcpyDtoH(back.data(), b, n));
  SIM_CHECK(std::memcmp(host.data(), back.data(), n) == 0);

  CUstream s;
  SIM_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  SIM_OK(cuMemsetD32Async(a, 0xDEADBEEF, 16, s));
  SIM_OK(cuMemsetD16Async(a + 64, 0xABCD, 2, s));
  uint32_t words[17] = {};
  SIM_OK(cuMemcpyDtoHAsync(words, a, sizeof(words), s));
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK_EQ(words[0], 0xDEADBEEFu);
  SIM_CHECK_EQ(words[15], 0xDEADBEEFu);
  SIM_CHECK_EQ(words[16], 0xABCDABCDu);

  // Pitched 2D copies.
  CUdeviceptr pitched;
  size_t pitch = 0;
  SIM_OK(cuMemAllocPitch(&pitched, &pitch, 100, 4, 4));
  SIM_CHECK(pitch >= 100);
  std::vector<uint8_t> src(400), dst(400, 0);
  for (int i = 0; i < 400; ++i) src[i] = static_cast<uint8_t>(i);
  const CUDA_MEMCPY2D c =
      simtest::Copy2D(simtest::HostRows(src.data(), 100), simtest::DeviceRows(pitched, pitch), 100, 4);
  SIM_OK(cuMemcpy2D(&c));
  const CUDA_MEMCPY2D r =
      simtest::Copy2D(simtest::DeviceRows(pitched, pitch), simtest::HostRows(dst.data(), 100), 100, 4);
  SIM_OK(cuMemcpy2D(&r));
  SIM_CHECK(src == dst);

  CUdeviceptr base = 0;
  size_t size = 0;
  SIM_OK(cuMemGetAddressRange(&base, &size, a + 100));
  SIM_CHECK(base == a && size == n);
  unsigned mt = 0;
  SIM_OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a));
  SIM_CHECK_EQ(mt, CU_MEMORYTYPE_DEVICE);
  // Copies outside any allocation are rejected, not crashes.
  SIM_CHECK_EQ(cuMemcpyHtoD(a + n - 8, host.data(), 64), CUDA_ERROR_INVALID_VALUE);

  // Host-pinned and managed memory.
  void* pinned = nullptr;
  SIM_OK(cuMemAllocHost(&pinned, 4096));
  std::memset(pinned, 5, 4096);
  SIM_OK(cuMemcpyHtoD(a, pinned, 4096));
  CUdeviceptr managed;
  SIM_OK(cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL));
  SIM_OK(cuMemcpyDtoD(managed, a, 4096));
  SIM_CHECK_EQ(reinterpret_cast<uint8_t*>(managed)[4095], 5);
  SIM_OK(cuMemFreeHost(pinned));
  SIM_OK(cuMemFree(managed));
  SIM_OK(cuMemFree(pitched));
  SIM_OK(cuMemFree(a));
  SIM_OK(cuMemFree(b));
  SIM_OK(cuStreamDestroy(s));
}

void OutOfMemoryAtCapacity() {
  CUdevice d1;
  simtest::UseDevice(1, &d1);
  size_t free_b = 0, total_b = 0;
  SIM_OK(cuMemGetInfo(&free_b, &total_b));
  // An 80 GB device costs nothing until touched: allocate all of it.
  std::vector<CUdeviceptr> blocks;
  const size_t chunk = 1ull << 30;
  CUdeviceptr p;
  while (cuMemAlloc(&p, chunk) == CUDA_SUCCESS) blocks.push_back(p);
  SIM_CHECK_EQ(blocks.size(), free_b / chunk);
  SIM_CHECK_EQ(cuMemAlloc(&p, chunk), CUDA_ERROR_OUT_OF_MEMORY);
  size_t free_now = 0;
  SIM_OK(cuMemGetInfo(&free_now, &total_b));
  SIM_CHECK(free_now < chunk);
  // The remainder still fits.
  SIM_OK(cuMemAlloc(&p, free_now));
  SIM_OK(cuMemGetInfo(&free_now, &total_b));
  SIM_CHECK_EQ(free_now, 0u);
  SIM_OK(cuMemFree(p));
  for (CUdeviceptr b : blocks) SIM_OK(cuMemFree(b));
  SIM_OK(cuMemGetInfo(&free_now, &total_b));
  SIM_CHECK_EQ(free_now, free_b);
  SIM_OK(cuDevicePrimaryCtxRelease(d1));
}

// Many threads of one process allocating, copying, launching and freeing at once.
void Threads() {
  CUdevice d0;
  CUcontext ctx = simtest::UseDevice(0, &d0);
  size_t free_before = 0, total = 0;
  SIM_OK(cuMemGetInfo(&free_before, &total));
  CUmodule m;
  SIM_OK(cuModuleLoadData(&m, "x"));
  CUfunction f;
  SIM_OK(cuModuleGetFunction(&f, m, "sim_busy_threads"));
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) ++errors;
      CUstream s;
      if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) ++errors;
      for (int i = 0; i < 50; ++i) {
        CUdeviceptr p;
        const size_t n = 4096 * static_cast<size_t>(1 + (i + t) % 7);
        if (cuMemAlloc(&p, n) != CUDA_SUCCESS) {
          ++errors;
          continue;
        }
        std::vector<uint8_t> buf(n, static_cast<uint8_t>(t)), back(n);
        if (cuMemcpyHtoDAsync(p, buf.data(), n, s) != CUDA_SUCCESS) ++errors;
        uint64_t ns = 1000;
        void* args[] = {&ns};
        if (cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr) != CUDA_SUCCESS) ++errors;
        if (cuMemcpyDtoHAsync(back.data(), p, n, s) != CUDA_SUCCESS) ++errors;
        if (cuStreamSynchronize(s) != CUDA_SUCCESS || back != buf) ++errors;
        if (cuMemFree(p) != CUDA_SUCCESS) ++errors;
      }
      if (cuStreamDestroy(s) != CUDA_SUCCESS) ++errors;
    });
  }
  for (auto& th : threads) th.join();
  SIM_CHECK_EQ(errors.load(), 0);
  size_t free_after = 0;
  SIM_OK(cuMemGetInfo(&free_after, &total));
  SIM_CHECK_EQ(free_after, free_before);
  SIM_OK(cuModuleUnload(m));
  SIM_OK(cuDevicePrimaryCtxRelease(d0));
}

// cuGetProcAddress answers for every function the library exports.
void ProcAddressCoversEveryExport() {
  Dl_info info{};
  SIM_CHECK(dladdr(reinterpret_cast<void*>(&cuInit), &info) != 0);
  const std::string cmd = std::string("nm -D --defined-only '") + info.dli_fname + "'";
  FILE* p = popen(cmd.c_str(), "r");
  SIM_CHECK(p != nullptr);
  if (p == nullptr) return;
  void* self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  char line[512];
  int names = 0;
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    char addr[64], type[8], name[256];
    if (std::sscanf(line, "%63s %7s %255s", addr, type, name) != 3 || std::strncmp(name, "cu", 2) != 0) {
      continue;
    }
    ++names;
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    const CUresult r = cuGetProcAddress(name, &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (r != CUDA_SUCCESS || fn == nullptr || status != CU_GET_PROC_ADDRESS_SUCCESS) {
      std::fprintf(stderr, "cuGetProcAddress does not answer for exported %s\n", name);
      ++simtest::Failures();
    }
    // Versioned names answer with themselves (base names map to their versioned entry point).
    const std::string n = name;
    if ((n.find("_v") != std::string::npos || n.find("_pt") != std::string::npos) &&
        fn != dlsym(self, name)) {
      std::fprintf(stderr, "cuGetProcAddress(%s) is not the exported function\n", name);
      ++simtest::Failures();
    }
  }
  pclose(p);
  SIM_CHECK(names > 250);
}

}  // namespace

int main() {
  simtest::UseFreshState("A100-40GB,H100-80GB", false);
  SIM_OK(cuInit(0));
  DeviceQueries();
  Contexts();
  MemoryAndCopies();
  OutOfMemoryAtCapacity();
  ProcAddressCoversEveryExport();
  Threads();
  return simtest::Finish("sim_device_test");
}
