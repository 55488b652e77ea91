// libvgpu cost, measured as an application sees it: this binary calls the
// driver API of the simulated GPU; run it once plainly and once with
// LD_PRELOAD=libvgpu.so and compare (docs/benchmarks.md has the commands).
//
//   BM_LaunchKernel      cuLaunchKernel of a no-op kernel (no compute limit set)
//   BM_AllocFree         cuMemAlloc_v2 + cuMemFree_v2 of 1 MiB under a memory limit
//   BM_ProcessStart      fork+exec of a process making its first CUDA calls and
//                        creating its first context, plain vs preloaded (all in
//                        one run); preloaded twice: as a later process of a
//                        container (the region already knows the context's
//                        size) and as the first (a fresh region each time:
//                        libvgpu measures the context through NVML)
//   BM_ConcurrentStart   N processes making their first CUDA calls (no
//                        context: N contexts would not fit the device) started
//                        at once; reports the slowest first-call time, plain vs
//                        preloaded
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace {

CUcontext g_ctx = nullptr;

bool ensure_context() {
  if (g_ctx != nullptr) return true;
  CUdevice dev = 0;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&g_ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS)
    return false;
  return true;
}

void BM_LaunchKernel(benchmark::State& state) {
  static const char kImage[] = "tessera-bench-module";
  CUmodule mod = nullptr;
  CUfunction fn = nullptr;
  CUstream stream = nullptr;
  if (!ensure_context() || cuModuleLoadData(&mod, kImage) != CUDA_SUCCESS ||
      cuModuleGetFunction(&fn, mod, "noop") != CUDA_SUCCESS ||
      cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    state.SkipWithError("no context/module");
    return;
  }
  int n = 0;
  for (auto _ : state) {
    CUresult rc = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
    benchmark::DoNotOptimize(rc);
    if (++n == 256) {  // keep the simulated queue short; excluded from timing
      state.PauseTiming();
      cuStreamSynchronize(stream);
      n = 0;
      state.ResumeTiming();
    }
  }
  cuStreamSynchronize(stream);
  cuStreamDestroy_v2(stream);
  cuModuleUnload(mod);
}
BENCHMARK(BM_LaunchKernel)->Iterations(100000);

void BM_AllocFree(benchmark::State& state) {
  if (!ensure_context()) {
    state.SkipWithError("no context");
    return;
  }
  for (auto _ : state) {
    CUdeviceptr p = 0;
    CUresult rc = cuMemAlloc_v2(&p, 1 << 20);
    if (rc == CUDA_SUCCESS) rc = cuMemFree_v2(p);
    if (rc != CUDA_SUCCESS) {
      state.SkipWithError("alloc/free failed");
      return;
    }
  }
}
BENCHMARK(BM_AllocFree);

// The environment of a first-call process; with `region`, its TESSERA_REGION.
std::vector<std::string> child_env(bool preload, const std::string& region = "") {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (strncmp(*e, "LD_PRELOAD=", 11) == 0) continue;
    if (!region.empty() && strncmp(*e, "TESSERA_REGION=", 15) == 0) continue;
    env.emplace_back(*e);
  }
  if (preload) env.emplace_back(std::string("LD_PRELOAD=") + TESSERA_VGPU_LIB);
  if (!region.empty()) env.emplace_back("TESSERA_REGION=" + region);
  return env;
}

struct FirstCall {
  long long first_calls_ns = 0;  // cuInit, cuDeviceGet, cuDeviceTotalMem
  long long context_ns = 0;      // the first context (0 without --context)
};

// Starts `count` first-call processes at once; returns what they reported, or
// an empty vector on failure.
std::vector<FirstCall> start_processes(int count, bool preload, bool context = false,
                                       const std::string& region = "") {
  std::vector<std::string> env = child_env(preload, region);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  char context_flag[] = "--context";
  char* argv[] = {const_cast<char*>(TESSERA_VGPU_FIRST_CALL), context ? context_flag : nullptr, nullptr};
  std::vector<pid_t> pids;
  std::vector<FILE*> outs;
  for (int i = 0; i < count; ++i) {
    int p[2];
    if (pipe(p) != 0) break;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (rc != 0) {
      close(p[0]);
      break;
    }
    pids.push_back(pid);
    outs.push_back(fdopen(p[0], "r"));
  }
  std::vector<FirstCall> times;
  bool ok = static_cast<int>(pids.size()) == count;
  for (size_t i = 0; i < pids.size(); ++i) {
    int res = -1;
    FirstCall t;
    if (fscanf(outs[i], "%d %lld %lld", &res, &t.first_calls_ns, &t.context_ns) != 3 || res != 0) ok = false;
    fclose(outs[i]);
    int status = 0;
    waitpid(pids[i], &status, 0);
    times.push_back(t);
  }
  if (!ok) times.clear();
  return times;
}

// Arguments: preloaded (0/1), fresh region per process (0/1).
void BM_ProcessStart(benchmark::State& state) {
  bool preload = state.range(0) != 0, fresh = state.range(1) != 0;
  long long first_calls = 0, contexts = 0;
  int n = 0;
  const char* base = getenv("TESSERA_REGION");
  for (auto _ : state) {
    // A fresh region: this process is its container's first and measures its context.
    std::string region = fresh ? std::string(base != nullptr ? base : "/tmp/tessera/vgpu.region") + ".fresh" +
                                     std::to_string(getpid()) + "-" + std::to_string(n++)
                               : "";
    auto t = start_processes(1, preload, /*context=*/true, region);
    if (!region.empty()) unlink(region.c_str());
    if (t.empty()) {
      state.SkipWithError("first-call process failed");
      return;
    }
    first_calls += t[0].first_calls_ns;
    contexts += t[0].context_ns;
  }
  double iterations = static_cast<double>(state.iterations());
  state.counters["first_calls_us"] =
      benchmark::Counter(static_cast<double>(first_calls) / 1000.0 / iterations);
  state.counters["context_us"] = benchmark::Counter(static_cast<double>(contexts) / 1000.0 / iterations);
  state.counters["both_us"] =
      benchmark::Counter(static_cast<double>(first_calls + contexts) / 1000.0 / iterations);
  state.SetLabel(!preload ? "plain"
                 : fresh  ? "preloaded, container's first process"
                          : "preloaded, later process");
}
BENCHMARK(BM_ProcessStart)
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({1, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_ConcurrentStart(benchmark::State& state) {
  int count = static_cast<int>(state.range(0));
  bool preload = state.range(1) != 0;
  long long worst = 0;
  for (auto _ : state) {
    auto t = start_processes(count, preload);
    if (t.empty()) {
      state.SkipWithError("a first-call process failed");
      return;
    }
    for (const FirstCall& f : t) worst = std::max(worst, f.first_calls_ns);
  }
  state.counters["slowest_first_call_ms"] = benchmark::Counter(static_cast<double>(worst) / 1e6);
  state.SetLabel(preload ? "preloaded" : "plain");
}
BENCHMARK(BM_ConcurrentStart)
    ->Args({300, 0})
    ->Args({300, 1})
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
