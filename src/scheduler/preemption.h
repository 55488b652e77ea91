// Preemption on shared GPUs: kube-scheduler's extender preempt verb.
//
// When a pod fits nowhere, kube-scheduler's DefaultPreemption picks, per
// candidate node, the lower-priority pods whose removal makes the pod pass its
// own (in-tree) filters, and posts them to the extender's preemptVerb as
// ExtenderPreemptionArgs {Pod, NodeNameToVictims | NodeNameToMetaVictims}
// (MetaVictims, UIDs only, when nodeCacheCapable). The extender answers
// ExtenderPreemptionResult {NodeNameToMetaVictims}: per node the victims it
// agrees to, a subset of those proposed (it may remove victims, never add), and
// the PodDisruptionBudget violations of that subset. A node left out is not a
// candidate; a node answered with no victim is an error to kube-scheduler, so
// such a node is left out as well.
//
// tessera checks the proposal at GPU level (TrimVictims):
//  - a proposed victim that holds no tessera GPU slice on the node (a CPU pod
//    kube-scheduler chose for CPU, memory or pods) is kept as proposed:
//    kube-scheduler needs it gone for its own filters, which tessera does not
//    see;
//  - GPU victims are trimmed to the cheapest subset whose removal makes the
//    pod fit on one GPU set of the node (core::FitNode on the node's state,
//    with the capacity held for other nominated pods of at least the
//    preemptor's priority, minus the subset): fewest PDB violations, then
//    fewest pods, then the lowest highest priority, then the lowest priority
//    sum. A slice on a GPU the preemptor cannot use (its type/UUID filters,
//    sharing mode, health, a GPU too small) frees nothing useful and is never
//    kept;
//  - a node where removing every proposed GPU victim still leaves the pod
//    without room is dropped.
// Up to kMaxExactVictims useful GPU victims per node every subset is tried
// (at most 2^12 fits); above that, kube-scheduler's own reprieve rule: start
// from all removed and give back, most important first, each pod the fit does
// not need.
//
// PodDisruptionBudgets: kube-scheduler sends only a count per node, not which
// pods violate. tessera evaluates the budgets itself, as kube-scheduler does
// (a victim violates when a budget of its namespace selecting its labels has
// no disruption left, victims taken most important first, each taking one
// from every budget selecting it; pods a budget already lists as disrupted
// take nothing), over the budgets the API server lists and the victims'
// labels. When that is not possible (the list failed, a kept victim whose
// labels are unknown) the answer reports min(kube-scheduler's count, victims
// kept), an upper bound, and the trimming prefers fewer victims only.
//
// The capacity freed is held for the preemptor: see ClusterState::SetHold and
// TrackNomination below.
//
// Thread-safety: the functions are pure, or as thread-safe as ClusterState.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "core/allocation.h"
#include "core/node_state.h"
#include "core/request.h"
#include "core/resource_config.h"
#include "scheduler/cluster_state.h"

namespace tessera::scheduler {

// Above this many useful GPU victims on one node, the reprieve rule replaces
// the exhaustive search.
inline constexpr size_t kMaxExactVictims = 12;

// How long the capacity freed for a nominated pod stays held at most (the
// nomination normally ends sooner: the pod binds, is deleted or nominated
// elsewhere).
inline constexpr std::chrono::minutes kNominationHoldTimeout{5};

// A pod's priority as the API server resolved it (spec.priority; 0 absent).
int32_t PodPriority(const nlohmann::json& pod);

// One PodDisruptionBudget as preemption reads it.
struct DisruptionBudget {
  std::string ns;
  nlohmann::json selector;  // spec.selector (null: selects nothing; {}: everything)
  int32_t disruptions_allowed = 0;
  std::vector<std::string> disrupted_pods;  // status.disruptedPods names
};
// The budgets of a PodDisruptionBudgetList's items (unreadable ones skipped).
std::vector<DisruptionBudget> ParseDisruptionBudgets(const std::vector<nlohmann::json>& items);
// Kubernetes' metav1.LabelSelector on `labels` (an object or null):
// matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist) all hold.
// A null selector matches nothing, an empty one everything; an unknown
// operator matches nothing.
bool LabelSelectorMatches(const nlohmann::json& selector, const nlohmann::json& labels);

// One pod kube-scheduler proposes to preempt on a node.
struct Victim {
  std::string uid;
  std::string ns, name;  // empty when unknown
  int32_t priority = 0;
  nlohmann::json labels;  // null when unknown
  // Its tessera GPU slices on this node; nullopt: it holds none (or tessera
  // does not know it).
  std::optional<core::PodAllocation> allocation;
};

// What a set of victims costs, compared lexicographically: PDB violations,
// pods, the highest priority among them, the priorities' sum. TrimVictims
// picks a node's cheapest useful set by it, and GPU preemption the node.
struct VictimSetCost {
  int64_t pdb = 0;
  size_t pods = 0;
  int32_t highest = std::numeric_limits<int32_t>::min();
  int64_t sum = 0;
  auto Tie() const { return std::tie(pdb, pods, highest, sum); }
  bool operator<(const VictimSetCost& o) const { return Tie() < o.Tie(); }
};

struct TrimmedVictims {
  // False: even without every proposed GPU victim the pod does not fit here.
  bool fits = false;
  std::vector<size_t> kept;  // indices into the victims, ascending
  int64_t pdb_violations = 0;
  std::string reason;  // why it does not fit
};

// The victims of one node that tessera agrees to (see the file comment).
// `node` is the node as the preemptor may use it (holds for others applied);
// `budgets` nullopt: not known, then `proposed_violations` (kube-scheduler's
// count) bounds the answer.
TrimmedVictims TrimVictims(const core::NodeState& node, const core::PodRequest& preemptor,
                           std::span<const Victim> victims,
                           const std::optional<std::vector<DisruptionBudget>>& budgets,
                           int64_t proposed_violations);

// kube-scheduler's PDB count for `victims` taken in the order given (most
// important first); unknown labels match nothing.
int64_t CountPdbViolations(std::span<const Victim* const> victims,
                           const std::vector<DisruptionBudget>& budgets);

// The seams the preempt verb reads through.
struct PreemptionDeps {
  ClusterState* state = nullptr;
  core::ResourceConfig resources;
  // The pod as the informer has it (labels, priority, UID), by namespace/name.
  std::function<Result<nlohmann::json>(const std::string& ns, const std::string& name)> get_pod;
  // Every PodDisruptionBudget; unset or failing: budgets unknown.
  std::function<Result<std::vector<nlohmann::json>>()> list_disruption_budgets;
};

// The preempt verb: ExtenderPreemptionArgs in, {HTTP status,
// ExtenderPreemptionResult} out. A body that is not ExtenderPreemptionArgs
// gets 400 and a message (the result type has no error member; kube-scheduler
// fails that preemption attempt, or skips the extender when ignorable).
std::pair<int, std::string> ProcessPreemption(const PreemptionDeps& deps, std::string_view body);

// Called for every pod the informer delivers (deleted = it is gone): keeps
// ClusterState's holds and terminating marks in step with the API. A pod that
// asks for GPUs, is not bound and carries status.nominatedNodeName gets a hold
// on that node (at most kNominationHoldTimeout from when it was first seen
// nominated there); any other state of the pod releases its hold. A pod with
// a deletionTimestamp is marked terminating (its slices are what a nominee's
// room is computed without).
void TrackNomination(ClusterState& state, const core::ResourceConfig& resources, const nlohmann::json& pod,
                     bool deleted);

}  // namespace tessera::scheduler
