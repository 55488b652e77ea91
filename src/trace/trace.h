// The Alibaba GPU-sharing trace (cluster-trace-gpu-v2023): its CSV files, the
// per-seed workload of the benchmark protocol, and the mapping of its nodes
// and tasks onto tessera's model (NodeState, PodRequest).
//
// See ../shared/data/alibaba-gpu-2023/README.md beside the repository (the protocol) and
// docs/benchmarks.md (results).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "core/node_state.h"
#include "core/request.h"

namespace tessera::trace {

struct TraceNode {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int gpus = 0;
  std::string model;
};

struct TraceTask {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int num_gpu = 0;
  int gpu_milli = 0;                  // per GPU, 0..1000
  std::vector<std::string> gpu_spec;  // allowed models, empty = any
  int64_t demand() const { return int64_t{num_gpu} * gpu_milli; }
};

// Parsers for the two CSV layouts (header row required; columns found by name,
// extra columns ignored). Errors name the source and line: "nodes.csv:12: ...".
Result<std::vector<TraceNode>> ParseNodes(std::string_view text, const std::string& source);
Result<std::vector<TraceTask>> ParseTasks(std::string_view text, const std::string& source);
Result<std::vector<TraceNode>> LoadNodes(const std::string& path);
Result<std::vector<TraceTask>> LoadTasks(const std::string& path);

// Each trace GPU is offered as this much memory per milli-GPU, so that a task's
// gpu_milli maps exactly to a vGPU of gpu_milli × 16 MiB (and gpu_milli / 10 %
// cores, rounded down — never the binding limit).
inline constexpr int64_t kMibPerMilli = 16;
// No slot limit in the trace: a GPU takes as many vGPUs as fit.
inline constexpr int kTraceSlots = 1000;

core::NodeState ToNodeState(const TraceNode& node);
core::PodRequest ToPodRequest(const TraceTask& task);

// The workload of one seed (protocol step 2).
struct Workload {
  std::vector<int> arrivals;    // indices into the task list, in arrival order
  std::vector<int> node_order;  // node indices by tie-break rank (rank 0 first)
};

// `tasks` in file order; they are sorted by name here, shuffled with the seed,
// then inflated (or trimmed) to `tune` × capacity of GPU demand.
Workload BuildWorkload(const std::vector<TraceTask>& tasks, int node_count, int64_t capacity_milli,
                       uint64_t seed, double tune);

}  // namespace tessera::trace
