#include "trace/replay.h"

#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>

#include "core/policy_placer.h"
#include "trace/baselines.h"
#include "trace/rng.h"

namespace tessera::trace {

int64_t Cluster::capacity_milli() const {
  int64_t gpus = 0;
  for (const TraceNode& n : nodes) gpus += n.gpus;
  return 1000 * gpus;
}

uint64_t PolicySeed(uint64_t seed) {
  return seed ^ 0x5eed0f7e55e7a000ULL;
}

ReplayResult Replay(const Cluster& cluster, const Workload& workload, core::Policy& policy, uint64_t seed,
                    bool record_placements) {
  std::vector<core::NodeState> nodes;
  nodes.reserve(workload.node_order.size());
  for (int i : workload.node_order) nodes.push_back(ToNodeState(cluster.nodes[i]));
  core::Placer placer(std::move(nodes));

  // Pods and shape ids per distinct task (the Placer caches per shape).
  std::vector<core::PodRequest> pods;
  std::vector<int> shape_of;
  std::map<std::tuple<int64_t, int64_t, int, int, std::vector<std::string>>, int> shapes;
  pods.reserve(cluster.tasks.size());
  for (const TraceTask& t : cluster.tasks) {
    pods.push_back(ToPodRequest(t));
    auto key = std::make_tuple(t.cpu_milli, t.memory_mib, t.num_gpu, t.gpu_milli, t.gpu_spec);
    auto [it, inserted] = shapes.emplace(key, static_cast<int>(shapes.size()));
    shape_of.push_back(it->second);
  }

  Rng draw(PolicySeed(seed));
  const double capacity = static_cast<double>(cluster.capacity_milli());
  int64_t arrived = 0;
  int64_t allocated = 0;
  ReplayResult r;
  r.unallocated_at_100 = std::numeric_limits<double>::quiet_NaN();
  bool read_100 = false;
  for (size_t a = 0; a < workload.arrivals.size(); ++a) {
    const int task = workload.arrivals[a];
    const core::PodRequest& pod = pods[task];
    policy.Observe(pod);
    auto decision = placer.Choose(pod, policy, &draw, shape_of[task]);
    Placed p{static_cast<int>(a), task, {}, {}};
    if (decision) {
      auto allocation = placer.Commit(*decision, pod);
      if (allocation) {
        allocated += cluster.tasks[task].demand();
        p.node = allocation->node;
        for (const auto& c : decision->candidate.placement.containers) {
          for (const auto& s : c.slices) p.gpus.push_back(s.gpu);
        }
      } else {
        ++r.failed;  // cannot happen unless a policy returns an infeasible placement
      }
    } else {
      ++r.failed;
    }
    if (record_placements) r.placements.push_back(std::move(p));
    arrived += cluster.tasks[task].demand();
    if (!read_100 && static_cast<double>(arrived) >= capacity) {
      read_100 = true;
      r.unallocated_at_100 = 100.0 - 100.0 * static_cast<double>(allocated) / capacity;
    }
  }
  r.arrivals = static_cast<int>(workload.arrivals.size());
  r.unallocated_at_end = 100.0 - 100.0 * static_cast<double>(allocated) / capacity;
  r.arrived_at_end = 100.0 * static_cast<double>(arrived) / capacity;
  return r;
}

Summary Summarise(const std::vector<double>& values) {
  Summary s;
  if (values.empty()) return s;
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  if (values.size() > 1) {
    double ss = 0;
    for (double v : values) ss += (v - s.mean) * (v - s.mean);
    s.sd = std::sqrt(ss / static_cast<double>(values.size() - 1));
  }
  return s;
}

Result<std::vector<SeedResult>> Simulate(const Cluster& cluster, const std::string& policy_name,
                                         const std::vector<uint64_t>& seeds, double tune) {
  std::vector<SeedResult> results;
  for (uint64_t seed : seeds) {
    auto policy = MakeTracePolicy(policy_name, cluster.tasks);
    if (!policy) return policy.error();
    Workload w = BuildWorkload(cluster.tasks, static_cast<int>(cluster.nodes.size()),
                               cluster.capacity_milli(), seed, tune);
    results.push_back({seed, Replay(cluster, w, **policy, seed)});
  }
  return results;
}

}  // namespace tessera::trace
