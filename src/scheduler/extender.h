// Extender: the kube-scheduler extender v1 verbs over ClusterState.
//
// Wire format is kube-scheduler's (k8s.io/kube-scheduler/extender/v1), whose Go
// structs carry no json tags, so every field name is capitalised:
//   filter:     ExtenderArgs {Pod, Nodes, NodeNames} ->
//               ExtenderFilterResult {Nodes, NodeNames, FailedNodes, FailedAndUnresolvableNodes, Error}
//   prioritize: ExtenderArgs -> HostPriorityList, a bare array of {Host, Score}, Score 0..10
//   bind:       ExtenderBindingArgs {PodName, PodNamespace, PodUID, Node} -> ExtenderBindingResult {Error}
// With nodeCacheCapable the scheduler sends NodeNames (Nodes is null) and
// expects NodeNames back; when it sends a NodeList instead, the answer carries
// the passing Node objects.
//
// Filter and prioritize work on the request body: the common shape is read
// and answered without a JSON tree of the node names (extender_wire.h), any
// other shape goes through nlohmann::json as a whole, and both give the same
// answers.
//
// Learning (workload_learner.h): filter and prioritize count every pod that
// asks for GPUs with a valid request into the `tessera` policy's workload mix,
// once per UID, before it is scored: the arrivals the trace benchmark's policy
// learns from. Scoring uses the policy as last published, held for the whole
// request. When the mix is relearned, the prioritize scores cached under the
// previous mix are dropped (ClusterState::DropScoresOf).
//
// Readiness: until the scheduler's view is complete (deps.not_ready answers
// ""), no verb decides anything: filter and bind answer with an Error and
// prioritize with HTTP 503, which kube-scheduler treats as a failed cycle and
// retries with backoff — never as "unschedulable" and never as a placement
// made against a partial view.
//
// Bind: only the leader binds. It derives the pod's request, reserves GPUs on
// the node against the current state (ClusterState::Reserve, so concurrent
// binds on one node never double-book), then POSTs one Binding carrying the
// tessera.io/allocation annotation. A failed Binding gives the reservation
// back when the API server definitely refused it (an HTTP 4xx); when the
// outcome is unknown (timeout, connection lost, 5xx) the reservation is kept
// until the pod shows up bound or the reservation times out, because the
// Binding may have landed. No lock is held across the API call.
//
// Dynamic MIG (mig_placement.h): a pod annotated nvidia.com/vgpu-mode: mig
// is placed only on mig-dynamic GPUs, a MIG instance per device: filter keeps
// the nodes where PlaceDynamicMig succeeds (the others with its reason),
// prioritize scores by MigPlacementScore whatever the node policy, and bind
// reserves the instances (ClusterState::Reserve with Sharing::kDynamicMig)
// and writes ToMigAllocation's allocation in the Binding, with no
// visible-devices annotations (the MIG UUIDs exist only once the node has
// created the instances). Such pods are not counted into the workload mix.
//
// Logging (base/log.h): each bind at info (pod, node, the GPUs of each
// container, the policies and where they came from), a bind refused at warn,
// the first refusal of a not-ready episode at warn and the return to
// readiness at info, filter's verdicts per node at debug.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "core/policy.h"
#include "kube/api_error.h"
#include "scheduler/cluster_state.h"
#include "scheduler/config.h"
#include "scheduler/pod_digest.h"
#include "scheduler/workload_learner.h"

namespace tessera::scheduler {

// Pod annotations that override the configured policies, one level each
// (HAMi's names are aliases; values as policy.node / policy.gpu take them).
inline constexpr std::string_view kNodePolicyAnnotation = "tessera.io/node-policy";
inline constexpr std::string_view kGpuPolicyAnnotation = "tessera.io/gpu-policy";
inline constexpr std::string_view kHamiNodePolicyAnnotation = "hami.io/node-scheduler-policy";
inline constexpr std::string_view kHamiGpuPolicyAnnotation = "hami.io/gpu-scheduler-policy";

// The seams to the outside world.
struct ExtenderDeps {
  ClusterState* state = nullptr;
  SchedulerConfig config;
  // Why this process may not decide yet ("" once its view of nodes and pods
  // is complete); unset = always ready (unit tests).
  std::function<std::string()> not_ready;
  // True when this process may bind (the leader, or leader election is off).
  std::function<bool()> is_leader;
  // Who leads, for the follower's error message ("" = unknown).
  std::function<std::string()> leader_identity;
  // Why the leader may not bind yet ("" = it may): just after a takeover, a
  // Binding its predecessor sent may still land. Unset = never held.
  std::function<std::string()> bind_held;
  // The pod as the API server has it (informer cache, else a GET).
  std::function<Result<nlohmann::json>(const std::string& ns, const std::string& name)> get_pod;
  // POST pods/<name>/binding with the annotations in the Binding's metadata.
  std::function<kube::ApiStatus(const std::string& ns, const std::string& name, const std::string& node,
                                const std::map<std::string, std::string>& annotations)>
      bind;
  // Every PodDisruptionBudget, for the preempt verb (preemption.h); unset:
  // budgets unknown.
  std::function<Result<std::vector<nlohmann::json>>()> list_disruption_budgets;
  // Called when filter finds that a pod asking for vGPU slices fits none of
  // the nodes it was given (GpuPreemptor::OnUnschedulable); must return at
  // once. Unset: nothing happens.
  std::function<void(const nlohmann::json& pod, const core::PodRequest& request,
                     std::vector<std::string> nodes)>
      on_unschedulable;
};

struct ExtenderCounters {
  std::atomic<uint64_t> filter_requests{0};
  std::atomic<uint64_t> filter_errors{0};
  std::atomic<uint64_t> prioritize_requests{0};
  std::atomic<uint64_t> bind_requests{0};
  std::atomic<uint64_t> binds{0};
  std::atomic<uint64_t> bind_errors{0};
  std::atomic<uint64_t> bind_not_leader{0};
  std::atomic<uint64_t> bind_settling{0};  // bind calls refused while a new leader waits out its predecessor
  std::atomic<uint64_t> not_ready{0};      // filter, prioritize and bind calls refused before readiness
  std::atomic<uint64_t> filter_micros{0};
  std::atomic<uint64_t> prioritize_micros{0};
  std::atomic<uint64_t> bind_micros{0};
  std::atomic<uint64_t> preempt_requests{0};
};

class Extender {
 public:
  explicit Extender(ExtenderDeps deps);

  // The verbs as the HTTP listener calls them: request body in, {HTTP
  // status, answer body} out. A body that is not JSON gets 400 and the verb's
  // result type (Error set for filter; [] for prioritize).
  std::pair<int, std::string> FilterBody(std::string_view body);
  std::pair<int, std::string> PrioritizeBody(std::string_view body);
  // The preempt verb (preemption.h): ExtenderPreemptionArgs in,
  // ExtenderPreemptionResult out; HTTP 503 before readiness, 400 for a body
  // that is not ExtenderPreemptionArgs.
  std::pair<int, std::string> PreemptBody(std::string_view body);

  // The same on parsed JSON (tests; Bind is only here). Filter and Prioritize
  // serialise `args` and go through the body path.
  std::pair<int, nlohmann::json> Filter(const nlohmann::json& args);
  std::pair<int, nlohmann::json> Prioritize(const nlohmann::json& args);
  std::pair<int, nlohmann::json> Bind(const nlohmann::json& args);

  const ExtenderCounters& counters() const { return counters_; }

  struct Policies {
    // The placement policy: the node policy, with its GPUs picked in `gpu`
    // order when one is set (core::WithGpuOrder). Prioritize scores with it
    // and bind commits its placement for the chosen node. Held: `tessera` is
    // replaced when it relearns.
    std::shared_ptr<const core::Policy> node;
    std::optional<core::GpuOrder> gpu;  // nullopt: the node policy's own GPU choice
    // Where each came from, for the log: "policy.node" or "pod annotation ...".
    std::string node_source;
    std::string gpu_source;
  };
  // The policies for `pod` (annotations, else config); error names the annotation.
  Result<Policies> PoliciesFor(const nlohmann::json& pod) const;

  // The workload mix of the `tessera` policy.
  const WorkloadLearner& learner() const { return learner_; }

  // Restart: counts the pods the API server lists, as if they had been asked
  // about live — those filter would count (a GPU request that derives, valid
  // policy annotations) that are not Succeeded/Failed and are addressed to
  // this scheduler (spec.schedulerName) or placed by it (an allocation
  // annotation) — in creation order (creationTimestamp, then namespace/name),
  // each once. Returns how many were counted (pods already seen are not).
  size_t ObserveListedPods(const std::vector<nlohmann::json>& pods);
  // The same over the pods `for_each_pod` visits (the informer's cache, in
  // place: no copy of every pod).
  size_t ObserveListedPods(
      const std::function<void(const std::function<void(const nlohmann::json&)>&)>& for_each_pod);
  // The same, fed as the pods arrive rather than read back from a cache (the
  // scheduler's start): the informer's handlers note every pod event
  // (NoteListedPod for an add or update, DropListedPod for a delete) until
  // ObserveNotedPods counts the pods noted and last seen, exactly as
  // ObserveListedPods counts a list of them (the same pods, the same order),
  // and notes nothing from then on. Each pod is checked and its shape taken
  // as it arrives; only that is kept until the count.
  void NoteListedPod(const PodDigest& pod);
  void DropListedPod(const nlohmann::json& pod);
  size_t ObserveNotedPods();
  // The pod will not be scheduled again (deleted, or Succeeded/Failed).
  void ForgetPod(const nlohmann::json& pod);

 private:
  Result<std::shared_ptr<const core::Policy>> NodePolicy(const std::string& value) const;
  // Counts an arriving pod (the filter/prioritize path); when that relearned
  // the mix, drops the scores cached under the previous one and returns true.
  bool Observe(const nlohmann::json& pod, const core::PodRequest& request);
  void DropStaleScores();
  std::pair<int, std::string> FilterUnchecked(std::string_view body);
  std::pair<int, std::string> PrioritizeUnchecked(std::string_view body);
  std::pair<int, nlohmann::json> BindUnchecked(const nlohmann::json& args);
  // Why no decision may be made now ("" = ready); counts a refusal.
  std::string RefusalBeforeReady();
  // A listed pod as the restart counts it.
  struct Listed {
    std::string created;  // RFC 3339 in UTC: sorts as text
    std::string key;      // namespace/name
    WorkloadLearner::ShapedArrival arrival;
  };
  // `pod` as ObserveListedPods counts it; nullopt when it is not counted.
  std::optional<Listed> ListedArrival(const PodDigest& pod) const;
  // Counts `listed` in creation order.
  size_t ObserveListed(std::vector<Listed> listed);

  ExtenderDeps deps_;
  // The policies that learn nothing (immutable after construction); `tessera`
  // is learner_'s.
  std::map<std::string, std::shared_ptr<const core::Policy>> policies_;
  WorkloadLearner learner_;
  ExtenderCounters counters_;
  std::atomic<bool> refusing_{false};  // in a not-ready episode (its first refusal was logged)
  // NoteListedPod's notes until ObserveNotedPods: one record per event, the
  // texts end to end in one buffer, so that 40,000 pods noted among the
  // informer's own allocations leave no holes in the heap when freed; the
  // last record of a key is the pod's.
  class NotedPods {
   public:
    // `listed` nullptr: the pod is not counted (any more).
    void Note(std::string_view key, const Listed* listed);
    // The pods counted, each once; empties the notes.
    std::vector<Listed> Take();

   private:
    struct Record {
      size_t at = 0;  // key, created, uid at text_[at...], lengths below
      uint32_t key_length = 0, created_length = 0, uid_length = 0;
      bool counted = false;
      core::TaskShape shape;
    };
    std::string_view KeyOf(const Record& r) const {
      return std::string_view(text_).substr(r.at, r.key_length);
    }
    // Keeps only the last record of each key that is counted.
    void Compact();
    std::string text_;
    std::vector<Record> records_;
    size_t compact_at_ = 4096;  // records before the next compaction
  };
  std::atomic<bool> noting_{true};
  std::mutex noted_mu_;
  NotedPods noted_;  // guarded by noted_mu_
};

}  // namespace tessera::scheduler
