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
// Dynamic MIG (Sharing::kDynamicMig, pods annotated nvidia.com/vgpu-mode: mig):
// filter, prioritize and reserve run PlaceDynamicMig instead (mig_placement.h).
// The MIG instances of bound and reserved pods' allocations (devices with a
// "mig" member) are held per node beside the NodeState, not in it (a GPU in
// MIG mode has no vGPU slots), and given to the placement as pending: an
// instance the inventory lists too counts once, so a placement stays taken
// from the reservation until the pod is gone and the node no longer lists it.
//
// Stale inventories: the node agent republishes the inventory with a fresh
// "heartbeat" at least every heartbeat period. A node whose heartbeat is older
// than `inventory_stale_after` at the moment of a filter, prioritize or
// reserve does not fit (its agent is gone, its GPUs may be too), with a reason
// naming the heartbeat. Staleness is checked against the wall clock on every
// request, before and outside the evaluation caches, so a node turns stale
// without any new event. An update that changes only the heartbeat refreshes
// it without rebuilding the node (the caches stay valid).
//
// Thread-safety: all methods may be called concurrently. Readers (Filter,
// Prioritize) share a reader lock; every change takes the writer lock for the
// in-memory update only; no lock is held across I/O.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/result.h"
#include "core/fit.h"
#include "core/node_state.h"
#include "core/policy.h"
#include "core/request.h"
#include "scheduler/loop_helper.h"
#include "scheduler/mig_placement.h"
#include "scheduler/pod_digest.h"

namespace tessera::scheduler {

using Json = nlohmann::json;

struct ClusterStateOptions {
  // Monotonic time for reservation expiry, wall time for the age of inventory
  // heartbeats. nullptr: the real clock.
  Clock* clock = nullptr;
  // A node whose inventory heartbeat is older than this does not fit
  // (0 = never stale).
  std::chrono::milliseconds inventory_stale_after{120000};
};

struct ClusterStats {
  size_t nodes = 0;  // nodes with a valid inventory (stale ones included)
  size_t nodes_without_inventory = 0;
  size_t nodes_stale = 0;  // valid inventory, heartbeat older than inventory_stale_after now
  size_t gpus = 0;
  size_t pods = 0;          // pods accounted from their annotation
  size_t reservations = 0;  // assumed, not yet seen bound
  uint64_t reservations_expired = 0;
  uint64_t inconsistent = 0;  // annotations that could not be applied (bad JSON, over capacity, unknown GPU)
  size_t mig_placements = 0;  // MIG instances held for bound or reserved pods (listed by the node or not)
  size_t evaluation_caches = 0;  // pod shapes with cached fit verdicts, shape × policy with cached scores
  // vGPU reservations whose placement came from prioritize's cached
  // candidate, and those the policy evaluated anew (the node had changed,
  // or prioritize ran elsewhere or not at all).
  uint64_t reserves_from_cache = 0;
  uint64_t reserves_evaluated = 0;
};

// How a pod shares GPUs: vGPU slices (core's fit and policies) or a dynamic
// MIG instance per device (PlaceDynamicMig; docs/mig.md).
enum class Sharing { kVgpu, kDynamicMig };

class ClusterState {
 public:
  explicit ClusterState(ClusterStateOptions options = {});

  // Informer handlers. Objects are core/v1 Node / Pod JSON.
  void UpsertNode(const Json& node);
  void DeleteNode(const Json& node);
  void UpsertPod(const Json& pod);
  // The same, with the pod's allocation decoded once for every handler.
  void UpsertPod(const PodDigest& pod);
  void DeletePod(const Json& pod);

  // A name listed more than once in one request is answered once, at its
  // first position: kube-scheduler adds up a host's prioritize entries, and
  // FailedNodes is a map.
  //
  // The verdict on each node of a request, by position in the request's list.
  struct NodeVerdicts {
    std::vector<uint32_t> feasible;                        // positions, ascending
    std::vector<std::pair<uint32_t, std::string>> failed;  // position, reason a person can read; ascending
  };
  // Which of `nodes` `pod` fits on. The names need to live only for the call.
  void Filter(const core::PodRequest& pod, std::span<const std::string_view> nodes, NodeVerdicts& out,
              Sharing sharing = Sharing::kVgpu) const;
  // The scores of a request's nodes: scores[k] is that of nodes[positions[k]].
  struct NodeScores {
    std::vector<uint32_t> positions;  // ascending
    std::vector<int> scores;          // 0..10
  };
  // Scores 0..10 for `nodes` (ExtenderScores: 10 for core's choice among
  // them; infeasible, stale or unknown = 0).
  void Prioritize(const core::PodRequest& pod, const core::Policy& policy,
                  std::span<const std::string_view> nodes, NodeScores& out) const;
  // The same for a dynamic MIG pod: no node policy; each feasible node's
  // score is MigPlacementScore of its placement, mapped as ExtenderScores
  // maps policy scores (10 for the best, ties to the name that sorts first).
  void PrioritizeDynamicMig(const core::PodRequest& pod, std::span<const std::string_view> nodes,
                            NodeScores& out) const;
  // Drops the scores cached for policy `policy_name` at any epoch but
  // `keep_epoch`. Scores are cached per policy epoch, so stale ones are never
  // read once the epoch moves; this frees them at once (the learning policy
  // calls it when it relearns) instead of when 256 newer shapes push them out.
  void DropScoresOf(std::string_view policy_name, uint64_t keep_epoch);
  // The first position of every name in `nodes`, ascending (the positions a
  // request is answered at).
  void FirstListings(std::span<const std::string_view> nodes, std::vector<uint32_t>& out) const;

  // The same with owned names (tests, small lists); Prioritize gives every
  // position a score (a repeated name that of its first position).
  struct FilterOutcome {
    std::vector<std::string> feasible;
    std::map<std::string, std::string> failed;  // node -> reason a person can read
  };
  FilterOutcome Filter(const core::PodRequest& pod, const std::vector<std::string>& nodes,
                       Sharing sharing = Sharing::kVgpu) const;
  std::vector<int> Prioritize(const core::PodRequest& pod, const core::Policy& policy,
                              const std::vector<std::string>& nodes) const;
  std::vector<int> PrioritizeDynamicMig(const core::PodRequest& pod,
                                        const std::vector<std::string>& nodes) const;

  // Holds for `pod_key` the placement `policy` chooses for `pod` on `node`
  // against the current state, including other reservations, until the pod
  // is seen bound, Unreserve, or `ttl`: the candidate prioritize evaluated
  // for this node (same policy, epoch and pod shape) while the node is
  // unchanged since, else policy.Evaluate anew — the same GPUs either way,
  // and the same GPUs core::Placer commits. Fails with the fit reason when
  // it no longer fits, or when the pod is already accounted. A pod still
  // holding a reservation (an earlier bind's outcome unknown) gets that one
  // again on the same node (its deadline at least `ttl` away), an error on
  // another node. kDynamicMig: the instances PlaceDynamicMig picks beside
  // the inventory's and every other pod's (ToMigAllocation; `policy` is not
  // used and may be null).
  Result<core::PodAllocation> Reserve(const std::string& pod_key, const core::PodRequest& pod,
                                      const std::string& node, const core::Policy* policy,
                                      std::chrono::milliseconds ttl, Sharing sharing = Sharing::kVgpu);
  // The same with FitNode's placement in `order` (core's node-binpack or
  // node-spread policy; for dynamic MIG and tests).
  Result<core::PodAllocation> Reserve(const std::string& pod_key, const core::PodRequest& pod,
                                      const std::string& node, core::GpuOrder order,
                                      std::chrono::milliseconds ttl, Sharing sharing = Sharing::kVgpu);
  // Gives back the reservation of `pod_key`, if it is still only a reservation.
  void Unreserve(const std::string& pod_key);
  // The node of `pod_key`'s reservation while it is still only a
  // reservation; nullopt when it has none.
  std::optional<std::string> ReservedNode(const std::string& pod_key) const;
  // Drops reservations past their deadline; returns how many.
  size_t ExpireReservations();

  // Largest memory of any known GPU (0 when no node is known).
  int64_t LargestGpuMemoryMiB() const;
  ClusterStats Stats() const;
  // Usage of one node (a copy), for tests and debugging.
  std::optional<core::NodeState> Node(const std::string& name) const;

  // One known node as VisitNodes shows it; the references live for the call.
  struct NodeVisit {
    const std::string& name;
    // With state.version(), identifies the GPUs and usage: a reader may keep
    // its copy while both are unchanged.
    uint64_t epoch;
    const core::NodeState& state;
    bool has_inventory;            // the node publishes the annotation (readable or not)
    const std::string& error;      // non-empty: no usable inventory (why)
    const std::string& heartbeat;  // as published ("" with an error)
    bool stale;                    // heartbeat older than inventory_stale_after now
    // The MIG instances of bound and reserved pods, by pod key; the node may
    // list them already or not yet. mig_version grows with every change.
    const std::map<std::string, std::vector<PendingMigInstance>>& mig_claims;
    uint64_t mig_version;
  };
  // Calls `visit` for every known node, in no particular order, under the
  // reader lock: `visit` must be quick (compare, copy what changed; no I/O,
  // no call back into this object). The dashboard's view is built with it.
  void VisitNodes(const std::function<void(const NodeVisit&)>& visit) const;
  // The allocation accounted for a pod (bound or reserved).
  std::optional<core::PodAllocation> AllocationOf(const std::string& pod_key) const;

  // Preemption holds (preemption.h). After kube-scheduler preempted pods for
  // `pod_key` and nominated it to `node` (status.nominatedNodeName), the GPU
  // room it needs there is kept from every other pod of lower or equal
  // priority until the hold is released (the pod binds, is deleted, or is no
  // longer nominated there) or `ttl` passes. The room is not a fixed set of
  // GPUs: wherever such a pod is checked against the node (filter, bind,
  // preempt), the nominees of at least its priority are placed first, by
  // core::FitNode, on the node without its terminating pods (their victims
  // are leaving), and the pod must fit beside them. A nominee that does not
  // fit even so (its victims are not seen terminating yet) keeps the whole
  // node from such pods. A hold set again for the same node keeps its
  // deadline; for another node it starts anew.
  void SetHold(const std::string& pod_key, const std::string& node, const core::PodRequest& pod,
               int32_t priority, std::chrono::milliseconds ttl);
  void ReleaseHold(const std::string& pod_key);
  size_t HoldCount() const;
  // The pods holding room on `node` (expired holds too) and their priority,
  // by pod key.
  std::vector<std::pair<std::string, int32_t>> HoldsOn(const std::string& node) const;
  // Marks a pod as terminating (a deletionTimestamp) or not.
  void SetTerminating(const std::string& pod_key, bool terminating);
  // `node` as pod `pod_key` of `priority` may use it: its state with the
  // holds that apply to that pod accounted (which may overcommit a GPU while
  // victims terminate). nullopt: unknown node or no usable inventory;
  // `blocked` (when given) gets why the holds leave the pod no room at all.
  std::optional<core::NodeState> ViewFor(const std::string& pod_key, int32_t priority,
                                         const std::string& node, std::string* blocked = nullptr) const;
  // Filter's answer with holds: the feasible nodes where holds apply to the
  // pod and it no longer fits beside them move to `failed`, with a reason
  // naming the nominee.
  void ApplyHolds(const std::string& pod_key, int32_t priority, const core::PodRequest& pod,
                  std::span<const std::string_view> nodes, NodeVerdicts& verdicts) const;
  // The GPU pods accounted on `node` (bound, not reservations): key and allocation.
  std::vector<std::pair<std::string, core::PodAllocation>> PodsOn(const std::string& node) const;
  // The same without copies, for preemption: `visit` gets each pod's key,
  // allocation, spec.priority and whether it is marked terminating, under
  // the reader lock (quick; no I/O, no call back into this object).
  void VisitPodsOn(const std::string& node,
                   const std::function<void(const std::string& key, const core::PodAllocation& allocation,
                                            int32_t priority, bool terminating)>& visit) const;
  // Whether any accounted GPU pod has a spec.priority below `priority`: GPU
  // preemption's first question, answered without walking the nodes (in a
  // cluster without priority classes it is always false, and every pending
  // pod would otherwise cost a walk of every node).
  bool AnyPodBelowPriority(int32_t priority) const;

 private:
  // A node's core::NodeMemo, kept between requests of any shape (a cold
  // request is a new shape, so its evaluation cache is empty, but the node's
  // fragmentation counts are not), with the node content (epoch, version) it
  // was kept for. Touched only by the request holding memos_mu_ (and its
  // helper thread, on other nodes), so a node's memo needs no lock of its own:
  // a per-node atomic was a tenth of a cold prioritize.
  struct MemoSlot {
    // The memo, forgotten first when the node's content is not the one it
    // was kept for.
    core::NodeMemo* For(uint64_t node_epoch, uint64_t node_version) {
      if (epoch != node_epoch || version != node_version) {
        memo.Forget();
        epoch = node_epoch;
        version = node_version;
      }
      return &memo;
    }
    // Asks for what the memo holds ahead of its use (a cold request reads
    // every node's once).
    void Prefetch() const {
      const char* ints = reinterpret_cast<const char*>(memo.ints.data());
      for (size_t at = 0; at < memo.ints.size() * sizeof(int); at += 64) __builtin_prefetch(ints + at);
    }
    core::NodeMemo memo;
    uint64_t epoch = 0;  // NodeEntry::epoch is never 0 once built
    uint64_t version = 0;
  };
  struct NodeEntry {
    bool present = false;  // false: a free slot
    core::NodeState state;
    std::string inventory_text;                       // raw annotation; unchanged text skips a rebuild
    std::string error;                                // non-empty: no usable inventory (reason)
    std::string heartbeat_text;                       // as published, for messages
    std::chrono::system_clock::time_point heartbeat;  // valid when error is empty
    // With Version(), identifies the node's content for the evaluation
    // caches: a fresh epoch on every rebuild.
    uint64_t epoch = 0;
    // The MIG instances of pods and reservations on this node, by pod key.
    std::map<std::string, std::vector<PendingMigInstance>> mig_claims;
    uint64_t mig_version = 0;  // bumped with every change of mig_claims
    // Grows with every change of the GPUs' usage, vGPU or MIG (both only grow).
    uint64_t Version() const { return state.version() + mig_version; }
    // mig_claims as one list.
    std::vector<PendingMigInstance> PendingMig() const;
    // The policy's pod-independent work on this node (core::NodeMemo),
    // shared by every request's evaluation; guarded by memos_mu_.
    mutable MemoSlot memo;
  };
  // Node names are looked up by string_view (request bodies are not copied).
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  // Filter/prioritize results of one pod shape per node, valid while the
  // node's (epoch, version) is unchanged: kube-scheduler asks filter and then
  // prioritize for the same pod, and consecutive pods of the same shape, over
  // nodes of which only the last bound one has changed.
  // node_epoch/node_version: NodeEntry::epoch and Version(). Prioritize
  // keeps the policy's whole candidate (score and placement), which bind
  // commits; dynamic MIG keeps its score in `candidate` (no placement).
  struct CachedEval : core::CachedEvaluation {
    bool fits = false;
    std::string reason;
  };
  struct EvalCache {
    std::mutex mu;                    // held for a whole request of this shape
    std::vector<CachedEval> entries;  // guarded by mu; by NodeEntry::slot
    uint64_t last_used = 0;           // guarded by ClusterState::caches_mu_
  };
  std::shared_ptr<EvalCache> CacheFor(const std::string& key) const;

 public:
  // Bounds of the evaluation caches (pod shapes × verbs × policy epochs):
  // at most kMaxCachedEvaluations entries over all of them (104 bytes each,
  // plus the placement of a fitting prioritize entry and the reason text of
  // a node that does not fit), and never fewer than
  // kMinEvaluationCaches caches (filter and prioritize of a few shapes in
  // flight at once) nor more than kMaxEvaluationCaches.
  static constexpr size_t kMaxCachedEvaluations = 256 * 1024;
  static constexpr size_t kMinEvaluationCaches = 8;
  static constexpr size_t kMaxEvaluationCaches = 256;
  static size_t MaxEvaluationCaches(size_t node_slots);

 private:
  // Per position of `nodes`, its slot, kNoSlot (unknown name) or kRepeat
  // (the name was listed at an earlier position). Needs mu_ (either mode).
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  static constexpr uint32_t kRepeat = UINT32_MAX - 1;
  static bool HasNode(uint32_t slot) { return slot < kRepeat; }
  std::vector<uint32_t> SlotsOfLocked(std::span<const std::string_view> nodes) const;
  // Per position of `nodes`, the slot of a node that can be evaluated, kRepeat,
  // or kNoSlot (unknown, no usable inventory, stale at `now`: the reason goes
  // to `early` when given, ascending by position). Needs mu_ (either mode).
  std::vector<uint32_t> ResolveLocked(std::span<const std::string_view> nodes,
                                      std::chrono::system_clock::time_point now,
                                      std::vector<std::pair<uint32_t, std::string>>* early) const;
  // Re-evaluates, with evaluate(NodeEntry, CachedEval&), the cache entries of
  // the slots whose node changed since they were filled; many such nodes are
  // shared with loop_helper_'s thread. Needs cache.mu and mu_ (either mode).
  template <typename Evaluate>
  void RefreshLocked(EvalCache& cache, const std::vector<uint32_t>& slot_at, const Evaluate& evaluate) const;
  // Prioritize's body over the cache `cache_key`, evaluating with `evaluate`
  // (as RefreshLocked) what changed.
  template <typename Evaluate>
  void ScoreWith(const std::string& cache_key, std::span<const std::string_view> nodes, NodeScores& out,
                 const Evaluate& evaluate) const;
  // A dynamic MIG pod's verdict, reason and score on `node`.
  static void EvaluateMig(const NodeEntry& node, const core::PodRequest& pod, CachedEval& e);
  // The entry of a present node, or nullptr. Needs mu_ (either mode).
  const NodeEntry* FindLocked(std::string_view name) const;
  NodeEntry* FindLocked(std::string_view name);
  // Non-empty when the node's heartbeat is older than allowed at `now`.
  std::string StaleReason(const NodeEntry& entry, std::chrono::system_clock::time_point now) const;
  bool IsStale(const NodeEntry& entry, std::chrono::system_clock::time_point now) const {
    return stale_after_.count() > 0 && entry.error.empty() && now - entry.heartbeat > stale_after_;
  }
  struct PodEntry {
    core::PodAllocation allocation;
    bool applied = false;  // accounted into its node
    int32_t priority = 0;  // spec.priority (immutable), for preemption
  };
  struct Reservation {
    core::PodAllocation allocation;
    std::chrono::steady_clock::time_point deadline;
  };

  // All need mu_ held for writing.
  // Accounts `allocation` of `key` into `entry`: its vGPU slices into the
  // NodeState, its MIG instances (each checked with CheckMigInstance) into
  // mig_claims. All or nothing.
  static Status ApplyLocked(NodeEntry& entry, const std::string& key, const core::PodAllocation& allocation);
  static void ReleaseLocked(NodeEntry& entry, const std::string& key, const core::PodAllocation& allocation);
  void RebuildNodeLocked(NodeEntry& entry);
  void ForgetPodLocked(const std::string& key);
  void ReleaseReservationLocked(const std::string& key);

  Clock* const clock_;
  const std::chrono::milliseconds stale_after_;
  mutable std::shared_mutex mu_;
  // Each known node has a slot: its index in nodes_ and in every EvalCache.
  // A deleted node's slot is reused by the next new node; cached evaluations
  // cannot leak across because epochs are never reused.
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> slots_;  // guarded by mu_
  std::vector<NodeEntry> nodes_;                                                // guarded by mu_; by slot
  std::vector<uint32_t> free_slots_;                                            // guarded by mu_
  // Held by the Prioritize request that keeps and reads the nodes' memos:
  // kube-scheduler asks one at a time; a request arriving meanwhile (another
  // profile, the preemptor) evaluates without them, which gives the same
  // scores.
  mutable std::mutex memos_mu_;
  std::atomic<size_t> slot_count_{0};  // nodes_.size(), read without mu_ by CacheFor
  // Bumped whenever a name gains or loses a slot; 0 is never used.
  uint64_t slots_generation_ = 1;  // guarded by mu_

  // The slots of the last few node lists asked about. kube-scheduler sends
  // the same 5,000 names with every filter (and nearly the same with every
  // prioritize); comparing them with the last list, byte for byte in one
  // sequential pass, is several times cheaper than 5,000 hash lookups.
  struct NameListMemo {
    uint64_t generation = 0;  // slots_generation_ when filled; 0 = empty
    uint64_t last_used = 0;
    std::string joined;           // the names back to back
    std::vector<uint32_t> ends;   // where each name ends in `joined`
    std::vector<uint32_t> slots;  // as SlotsOfLocked answers (repeats marked)
  };
  mutable LoopHelper loop_helper_;                  // splits a request's evaluations over two threads
  mutable std::mutex memo_mu_;                      // taken after mu_, never before
  mutable std::array<NameListMemo, 4> memos_;       // guarded by memo_mu_
  mutable uint64_t memo_clock_ = 0;                 // guarded by memo_mu_
  std::unordered_map<std::string, PodEntry> pods_;  // guarded by mu_
  std::map<int32_t, size_t> pods_by_priority_;      // guarded by mu_; pods_ counted by priority
  std::unordered_map<std::string, Reservation> reservations_;  // guarded by mu_
  std::unordered_map<std::string, std::set<std::string>>
      keys_by_node_;                  // guarded by mu_; pods + reservations
  uint64_t expired_ = 0;              // guarded by mu_
  uint64_t reserves_from_cache_ = 0;  // guarded by mu_
  uint64_t reserves_evaluated_ = 0;   // guarded by mu_
  uint64_t inconsistent_ = 0;         // guarded by mu_
  uint64_t next_epoch_ = 0;           // guarded by mu_
  mutable std::mutex caches_mu_;      // taken after EvalCache::mu and mu_, never before
  mutable uint64_t cache_clock_ = 0;  // guarded by caches_mu_
  mutable std::unordered_map<std::string, std::shared_ptr<EvalCache>> caches_;  // guarded by caches_mu_

  // Preemption holds (SetHold), by pod key.
  struct Hold {
    std::string node;
    core::PodRequest pod;
    int32_t priority = 0;
    std::chrono::steady_clock::time_point deadline;
  };
  // HeldViewLocked's answer: the state with the holds accounted, or why none
  // of it is left for the pod. Needs mu_ (either mode).
  struct HeldView {
    core::NodeState state;
    std::string blocked;
  };
  HeldView HeldViewLocked(const NodeEntry& entry, const std::string& pod_key, int32_t priority) const;
  // Whether a hold on `node` applies to pod `pod_key` of `priority` now.
  bool HoldsApplyLocked(const std::string& node, const std::string& pod_key, int32_t priority) const;
  std::unordered_map<std::string, Hold> holds_;  // guarded by mu_
  std::set<std::string> terminating_;            // guarded by mu_; keys of pods with a deletionTimestamp
};

// "namespace/name" of a pod object.
std::string PodKey(const Json& pod);

// The extender's 0..10 for the nodes named `names` whose policy scores are
// `scores` (nullopt = infeasible), into `out`:
//  - 10 for exactly the node core::Placer::Choose picks among them when given
//    them in name order: the highest score, equal scores to the name that
//    sorts first (bytewise). kube-scheduler adds every node's extender score
//    (times the extender weight) to its own plugins' scores, and with the
//    profile of docs/scheduler.md ("Making tessera's choice win") the one
//    node at 10 is the node it picks: the decision the trace benchmark
//    measures, not a tie among many nodes at 10 broken by kube-scheduler;
//  - the other feasible nodes linearly onto 0..9 between the lowest score
//    and the chosen one's (a score equal to the chosen one's, i.e. a lost
//    tie-break, gets 9), so that they keep their order should the chosen node
//    drop out;
//  - infeasible 0.
void ExtenderScores(std::span<const std::string_view> names, std::span<const std::optional<double>> scores,
                    std::vector<int>& out);

}  // namespace tessera::scheduler
