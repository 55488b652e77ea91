// Graph memory nodes on the simulated driver, as an ordinary driver-API
// program sees them: alloc/free nodes (explicit and captured from
// cuMemAllocAsync / cuMemFreeAsync), the graph memory pool's physical memory
// (mapped at upload or launch, kept across launches and after the graph's
// frees, returned by cuDeviceGraphMemTrim only), its attributes, the lifetime
// rules (unfreed allocations, auto-free on launch, frees outside the graph)
// and a launch the device cannot back.
#include <cuda.h>
#include <nvml.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "sim_test_util.h"

namespace {

constexpr uint64_t kMiB = 1ull << 20;

CUdevice g_dev = 0;

uint64_t FreeBytes() {
  size_t free = 0, total = 0;
  SIM_OK(cuMemGetInfo(&free, &total));
  return free;
}

uint64_t Attr(CUgraphMem_attribute attr) {
  cuuint64_t v = ~0ull;
  SIM_OK(cuDeviceGetGraphMemAttribute(g_dev, attr, &v));
  return v;
}

// This process's memory on device 0 as NVML lists it.
uint64_t NvmlProcessBytes() {
  nvmlDevice_t dev;
  SIM_OK(nvmlDeviceGetHandleByIndex(0, &dev));
  nvmlProcessInfo_t infos[16];
  unsigned count = 16;
  SIM_OK(nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, infos));
  for (unsigned i = 0; i < count; ++i) {
    if (infos[i].pid == static_cast<unsigned>(getpid())) return infos[i].usedGpuMemory;
  }
  return 0;
}

CUDA_MEM_ALLOC_NODE_PARAMS AllocParams(uint64_t bytes) {
  CUDA_MEM_ALLOC_NODE_PARAMS p{};
  p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.poolProps.location.id = g_dev;
  p.bytesize = bytes;
  return p;
}

CUDA_MEMSET_NODE_PARAMS Memset(CUdeviceptr dst, unsigned char value, size_t bytes) {
  CUDA_MEMSET_NODE_PARAMS ms{};
  ms.dst = dst;
  ms.value = value;
  ms.elementSize = 1;
  ms.width = bytes;
  ms.height = 1;
  return ms;
}

// alloc 64 MiB -> memset -> copy to host -> free: memory appears when the
// graph runs, stays with the graph pool after its free node, and is given
// back only by a trim.
void AllocatedFreedAndTrimmed(CUstream s) {
  const uint64_t base = FreeBytes();
  const uint64_t nvml_base = NvmlProcessBytes();
  CUgraph g;
  SIM_OK(cuGraphCreate(&g, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS ap = AllocParams(64 * kMiB);
  CUgraphNode alloc, set, copy, free_node;
  SIM_OK(cuGraphAddMemAllocNode(&alloc, g, nullptr, 0, &ap));
  SIM_CHECK(ap.dptr != 0);
  CUDA_MEMSET_NODE_PARAMS ms = Memset(ap.dptr, 0x5A, 4096);
  SIM_OK(cuGraphAddMemsetNode(&set, g, &alloc, 1, &ms, nullptr));
  static uint8_t host[4096];
  std::memset(host, 0, sizeof(host));
  CUDA_MEMCPY3D cp = simtest::Copy3DToHost(ap.dptr, host, sizeof(host));
  SIM_OK(cuGraphAddMemcpyNode(&copy, g, &set, 1, &cp, nullptr));
  SIM_OK(cuGraphAddMemFreeNode(&free_node, g, &copy, 1, ap.dptr));

  CUgraphNodeType type;
  SIM_OK(cuGraphNodeGetType(alloc, &type));
  SIM_CHECK_EQ(type, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  SIM_OK(cuGraphNodeGetType(free_node, &type));
  SIM_CHECK_EQ(type, CU_GRAPH_NODE_TYPE_MEM_FREE);
  CUDA_MEM_ALLOC_NODE_PARAMS got{};
  SIM_OK(cuGraphMemAllocNodeGetParams(alloc, &got));
  SIM_CHECK_EQ(got.bytesize, 64 * kMiB);
  SIM_CHECK_EQ(got.dptr, ap.dptr);
  SIM_CHECK_EQ(got.poolProps.location.id, g_dev);
  CUdeviceptr freed = 0;
  SIM_OK(cuGraphMemFreeNodeGetParams(free_node, &freed));
  SIM_CHECK_EQ(freed, ap.dptr);
  SIM_CHECK_EQ(cuGraphMemFreeNodeGetParams(alloc, &freed), CUDA_ERROR_INVALID_VALUE);
  // A second free of the same allocation, or of memory no alloc node returned, is refused.
  CUgraphNode extra;
  SIM_CHECK_EQ(cuGraphAddMemFreeNode(&extra, g, &free_node, 1, ap.dptr), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr plain;
  SIM_OK(cuMemAlloc(&plain, 4096));
  SIM_CHECK_EQ(cuGraphAddMemFreeNode(&extra, g, &free_node, 1, plain), CUDA_ERROR_INVALID_VALUE);
  SIM_OK(cuMemFree(plain));
  // Graphs with memory nodes: no clone, no node removal.
  CUgraph clone;
  SIM_CHECK(cuGraphClone(&clone, g) != CUDA_SUCCESS);
  SIM_CHECK(cuGraphDestroyNode(copy) != CUDA_SUCCESS);

  // Nothing physical yet: not at node creation, not at instantiation.
  SIM_CHECK_EQ(FreeBytes(), base);
  CUgraphExec exec;
  SIM_OK(cuGraphInstantiate(&exec, g, 0));
  SIM_CHECK_EQ(FreeBytes(), base);
  SIM_CHECK_EQ(Attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0u);
  // One executable at a time for a graph with memory nodes.
  CUgraphExec second;
  SIM_CHECK_EQ(cuGraphInstantiate(&second, g, 0), CUDA_ERROR_INVALID_VALUE);

  SIM_OK(cuGraphLaunch(exec, s));
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK_EQ(host[0], 0x5A);
  SIM_CHECK_EQ(host[4095], 0x5A);
  // Freed by the graph, but its physical memory stays mapped for the next launch.
  SIM_CHECK_EQ(FreeBytes(), base - 64 * kMiB);
  SIM_CHECK_EQ(NvmlProcessBytes(), nvml_base + 64 * kMiB);
  SIM_CHECK_EQ(Attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 64 * kMiB);
  SIM_CHECK_EQ(Attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 64 * kMiB);
  // The graph freed it: it cannot be freed outside.
  SIM_CHECK_EQ(cuMemFree(ap.dptr), CUDA_ERROR_INVALID_VALUE);
  // Relaunching reuses the mapping.
  std::memset(host, 0, sizeof(host));
  SIM_OK(cuGraphLaunch(exec, s));
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK_EQ(host[100], 0x5A);
  SIM_CHECK_EQ(FreeBytes(), base - 64 * kMiB);
  SIM_CHECK_EQ(Attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 64 * kMiB);

  // Trim: the idle executable's memory goes back, and comes again with the next launch.
  SIM_OK(cuDeviceGraphMemTrim(g_dev));
  SIM_CHECK_EQ(FreeBytes(), base);
  SIM_CHECK_EQ(NvmlProcessBytes(), nvml_base);
  SIM_CHECK_EQ(Attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0u);
  SIM_CHECK_EQ(Attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0u);
  SIM_CHECK_EQ(Attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 64 * kMiB);
  std::memset(host, 0, sizeof(host));
  SIM_OK(cuGraphLaunch(exec, s));
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK_EQ(host[7], 0x5A);
  SIM_CHECK_EQ(FreeBytes(), base - 64 * kMiB);

  // Destroying the executable does not give memory back; it only leaves the pool idle.
  SIM_OK(cuGraphExecDestroy(exec));
  SIM_CHECK_EQ(FreeBytes(), base - 64 * kMiB);
  SIM_CHECK_EQ(Attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0u);
  SIM_CHECK_EQ(Attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 64 * kMiB);
  // A new executable of the graph takes the idle memory instead of new memory.
  SIM_OK(cuGraphInstantiate(&exec, g, 0));
  SIM_OK(cuGraphLaunch(exec, s));
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK_EQ(FreeBytes(), base - 64 * kMiB);
  SIM_OK(cuGraphExecDestroy(exec));
  SIM_OK(cuGraphDestroy(g));
  SIM_CHECK_EQ(FreeBytes(), base - 64 * kMiB);
  SIM_OK(cuDeviceGraphMemTrim(g_dev));
  SIM_CHECK_EQ(FreeBytes(), base);

  // Watermarks reset to the current figure; nothing else can be set.
  cuuint64_t zero = 0, one = 1;
  SIM_OK(cuDeviceSetGraphMemAttribute(g_dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &zero));
  SIM_OK(cuDeviceSetGraphMemAttribute(g_dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
  SIM_CHECK_EQ(Attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 0u);
  SIM_CHECK_EQ(Attr(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), 0u);
  SIM_CHECK_EQ(cuDeviceSetGraphMemAttribute(g_dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &one),
               CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK_EQ(cuDeviceSetGraphMemAttribute(g_dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &zero),
               CUDA_ERROR_INVALID_VALUE);
  cuuint64_t v;
  SIM_CHECK_EQ(cuDeviceGetGraphMemAttribute(99, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v),
               CUDA_ERROR_INVALID_DEVICE);
  SIM_CHECK_EQ(cuDeviceGraphMemTrim(99), CUDA_ERROR_INVALID_DEVICE);
}

// An allocation the graph does not free outlives the launch: a relaunch is
// refused until it is freed (outside the graph, or by another graph's free
// node), unless the executable frees it on launch.
void UnfreedAllocations(CUstream s) {
  const uint64_t base = FreeBytes();
  CUgraph g;
  SIM_OK(cuGraphCreate(&g, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS ap = AllocParams(16 * kMiB);
  CUgraphNode alloc;
  SIM_OK(cuGraphAddMemAllocNode(&alloc, g, nullptr, 0, &ap));
  CUgraphExec exec;
  SIM_OK(cuGraphInstantiate(&exec, g, 0));
  SIM_OK(cuGraphLaunch(exec, s));
  SIM_OK(cuStreamSynchronize(s));
  // Live after the graph: ordinary stream work may use it.
  SIM_OK(cuMemsetD8(ap.dptr, 0x21, 16 * kMiB));
  uint8_t byte = 0;
  SIM_OK(cuMemcpyDtoH(&byte, ap.dptr + 16 * kMiB - 1, 1));
  SIM_CHECK_EQ(byte, 0x21);
  SIM_CHECK_EQ(FreeBytes(), base - 16 * kMiB);
  SIM_CHECK_EQ(cuGraphLaunch(exec, s), CUDA_ERROR_INVALID_VALUE);  // unfreed from the last launch
  SIM_OK(cuMemFreeAsync(ap.dptr, s));
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK_EQ(cuMemFree(ap.dptr), CUDA_ERROR_INVALID_VALUE);  // not live any more
  SIM_CHECK_EQ(FreeBytes(), base - 16 * kMiB);                 // the executable keeps its memory
  SIM_OK(cuGraphLaunch(exec, s));
  SIM_OK(cuMemFree(ap.dptr));

  // Freed by another graph's free node; then the owning graph cannot free it.
  CUgraph g_free;
  SIM_OK(cuGraphCreate(&g_free, 0));
  CUgraphNode fn;
  SIM_OK(cuGraphAddMemFreeNode(&fn, g_free, nullptr, 0, ap.dptr));
  SIM_CHECK_EQ(cuGraphAddMemFreeNode(&fn, g, &alloc, 1, ap.dptr), CUDA_ERROR_INVALID_VALUE);
  CUgraphExec exec_free;
  SIM_OK(cuGraphInstantiate(&exec_free, g_free, 0));
  SIM_CHECK_EQ(cuGraphLaunch(exec_free, s), CUDA_ERROR_INVALID_VALUE);  // nothing live to free
  SIM_OK(cuGraphLaunch(exec, s));
  SIM_OK(cuGraphLaunch(exec_free, s));
  SIM_OK(cuGraphLaunch(exec, s));  // freed: may run again
  SIM_OK(cuStreamSynchronize(s));

  // The executable goes while its allocation is live: the memory stays with
  // the allocation until it is freed, then with the pool until trimmed.
  SIM_OK(cuGraphExecDestroy(exec));
  SIM_OK(cuMemsetD8(ap.dptr, 0x22, 4096));
  SIM_CHECK_EQ(FreeBytes(), base - 16 * kMiB);
  SIM_OK(cuGraphLaunch(exec_free, s));
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK_EQ(Attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0u);
  SIM_CHECK_EQ(FreeBytes(), base - 16 * kMiB);
  SIM_OK(cuDeviceGraphMemTrim(g_dev));
  SIM_CHECK_EQ(FreeBytes(), base);

  // Auto-free on launch: relaunching frees what the last launch left.
  SIM_OK(cuGraphInstantiate(&exec, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
  cuuint64_t flags = 0;
  SIM_OK(cuGraphExecGetFlags(exec, &flags));
  SIM_CHECK_EQ(flags, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
  for (int i = 0; i < 3; ++i) SIM_OK(cuGraphLaunch(exec, s));
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK_EQ(FreeBytes(), base - 16 * kMiB);  // one allocation's memory, not three
  SIM_OK(cuMemFree(ap.dptr));
  SIM_OK(cuGraphExecDestroy(exec));
  SIM_OK(cuGraphExecDestroy(exec_free));
  SIM_OK(cuGraphDestroy(g_free));
  SIM_OK(cuGraphDestroy(g));
  SIM_OK(cuDeviceGraphMemTrim(g_dev));
  SIM_CHECK_EQ(FreeBytes(), base);
}

// cuMemAllocAsync / cuMemFreeAsync captured into a graph become alloc and
// free nodes; nothing is allocated until the graph runs.
void Captured(CUstream s) {
  // Only graph allocations can be freed by a captured free.
  CUdeviceptr plain;
  SIM_OK(cuMemAlloc(&plain, 4096));
  SIM_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  SIM_CHECK_EQ(cuMemFreeAsync(plain, s), CUDA_ERROR_INVALID_VALUE);
  CUgraph discarded = nullptr;
  cuStreamEndCapture(s, &discarded);  // a real driver may report the capture invalidated
  if (discarded != nullptr) SIM_OK(cuGraphDestroy(discarded));
  SIM_OK(cuMemFree(plain));

  const uint64_t base = FreeBytes();
  SIM_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr p = 0;
  SIM_OK(cuMemAllocAsync(&p, 32 * kMiB, s));
  SIM_CHECK(p != 0);
  SIM_OK(cuMemsetD32Async(p, 0xCAFEF00D, 1024, s));
  static uint32_t words[1024];
  std::memset(words, 0, sizeof(words));
  SIM_OK(cuMemcpyDtoHAsync(words, p, sizeof(words), s));
  SIM_OK(cuMemFreeAsync(p, s));
  CUgraph g;
  SIM_OK(cuStreamEndCapture(s, &g));
  SIM_CHECK_EQ(FreeBytes(), base);
  size_t n = 0;
  SIM_OK(cuGraphGetNodes(g, nullptr, &n));
  SIM_CHECK_EQ(n, 4u);
  std::vector<CUgraphNode> nodes(n);
  SIM_OK(cuGraphGetNodes(g, nodes.data(), &n));
  CUgraphNodeType first, last;
  SIM_OK(cuGraphNodeGetType(nodes.front(), &first));
  SIM_OK(cuGraphNodeGetType(nodes.back(), &last));
  SIM_CHECK_EQ(first, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  SIM_CHECK_EQ(last, CU_GRAPH_NODE_TYPE_MEM_FREE);
  CUDA_MEM_ALLOC_NODE_PARAMS got{};
  SIM_OK(cuGraphMemAllocNodeGetParams(nodes.front(), &got));
  SIM_CHECK_EQ(got.bytesize, 32 * kMiB);
  SIM_CHECK_EQ(got.dptr, p);
  SIM_CHECK_EQ(got.poolProps.location.type, CU_MEM_LOCATION_TYPE_DEVICE);

  CUgraphExec exec;
  SIM_OK(cuGraphInstantiate(&exec, g, 0));
  SIM_CHECK_EQ(FreeBytes(), base);
  SIM_OK(cuGraphLaunch(exec, s));
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK_EQ(words[1023], 0xCAFEF00Du);
  SIM_CHECK_EQ(FreeBytes(), base - 32 * kMiB);
  SIM_OK(cuGraphExecDestroy(exec));
  SIM_OK(cuGraphDestroy(g));
  SIM_OK(cuDeviceGraphMemTrim(g_dev));
  SIM_CHECK_EQ(FreeBytes(), base);
}

// A launch whose allocations the device cannot back fails with
// CUDA_ERROR_OUT_OF_MEMORY before any node runs; an upload maps the memory
// ahead of the launch.
void OutOfMemoryAndUpload(CUstream s) {
  const uint64_t base = FreeBytes();
  static int host_calls = 0;
  CUgraph g;
  SIM_OK(cuGraphCreate(&g, 0));
  CUDA_HOST_NODE_PARAMS hp{};
  hp.fn = [](void*) { ++host_calls; };
  CUgraphNode host, alloc, free_node;
  SIM_OK(cuGraphAddHostNode(&host, g, nullptr, 0, &hp));
  CUDA_MEM_ALLOC_NODE_PARAMS ap = AllocParams(base + 64 * kMiB);  // more than is free
  SIM_OK(cuGraphAddMemAllocNode(&alloc, g, &host, 1, &ap));
  SIM_OK(cuGraphAddMemFreeNode(&free_node, g, &alloc, 1, ap.dptr));
  CUgraphExec exec;
  SIM_OK(cuGraphInstantiate(&exec, g, 0));
  SIM_CHECK_EQ(cuGraphLaunch(exec, s), CUDA_ERROR_OUT_OF_MEMORY);
  SIM_CHECK_EQ(cuGraphUpload(exec, s), CUDA_ERROR_OUT_OF_MEMORY);
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK_EQ(host_calls, 0);
  SIM_CHECK_EQ(FreeBytes(), base);
  SIM_CHECK_EQ(Attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0u);
  SIM_OK(cuGraphExecDestroy(exec));
  SIM_OK(cuGraphDestroy(g));

  // Upload: mapped before the launch, which then needs nothing more.
  SIM_OK(cuGraphCreate(&g, 0));
  ap = AllocParams(8 * kMiB);
  SIM_OK(cuGraphAddMemAllocNode(&alloc, g, nullptr, 0, &ap));
  SIM_OK(cuGraphAddMemFreeNode(&free_node, g, &alloc, 1, ap.dptr));
  SIM_OK(cuGraphInstantiate(&exec, g, 0));
  SIM_OK(cuGraphUpload(exec, s));
  SIM_CHECK_EQ(FreeBytes(), base - 8 * kMiB);
  SIM_OK(cuGraphLaunch(exec, s));
  SIM_OK(cuStreamSynchronize(s));
  SIM_CHECK_EQ(FreeBytes(), base - 8 * kMiB);
  SIM_OK(cuGraphExecDestroy(exec));
  // Instantiated with the upload flag: mapped by the instantiation.
  CUDA_GRAPH_INSTANTIATE_PARAMS ip{};
  ip.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
  ip.hUploadStream = s;
  SIM_OK(cuDeviceGraphMemTrim(g_dev));
  SIM_CHECK_EQ(FreeBytes(), base);
  SIM_OK(cuGraphInstantiateWithParams(&exec, g, &ip));
  SIM_CHECK_EQ(ip.result_out, CUDA_GRAPH_INSTANTIATE_SUCCESS);
  SIM_CHECK_EQ(FreeBytes(), base - 8 * kMiB);
  SIM_OK(cuGraphExecDestroy(exec));
  SIM_OK(cuGraphDestroy(g));
  SIM_OK(cuDeviceGraphMemTrim(g_dev));
  SIM_CHECK_EQ(FreeBytes(), base);
}

// The entry points are found by cuGetProcAddress as by linking.
void ProcAddresses() {
  struct {
    const char* name;
    void* linked;
  } expected[] = {
      {"cuGraphAddMemAllocNode", reinterpret_cast<void*>(&cuGraphAddMemAllocNode)},
      {"cuGraphAddMemFreeNode", reinterpret_cast<void*>(&cuGraphAddMemFreeNode)},
      {"cuGraphMemAllocNodeGetParams", reinterpret_cast<void*>(&cuGraphMemAllocNodeGetParams)},
      {"cuGraphMemFreeNodeGetParams", reinterpret_cast<void*>(&cuGraphMemFreeNodeGetParams)},
      {"cuDeviceGraphMemTrim", reinterpret_cast<void*>(&cuDeviceGraphMemTrim)},
      {"cuDeviceGetGraphMemAttribute", reinterpret_cast<void*>(&cuDeviceGetGraphMemAttribute)},
      {"cuDeviceSetGraphMemAttribute", reinterpret_cast<void*>(&cuDeviceSetGraphMemAttribute)},
  };
  for (const auto& e : expected) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult st{};
    SIM_OK(cuGetProcAddress(e.name, &p, 11040, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    SIM_CHECK(p == e.linked);
  }
}

}  // namespace

int main() {
  simtest::UseFreshState("1xL4", false);
  SIM_OK(cuInit(0));
  SIM_OK(nvmlInit_v2());
  SIM_OK(cuDeviceGet(&g_dev, 0));
  CUcontext ctx;
  SIM_OK(cuDevicePrimaryCtxRetain(&ctx, g_dev));
  SIM_OK(cuCtxSetCurrent(ctx));
  CUstream s;
  SIM_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  AllocatedFreedAndTrimmed(s);
  UnfreedAllocations(s);
  Captured(s);
  OutOfMemoryAndUpload(s);
  ProcAddresses();
  SIM_OK(cuStreamDestroy(s));
  SIM_OK(nvmlShutdown());
  return simtest::Finish("sim_graph_memory_test");
}
