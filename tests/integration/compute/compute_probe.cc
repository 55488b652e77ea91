// compute_probe: a saturating sim_busy workload written to the CUDA driver API,
// as a container's program would be. It knows nothing of tessera.
//
//   compute_probe MODE KERNEL_US WARMUP_S MEASURE_S
//
// MODE: kernel | ex | coop | ptsz | graph. Each round launches two kernels of
// KERNEL_US (a graph of two chained kernel nodes for `graph`); three rounds
// are kept in flight. After WARMUP_S it counts the device time its finished work took over
// MEASURE_S of wall time and prints
//   share <percent of the device> busy_ms <device ms> wall_ms <ms> rounds <n>
// followed by "samples" lines: the share of every 500 ms window.
//
// MODE batch (latency-bound, issue 19): launches four kernels of KERNEL_US,
// waits for the last (cuEventSynchronize), and again, for WARMUP_S +
// MEASURE_S. Every kernel is followed by an event, whose time against an
// origin event gives the kernel's device interval on the simulated GPU's
// timeline (the simulator's busy-time accounting, not the host's clock). It
// prints the share of the device its kernels held over the measured span,
// from WARMUP_S on, and over each whole second of it:
//   share <percent> windows <percent> <percent> ...
#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" CUresult cuLaunchKernel_ptsz(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                                        unsigned int, unsigned int, unsigned int, CUstream, void**, void**);

#define CHECK(call)                                                       \
  do {                                                                    \
    CUresult rc_ = (call);                                                \
    if (rc_ != CUDA_SUCCESS) {                                            \
      std::fprintf(stderr, "compute_probe: %s failed: %d\n", #call, rc_); \
      return 1;                                                           \
    }                                                                     \
  } while (0)

namespace {

// MODE batch (see the top of the file).
int RunBatches(CUfunction fn, CUstream stream, uint64_t ns, double warmup_s, double measure_s) {
  constexpr int kBatch = 4;
  void* params[] = {&ns};
  CUevent origin;
  CUevent done[kBatch];
  CHECK(cuEventCreate(&origin, CU_EVENT_DEFAULT));
  for (CUevent& e : done) CHECK(cuEventCreate(&e, CU_EVENT_DEFAULT));
  const uint64_t from_ns = static_cast<uint64_t>(warmup_s * 1e9);
  const uint64_t to_ns = from_ns + static_cast<uint64_t>(measure_s * 1e9);
  const size_t seconds = static_cast<size_t>(measure_s);
  std::vector<uint64_t> busy(seconds, 0);
  uint64_t total = 0;
  CHECK(cuEventRecord(origin, stream));
  for (uint64_t device_end = 0; device_end < to_ns;) {
    for (CUevent& e : done) {
      CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
      CHECK(cuEventRecord(e, stream));
    }
    CHECK(cuEventSynchronize(done[kBatch - 1]));
    for (CUevent& e : done) {
      float ms = 0;
      CHECK(cuEventElapsedTime(&ms, origin, e));
      const uint64_t end = static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
      const uint64_t begin = end > ns ? end - ns : 0;
      device_end = end;
      // The part of [begin, end) inside [from_ns, to_ns), split by second.
      for (uint64_t t = begin > from_ns ? begin : from_ns; t < end && t < to_ns;) {
        const size_t w = static_cast<size_t>((t - from_ns) / 1'000'000'000ull);
        const uint64_t w_end = from_ns + (w + 1) * 1'000'000'000ull;
        const uint64_t piece = (end < w_end ? end : w_end) - t;
        if (w < seconds) busy[w] += piece;
        total += piece;
        t += piece;
      }
    }
  }
  std::printf("share %.2f windows", 100.0 * static_cast<double>(total) / (measure_s * 1e9));
  for (uint64_t b : busy) std::printf(" %.2f", static_cast<double>(b) / 1e7);
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: compute_probe MODE KERNEL_US WARMUP_S MEASURE_S\n");
    return 2;
  }
  const char* mode = argv[1];
  uint64_t ns = static_cast<uint64_t>(std::atof(argv[2]) * 1000);
  double warmup_s = std::atof(argv[3]), measure_s = std::atof(argv[4]);

  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  static const char kImage[] = "compute probe module";
  CHECK(cuModuleLoadData(&mod, kImage));
  CUfunction fn;
  CHECK(cuModuleGetFunction(&fn, mod, "sim_busy_probe"));
  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  void* params[] = {&ns};

  if (std::strcmp(mode, "batch") == 0) return RunBatches(fn, stream, ns, warmup_s, measure_s);

  CUgraphExec exec = nullptr;
  if (std::strcmp(mode, "graph") == 0) {
    CUgraph graph;
    CHECK(cuGraphCreate(&graph, 0));
    CUDA_KERNEL_NODE_PARAMS p;
    std::memset(&p, 0, sizeof(p));
    p.func = fn;
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = params;
    CUgraphNode a, b;
    CHECK(cuGraphAddKernelNode(&a, graph, nullptr, 0, &p));
    CHECK(cuGraphAddKernelNode(&b, graph, &a, 1, &p));
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
  }

  auto launch = [&]() -> CUresult {
    if (std::strcmp(mode, "ex") == 0) {
      CUlaunchConfig cfg;
      std::memset(&cfg, 0, sizeof(cfg));
      cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
      cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
      cfg.hStream = stream;
      return cuLaunchKernelEx(&cfg, fn, params, nullptr);
    }
    if (std::strcmp(mode, "coop") == 0)
      return cuLaunchCooperativeKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params);
    if (std::strcmp(mode, "ptsz") == 0)
      return cuLaunchKernel_ptsz(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
    return cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
  };

  // Three rounds in flight, each followed by an event: the device never waits
  // for the host, however late the host wakes up on a loaded machine.
  constexpr int kDepth = 3;
  CUstream sync_stream = std::strcmp(mode, "ptsz") == 0 ? CU_STREAM_PER_THREAD : stream;
  CUevent done[kDepth];
  for (CUevent& e : done) CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto measure_from =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(warmup_s));
  const auto end =
      measure_from + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(measure_s));
  const uint64_t round_ns = 2 * ns;
  uint64_t rounds = 0, launched = 0, finished = 0;
  bool stop = false;
  std::vector<double> windows;
  auto window_start = measure_from;
  uint64_t window_rounds = 0;
  while (!stop || finished < launched) {
    if (!stop && launched - finished < kDepth) {
      if (exec != nullptr) {
        CHECK(cuGraphLaunch(exec, stream));
      } else {
        CHECK(launch());
        CHECK(launch());
      }
      CHECK(cuEventRecord(done[launched % kDepth], sync_stream));
      ++launched;
      stop = Clock::now() >= end;
      continue;
    }
    CHECK(cuEventSynchronize(done[finished % kDepth]));
    ++finished;
    auto now = Clock::now();
    if (now < measure_from || now >= end) continue;
    ++rounds;
    ++window_rounds;
    if (now - window_start >= std::chrono::milliseconds(500)) {
      double wall = std::chrono::duration<double>(now - window_start).count();
      windows.push_back(100.0 * static_cast<double>(window_rounds * round_ns) / 1e9 / wall);
      window_start = now;
      window_rounds = 0;
    }
  }
  double wall_ms = measure_s * 1000.0;
  double busy_ms = static_cast<double>(rounds * round_ns) / 1e6;
  std::printf("share %.2f busy_ms %.1f wall_ms %.1f rounds %llu\n", 100.0 * busy_ms / wall_ms, busy_ms,
              wall_ms, static_cast<unsigned long long>(rounds));
  std::printf("samples");
  for (double w : windows) std::printf(" %.1f", w);
  std::printf("\n");
  return 0;
}
