// The cost of one GPU preemption decision (DecideGpuPreemption, the work of
// one attempt on tessera-scheduler's preemption thread) over a large cluster
// held in ClusterState: `nodes` nodes of 8 GPUs of 80 GiB, each GPU full with
// four 20 GiB slices of priorities 1..4; the preemptor (priority 100) asks
// 40 GiB on one GPU.
//   uniform:   every node is a candidate (the search stops after 100 of them)
//   last-only: only the last node holds lower-priority pods; the others are
//              full of pods of higher priority (each is read and passed over)
// Usage: gpu_preemption_bench [nodes=5000] [repeats=5]. Prints the median and
// the worst wall time per decision.
//
// build-preempt/bin/gpu_preemption_bench 5000 5, on the shared 2-core build
// machine at load average ~4 (2026-11-26):
//   uniform    nodes=5000 decision: median 62.8 ms, worst 78.1 ms (node-0, 2 victim(s))
//   last-only  nodes=5000 decision: median 127.1 ms, worst 159.4 ms (node-4999, 2 victim(s))
// Before the pods' priorities were kept in ClusterState (every pod of every
// node read from the informer): 110 ms and 1,709 ms at load ~8.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/allocation_codec.h"
#include "core/pod_request.h"
#include "scheduler/cluster_state.h"
#include "scheduler/gpu_preemptor.h"
#include "scheduler/testing.h"

namespace {

using Json = nlohmann::json;
using namespace tessera::scheduler;

struct Cluster {
  ClusterState state{ClusterStateOptions{nullptr, std::chrono::milliseconds(0)}};
  std::map<std::string, Json> pods;
};

void Fill(Cluster& c, int nodes, bool last_only) {
  for (int n = 0; n < nodes; ++n) {
    const std::string name = "node-" + std::to_string(n);
    c.state.UpsertNode(testing::NodeWithGpus(name, n + 1, 8, 81920, 10));
    const bool lower = !last_only || n == nodes - 1;
    for (int g = 0; g < 8; ++g) {
      for (int k = 0; k < 4; ++k) {
        const std::string pod_name = name + "-" + std::to_string(g) + "-" + std::to_string(k);
        Json pod = testing::GpuPod("bench", pod_name, 1, 20480, 10);
        pod["metadata"]["uid"] = "uid-" + pod_name;
        pod["spec"]["nodeName"] = name;
        pod["spec"]["priority"] = lower ? k + 1 : 1000 + k;
        pod["metadata"]["annotations"]["tessera.io/allocation"] =
            *tessera::core::EncodeAllocation({name, {{"app", {{testing::GpuUuid(n + 1, g), 20480, 10}}}}});
        c.state.UpsertPod(pod);
        c.pods["bench/" + pod_name] = std::move(pod);
      }
    }
  }
}

void Run(const char* label, int nodes, int repeats, bool last_only) {
  Cluster c;
  Fill(c, nodes, last_only);
  std::vector<std::string> names;
  for (int n = 0; n < nodes; ++n) names.push_back("node-" + std::to_string(n));
  Json pre = testing::GpuPod("bench", "pre", 1, 40960, 10);
  pre["spec"]["priority"] = 100;
  auto request = tessera::core::DerivePodRequest(pre, {});
  PodLookup lookup = [&c](const std::string& ns, const std::string& name) -> tessera::Result<Json> {
    auto it = c.pods.find(ns + "/" + name);
    if (it == c.pods.end()) return tessera::Error{"not found"};
    return it->second;
  };
  std::vector<double> ms;
  std::string outcome;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    GpuPreemptionDecision d = DecideGpuPreemption(c.state, lookup, pre, *request, names, {});
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    outcome = d.plan ? d.plan->node + ", " + std::to_string(d.plan->victims.size()) + " victim(s)" : d.reason;
  }
  std::sort(ms.begin(), ms.end());
  std::printf("%-10s nodes=%d decision: median %.1f ms, worst %.1f ms (%s)\n", label, nodes,
              ms[ms.size() / 2], ms.back(), outcome.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const int nodes = argc > 1 ? std::atoi(argv[1]) : 5000;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  Run("uniform", nodes, repeats, false);
  Run("last-only", nodes, repeats, true);
  return 0;
}
