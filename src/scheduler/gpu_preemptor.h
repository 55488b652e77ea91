// GpuPreemptor: GPU-level preemption that tessera-scheduler starts itself.
//
// Why it exists. kube-scheduler's DefaultPreemption proposes victims from its
// own filter plugins only: per node it removes every lower-priority pod, runs
// its plugins, and gives pods back while the preemptor still passes them. With
// the GPU resources `ignoredByScheduler` (as deployed) a node whose only
// shortage is GPU room passes those plugins with every pod given back, so it
// gets no victim and is not a candidate ("expected at least one victim pod");
// the extender's preempt verb (preemption.h) is then never called for it.
// Counting node-level GPU sums in kube-scheduler would not help either: a
// node whose sum is enough but whose every GPU is too full also passes.
// docs/decisions.md has the sources.
//
// What it does. When filter finds that a GPU pod fits none of the nodes it
// was given, the extender calls OnUnschedulable. On the leader, once per pod
// at most every `pod_retry`, and one attempt at a time, a worker thread then
// (Attempt):
//  - checks that the pod may preempt (PreemptionIneligibility: it asks for
//    vGPU slices, is not bound, deleted or binding, its preemptionPolicy is
//    not Never, and it is not waiting for pods terminating on the node it is
//    nominated to) and that the victims of its previous attempt are gone;
//  - picks one node and the victims there (DecideGpuPreemption): on each
//    node with a fresh inventory, the GPU pods of strictly lower priority
//    that are not terminating are the candidates, and preemption.h's
//    TrimVictims keeps the cheapest subset whose removal makes the pod fit
//    on one GPU set (fewest PodDisruptionBudget violations, fewest pods, the
//    lowest highest priority, the lowest sum); the node with the cheapest
//    such subset wins (then the name that sorts first). Nothing is preempted
//    when the pod already fits somewhere, fits once terminating pods are
//    gone, or fits nowhere even without every lower-priority pod;
//  - sets the pod's status.nominatedNodeName (kube-scheduler then tries that
//    node first and counts the pod there; TrackNomination turns it into the
//    GPU hold that keeps the room from pods of lower or equal priority) and
//    holds the room at once (ClusterState::SetHold);
//  - preempts each victim as kube-scheduler does: re-reads it (a victim
//    gone, replaced or already terminating is skipped), adds the
//    DisruptionTarget condition (reason PreemptionByScheduler), deletes it
//    (a delete, not an eviction: budgets steer the choice, they do not
//    veto it), and records an Event on it;
//  - records an Event on the preemptor and logs the decision; clears the
//    nomination of pods of lower priority nominated to that node (as
//    kube-scheduler does: they may no longer fit there).
// When a victim cannot be preempted (an API error other than NotFound), the
// remaining victims are left alone, the nomination and hold are withdrawn,
// and the error is logged with the victims already deleted; the next attempt
// comes after those are gone and `pod_retry` has passed.
//
// Thread-safety: all methods may be called concurrently. Attempt runs the
// API calls without holding the preemptor's lock.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/result.h"
#include "core/request.h"
#include "core/resource_config.h"
#include "kube/api_error.h"
#include "scheduler/cluster_state.h"
#include "scheduler/preemption.h"

namespace tessera::scheduler {

// The pod as the informer has it (UID, labels, priority, deletionTimestamp,
// the allocation annotation), by namespace and name.
using PodLookup = std::function<Result<nlohmann::json>(const std::string& ns, const std::string& name)>;

// Why `pod` may not preempt anything ("" = it may): it asks for no vGPU
// slice (no GPU, or dynamic MIG), is bound, is being deleted, or its
// spec.preemptionPolicy is Never.
std::string PreemptionIneligibility(const nlohmann::json& pod, const core::PodRequest& request);

struct GpuPreemptionPlan {
  std::string node;
  std::vector<Victim> victims;  // lowest priority first
  int64_t pdb_violations = 0;
};

struct GpuPreemptionDecision {
  std::optional<GpuPreemptionPlan> plan;
  std::string reason;              // without a plan: why nothing is preempted
  std::vector<std::string> notes;  // pods passed over and why (e.g. an unreadable allocation)
};

// The decision for `pod` (whose request is `request`) over `nodes`, against
// `state` and the pods `get_pod` knows; `budgets`: every PodDisruptionBudget.
// Pure apart from the reads; does not check PreemptionIneligibility.
GpuPreemptionDecision DecideGpuPreemption(const ClusterState& state, const PodLookup& get_pod,
                                          const nlohmann::json& pod, const core::PodRequest& request,
                                          std::span<const std::string> nodes,
                                          const std::vector<DisruptionBudget>& budgets);

struct GpuPreemptionOptions {
  bool enabled = true;
  // At most one attempt per pod this often.
  std::chrono::milliseconds pod_retry{10000};
  // Pods waiting for an attempt at most; more are dropped (kube-scheduler
  // retries them, and filter asks again).
  size_t max_queued = 256;
};

// The seams: the informer's view, and the API calls it makes.
struct GpuPreemptorDeps {
  ClusterState* state = nullptr;
  std::string scheduler_name = "tessera-scheduler";  // named in the DisruptionTarget condition
  // True when this process may act (the leader); unset = always.
  std::function<bool()> is_leader;
  PodLookup get_pod;
  // Every PodDisruptionBudget. Unset or failing: no preemption (budgets
  // cannot be honoured unseen).
  std::function<Result<std::vector<nlohmann::json>>()> list_disruption_budgets;
  // GET the pod from the API server (not a cache).
  std::function<kube::ApiResult<nlohmann::json>(const std::string& ns, const std::string& name)> read_pod;
  // JSON merge patch of pods/<name>/status.
  std::function<kube::ApiResult<nlohmann::json>(const std::string& ns, const std::string& name,
                                                const nlohmann::json& patch)>
      patch_pod_status;
  std::function<kube::ApiStatus(const std::string& ns, const std::string& name)> delete_pod;
  // An Event on `pod` (type Normal); failures are the callee's to log.
  std::function<void(const nlohmann::json& pod, const std::string& reason, const std::string& message)>
      record_event;
  Clock* clock = nullptr;  // nullptr: the real clock
};

struct GpuPreemptionCounters {
  std::atomic<uint64_t> requested{0};    // pods filter found fitting nowhere, passed on
  std::atomic<uint64_t> attempts{0};     // attempts run
  std::atomic<uint64_t> preemptions{0};  // attempts that deleted victims and nominated the pod
  std::atomic<uint64_t> victims{0};      // pods deleted
  std::atomic<uint64_t> not_helpful{0};  // attempts that found nothing worth preempting
  std::atomic<uint64_t> skipped{0};      // not the leader, rate-limited, waiting for victims, queue full
  std::atomic<uint64_t> failures{0};     // attempts stopped by an API error
};

class GpuPreemptor {
 public:
  GpuPreemptor(GpuPreemptorDeps deps, GpuPreemptionOptions options);
  ~GpuPreemptor();  // Stop()
  GpuPreemptor(const GpuPreemptor&) = delete;
  GpuPreemptor& operator=(const GpuPreemptor&) = delete;

  // Starts the worker thread (a no-op when disabled or started). Stop waits
  // for the attempt in progress; idempotent.
  void Start();
  void Stop();

  // From filter: `pod` fit none of `nodes`. Returns at once; queues an
  // attempt unless preemption is off, this is not the leader, or the pod's
  // last attempt is less than pod_retry ago (a queued attempt of the same pod
  // is replaced).
  void OnUnschedulable(const nlohmann::json& pod, const core::PodRequest& request,
                       std::vector<std::string> nodes);

  struct Outcome {
    enum class Kind { kPreempted, kNotHelpful, kSkipped, kFailed };
    Kind kind = Kind::kSkipped;
    std::string message;
    std::optional<GpuPreemptionPlan> plan;  // kPreempted, kFailed: what was chosen
  };
  // One attempt now, on the caller's thread (what the worker runs).
  Outcome Attempt(const nlohmann::json& pod, const core::PodRequest& request,
                  const std::vector<std::string>& nodes);

  // True while no attempt is queued or running (tests).
  bool Idle() const;
  const GpuPreemptionCounters& counters() const { return counters_; }
  bool enabled() const { return options_.enabled; }

 private:
  struct Pending {
    nlohmann::json pod;
    core::PodRequest request;
    std::vector<std::string> nodes;
  };
  // The last attempt of a pod: when, and the victims it deleted (key, UID).
  struct Past {
    std::chrono::steady_clock::time_point at;
    std::vector<std::pair<std::string, std::string>> victims;
  };
  void Run();
  // The victims of `key`'s last attempt still present ("" = none).
  std::string VictimsStillPresent(const std::string& key);
  void Remember(const std::string& key, std::vector<std::pair<std::string, std::string>> victims);
  Outcome Execute(const nlohmann::json& pod, const core::PodRequest& request, GpuPreemptionPlan plan);

  const GpuPreemptorDeps deps_;
  const GpuPreemptionOptions options_;
  Clock* const clock_;
  GpuPreemptionCounters counters_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::map<std::string, Pending> queue_;  // guarded by mu_; by pod key
  std::map<std::string, Past> past_;      // guarded by mu_; by pod key
  bool running_ = false;                  // guarded by mu_: an attempt is in progress
  bool stopping_ = false;                 // guarded by mu_
  std::thread worker_;                    // started by Start()
};

}  // namespace tessera::scheduler
