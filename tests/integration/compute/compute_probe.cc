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
