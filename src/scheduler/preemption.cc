#include "scheduler/preemption.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "base/log.h"
#include "core/fit.h"
#include "core/pod_request.h"
#include "kube/client.h"
#include "scheduler/extender_wire.h"
#include "scheduler/mig_placement.h"

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;

const Json* Member(const Json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

bool AsksForGpus(const core::PodRequest& request) {
  return !request.containers.empty() || !request.init_containers.empty();
}

// Whether some container of `pod` could take a slice of `gpu` were it empty:
// health, type and UUID filters, sharing mode, size. A victim's slice on a GPU
// failing this for every container frees nothing the pod can use.
bool UsableBy(const core::Gpu& gpu, const core::PodRequest& pod) {
  const core::GpuState empty{gpu, {}};
  auto usable = [&](const std::vector<core::ContainerRequest>& list) {
    return std::any_of(list.begin(), list.end(), [&](const core::ContainerRequest& c) {
      return core::CheckGpu(empty, c, pod.filter).fits();
    });
  };
  return usable(pod.containers) || usable(pod.init_containers);
}

// kube-scheduler's importance order: higher priority first; then the order
// proposed.
std::vector<size_t> ByImportance(std::span<const Victim> victims, const std::vector<size_t>& indices) {
  std::vector<size_t> order = indices;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return victims[a].priority > victims[b].priority; });
  return order;
}

}  // namespace

int32_t PodPriority(const Json& pod) {
  const Json* spec = Member(pod, "spec");
  const Json* priority = spec ? Member(*spec, "priority") : nullptr;
  if (!priority || !priority->is_number_integer()) return 0;
  return static_cast<int32_t>(std::clamp<int64_t>(
      priority->get<int64_t>(), std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
}

std::vector<DisruptionBudget> ParseDisruptionBudgets(const std::vector<Json>& items) {
  std::vector<DisruptionBudget> out;
  for (const Json& item : items) {
    const Json* meta = Member(item, "metadata");
    if (!meta || !meta->is_object()) continue;
    DisruptionBudget b;
    b.ns = meta->value("namespace", "");
    if (const Json* spec = Member(item, "spec")) {
      if (const Json* selector = Member(*spec, "selector")) b.selector = *selector;
    }
    if (const Json* status = Member(item, "status")) {
      if (const Json* allowed = Member(*status, "disruptionsAllowed");
          allowed && allowed->is_number_integer()) {
        b.disruptions_allowed = allowed->get<int32_t>();
      }
      if (const Json* disrupted = Member(*status, "disruptedPods"); disrupted && disrupted->is_object()) {
        for (const auto& [name, when] : disrupted->items()) b.disrupted_pods.push_back(name);
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

bool LabelSelectorMatches(const Json& selector, const Json& labels) {
  if (!selector.is_object()) return false;  // a nil selector selects nothing
  auto label = [&](const std::string& key) -> const Json* {
    const Json* v = Member(labels, key.c_str());
    return v && v->is_string() ? v : nullptr;
  };
  if (const Json* match = Member(selector, "matchLabels"); match && !match->is_null()) {
    if (!match->is_object()) return false;
    for (const auto& [key, value] : match->items()) {
      const Json* have = label(key);
      if (!have || *have != value) return false;
    }
  }
  if (const Json* exprs = Member(selector, "matchExpressions"); exprs && !exprs->is_null()) {
    if (!exprs->is_array()) return false;
    for (const Json& e : *exprs) {
      if (!e.is_object()) return false;
      const std::string key = e.value("key", "");
      const std::string op = e.value("operator", "");
      const Json* have = label(key);
      bool in_values = false;
      if (const Json* values = Member(e, "values"); have && values && values->is_array()) {
        in_values = std::find(values->begin(), values->end(), *have) != values->end();
      }
      if (op == "In") {
        if (!in_values) return false;
      } else if (op == "NotIn") {
        if (in_values) return false;
      } else if (op == "Exists") {
        if (!have) return false;
      } else if (op == "DoesNotExist") {
        if (have) return false;
      } else {
        return false;  // unknown operator: the selector is invalid, it selects nothing
      }
    }
  }
  return true;
}

int64_t CountPdbViolations(std::span<const Victim* const> victims,
                           const std::vector<DisruptionBudget>& budgets) {
  std::vector<int64_t> allowed;
  allowed.reserve(budgets.size());
  for (const DisruptionBudget& b : budgets) allowed.push_back(b.disruptions_allowed);
  int64_t violations = 0;
  for (const Victim* v : victims) {
    if (v->labels.is_null() && v->name.empty()) continue;  // unknown: matched by nothing
    const Json labels = v->labels.is_null() ? Json::object() : v->labels;
    bool violates = false;
    for (size_t i = 0; i < budgets.size(); ++i) {
      const DisruptionBudget& b = budgets[i];
      if (b.ns != v->ns || !LabelSelectorMatches(b.selector, labels)) continue;
      if (std::find(b.disrupted_pods.begin(), b.disrupted_pods.end(), v->name) != b.disrupted_pods.end()) {
        continue;  // already counted by the budget's controller
      }
      if (--allowed[i] < 0) violates = true;
    }
    if (violates) ++violations;
  }
  return violations;
}

TrimmedVictims TrimVictims(const core::NodeState& node, const core::PodRequest& preemptor,
                           std::span<const Victim> victims,
                           const std::optional<std::vector<DisruptionBudget>>& budgets,
                           int64_t proposed_violations) {
  TrimmedVictims out;
  std::vector<size_t> always;  // non-GPU victims: kept as proposed
  std::vector<size_t> useful;  // GPU victims with a slice on a GPU the preemptor can use
  for (size_t i = 0; i < victims.size(); ++i) {
    const Victim& v = victims[i];
    if (!v.allocation) {
      always.push_back(i);
      continue;
    }
    bool frees = false;
    for (const core::ContainerAllocation& c : v.allocation->containers) {
      for (const core::DeviceSlice& d : c.devices) {
        const int g = node.IndexOf(d.uuid);
        if (g >= 0 && d.mig_profile.empty() && UsableBy(node.gpus()[g].gpu, preemptor)) frees = true;
      }
    }
    if (frees) useful.push_back(i);  // the others free nothing useful: never kept
  }
  // The node without the victims of `removed` (indices into `useful`).
  auto fits_without = [&](const std::vector<bool>& removed, std::string* why) {
    core::NodeState state = node;
    for (size_t k = 0; k < useful.size(); ++k) {
      if (removed[k]) (void)state.Release(SplitByKind(*victims[useful[k]].allocation).vgpu);
    }
    core::FitResult fit = core::FitNode(state, preemptor);
    if (why) *why = fit.message;
    return fit.fits;
  };
  auto chosen_of = [&](const std::vector<bool>& removed) {
    std::vector<size_t> kept = always;
    for (size_t k = 0; k < useful.size(); ++k) {
      if (removed[k]) kept.push_back(useful[k]);
    }
    std::sort(kept.begin(), kept.end());
    return kept;
  };
  auto cost_of = [&](const std::vector<size_t>& kept) {
    VictimSetCost c;
    c.pods = kept.size();
    for (size_t i : kept) {
      c.highest = std::max(c.highest, victims[i].priority);
      c.sum += victims[i].priority;
    }
    if (budgets) {
      std::vector<const Victim*> ordered;
      for (size_t i : ByImportance(victims, kept)) ordered.push_back(&victims[i]);
      c.pdb = CountPdbViolations(ordered, *budgets);
    }
    return c;
  };
  std::vector<bool> all(useful.size(), true);
  if (!fits_without(all, &out.reason)) return out;
  out.fits = true;
  std::vector<bool> best = all;
  if (useful.size() <= kMaxExactVictims) {
    VictimSetCost best_cost = cost_of(chosen_of(all));
    const uint32_t masks = 1u << useful.size();
    for (uint32_t mask = 0; mask + 1 < masks; ++mask) {  // the last mask is `all`
      std::vector<bool> removed(useful.size());
      for (size_t k = 0; k < useful.size(); ++k) removed[k] = (mask >> k) & 1u;
      const VictimSetCost c = cost_of(chosen_of(removed));
      if (!(c < best_cost) || !fits_without(removed, nullptr)) continue;
      best_cost = c;
      best = std::move(removed);
    }
  } else {
    // kube-scheduler's reprieve: give back the most important first.
    std::vector<size_t> positions(useful.size());
    for (size_t k = 0; k < positions.size(); ++k) positions[k] = k;
    std::stable_sort(positions.begin(), positions.end(), [&](size_t a, size_t b) {
      return victims[useful[a]].priority > victims[useful[b]].priority;
    });
    for (size_t k : positions) {
      best[k] = false;
      if (!fits_without(best, nullptr)) best[k] = true;
    }
  }
  out.kept = chosen_of(best);
  // Victims whose labels are unknown may violate a budget or not: counted as
  // violating, the answer bounded by kube-scheduler's own count.
  int64_t unknown = 0;
  for (size_t i : out.kept) unknown += victims[i].labels.is_null() && victims[i].name.empty();
  if (budgets) {
    out.pdb_violations = cost_of(out.kept).pdb;
    if (unknown > 0) out.pdb_violations = std::min(proposed_violations, out.pdb_violations + unknown);
  } else {
    out.pdb_violations = std::min<int64_t>(proposed_violations, static_cast<int64_t>(out.kept.size()));
  }
  return out;
}

namespace {

// The victims proposed on one node, resolved against what tessera knows.
std::vector<Victim> ResolveVictims(const PreemptionDeps& deps, const wire::ProposedVictims& proposed,
                                   bool meta) {
  // The GPU pods tessera accounts on the node, by UID (from the informer).
  struct Known {
    std::string ns, name;
    int32_t priority = 0;
    Json labels;
    core::PodAllocation allocation;
  };
  std::map<std::string, Known> by_uid;
  std::map<std::string, core::PodAllocation> by_key;
  for (auto& [key, allocation] : deps.state->PodsOn(proposed.node)) {
    by_key[key] = allocation;
    if (!meta || !deps.get_pod) continue;
    const size_t slash = key.find('/');
    if (slash == std::string::npos) continue;
    auto pod = deps.get_pod(key.substr(0, slash), key.substr(slash + 1));
    if (!pod.ok()) continue;
    const Json* m = Member(*pod, "metadata");
    const std::string uid = m ? m->value("uid", "") : "";
    if (uid.empty()) continue;
    Known k{key.substr(0, slash), key.substr(slash + 1), PodPriority(*pod), Json(), allocation};
    if (const Json* labels = m ? Member(*m, "labels") : nullptr; labels && labels->is_object()) {
      k.labels = *labels;
    } else {
      k.labels = Json::object();
    }
    by_uid[uid] = std::move(k);
  }
  std::vector<Victim> out;
  for (size_t i = 0; i < proposed.uids.size(); ++i) {
    Victim v;
    v.uid = proposed.uids[i];
    if (!meta) {
      const Json& pod = proposed.pods[i];
      v.ns = kube::NamespaceOf(pod);
      v.name = kube::NameOf(pod);
      v.priority = PodPriority(pod);
      const Json* m = Member(pod, "metadata");
      const Json* labels = m ? Member(*m, "labels") : nullptr;
      v.labels = labels && labels->is_object() ? *labels : Json::object();
      if (auto a = by_key.find(v.ns + "/" + v.name); a != by_key.end()) v.allocation = a->second;
    } else if (auto k = by_uid.find(v.uid); k != by_uid.end()) {
      v.ns = k->second.ns;
      v.name = k->second.name;
      v.priority = k->second.priority;
      v.labels = k->second.labels;
      v.allocation = k->second.allocation;
    }  // else a pod tessera does not place: no slice, labels unknown
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace

std::pair<int, std::string> ProcessPreemption(const PreemptionDeps& deps, std::string_view body) {
  auto args = wire::ParsePreemptionArgs(body);
  if (!args.ok()) {
    log::Info("preempt refused the request", {{"reason", args.error().message}});
    return {400, Json{{"Error", args.error().message}}.dump(-1, ' ', false, Json::error_handler_t::replace)};
  }
  const Json& pod = args->pod;
  const std::string key = PodKey(pod);
  auto request = core::DerivePodRequest(pod, deps.resources);
  if (!request.ok()) {
    const std::string message = "pod " + key + ": " + request.error().message;
    log::Info("preempt refused the request", {{"reason", message}});
    return {400, Json{{"Error", message}}.dump(-1, ' ', false, Json::error_handler_t::replace)};
  }
  std::vector<wire::AgreedVictims> agreed;
  if (!AsksForGpus(*request)) {
    // Not a GPU pod: kube-scheduler's proposal stands as it is.
    for (const wire::ProposedVictims& p : args->nodes) {
      if (!p.uids.empty()) agreed.push_back({p.node, p.uids, p.pdb_violations});
    }
    return {200, wire::PreemptionResultText(agreed)};
  }
  if (WantsDynamicMig(pod)) {
    log::Info("preempt: dynamic MIG pods do not preempt (not implemented)", {{"pod", key}});
    return {200, wire::PreemptionResultText(agreed)};
  }
  const int32_t priority = PodPriority(pod);
  std::optional<std::vector<DisruptionBudget>> budgets;
  if (deps.list_disruption_budgets) {
    auto listed = deps.list_disruption_budgets();
    if (listed.ok()) {
      budgets = ParseDisruptionBudgets(*listed);
    } else {
      log::Warn("preempt: PodDisruptionBudgets not listed; reporting kube-scheduler's counts as bounds",
                {{"pod", key}, {"error", listed.error().message}});
    }
  }
  for (const wire::ProposedVictims& p : args->nodes) {
    std::vector<Victim> victims = ResolveVictims(deps, p, args->meta);
    std::string blocked;
    auto view = deps.state->ViewFor(key, priority, p.node, &blocked);
    if (!view) {
      log::Info("preempt: node left out", {{"pod", key}, {"node", p.node}, {"reason", "no GPU inventory"}});
      continue;
    }
    if (!blocked.empty()) {
      log::Info("preempt: node left out", {{"pod", key}, {"node", p.node}, {"reason", blocked}});
      continue;
    }
    TrimmedVictims trimmed = TrimVictims(*view, *request, victims, budgets, p.pdb_violations);
    if (!trimmed.fits || trimmed.kept.empty()) {
      log::Info("preempt: node left out",
                {{"pod", key},
                 {"node", p.node},
                 {"reason", trimmed.fits ? "no proposed victim is needed for the GPUs"
                                         : "no room even without every proposed victim: " + trimmed.reason}});
      continue;
    }
    wire::AgreedVictims a{p.node, {}, trimmed.pdb_violations};
    for (size_t i : trimmed.kept) a.uids.push_back(victims[i].uid);
    log::Info("preempt: victims agreed", {{"pod", key},
                                          {"node", p.node},
                                          {"proposed", victims.size()},
                                          {"kept", a.uids.size()},
                                          {"pdb_violations", a.pdb_violations}});
    agreed.push_back(std::move(a));
  }
  return {200, wire::PreemptionResultText(agreed)};
}

void TrackNomination(ClusterState& state, const core::ResourceConfig& resources, const Json& pod,
                     bool deleted) {
  const std::string key = PodKey(pod);
  if (deleted) {
    state.ReleaseHold(key);
    state.SetTerminating(key, false);
    return;
  }
  const Json* meta = Member(pod, "metadata");
  const Json* deletion = meta ? Member(*meta, "deletionTimestamp") : nullptr;
  const bool terminating = deletion && !deletion->is_null();
  state.SetTerminating(key, terminating);
  const Json* spec = Member(pod, "spec");
  const Json* status = Member(pod, "status");
  const std::string bound = spec ? spec->value("nodeName", "") : "";
  const std::string nominated = status ? status->value("nominatedNodeName", "") : "";
  if (!nominated.empty() && bound.empty() && !terminating && !kube::IsPodTerminal(pod) &&
      !WantsDynamicMig(pod)) {
    auto request = core::DerivePodRequest(pod, resources);
    if (request.ok() && AsksForGpus(*request)) {
      state.SetHold(key, nominated, *request, PodPriority(pod),
                    std::chrono::duration_cast<std::chrono::milliseconds>(kNominationHoldTimeout));
      return;
    }
  }
  state.ReleaseHold(key);
}

}  // namespace tessera::scheduler
