// TESSERA_SIM_CONFIG's knobs seen from an ordinary driver-API / NVML client:
// the per-context overhead in cuMemGetInfo and NVML, the copy bandwidth in the
// device time of a large copy; and calls no other test covers:
// cuDevicePrimaryCtxReset, cuMemHostAlloc, nvmlDeviceGetComputeRunningProcesses_v2.
//
// The assertions are on simulated quantities (bytes charged, device time
// between events); where only wall time is observable (a synchronous copy),
// only a lower bound is checked.
#include <cuda.h>
#include <nvml.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sim_test_util.h"

namespace {

constexpr uint64_t kMiB = 1ull << 20;

// The parent's configuration: no context overhead, a slow 100 MB/s copy engine.
constexpr const char* kSlowConfig = R"(
gpus:
  - model: A100-80GB
    count: 2
context_overhead_mib: 0
copy_bandwidth_mb_per_s: 100
)";
// The child's (another state directory): a 1234 MiB context.
constexpr const char* kOverheadConfig = R"(
gpus:
  - model: A30
context_overhead_mib: 1234
)";

uint64_t UsedBytes() {
  size_t free_b = 0, total_b = 0;
  SIM_OK(cuMemGetInfo(&free_b, &total_b));
  return total_b - free_b;
}

uint64_t NvmlUsed(unsigned index) {
  nvmlDevice_t dev;
  SIM_OK(nvmlDeviceGetHandleByIndex(index, &dev));
  nvmlMemory_t mem{};
  SIM_OK(nvmlDeviceGetMemoryInfo(dev, &mem));
  return mem.used;
}

// This process's entry in nvmlDeviceGetComputeRunningProcesses_v2, if listed.
bool ListedV2(unsigned index, nvmlProcessInfo_v2_t* out) {
  nvmlDevice_t dev;
  SIM_OK(nvmlDeviceGetHandleByIndex(index, &dev));
  unsigned count = 0;
  nvmlReturn_t r = nvmlDeviceGetComputeRunningProcesses_v2(dev, &count, nullptr);
  if (r == NVML_SUCCESS && count == 0) return false;
  SIM_CHECK_EQ(r, NVML_ERROR_INSUFFICIENT_SIZE);
  std::vector<nvmlProcessInfo_v2_t> infos(count + 2);
  count = static_cast<unsigned>(infos.size());
  SIM_OK(nvmlDeviceGetComputeRunningProcesses_v2(dev, &count, infos.data()));
  for (unsigned i = 0; i < count; ++i) {
    if (infos[i].pid == static_cast<unsigned>(getpid())) {
      *out = infos[i];
      return true;
    }
  }
  return false;
}

// context_overhead_mib: 0 — a context costs nothing; memory shows exactly what
// was allocated, in CUDA, NVML and the v2 process list.
void NoContextOverhead() {
  simtest::UseDevice(0);
  SIM_CHECK_EQ(UsedBytes(), 0u);
  SIM_CHECK_EQ(NvmlUsed(0), 0u);
  nvmlProcessInfo_v2_t me{};
  SIM_CHECK(ListedV2(0, &me));  // a context makes it a GPU user, even with no memory
  SIM_CHECK_EQ(me.usedGpuMemory, 0u);
  CUdeviceptr p;
  SIM_OK(cuMemAlloc(&p, 64 * kMiB));
  SIM_CHECK_EQ(UsedBytes(), 64 * kMiB);
  SIM_CHECK_EQ(NvmlUsed(0), 64 * kMiB);
  SIM_CHECK(ListedV2(0, &me));
  SIM_CHECK_EQ(me.usedGpuMemory, 64 * kMiB);
  SIM_CHECK_EQ(me.gpuInstanceId, 0xFFFFFFFFu);  // not in a MIG instance
  SIM_CHECK_EQ(me.computeInstanceId, 0xFFFFFFFFu);
  SIM_OK(cuMemFree(p));
  SIM_CHECK_EQ(NvmlUsed(0), 0u);
}

// copy_bandwidth_mb_per_s: 100 — an asynchronous 8 MB copy occupies its stream
// for 8e6 / 100e6 s = 80 ms of device time (25000 MB/s, the default, would be
// 0.32 ms). A 300 ms kernel first keeps the stream busy, so the copy starts
// exactly when the kernel ends and the events bracket only the copy.
void CopyBandwidth() {
  simtest::UseDevice(0);
  constexpr size_t kBytes = 8'000'000;
  std::vector<unsigned char> host(kBytes), back(kBytes);
  for (size_t i = 0; i < kBytes; ++i) host[i] = static_cast<unsigned char>(i * 7 + 1);
  CUdeviceptr dev;
  SIM_OK(cuMemAlloc(&dev, kBytes));
  CUstream s;
  SIM_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUfunction busy = simtest::SimKernel("sim_busy_wait");
  uint64_t ns = 300'000'000;
  void* args[] = {&ns};
  CUevent before, after;
  SIM_OK(cuEventCreate(&before, CU_EVENT_DEFAULT));
  SIM_OK(cuEventCreate(&after, CU_EVENT_DEFAULT));
  SIM_OK(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr));
  SIM_OK(cuEventRecord(before, s));
  SIM_OK(cuMemcpyHtoDAsync(dev, host.data(), kBytes, s));
  SIM_OK(cuEventRecord(after, s));
  // Still inside the kernel: the copy was queued behind it (not started "now").
  const bool queued_behind_kernel = cuEventQuery(before) == CUDA_ERROR_NOT_READY;
  SIM_OK(cuStreamSynchronize(s));
  float ms = 0;
  SIM_OK(cuEventElapsedTime(&ms, before, after));
  if (queued_behind_kernel) {
    SIM_CHECK(ms > 79.999f && ms < 80.001f);
  } else {
    std::fprintf(stderr, "CopyBandwidth: the kernel ended before the copy was queued; lower bound only\n");
    SIM_CHECK(ms >= 79.999f);
  }
  if (!(ms >= 79.999f)) std::fprintf(stderr, "  async 8 MB copy took %.3f ms of device time\n", ms);

  // A synchronous copy back blocks for the same time; only wall time shows it,
  // so only a lower bound is checked. The bytes made the round trip.
  const auto t0 = std::chrono::steady_clock::now();
  SIM_OK(cuMemcpyDtoH(back.data(), dev, kBytes));
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  SIM_CHECK(wall_ms >= 79.0);
  SIM_CHECK(std::memcmp(host.data(), back.data(), kBytes) == 0);
  SIM_OK(cuEventDestroy(before));
  SIM_OK(cuEventDestroy(after));
  SIM_OK(cuStreamDestroy(s));
  SIM_OK(cuMemFree(dev));
}

// cuDevicePrimaryCtxReset destroys the primary context and everything in it,
// whatever its retain count; the next retain makes a fresh one.
void PrimaryContextReset() {
  CUdevice d;
  SIM_OK(cuDeviceGet(&d, 1));
  CUcontext a = nullptr, b = nullptr;
  SIM_OK(cuDevicePrimaryCtxRetain(&a, d));
  SIM_OK(cuDevicePrimaryCtxRetain(&b, d));  // retained twice
  SIM_CHECK(a == b);
  SIM_OK(cuCtxSetCurrent(a));
  CUdeviceptr p;
  SIM_OK(cuMemAlloc(&p, 256 * kMiB));
  SIM_CHECK_EQ(NvmlUsed(1), 256 * kMiB);
  unsigned flags = 0;
  int active = 0;
  SIM_OK(cuDevicePrimaryCtxGetState(d, &flags, &active));
  SIM_CHECK_EQ(active, 1);

  SIM_OK(cuDevicePrimaryCtxReset(d));
  SIM_OK(cuDevicePrimaryCtxGetState(d, &flags, &active));
  SIM_CHECK_EQ(active, 0);
  SIM_CHECK_EQ(NvmlUsed(1), 0u);  // its memory went with it
  nvmlProcessInfo_v2_t me{};
  SIM_CHECK(!ListedV2(1, &me));  // and this process no longer uses GPU 1
  SIM_CHECK(cuMemFree(p) != CUDA_SUCCESS);

  CUcontext fresh = nullptr;
  SIM_OK(cuDevicePrimaryCtxRetain(&fresh, d));
  SIM_OK(cuCtxSetCurrent(fresh));
  SIM_OK(cuMemAlloc(&p, 32 * kMiB));
  SIM_CHECK_EQ(NvmlUsed(1), 32 * kMiB);
  SIM_OK(cuMemFree(p));
  SIM_OK(cuDevicePrimaryCtxRelease(d));
  SIM_OK(cuDevicePrimaryCtxGetState(d, &flags, &active));
  SIM_CHECK_EQ(active, 0);
}

// cuMemHostAlloc: pinned host memory, flags kept, mapped into the device's
// address space, charged nothing on the GPU.
void HostAlloc() {
  simtest::UseDevice(0);
  const uint64_t used = NvmlUsed(0);
  const unsigned want = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP;
  void* h = nullptr;
  SIM_OK(cuMemHostAlloc(&h, 4 * kMiB, want));
  SIM_CHECK(h != nullptr);
  unsigned flags = 0;
  SIM_OK(cuMemHostGetFlags(&flags, h));
  SIM_CHECK_EQ(flags, want);
  SIM_CHECK_EQ(NvmlUsed(0), used);
  std::memset(h, 0x5a, 4 * kMiB);
  CUdeviceptr mapped = 0;
  SIM_OK(cuMemHostGetDevicePointer(&mapped, h, 0));
  CUdeviceptr dev;
  SIM_OK(cuMemAlloc(&dev, 4 * kMiB));
  SIM_OK(cuMemcpyDtoD(dev, mapped, 4 * kMiB));  // device-side copy from the mapped host memory
  std::vector<unsigned char> back(4 * kMiB);
  SIM_OK(cuMemcpyDtoH(back.data(), dev, back.size()));
  SIM_CHECK(back.front() == 0x5a && back.back() == 0x5a);
  SIM_OK(cuMemFree(dev));
  SIM_OK(cuMemFreeHost(h));
  SIM_CHECK(cuMemFreeHost(h) != CUDA_SUCCESS);  // not twice
  SIM_CHECK_EQ(NvmlUsed(0), used);
}

// Child role, in its own state with kOverheadConfig: a context costs 1234 MiB.
int OverheadChild() {
  SIM_OK(cuInit(0));
  SIM_OK(nvmlInit());
  SIM_CHECK_EQ(NvmlUsed(0), 0u);
  simtest::UseDevice(0);
  SIM_CHECK_EQ(UsedBytes(), 1234 * kMiB);
  SIM_CHECK_EQ(NvmlUsed(0), 1234 * kMiB);
  nvmlProcessInfo_v2_t me{};
  SIM_CHECK(ListedV2(0, &me));
  SIM_CHECK_EQ(me.usedGpuMemory, 1234 * kMiB);
  // A second context in the same process costs nothing more.
  CUdevice d;
  SIM_OK(cuDeviceGet(&d, 0));
  CUcontext extra;
  SIM_OK(cuCtxCreate(&extra, nullptr, 0, d));
  SIM_CHECK_EQ(UsedBytes(), 1234 * kMiB);
  SIM_OK(cuCtxDestroy(extra));
  SIM_OK(nvmlShutdown());
  return simtest::Failures() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool child = argc > 1 && std::string(argv[1]) == "overhead";
  simtest::UseFreshState(nullptr, child);
  if (child) return OverheadChild();

  setenv("TESSERA_SIM_CONFIG", kSlowConfig, 1);
  SIM_OK(cuInit(0));
  SIM_OK(nvmlInit());
  NoContextOverhead();
  CopyBandwidth();
  PrimaryContextReset();
  HostAlloc();
  SIM_OK(nvmlShutdown());

  // Another configuration needs another state: the child gets its own directory.
  {
    tessera::testing::TempDir other("tessera-simtest");
    const std::string mine = getenv("TESSERA_SIM_STATE");
    setenv("TESSERA_SIM_STATE", other.path().c_str(), 1);
    setenv("TESSERA_SIM_CONFIG", kOverheadConfig, 1);
    simtest::Child c = simtest::SpawnSelf({"overhead"});
    SIM_CHECK_EQ(c.Wait(), 0);
    setenv("TESSERA_SIM_STATE", mine.c_str(), 1);
  }
  return simtest::Finish("sim_config_test");
}
