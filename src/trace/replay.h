// Replays the trace benchmark: one seed (Replay) or many (Simulate), for one
// policy, through the core engine's Placer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/allocation.h"
#include "core/policy.h"
#include "trace/trace.h"

namespace tessera::trace {

struct Placed {
  int arrival = 0;        // position in the arrival sequence
  int task = 0;           // index into the task list
  std::string node;       // empty = failed
  std::vector<int> gpus;  // GPU indices on the node (app containers)
};

struct ReplayResult {
  // Unallocated GPU % (100 − allocated/capacity) read at the first arrival at
  // which arrived demand reaches 100 % of capacity (NaN if it never does), and
  // at the end of the sequence.
  double unallocated_at_100 = 0;
  double unallocated_at_end = 0;
  double arrived_at_end = 0;  // % of capacity
  int arrivals = 0;
  int failed = 0;
  std::vector<Placed> placements;  // filled when asked
};

struct Cluster {
  std::vector<TraceNode> nodes;
  std::vector<TraceTask> tasks;
  int64_t capacity_milli() const;
};

// Seeds a policy's own randomness (random-fit) from the workload seed.
uint64_t PolicySeed(uint64_t seed);

ReplayResult Replay(const Cluster& cluster, const Workload& workload, core::Policy& policy, uint64_t seed,
                    bool record_placements = false);

struct SeedResult {
  uint64_t seed = 0;
  ReplayResult result;
};

struct Summary {
  double mean = 0;
  double sd = 0;  // sample standard deviation (n − 1)
};
Summary Summarise(const std::vector<double>& values);

// Runs `policy_name` over every seed; a fresh policy per seed.
Result<std::vector<SeedResult>> Simulate(const Cluster& cluster, const std::string& policy_name,
                                         const std::vector<uint64_t>& seeds, double tune);

}  // namespace tessera::trace
