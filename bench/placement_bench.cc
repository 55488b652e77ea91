// One placement decision over the whole trace cluster (1,213 nodes, 6,212
// GPUs), uncached: every node is evaluated by the policy, as the extender's
// prioritize call would. The cluster is first filled by replaying half of the
// seed-42 workload with the same policy, so nodes are partly used.
//
// Per-iteration thread CPU times are recorded to report the median and p99
// (counters p50_us, p99_us) beside Google Benchmark's mean wall and CPU time.
//
//   build/bin/placement_bench --benchmark_repetitions=3
// Trace folder: $TESSERA_TRACE_DIR, else ../shared/data/alibaba-gpu-2023 beside
// the repository (TESSERA_TRACE_DIR compile definition, bench/CMakeLists.txt).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <map>
#include <string>
#include <tuple>

#include "core/policy_placer.h"
#include "trace/baselines.h"
#include "trace/replay.h"
#include "trace/rng.h"
#include "trace/trace.h"

namespace {

using namespace tessera;

// CPU time of this thread: what one decision costs on one core, whatever the
// load of a shared machine (wall time there includes waiting for a CPU).
double ThreadCpuMicros() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

std::string TraceDir() {
  const char* env = std::getenv("TESSERA_TRACE_DIR");
  return env ? env : TESSERA_TRACE_DIR;
}

struct Fixture {
  trace::Cluster cluster;
  trace::Workload workload;
  std::vector<core::PodRequest> pods;
  bool ok = false;
};

const Fixture& Data() {
  static Fixture f = [] {
    Fixture x;
    auto nodes = trace::LoadNodes(TraceDir() + "/openb_node_list_gpu_node.csv");
    auto tasks = trace::LoadTasks(TraceDir() + "/openb_pod_list_default.csv");
    if (!nodes || !tasks) {
      std::cerr << (nodes ? tasks.error().message : nodes.error().message) << "\n";
      return x;
    }
    x.cluster.nodes = std::move(*nodes);
    x.cluster.tasks = std::move(*tasks);
    x.workload = trace::BuildWorkload(x.cluster.tasks, static_cast<int>(x.cluster.nodes.size()),
                                      x.cluster.capacity_milli(), 42, 1.3);
    for (const auto& t : x.cluster.tasks) x.pods.push_back(trace::ToPodRequest(t));
    x.ok = true;
    return x;
  }();
  return f;
}

void BM_PlaceOne(benchmark::State& state, const std::string& policy_name) {
  const Fixture& f = Data();
  if (!f.ok) {
    static const std::string message = "trace files not found in " + TraceDir() + " (set TESSERA_TRACE_DIR)";
    state.SkipWithError(message.c_str());
    return;
  }
  auto policy = trace::MakeTracePolicy(policy_name, f.cluster.tasks);
  std::vector<core::NodeState> nodes;
  for (int i : f.workload.node_order) nodes.push_back(trace::ToNodeState(f.cluster.nodes[i]));
  core::Placer placer(std::move(nodes));
  trace::Rng draw(1);
  const size_t half = f.workload.arrivals.size() / 2;
  std::map<std::tuple<int64_t, int64_t, int, int>, int> shapes;  // warm-up only: cached per shape
  for (size_t a = 0; a < half; ++a) {
    const auto& task = f.cluster.tasks[f.workload.arrivals[a]];
    auto key = std::make_tuple(task.cpu_milli, task.memory_mib, task.num_gpu, task.gpu_milli);
    int shape = shapes.emplace(key, static_cast<int>(shapes.size())).first->second;
    const auto& pod = f.pods[f.workload.arrivals[a]];
    (*policy)->Observe(pod);
    auto d = placer.Choose(pod, **policy, &draw, shape);
    if (d) (void)placer.Commit(*d, pod);
  }
  std::vector<double> micros;
  size_t next = half;
  for (auto _ : state) {
    const auto& pod = f.pods[f.workload.arrivals[next]];
    next = next + 1 < f.workload.arrivals.size() ? next + 1 : half;
    double t0 = ThreadCpuMicros();
    auto d = placer.Choose(pod, **policy, &draw, /*shape=*/-1);  // uncached
    benchmark::DoNotOptimize(d);
    micros.push_back(ThreadCpuMicros() - t0);
  }
  std::sort(micros.begin(), micros.end());
  if (!micros.empty()) {
    state.counters["p50_us"] = micros[micros.size() / 2];
    state.counters["p90_us"] = micros[micros.size() * 90 / 100];
    state.counters["p99_us"] = micros[std::min(micros.size() - 1, micros.size() * 99 / 100)];
    state.counters["max_us"] = micros.back();
  }
}

BENCHMARK_CAPTURE(BM_PlaceOne, tessera, std::string("tessera"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlaceOne, fgd, std::string("fgd"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlaceOne, bestfit, std::string("bestfit"))->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
