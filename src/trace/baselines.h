// The six baseline policies of the trace benchmark, as the README of the
// data set restates them from the paper's artifact: Random-fit, DotProd, GPU
// Clustering, GPU Packing, Best-fit and FGD. Each is a core::Policy over the
// engine's NodeState (free milli-GPU per GPU = GpuState::free_milli), scores
// are the artifact's truncated integers, and the Placer breaks ties by rank.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "core/policy.h"
#include "core/score_fragmentation.h"
#include "trace/trace.h"

namespace tessera::trace {

// FGD's typical tasks: the trace's tasks grouped by (cpu_milli, gpu_milli,
// num_gpu, gpu_spec), most frequent first, the shortest prefix covering 95 %.
core::WorkloadMix TypicalTasks(const std::vector<TraceTask>& tasks, double coverage = 0.95);

// random, dotprod, clustering, packing, bestfit, fgd; tessera (core's default
// policy, its online mix starting from the counts of `tasks`, as FGD's typical
// tasks do); tessera-online (no prior: learns from arrivals only); the
// placement policies of the scheduler and `tessera run` by their names
// (node-binpack, node-spread, gpu-binpack, gpu-spread). Names of the form
// "tessera:k=v,..." build experiment variants (docs/placement.md).
Result<std::unique_ptr<core::Policy>> MakeTracePolicy(std::string_view name,
                                                      const std::vector<TraceTask>& tasks);
std::vector<std::string> TracePolicyNames();

}  // namespace tessera::trace
