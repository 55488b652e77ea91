// Graphs on the simulated driver: explicit graphs (kernel, memset, memcpy,
// host nodes with dependencies) and stream capture, instantiated and launched;
// kernel nodes occupy device time like launched kernels.
#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "sim_test_util.h"

namespace {

int host_calls = 0;

// Launches `exec` on `s` and returns the device time it took in milliseconds
// (between events recorded around it); `query_after_launch`, when given, gets
// the stream's state right after the launch was queued.
float LaunchTimed(CUgraphExec exec, CUstream s, CUresult* query_after_launch = nullptr) {
  CUevent a, b;
  SIM_OK(cuEventCreate(&a, 0));
  SIM_OK(cuEventCreate(&b, 0));
  SIM_OK(cuEventRecord(a, s));
  SIM_OK(cuGraphLaunch(exec, s));
  SIM_OK(cuEventRecord(b, s));
  if (query_after_launch != nullptr) *query_after_launch = cuStreamQuery(s);
  SIM_OK(cuStreamSynchronize(s));
  float ms = 0;
  SIM_OK(cuEventElapsedTime(&ms, a, b));
  SIM_OK(cuEventDestroy(a));
  SIM_OK(cuEventDestroy(b));
  return ms;
}

void ExplicitGraph(CUfunction busy, CUstream s) {
  CUdeviceptr buf;
  SIM_OK(cuMemAlloc(&buf, 4096));
  CUgraph g;
  SIM_OK(cuGraphCreate(&g, 0));

  CUDA_MEMSET_NODE_PARAMS ms{};
  ms.dst = buf;
  ms.value = 0x11;
  ms.elementSize = 1;
  ms.width = 4096;
  ms.height = 1;
  CUgraphNode set;
  SIM_OK(cuGraphAddMemsetNode(&set, g, nullptr, 0, &ms, nullptr));

  uint64_t ns = 15'000'000;
  void* args[] = {&ns};
  CUDA_KERNEL_NODE_PARAMS kp{};
  kp.func = busy;
  kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
  kp.kernelParams = args;
  CUgraphNode k1, k2;
  SIM_OK(cuGraphAddKernelNode(&k1, g, &set, 1, &kp));
  ns = 5'000'000;  // parameters are captured when the node is added
  SIM_OK(cuGraphAddKernelNode(&k2, g, &k1, 1, &kp));

  static uint8_t host[4096];
  std::memset(host, 0, sizeof(host));
  CUDA_MEMCPY3D cp = simtest::Copy3DToHost(buf, host, 4096);
  CUgraphNode copy;
  SIM_OK(cuGraphAddMemcpyNode(&copy, g, &k2, 1, &cp, nullptr));
  CUDA_HOST_NODE_PARAMS hp{};
  hp.fn = [](void*) { ++host_calls; };
  CUgraphNode hostNode;
  SIM_OK(cuGraphAddHostNode(&hostNode, g, &copy, 1, &hp));

  size_t n = 0;
  SIM_OK(cuGraphGetNodes(g, nullptr, &n));
  SIM_CHECK_EQ(n, 5u);
  CUgraphNodeType type;
  SIM_OK(cuGraphNodeGetType(k1, &type));
  SIM_CHECK_EQ(type, CU_GRAPH_NODE_TYPE_KERNEL);

  CUgraphExec exec;
  SIM_OK(cuGraphInstantiate(&exec, g, 0));
  for (int launch = 0; launch < 2; ++launch) {
    const float ms_elapsed = LaunchTimed(exec, s);
    SIM_CHECK(ms_elapsed >= 19.9f && ms_elapsed < 300.0f);  // 15 + 5 ms of kernels
  }
  SIM_CHECK_EQ(host[4095], 0x11);
  SIM_CHECK_EQ(host_calls, 2);
  SIM_OK(cuGraphExecDestroy(exec));
  SIM_OK(cuGraphDestroy(g));

  // A cycle cannot be instantiated.
  CUgraph cyc;
  SIM_OK(cuGraphCreate(&cyc, 0));
  CUgraphNode x, y;
  SIM_OK(cuGraphAddEmptyNode(&x, cyc, nullptr, 0));
  SIM_OK(cuGraphAddEmptyNode(&y, cyc, &x, 1));
  SIM_OK(cuGraphAddDependencies(cyc, &y, &x, nullptr, 1));
  CUgraphExec bad;
  SIM_CHECK(cuGraphInstantiate(&bad, cyc, 0) != CUDA_SUCCESS);
  SIM_OK(cuGraphDestroy(cyc));
  SIM_OK(cuMemFree(buf));
}

void Capture(CUfunction busy, CUstream s) {
  CUdeviceptr buf;
  SIM_OK(cuMemAlloc(&buf, 1024));
  SIM_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus st;
  SIM_OK(cuStreamIsCapturing(s, &st));
  SIM_CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  uint64_t ns = 10'000'000;
  void* args[] = {&ns};
  for (int i = 0; i < 4; ++i) SIM_OK(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr));
  SIM_OK(cuMemsetD32Async(buf, 0xCAFEF00D, 256, s));
  // Captured work does not run: the stream has nothing pending.
  CUgraph g;
  SIM_OK(cuStreamEndCapture(s, &g));
  SIM_OK(cuStreamIsCapturing(s, &st));
  SIM_CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);
  SIM_OK(cuStreamQuery(s));
  uint32_t word = 0;
  SIM_OK(cuMemcpyDtoH(&word, buf, 4));
  SIM_CHECK(word != 0xCAFEF00Du);
  size_t n = 0;
  SIM_OK(cuGraphGetNodes(g, nullptr, &n));
  SIM_CHECK_EQ(n, 5u);

  CUgraphExec exec;
  SIM_OK(cuGraphInstantiate(&exec, g, 0));
  CUresult pending = CUDA_SUCCESS;
  const float ms = LaunchTimed(exec, s, &pending);
  SIM_CHECK_EQ(pending, CUDA_ERROR_NOT_READY);
  SIM_CHECK(ms >= 39.9f && ms < 300.0f);
  SIM_OK(cuMemcpyDtoH(&word, buf + 1020, 4));
  SIM_CHECK_EQ(word, 0xCAFEF00Du);
  SIM_OK(cuGraphExecDestroy(exec));
  SIM_OK(cuGraphDestroy(g));
  SIM_OK(cuMemFree(buf));
}

// The graph API's bookkeeping: generic node creation, roots, edges, clone, update.
void GraphBookkeeping(CUfunction busy, CUstream s) {
  CUgraph g;
  SIM_OK(cuGraphCreate(&g, 0));
  uint64_t ns = 2'000'000;
  void* args[] = {&ns};
  CUgraphNodeParams np{};
  np.type = CU_GRAPH_NODE_TYPE_KERNEL;
  np.kernel.func = busy;
  np.kernel.gridDimX = np.kernel.gridDimY = np.kernel.gridDimZ = 1;
  np.kernel.blockDimX = np.kernel.blockDimY = np.kernel.blockDimZ = 1;
  np.kernel.kernelParams = args;
  CUgraphNode a, b, c;
  SIM_OK(cuGraphAddNode(&a, g, nullptr, nullptr, 0, &np));
  SIM_OK(cuGraphAddNode(&b, g, nullptr, nullptr, 0, &np));
  CUgraphNode both[] = {a, b};
  SIM_OK(cuGraphAddEmptyNode(&c, g, both, 2));
  size_t n = 0;
  SIM_OK(cuGraphGetRootNodes(g, nullptr, &n));
  SIM_CHECK_EQ(n, 2u);
  SIM_OK(cuGraphGetEdges(g, nullptr, nullptr, nullptr, &n));
  SIM_CHECK_EQ(n, 2u);
  SIM_OK(cuGraphNodeGetDependentNodes(a, nullptr, nullptr, &n));
  SIM_CHECK_EQ(n, 1u);
  CUgraph clone;
  SIM_OK(cuGraphClone(&clone, g));
  SIM_OK(cuGraphGetNodes(clone, nullptr, &n));
  SIM_CHECK_EQ(n, 3u);
  CUgraphExec exec;
  SIM_OK(cuGraphInstantiate(&exec, g, 0));
  SIM_OK(cuGraphDestroyNode(b));
  CUgraphExecUpdateResultInfo info{};
  SIM_OK(cuGraphExecUpdate(exec, g, &info));
  SIM_CHECK_EQ(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
  const float ms = LaunchTimed(exec, s);
  SIM_CHECK(ms >= 1.9f && ms < 100.0f);  // one 2 ms kernel left after the update
  SIM_OK(cuGraphExecDestroy(exec));
  SIM_OK(cuGraphDestroy(clone));
  SIM_OK(cuGraphDestroy(g));
}

}  // namespace

int main() {
  simtest::UseFreshState("1xL4", false);
  SIM_OK(cuInit(0));
  simtest::UseDevice(0);
  CUfunction busy = simtest::SimKernel("sim_busy_graph");
  CUstream s;
  SIM_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  ExplicitGraph(busy, s);
  Capture(busy, s);
  GraphBookkeeping(busy, s);
  SIM_OK(cuStreamDestroy(s));
  return simtest::Finish("sim_graph_test");
}
