// WorkloadLearner: the extender's `tessera` policy, learning its workload mix
// from the pods the cluster asks tessera to place, as the trace benchmark's
// policy learns from every arriving pod (docs/placement.md, "The default
// policy"; docs/decisions.md for why arrivals are counted at filter).
//
// One core::FragmentationPolicy (the same class, options and Observe as
// `tessera simulate --policy tessera-online`) is told about each pod once,
// keyed by the pod's UID: kube-scheduler retries an unschedulable pod and
// asks filter and prioritize about it on every attempt, and each asks count
// nothing after the first. Whenever Observe makes that policy relearn its mix
// (its epoch moves: at the first pod, then every `relearn_every` pods), an
// immutable copy is published; scoring reads that copy (Current()), so a
// request scores every node against one mix, never waits for learning, and
// learning never waits for a request. Only a relearn publishes, which is also
// the only moment cached scores go stale (their cache key carries the epoch).
//
// The UIDs are remembered until Forget (the pod was deleted or finished), so
// the set holds about the live pods; a forgotten pod's count stays in the mix.
// At most `max_remembered` UIDs are held (a pod asked about that never shows
// up in the API server is never forgotten): past that the oldest is dropped,
// and should that pod be asked about again it would count twice, one pod in
// hundreds of thousands of the mix.
//
// The shapes counted are bounded too: at most `max_shapes` distinct shapes
// (core::ShapeOf: GPUs, GPU memory, cores, CPU, model filter) are held, so
// pods of ever new sizes (a generator asking for random CPU, say) cannot grow
// the counts without end. Past the bound a new shape takes the place of the
// rarest one held (the first in shape order among equally rare) and starts
// from that one's count plus one ("space-saving" counting: a shape seen more
// often than once in `max_shapes` pods is never the one dropped, and a count
// is over by at most the count it inherited). Below the bound the counts, the
// relearn points and the mixes are exactly core::FragmentationPolicy's.
//
// Restart: nothing here is persisted. The scheduler rebuilds it from the pods
// the API server lists (ObserveAllShapes in their creation order) before it reports
// ready; pods that finished before the restart are not counted again.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/request.h"
#include "core/score_fragmentation.h"

namespace tessera::scheduler {

class WorkloadLearner {
 public:
  // core::FragmentationPolicy's defaults: the policy core::MakePolicy("tessera")
  // and the trace benchmark's `tessera-online` build.
  // Above Kubernetes' 150,000 pods per cluster.
  static constexpr size_t kDefaultMaxRemembered = 256 * 1024;
  // Distinct pod shapes counted; a real cluster runs tens to a few hundred.
  static constexpr size_t kDefaultMaxShapes = 2048;

  WorkloadLearner();
  explicit WorkloadLearner(core::FragmentationPolicy::Options options,
                           size_t max_remembered = kDefaultMaxRemembered,
                           size_t max_shapes = kDefaultMaxShapes);

  struct Observation {
    size_t counted = 0;      // pods counted: UIDs not seen before (Observe: 0 or 1)
    bool relearned = false;  // the mix was recomputed: Current() changed
  };
  // Counts `pod` into the mix unless `uid` was counted before (and not
  // forgotten since). `uid` must not be empty.
  Observation Observe(std::string_view uid, const core::PodRequest& pod);

  struct Arrival {
    std::string uid;
    core::PodRequest pod;
  };
  // Observe for each, in the order given, publishing once at the end.
  Observation ObserveAll(std::span<const Arrival> arrivals);
  // The same with each pod's core::ShapeOf taken already (all the count
  // keeps of a pod): the scheduler's start takes it as each pod arrives.
  struct ShapedArrival {
    std::string uid;
    core::TaskShape shape;
  };
  Observation ObserveAllShapes(std::span<const ShapedArrival> arrivals);

  // The pod will not be asked about again (deleted, finished): its UID is
  // dropped; its count stays.
  void Forget(std::string_view uid);

  // The policy to score with: immutable, valid for as long as it is held.
  std::shared_ptr<const core::FragmentationPolicy> Current() const;

  struct Stats {
    uint64_t counted = 0;          // pods counted into the mix since start
    size_t remembered = 0;         // UIDs held (observed, not forgotten)
    uint64_t evicted = 0;          // UIDs dropped, oldest first, to stay within max_remembered
    uint64_t epoch = 0;            // the published policy's epoch: mixes learned
    size_t mix_shapes = 0;         // shapes in the published mix
    size_t shapes = 0;             // distinct shapes counted (at most max_shapes)
    uint64_t shapes_replaced = 0;  // shapes dropped for a new one past max_shapes
  };
  Stats stats() const;

 private:
  Observation ObserveLocked(std::string_view uid, const core::TaskShape& shape);
  void PublishLocked();

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };

  // Counts `shape` once (see above for the bound).
  void CountLocked(const core::TaskShape& shape);

  const core::FragmentationPolicy::Options options_;
  const size_t max_remembered_;
  const size_t max_shapes_;
  mutable std::mutex mu_;  // taken before published_mu_, never after
  // Pods counted per shape, at most max_shapes_ of them; what the mix is
  // learned from, as core::MixCounter counts it.
  std::map<core::TaskShape, int64_t> shapes_;  // guarded by mu_
  int64_t total_ = 0;                          // guarded by mu_: sum of shapes_
  int64_t next_relearn_ = 1;                   // guarded by mu_
  uint64_t epoch_ = 0;                         // guarded by mu_: mixes learned
  core::WorkloadMix learned_mix_;              // guarded by mu_: learned at epoch_
  uint64_t shapes_replaced_ = 0;               // guarded by mu_
  // UID -> when it was first seen; and the other way round, oldest first
  // (views into seen_'s keys, which stay put).
  std::unordered_map<std::string, uint64_t, Hash, std::equal_to<>> seen_;  // guarded by mu_
  std::map<uint64_t, std::string_view> seen_order_;                        // guarded by mu_
  uint64_t next_seen_ = 0;                                                 // guarded by mu_
  uint64_t evicted_ = 0;                                                   // guarded by mu_
  uint64_t counted_ = 0;                                                   // guarded by mu_
  mutable std::mutex published_mu_;
  std::shared_ptr<const core::FragmentationPolicy> published_;  // guarded by published_mu_
};

}  // namespace tessera::scheduler
