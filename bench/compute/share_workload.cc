// compute_share_workload: a sim_busy tenant for the compute isolation
// benchmark. It keeps kernels of KERNEL_US in flight on one stream for
// DURATION_S — at least three, and at least IN_FLIGHT_MS of work (default 0:
// three kernels) — and learns each kernel's device end time exactly from a
// timing event recorded after it (elapsed time from an event recorded at the
// start). Each kernel's device interval [end - d, end] is split over windows
// of WINDOW_MS; one line per window:
//   <label> <window end, s> <share of the device in the window, %>
// It knows nothing of tessera: run it with and without libvgpu.so preloaded.
//
// With BATCH > 0 the tenant instead launches BATCH kernels, then synchronises
// (waits for all of them), and again: the training-step shape whose gaps at
// each synchronisation a neighbour's work can fill.
//
// How much is in flight decides what a late host costs. Three 0.1 ms kernels
// are 0.3 ms of work: the device idles whenever the host wakes the process
// more than 0.2 ms after a kernel ends, with or without a limiter (a
// latency-bound application). With IN_FLIGHT_MS 10 the queue covers the
// wake-ups of a loaded machine and the tenant saturates the device.
#include <cuda.h>
#include <time.h>

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

constexpr uint64_t kMinDepth = 3;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5 || argc > 7) {
    std::fprintf(
        stderr,
        "usage: compute_share_workload LABEL KERNEL_US DURATION_S WINDOW_MS [IN_FLIGHT_MS [BATCH]]\n");
    return 2;
  }
  const char* label = argv[1];
  const uint64_t kernel_ns = static_cast<uint64_t>(std::atof(argv[2]) * 1000);
  const uint64_t duration_ns = static_cast<uint64_t>(std::atof(argv[3]) * 1e9);
  const uint64_t window_ns = static_cast<uint64_t>(std::atof(argv[4]) * 1e6);
  const uint64_t in_flight_ns = argc >= 6 ? static_cast<uint64_t>(std::atof(argv[5]) * 1e6) : 0;
  const uint64_t batch = argc == 7 ? static_cast<uint64_t>(std::atoll(argv[6])) : 0;
  if (kernel_ns == 0 || window_ns == 0) return 2;
  uint64_t depth = (in_flight_ns + kernel_ns - 1) / kernel_ns;
  if (depth < kMinDepth) depth = kMinDepth;
  if (batch > 0) depth = batch;
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction fn;
  CUstream stream;
  CUevent origin;
  std::vector<CUevent> done(depth);
  static const char kImage[] = "compute share bench";
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
      cuModuleLoadData(&mod, kImage) != CUDA_SUCCESS ||
      cuModuleGetFunction(&fn, mod, "sim_busy_bench") != CUDA_SUCCESS ||
      cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      cuEventCreate(&origin, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    std::fprintf(stderr, "compute_share_workload: no simulated GPU\n");
    return 1;
  }
  for (CUevent& e : done)
    if (cuEventCreate(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return 1;
  uint64_t ns = kernel_ns;
  void* params[] = {&ns};
  const size_t windows = static_cast<size_t>((duration_ns + window_ns - 1) / window_ns);
  std::vector<uint64_t> busy(windows, 0);
  const uint64_t start = now_ns();
  if (cuEventRecord(origin, stream) != CUDA_SUCCESS) return 1;
  uint64_t launched = 0, finished = 0;
  bool stop = false;
  while (!stop || finished < launched) {
    // In batch mode a new batch starts only once the previous one is done.
    const bool room = batch > 0 ? launched == finished || launched % batch != 0 : launched - finished < depth;
    if (!stop && room) {
      if (cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr) != CUDA_SUCCESS ||
          cuEventRecord(done[launched % depth], stream) != CUDA_SUCCESS)
        return 1;
      ++launched;
      stop = now_ns() - start >= duration_ns;
      continue;
    }
    CUevent e = done[finished % depth];
    float ms = 0;
    if (cuEventSynchronize(e) != CUDA_SUCCESS || cuEventElapsedTime(&ms, origin, e) != CUDA_SUCCESS) return 1;
    ++finished;
    uint64_t end = static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
    uint64_t begin = end > kernel_ns ? end - kernel_ns : 0;
    for (uint64_t t = begin; t < end;) {
      size_t w = static_cast<size_t>(t / window_ns);
      if (w >= windows) break;
      uint64_t w_end = (w + 1) * window_ns;
      uint64_t piece = (end < w_end ? end : w_end) - t;
      busy[w] += piece;
      t += piece;
    }
  }
  for (size_t w = 0; w < windows; ++w)
    std::printf("%s %.3f %.2f\n", label, static_cast<double>((w + 1) * window_ns) / 1e9,
                100.0 * static_cast<double>(busy[w]) / static_cast<double>(window_ns));
  return 0;
}
