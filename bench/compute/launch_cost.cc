// compute_launch_cost: the latency of one cuLaunchKernel as the application
// sees it, as a distribution (median, p90, p99 of N single-launch timings).
// Run plainly, with libvgpu.so preloaded and no compute quota, and preloaded
// with a quota whose budget the launches stay under (docs/benchmarks.md).
// The kernel is a 1 ns sim_busy kernel, so the budget is never spent.
#include <cuda.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 200000;
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction fn;
  CUstream stream;
  static const char kImage[] = "compute launch cost";
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
      cuModuleLoadData(&mod, kImage) != CUDA_SUCCESS ||
      cuModuleGetFunction(&fn, mod, "sim_busy_cost") != CUDA_SUCCESS ||
      cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    std::fprintf(stderr, "compute_launch_cost: no simulated GPU\n");
    return 1;
  }
  uint64_t ns = 1;
  void* params[] = {&ns};
  std::vector<uint64_t> t(static_cast<size_t>(n));
  for (int i = 0; i < 2000; ++i) cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);  // warm up
  cuStreamSynchronize(stream);
  for (int i = 0; i < n; ++i) {
    uint64_t a = now_ns();
    CUresult rc = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
    uint64_t b = now_ns();
    if (rc != CUDA_SUCCESS) return 1;
    t[static_cast<size_t>(i)] = b - a;
    if (i % 256 == 255) cuStreamSynchronize(stream);  // keep the simulated queue short (untimed)
  }
  std::sort(t.begin(), t.end());
  auto pct = [&](double p) { return t[static_cast<size_t>(p * (n - 1))]; };
  std::printf("launches %d median_ns %llu p90_ns %llu p99_ns %llu\n", n,
              static_cast<unsigned long long>(pct(0.5)), static_cast<unsigned long long>(pct(0.9)),
              static_cast<unsigned long long>(pct(0.99)));
  return 0;
}
