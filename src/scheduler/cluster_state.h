// ClusterState: the scheduler's view of GPU usage across the cluster.
//
// Built from two informers: nodes (their tessera.io/gpu-inventory annotation,
// published by the node agent) and pods (their tessera.io/allocation
// annotation, written with the Binding). A pod counts while it carries an
// allocation and is not Succeeded/Failed; deletion or a terminal phase gives
// its slice back. Nothing lives only here: after a restart the informers'
// first lists rebuild it exactly.
//
// Reservations ("assumed" pods): Reserve() re-checks fit on the chosen node and
// accounts the allocation at once, before the Binding is sent, so two binds in
// flight can never take the same capacity. The reservation turns into the
// pod's real entry when the informer shows the pod with its annotation, is
// dropped by Unreserve() when the bind fails, and expires after its timeout
// when neither happens.
//
// Fit and scoring are core's (FitNode, Policy::Evaluate); this class only keeps
// the NodeStates current and serialises changes.
//
// Thread-safety: all methods may be called concurrently. Readers (Filter,
// Prioritize) share a reader lock; every change takes the writer lock for the
// in-memory update only; no lock is held across I/O.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fit.h"
#include "core/node_state.h"
#include "core/policy.h"
#include "core/request.h"
#include "core/result.h"

namespace tessera::scheduler {

using Json = nlohmann::json;
using SteadyNow = std::function<std::chrono::steady_clock::time_point()>;

struct ClusterStats {
  size_t nodes = 0;  // nodes with a valid inventory
  size_t nodes_without_inventory = 0;
  size_t gpus = 0;
  size_t pods = 0;          // pods accounted from their annotation
  size_t reservations = 0;  // assumed, not yet seen bound
  uint64_t reservations_expired = 0;
  uint64_t inconsistent = 0;  // annotations that could not be applied (bad JSON, over capacity, unknown GPU)
};

class ClusterState {
 public:
  // `now` is the seam for reservation expiry (default: steady_clock).
  explicit ClusterState(SteadyNow now = nullptr);

  // Informer handlers. Objects are core/v1 Node / Pod JSON.
  void UpsertNode(const Json& node);
  void DeleteNode(const Json& node);
  void UpsertPod(const Json& pod);
  void DeletePod(const Json& pod);

  struct FilterOutcome {
    std::vector<std::string> feasible;
    std::map<std::string, std::string> failed;  // node -> reason a person can read
  };
  FilterOutcome Filter(const core::PodRequest& pod, const std::vector<std::string>& nodes) const;

  // Scores 0..10 for `nodes` in order (best = 10; infeasible or unknown = 0).
  std::vector<int> Prioritize(const core::PodRequest& pod, const core::Policy& policy,
                              const std::vector<std::string>& nodes) const;

  // Picks GPUs for `pod` on `node` (in `order`) against the current state,
  // including other reservations, and holds them for `pod_key` until the pod
  // is seen bound, Unreserve, or `ttl`. Fails with the fit reason when it no
  // longer fits, or when the pod is already accounted.
  Result<core::PodAllocation> Reserve(const std::string& pod_key, const core::PodRequest& pod,
                                      const std::string& node, core::GpuOrder order,
                                      std::chrono::milliseconds ttl);
  // Gives back the reservation of `pod_key`, if it is still only a reservation.
  void Unreserve(const std::string& pod_key);
  // Drops reservations past their deadline; returns how many.
  size_t ExpireReservations();

  // Largest memory of any known GPU (0 when no node is known).
  int64_t LargestGpuMemoryMiB() const;
  ClusterStats Stats() const;
  // Usage of one node (a copy), for tests and debugging.
  std::optional<core::NodeState> Node(const std::string& name) const;
  // The allocation accounted for a pod (bound or reserved).
  std::optional<core::PodAllocation> AllocationOf(const std::string& pod_key) const;

 private:
  struct NodeEntry {
    core::NodeState state;
    std::string inventory_text;  // raw annotation; unchanged text skips a rebuild
    std::string error;           // non-empty: no usable inventory (reason)
    // With state.version(), identifies the node's content for the
    // evaluation caches: a fresh epoch on every rebuild.
    uint64_t epoch = 0;
    size_t slot = 0;  // index into the evaluation caches; fixed per node name
  };
  // Filter/prioritize results of one pod shape per node, valid while the
  // node's (epoch, version) is unchanged: kube-scheduler asks filter and then
  // prioritize for the same pod, and consecutive pods of the same shape, over
  // nodes of which only the last bound one has changed.
  struct CachedEval {
    uint64_t epoch = 0;  // 0 = empty
    uint64_t version = 0;
    bool fits = false;
    std::optional<double> score;
    std::string reason;
  };
  struct EvalCache {
    std::mutex mu;                    // held for a whole request of this shape
    std::vector<CachedEval> entries;  // guarded by mu; by NodeEntry::slot
  };
  std::shared_ptr<EvalCache> CacheFor(const std::string& key) const;
  struct PodEntry {
    core::PodAllocation allocation;
    bool applied = false;  // accounted into its node
  };
  struct Reservation {
    core::PodAllocation allocation;
    std::chrono::steady_clock::time_point deadline;
  };

  // All need mu_ held for writing.
  void RebuildNodeLocked(NodeEntry& entry);
  void ForgetPodLocked(const std::string& key);
  void ReleaseReservationLocked(const std::string& key);

  SteadyNow now_;
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, NodeEntry> nodes_;           // guarded by mu_
  std::unordered_map<std::string, PodEntry> pods_;             // guarded by mu_
  std::unordered_map<std::string, Reservation> reservations_;  // guarded by mu_
  std::unordered_map<std::string, std::set<std::string>>
      keys_by_node_;                               // guarded by mu_; pods + reservations
  uint64_t expired_ = 0;                           // guarded by mu_
  uint64_t inconsistent_ = 0;                      // guarded by mu_
  std::unordered_map<std::string, size_t> slots_;  // guarded by mu_; node name -> cache slot
  uint64_t next_epoch_ = 0;                        // guarded by mu_
  mutable std::mutex caches_mu_;                   // taken after EvalCache::mu and mu_, never before
  mutable std::unordered_map<std::string, std::shared_ptr<EvalCache>> caches_;  // guarded by caches_mu_
};

// "namespace/name" of a pod object.
std::string PodKey(const Json& pod);

// Linear map of policy scores onto the extender's 0..10 (best = 10, all equal =
// 10, nullopt = infeasible = 0).
std::vector<int> ScaleToExtenderScores(const std::vector<std::optional<double>>& scores);

}  // namespace tessera::scheduler
