#include "scheduler/gpu_preemptor.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string_view>
#include <tuple>

#include "base/log.h"
#include "core/allocation_codec.h"
#include "core/fit.h"
#include "kube/client.h"
#include "kube/typed_api.h"
#include "scheduler/mig_placement.h"

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;

// Once this many candidate nodes are found, one of them without a budget
// violation, the search stops (kube-scheduler's DefaultPreemption stops at
// max(10 % of the nodes, 100) candidates in the same way).
constexpr size_t kEnoughCandidates = 100;
// Past attempts remembered at most (older ones are forgotten first).
constexpr size_t kMaxRemembered = 4096;

const Json* Member(const Json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string Text(const Json& object, const char* a, const char* b) {
  const Json* outer = Member(object, a);
  const Json* inner = outer ? Member(*outer, b) : nullptr;
  return inner && inner->is_string() ? inner->get<std::string>() : std::string();
}

bool IsTerminating(const Json& pod) {
  const Json* meta = Member(pod, "metadata");
  const Json* deletion = meta ? Member(*meta, "deletionTimestamp") : nullptr;
  return deletion && !deletion->is_null();
}

std::pair<std::string, std::string> SplitKey(const std::string& key) {
  const size_t slash = key.find('/');
  if (slash == std::string::npos) return {"", key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

std::string Describe(const std::vector<Victim>& victims) {
  std::string out;
  for (const Victim& v : victims) {
    if (!out.empty()) out += ", ";
    out += v.ns + "/" + v.name + " (priority " + std::to_string(v.priority) + ")";
  }
  return out;
}

std::string Keys(const std::vector<std::pair<std::string, std::string>>& keys) {
  std::string out;
  for (const auto& [key, uid] : keys) out += (out.empty() ? "" : ",") + key;
  return out.empty() ? "none" : out;
}

}  // namespace

std::string PreemptionIneligibility(const Json& pod, const core::PodRequest& request) {
  if (request.containers.empty() && request.init_containers.empty()) return "it asks for no GPU";
  if (WantsDynamicMig(pod)) return "it asks for dynamic MIG instances (their preemption is not implemented)";
  if (!Text(pod, "spec", "nodeName").empty()) return "it is bound already";
  if (IsTerminating(pod)) return "it is being deleted";
  if (kube::IsPodTerminal(pod)) return "it has finished";
  if (Text(pod, "spec", "preemptionPolicy") == "Never") return "its preemptionPolicy is Never";
  return "";
}

GpuPreemptionDecision DecideGpuPreemption(const ClusterState& state, const PodLookup& get_pod,
                                          const Json& pod, const core::PodRequest& request,
                                          std::span<const std::string> nodes,
                                          const std::vector<DisruptionBudget>& budgets) {
  GpuPreemptionDecision out;
  const std::string key = PodKey(pod);
  const int32_t priority = PodPriority(pod);
  auto lookup = [&](const std::string& pod_key) -> Result<Json> {
    if (!get_pod) return Error{"no pod lookup"};
    auto [ns, name] = SplitKey(pod_key);
    return get_pod(ns, name);
  };

  // Nothing anywhere to preempt: the usual case in a cluster without
  // priority classes, where every pending pod would otherwise walk every node.
  if (!state.AnyPodBelowPriority(priority)) {
    out.reason = "no pod of lower priority holds a GPU slice anywhere in the cluster (its priority: " +
                 std::to_string(priority) + ")";
    return out;
  }

  // Nominated already (by kube-scheduler or an earlier attempt): while pods
  // of lower priority are terminating there, it waits for them, as
  // kube-scheduler's PodEligibleToPreemptOthers has it wait.
  if (const std::string nominated = Text(pod, "status", "nominatedNodeName"); !nominated.empty()) {
    std::string leaving;
    state.VisitPodsOn(
        nominated, [&](const std::string& pod_key, const core::PodAllocation&, int32_t p, bool terminating) {
          if (terminating && p < priority && leaving.empty()) leaving = pod_key;
        });
    if (!leaving.empty()) {
      out.reason = "it is nominated to node " + nominated + ", where pod " + leaving +
                   " of lower priority is still terminating";
      return out;
    }
  }

  // The nodes given whose inventory is usable and fresh (filter refused the
  // others for reasons preemption cannot change).
  std::set<std::string, std::less<>> usable;
  {
    std::set<std::string_view> wanted(nodes.begin(), nodes.end());
    state.VisitNodes([&](const ClusterState::NodeVisit& v) {
      if (wanted.count(v.name) && v.has_inventory && v.error.empty() && !v.stale) usable.insert(v.name);
    });
  }

  struct Candidate {
    std::string node;
    std::vector<Victim> victims;  // the kept ones
    VictimSetCost cost;
  };
  std::optional<Candidate> best;
  size_t candidates = 0;
  bool any_lower = false;
  std::set<std::string_view> seen;
  for (const std::string& node : nodes) {
    if (!seen.insert(node).second || !usable.count(node)) continue;
    std::string blocked;
    auto view = state.ViewFor(key, priority, node, &blocked);
    if (!view) continue;
    if (!blocked.empty()) {
      out.notes.push_back(blocked);
      continue;
    }
    if (core::FitNode(*view, request).fits) {
      out.reason = "it fits on node " + node + " without preemption";
      return out;
    }
    // The pods of lower priority and the terminating ones, in one pass under
    // the state's lock. Only those are read from the informer (most nodes of
    // a busy cluster hold none, and reading every pod of 5,000 nodes costs
    // seconds), and a node with neither costs no more than the check above.
    struct Accounted {
      std::string key;
      core::PodAllocation allocation;
    };
    std::vector<Accounted> lower, terminating;
    state.VisitPodsOn(node, [&](const std::string& pod_key, const core::PodAllocation& allocation, int32_t p,
                                bool is_terminating) {
      if (pod_key == key) return;
      if (is_terminating) {
        terminating.push_back({pod_key, allocation});
      } else if (p < priority) {  // never a pod of equal or higher priority
        lower.push_back({pod_key, allocation});
      }
    });
    if (lower.empty() && terminating.empty()) continue;
    core::NodeState leaving = *view;  // without the pods already terminating
    for (const Accounted& t : terminating) (void)leaving.Release(SplitByKind(t.allocation).vgpu);
    if (!terminating.empty() && core::FitNode(leaving, request).fits) {
      out.reason = "it fits on node " + node + " once the pods terminating there are gone";
      return out;
    }
    if (lower.empty()) continue;
    {
      // Not even without every pod of lower priority: nothing to gain here.
      core::NodeState freed = leaving;
      for (const Accounted& l : lower) (void)freed.Release(SplitByKind(l.allocation).vgpu);
      if (!core::FitNode(freed, request).fits) continue;
    }
    std::vector<Victim> victims;
    for (const Accounted& l : lower) {
      const std::string& pod_key = l.key;
      const core::PodAllocation& allocation = l.allocation;
      auto p = lookup(pod_key);
      if (!p.ok()) {
        out.notes.push_back("pod " + pod_key + " on node " + node + " is not known (" + p.error().message +
                            "); not a victim");
        continue;
      }
      const int32_t victim_priority = PodPriority(*p);
      if (IsTerminating(*p) || victim_priority >= priority) continue;  // changed since it was accounted
      // Its annotation now must be what was accounted: a victim is chosen
      // for the room it frees, and an annotation that cannot be read or
      // changed since says nothing reliable about that room.
      auto decoded = core::DecodeAllocation(kube::AnnotationOf(*p, core::kAllocationAnnotation));
      if (!decoded.ok() || !(*decoded == allocation)) {
        out.notes.push_back("pod " + pod_key + " on node " + node + ": its " +
                            std::string(core::kAllocationAnnotation) + " annotation " +
                            (decoded.ok() ? "differs from the allocation accounted"
                                          : "cannot be read (" + decoded.error().message + ")") +
                            "; not a victim");
        continue;
      }
      any_lower = true;
      const Json* meta = Member(*p, "metadata");
      const Json* labels = meta ? Member(*meta, "labels") : nullptr;
      auto [ns, name] = SplitKey(pod_key);
      victims.push_back({kube::UidOf(*p), ns, name, victim_priority,
                         labels && labels->is_object() ? *labels : Json::object(), allocation});
    }
    if (victims.empty()) continue;
    const TrimmedVictims trimmed =
        TrimVictims(leaving, request, victims, std::optional<std::vector<DisruptionBudget>>(budgets), 0);
    if (!trimmed.fits || trimmed.kept.empty()) continue;
    Candidate c{node, {}, {}};
    c.cost.pdb = trimmed.pdb_violations;
    c.cost.pods = trimmed.kept.size();
    for (size_t i : trimmed.kept) {
      c.victims.push_back(victims[i]);
      c.cost.highest = std::max(c.cost.highest, victims[i].priority);
      c.cost.sum += victims[i].priority;
    }
    ++candidates;
    if (!best || c.cost < best->cost || (!(best->cost < c.cost) && c.node < best->node)) best = std::move(c);
    if (candidates >= kEnoughCandidates && best->cost.pdb == 0) break;
  }
  if (!best) {
    const std::string over = " of the " + std::to_string(seen.size()) + " node(s) it was given";
    out.reason = any_lower ? "removing pods of lower priority makes room on none" + over
                           : "no pod of lower priority whose removal could make room runs on any" + over;
    return out;
  }
  GpuPreemptionPlan plan{best->node, std::move(best->victims), best->cost.pdb};
  std::stable_sort(plan.victims.begin(), plan.victims.end(),
                   [](const Victim& a, const Victim& b) { return a.priority < b.priority; });
  out.plan = std::move(plan);
  return out;
}

GpuPreemptor::GpuPreemptor(GpuPreemptorDeps deps, GpuPreemptionOptions options)
    : deps_(std::move(deps)), options_(options), clock_(OrRealClock(deps_.clock)) {}

GpuPreemptor::~GpuPreemptor() {
  Stop();
}

void GpuPreemptor::Start() {
  std::lock_guard lock(mu_);
  if (!options_.enabled || worker_.joinable()) return;
  stopping_ = false;
  worker_ = std::thread([this] { Run(); });
}

void GpuPreemptor::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    queue_.clear();
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

bool GpuPreemptor::Idle() const {
  std::lock_guard lock(mu_);
  return queue_.empty() && !running_;
}

void GpuPreemptor::OnUnschedulable(const Json& pod, const core::PodRequest& request,
                                   std::vector<std::string> nodes) {
  if (!options_.enabled) return;
  ++counters_.requested;
  if ((deps_.is_leader && !deps_.is_leader()) || !PreemptionIneligibility(pod, request).empty()) {
    ++counters_.skipped;
    return;
  }
  const std::string key = PodKey(pod);
  {
    std::lock_guard lock(mu_);
    if (stopping_ || !worker_.joinable()) return;
    if (auto p = past_.find(key); p != past_.end() && clock_->Now() - p->second.at < options_.pod_retry) {
      ++counters_.skipped;
      return;
    }
    if (!queue_.count(key) && queue_.size() >= options_.max_queued) {
      ++counters_.skipped;
      return;
    }
    queue_[key] = Pending{pod, request, std::move(nodes)};
  }
  wake_.notify_one();
}

void GpuPreemptor::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    // The pod of highest priority first, as kube-scheduler's queue orders them.
    auto next = std::max_element(queue_.begin(), queue_.end(), [](const auto& a, const auto& b) {
      return PodPriority(a.second.pod) < PodPriority(b.second.pod);
    });
    Pending p = std::move(next->second);
    queue_.erase(next);
    running_ = true;
    lock.unlock();
    (void)Attempt(p.pod, p.request, p.nodes);
    lock.lock();
    running_ = false;
  }
}

std::string GpuPreemptor::VictimsStillPresent(const std::string& key) {
  std::vector<std::pair<std::string, std::string>> victims;
  {
    std::lock_guard lock(mu_);
    auto p = past_.find(key);
    if (p == past_.end()) return "";
    victims = p->second.victims;
  }
  for (const auto& [victim, uid] : victims) {
    auto [ns, name] = SplitKey(victim);
    auto pod = deps_.get_pod ? deps_.get_pod(ns, name) : Result<Json>(Error{"no lookup"});
    if (pod.ok() && kube::UidOf(*pod) == uid) return victim;
  }
  return "";
}

void GpuPreemptor::Remember(const std::string& key,
                            std::vector<std::pair<std::string, std::string>> victims) {
  std::lock_guard lock(mu_);
  if (past_.size() >= kMaxRemembered && !past_.count(key)) {
    auto oldest = std::min_element(past_.begin(), past_.end(),
                                   [](const auto& a, const auto& b) { return a.second.at < b.second.at; });
    past_.erase(oldest);
  }
  past_[key] = Past{clock_->Now(), std::move(victims)};
}

GpuPreemptor::Outcome GpuPreemptor::Attempt(const Json& pod, const core::PodRequest& request,
                                            const std::vector<std::string>& nodes) {
  using Kind = Outcome::Kind;
  const std::string key = PodKey(pod);
  auto skip = [&](const std::string& why) {
    ++counters_.skipped;
    log::Debug("gpu preemption: not now", {{"pod", key}, {"reason", why}});
    return Outcome{Kind::kSkipped, why, std::nullopt};
  };
  if (deps_.is_leader && !deps_.is_leader()) return skip("this replica is not the leader");
  if (std::string why = PreemptionIneligibility(pod, request); !why.empty()) return skip(why);
  if (auto reserved = deps_.state->ReservedNode(key))
    return skip("a bind to node " + *reserved + " is in flight");
  if (std::string victim = VictimsStillPresent(key); !victim.empty()) {
    return skip("pod " + victim + ", preempted for it before, is still terminating");
  }
  ++counters_.attempts;
  auto passed_over = [&](const GpuPreemptionDecision& decision) {
    for (const std::string& note : decision.notes) {
      log::Warn("gpu preemption: pod passed over", {{"pod", key}, {"reason", note}});
    }
  };
  auto not_helpful = [&](const GpuPreemptionDecision& decision) {
    passed_over(decision);
    ++counters_.not_helpful;
    Remember(key, {});
    log::Info(
        "gpu preemption: nothing to preempt",
        {{"pod", key}, {"priority", PodPriority(pod)}, {"nodes", nodes.size()}, {"reason", decision.reason}});
    return Outcome{Kind::kNotHelpful, decision.reason, std::nullopt};
  };
  // Budgets change which victims are cheapest, never whether preempting
  // helps: without a plan ignoring them there is none with them, and the
  // common case (no pod of lower priority in the way) costs no API call.
  if (GpuPreemptionDecision probe = DecideGpuPreemption(*deps_.state, deps_.get_pod, pod, request, nodes, {});
      !probe.plan) {
    return not_helpful(probe);
  }
  if (!deps_.list_disruption_budgets) {
    ++counters_.failures;
    return {Kind::kFailed, "PodDisruptionBudgets cannot be read", std::nullopt};
  }
  auto listed = deps_.list_disruption_budgets();
  if (!listed.ok()) {
    ++counters_.failures;
    Remember(key, {});
    const std::string message = "PodDisruptionBudgets could not be listed (" + listed.error().message +
                                "); nothing preempted, budgets are not ignored";
    log::Warn("gpu preemption: not attempted", {{"pod", key}, {"reason", message}});
    return {Kind::kFailed, message, std::nullopt};
  }
  GpuPreemptionDecision decision =
      DecideGpuPreemption(*deps_.state, deps_.get_pod, pod, request, nodes, ParseDisruptionBudgets(*listed));
  if (!decision.plan) return not_helpful(decision);
  passed_over(decision);
  return Execute(pod, request, std::move(*decision.plan));
}

GpuPreemptor::Outcome GpuPreemptor::Execute(const Json& pod, const core::PodRequest& request,
                                            GpuPreemptionPlan plan) {
  using Kind = Outcome::Kind;
  const std::string key = PodKey(pod);
  const auto [ns, name] = SplitKey(key);
  const int32_t priority = PodPriority(pod);
  const std::string uid = kube::UidOf(pod);
  const std::string why =
      "pod " + key + " (priority " + std::to_string(priority) +
      ") fits on no node for lack of GPU room; tessera-scheduler frees GPU slices on node " + plan.node;

  // The nomination first: the room is held from the moment it is freed.
  auto nominated = deps_.patch_pod_status(ns, name, Json{{"status", {{"nominatedNodeName", plan.node}}}});
  if (!nominated.ok()) {
    ++counters_.failures;
    Remember(key, {});
    const std::string message = "cannot nominate the pod to node " + plan.node + ": " +
                                nominated.error().message + "; nothing preempted";
    log::Warn("gpu preemption failed", {{"pod", key}, {"reason", message}});
    return {Kind::kFailed, message, std::move(plan)};
  }
  deps_.state->SetHold(key, plan.node, request, priority,
                       std::chrono::duration_cast<std::chrono::milliseconds>(kNominationHoldTimeout));

  std::vector<std::pair<std::string, std::string>> deleted;  // key, UID
  std::string failure;
  size_t failed_at = plan.victims.size();
  for (size_t i = 0; i < plan.victims.size() && failure.empty(); ++i) {
    const Victim& v = plan.victims[i];
    const std::string victim_key = v.ns + "/" + v.name;
    bool gone = false;
    // Re-read, then add the DisruptionTarget condition (compare-and-swap on
    // the resourceVersion; a conflict reads again).
    for (int tries = 0; !gone && failure.empty(); ++tries) {
      auto fresh = deps_.read_pod(v.ns, v.name);
      if (!fresh.ok()) {
        if (fresh.error().IsNotFound()) {
          gone = true;
        } else {
          failure = "cannot read victim " + victim_key + ": " + fresh.error().message;
        }
        break;
      }
      if (kube::UidOf(*fresh) != v.uid || IsTerminating(*fresh)) {
        gone = true;  // replaced by another pod of that name, or already leaving
        break;
      }
      Json conditions = Json::array();
      if (const Json* status = Member(*fresh, "status")) {
        if (const Json* c = Member(*status, "conditions"); c && c->is_array()) {
          for (const Json& cond : *c) {
            if (!cond.is_object() || cond.value("type", "") != "DisruptionTarget") conditions.push_back(cond);
          }
        }
      }
      conditions.push_back(
          {{"type", "DisruptionTarget"},
           {"status", "True"},
           {"reason", "PreemptionByScheduler"},
           {"message", deps_.scheduler_name + ": preempting to accommodate a higher priority pod"},
           {"lastTransitionTime", kube::FormatMicroTime(clock_->WallNow()).substr(0, 19) + "Z"}});
      Json patch = {{"metadata", {{"resourceVersion", kube::ResourceVersionOf(*fresh)}}},
                    {"status", {{"conditions", std::move(conditions)}}}};
      auto patched = deps_.patch_pod_status(v.ns, v.name, patch);
      if (patched.ok()) break;
      if (patched.error().IsNotFound()) {
        gone = true;
      } else if (!patched.error().IsConflict() || tries >= 2) {
        failure = "cannot mark victim " + victim_key +
                  " with the DisruptionTarget condition: " + patched.error().message;
      }
    }
    if (failure.empty() && !gone) {
      kube::ApiStatus del = deps_.delete_pod(v.ns, v.name);
      if (!del.ok() && !del.error().IsNotFound()) {
        failure = "cannot delete victim " + victim_key + ": " + del.error().message;
      } else if (del.ok()) {
        deleted.emplace_back(victim_key, v.uid);
        ++counters_.victims;
        if (deps_.record_event) {
          Json ref = {{"metadata", {{"namespace", v.ns}, {"name", v.name}, {"uid", v.uid}}}};
          deps_.record_event(ref, "Preempted",
                             "Preempted by pod " + uid + " on node " + plan.node + ": " + why +
                                 "; this pod (priority " + std::to_string(v.priority) +
                                 ") held some of that room");
        }
      }
    }
    if (!failure.empty()) failed_at = i;
  }

  if (!failure.empty()) {
    ++counters_.failures;
    // Without every victim gone the pod does not fit: withdraw the nomination
    // so that the node's room is not held for nothing.
    auto withdrawn = deps_.patch_pod_status(ns, name, Json{{"status", {{"nominatedNodeName", nullptr}}}});
    deps_.state->ReleaseHold(key);
    std::vector<std::pair<std::string, std::string>> left;
    for (size_t i = failed_at; i < plan.victims.size(); ++i) {
      left.emplace_back(plan.victims[i].ns + "/" + plan.victims[i].name, plan.victims[i].uid);
    }
    Remember(key, deleted);
    log::Error("gpu preemption failed: the remaining victims are left alone and the nomination withdrawn",
               {{"pod", key},
                {"node", plan.node},
                {"reason", failure},
                {"deleted", Keys(deleted)},
                {"not_deleted", Keys(left)},
                {"nomination_withdrawn", withdrawn.ok()}});
    return {Kind::kFailed, failure, std::move(plan)};
  }
  ++counters_.preemptions;
  Remember(key, deleted);
  // Pods of lower priority nominated to this node may no longer fit there:
  // their nomination (and with it their hold, which would keep the node from
  // pods of their priority) is cleared so that they are placed elsewhere, as
  // kube-scheduler clears them.
  for (const auto& [nominee, nominee_priority] : deps_.state->HoldsOn(plan.node)) {
    if (nominee == key || nominee_priority >= priority) continue;
    const auto [nominee_ns, nominee_name] = SplitKey(nominee);
    auto cleared =
        deps_.patch_pod_status(nominee_ns, nominee_name, Json{{"status", {{"nominatedNodeName", nullptr}}}});
    log::Info("gpu preemption: nomination of a lower-priority pod cleared",
              {{"pod", nominee},
               {"node", plan.node},
               {"for", key},
               {"ok", cleared.ok() || cleared.error().IsNotFound()}});
  }
  const std::string summary = "preempting " + std::to_string(plan.victims.size()) +
                              " pod(s) of lower priority on node " + plan.node + ": " +
                              Describe(plan.victims) +
                              " (PodDisruptionBudget violations: " + std::to_string(plan.pdb_violations) +
                              "); nominated to node " + plan.node;
  if (deps_.record_event) deps_.record_event(pod, "Preempting", why + "; " + summary);
  log::Info("gpu preemption", {{"pod", key},
                               {"priority", priority},
                               {"node", plan.node},
                               {"victims", Describe(plan.victims)},
                               {"deleted", deleted.size()},
                               {"pdb_violations", plan.pdb_violations}});
  return {Kind::kPreempted, summary, std::move(plan)};
}

}  // namespace tessera::scheduler
