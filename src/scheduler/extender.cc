#include "scheduler/extender.h"

#include "base/log.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <tuple>

#include "core/allocation_codec.h"
#include "core/pod_request.h"
#include "kube/client.h"
#include "scheduler/extender_wire.h"
#include "scheduler/mig_placement.h"
#include "scheduler/preemption.h"
#include "scheduler/webhook.h"

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;
using Micros = std::chrono::microseconds;

class Timer {
 public:
  explicit Timer(std::atomic<uint64_t>& sink) : sink_(sink), start_(std::chrono::steady_clock::now()) {}
  ~Timer() { sink_ += std::chrono::duration_cast<Micros>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::atomic<uint64_t>& sink_;
  std::chrono::steady_clock::time_point start_;
};

// ExtenderArgs as one request carries them: read by the fast reader when it
// takes the body (extender_wire.h), else parsed in full. Not movable: `pod`
// and `names` may point into the object itself.
struct Args {
  Args() = default;
  Args(const Args&) = delete;
  Args& operator=(const Args&) = delete;

  Json tree;                       // the whole body, when parsed in full
  Json pod_tree;                   // the Pod, when read fast
  const Json* pod = nullptr;       // the Pod member; nullptr when absent
  std::vector<std::string> owned;  // names taken from Nodes.items
  std::vector<std::string_view> names;
  bool node_list = false;  // the names came from Nodes: answer with Node objects
};

// Reads the body; an error is the 400 answer's message.
Status ReadArgs(std::string_view body, Args& args) {
  wire::ScannedArgs scanned;
  if (wire::ScanExtenderArgs(body, scanned)) {
    bool pod_ok = true;
    if (!scanned.pod.empty()) {
      args.pod_tree =
          Json::parse(scanned.pod.begin(), scanned.pod.end(), nullptr, /*allow_exceptions=*/false);
      pod_ok = !args.pod_tree.is_discarded();
    }
    if (pod_ok) {
      args.pod = scanned.pod.empty() ? nullptr : &args.pod_tree;
      args.names = std::move(scanned.node_names);
      return Status::Ok();
    }
  }
  args.tree = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (args.tree.is_discarded()) return Error{"request body is not valid JSON"};
  if (!args.tree.is_object()) return Error{"request body is not an ExtenderArgs object"};
  if (auto pod = args.tree.find("Pod"); pod != args.tree.end()) args.pod = &*pod;
  auto nn = args.tree.find("NodeNames");
  if (nn != args.tree.end() && nn->is_array()) {
    for (const Json& n : *nn) {
      if (!n.is_string()) return Error{"NodeNames must be an array of strings"};
      args.names.push_back(n.get_ref<const std::string&>());
    }
    return Status::Ok();
  }
  auto nodes = args.tree.find("Nodes");
  if (nodes != args.tree.end() && nodes->is_object() && nodes->contains("items") &&
      (*nodes)["items"].is_array()) {
    for (const Json& n : (*nodes)["items"]) {
      if (n.is_object() && n.contains("metadata") && n["metadata"].is_object()) {
        args.owned.push_back(n["metadata"].value("name", ""));
      }
    }
    args.names.assign(args.owned.begin(), args.owned.end());
    args.node_list = true;
    return Status::Ok();
  }
  return Error{"ExtenderArgs carries neither NodeNames nor Nodes"};
}

Json FilterResultJson(const std::string& error) {
  return {{"Nodes", nullptr},
          {"NodeNames", nullptr},
          {"FailedNodes", Json::object()},
          {"FailedAndUnresolvableNodes", Json::object()},
          {"Error", error}};
}

// Error answers may quote request bytes: never throw on invalid UTF-8.
std::string DumpLenient(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// The one policy that learns; served by the WorkloadLearner.
constexpr std::string_view kLearningPolicy = "tessera";

// What a pod is counted under: its UID (kube-scheduler's requests carry it);
// namespace/name for a pod object without one (hand-written requests).
std::string ArrivalKey(const Json& pod) {
  if (auto meta = pod.find("metadata"); meta != pod.end() && meta->is_object()) {
    if (auto uid = meta->find("uid"); uid != meta->end() && uid->is_string() && !uid->empty()) {
      return uid->get<std::string>();
    }
  }
  return PodKey(pod);
}

bool AsksForGpus(const core::PodRequest& request) {
  return !request.containers.empty() || !request.init_containers.empty();
}

// filter's answer for one pod, at debug: a summary, then each node that does
// not fit and why.
void LogVerdicts(const Json& pod, const std::vector<std::string_view>& names,
                 const ClusterState::NodeVerdicts& verdicts) {
  const std::string key = PodKey(pod);
  log::Debug("filter",
             {{"pod", key}, {"feasible", verdicts.feasible.size()}, {"failed", verdicts.failed.size()}});
  for (const auto& [i, reason] : verdicts.failed) {
    log::Debug("node does not fit", {{"pod", key}, {"node", names[i]}, {"reason", reason}});
  }
}

// "app:GPU-…:2000MiB:30%,GPU-…:2000MiB:30%;init:GPU-…:0MiB:0%" (no spaces:
// one log field); a MIG instance adds its profile and start: "GPU-…:9728MiB:0%:1g.10gb@6".
std::string DescribeSlices(const core::PodAllocation& allocation) {
  std::string out;
  for (const core::ContainerAllocation& c : allocation.containers) {
    if (!out.empty()) out += ';';
    out += c.container;
    char sep = ':';
    for (const core::DeviceSlice& d : c.devices) {
      out += sep + d.uuid + ":" + std::to_string(d.memory_mib) + "MiB:" + std::to_string(d.cores) + "%";
      if (!d.mig_profile.empty()) out += ":" + d.mig_profile + "@" + std::to_string(d.mig_start);
      sep = ',';
    }
  }
  return out;
}

}  // namespace

Extender::Extender(ExtenderDeps deps) : deps_(std::move(deps)) {
  for (const std::string& name : core::PolicyNames()) {
    if (name == kLearningPolicy) continue;
    auto p = core::MakePolicy(name);
    if (p.ok()) policies_[name] = std::move(p).value();
  }
}

std::string Extender::RefusalBeforeReady() {
  std::string reason = deps_.not_ready ? deps_.not_ready() : "";
  if (reason.empty()) {
    if (refusing_.load(std::memory_order_relaxed) && refusing_.exchange(false)) {
      log::Info("ready: deciding again", {{"identity", deps_.config.identity}});
    }
    return reason;
  }
  ++counters_.not_ready;
  if (!refusing_.exchange(true)) {
    log::Warn("not ready: refusing every filter, prioritize and bind until the view is complete",
              {{"identity", deps_.config.identity}, {"reason", reason}});
  } else {
    log::Debug("not ready: refused", {{"reason", reason}});
  }
  return "tessera-scheduler " + deps_.config.identity + " is not ready to decide: " + reason +
         "; retry when it is (kube-scheduler retries this pod)";
}

Result<std::shared_ptr<const core::Policy>> Extender::NodePolicy(const std::string& value) const {
  TESSERA_ASSIGN_OR_RETURN(const std::string name, CoreNodePolicyName(value));
  if (name == kLearningPolicy) return std::shared_ptr<const core::Policy>(learner_.Current());
  auto it = policies_.find(name);
  if (it == policies_.end() || it->second->picks_uniformly()) {
    return Error{"'" + value + "' is not a node policy (" + std::string(kNodePolicyValues) + ")"};
  }
  return it->second;
}

void Extender::DropStaleScores() {
  deps_.state->DropScoresOf(kLearningPolicy, learner_.Current()->epoch());
}

bool Extender::Observe(const Json& pod, const core::PodRequest& request) {
  if (!learner_.Observe(ArrivalKey(pod), request).relearned) return false;
  DropStaleScores();
  return true;
}

size_t Extender::ObserveListedPods(const std::vector<Json>& pods) {
  return ObserveListedPods([&pods](const std::function<void(const Json&)>& visit) {
    for (const Json& pod : pods) visit(pod);
  });
}

std::optional<Extender::Listed> Extender::ListedArrival(const PodDigest& digest) const {
  const Json& pod = digest.pod();
  if (!pod.is_object() || digest.terminal()) return std::nullopt;
  const bool placed = !digest.allocation_text().empty();
  std::string scheduler;
  if (auto spec = pod.find("spec"); spec != pod.end() && spec->is_object()) {
    scheduler = spec->value("schedulerName", "");
  }
  if (!placed && scheduler != deps_.config.scheduler_name)
    return std::nullopt;                          // never sent to this extender
  if (WantsDynamicMig(pod)) return std::nullopt;  // not part of the vGPU workload mix
  const Result<core::PodRequest>& request = digest.request();
  if (!request.ok() || !AsksForGpus(*request) || !PoliciesFor(pod).ok())
    return std::nullopt;  // filter refuses it
  std::string created;
  if (auto meta = pod.find("metadata"); meta != pod.end() && meta->is_object()) {
    if (auto t = meta->find("creationTimestamp"); t != meta->end() && t->is_string()) created = *t;
  }
  return Listed{std::move(created), PodKey(pod), {ArrivalKey(pod), core::ShapeOf(*request)}};
}

size_t Extender::ObserveListed(std::vector<Listed> listed) {
  std::sort(listed.begin(), listed.end(), [](const Listed& a, const Listed& b) {
    return std::tie(a.created, a.key) < std::tie(b.created, b.key);
  });
  std::vector<WorkloadLearner::ShapedArrival> arrivals;
  arrivals.reserve(listed.size());
  for (Listed& l : listed) arrivals.push_back(std::move(l.arrival));
  const WorkloadLearner::Observation o = learner_.ObserveAllShapes(arrivals);
  if (o.relearned) DropStaleScores();
  return o.counted;
}

size_t Extender::ObserveListedPods(
    const std::function<void(const std::function<void(const Json&)>&)>& for_each_pod) {
  std::vector<Listed> listed;
  for_each_pod([&](const Json& pod) {
    if (auto l = ListedArrival(PodDigest(pod, deps_.config.resources))) listed.push_back(std::move(*l));
  });
  return ObserveListed(std::move(listed));
}

void Extender::NoteListedPod(const PodDigest& pod) {
  if (!noting_.load(std::memory_order_acquire)) return;
  std::optional<Listed> listed = ListedArrival(pod);
  const std::string key = PodKey(pod.pod());
  std::lock_guard lock(noted_mu_);
  if (noting_.load(std::memory_order_relaxed)) noted_.Note(key, listed ? &*listed : nullptr);
}

void Extender::DropListedPod(const Json& pod) {
  if (!noting_.load(std::memory_order_acquire)) return;
  const std::string key = PodKey(pod);
  std::lock_guard lock(noted_mu_);
  if (noting_.load(std::memory_order_relaxed)) noted_.Note(key, nullptr);
}

size_t Extender::ObserveNotedPods() {
  std::vector<Listed> listed;
  {
    std::lock_guard lock(noted_mu_);
    if (!noting_.exchange(false)) return 0;
    listed = noted_.Take();
  }
  return ObserveListed(std::move(listed));
}

void Extender::NotedPods::Note(std::string_view key, const Listed* listed) {
  Record r;
  r.at = text_.size();
  r.key_length = static_cast<uint32_t>(key.size());
  text_.append(key);
  if (listed) {
    r.counted = true;
    r.created_length = static_cast<uint32_t>(listed->created.size());
    r.uid_length = static_cast<uint32_t>(listed->arrival.uid.size());
    text_.append(listed->created).append(listed->arrival.uid);
    r.shape = listed->arrival.shape;
  }
  records_.push_back(std::move(r));
  if (records_.size() >= compact_at_) {
    Compact();
    compact_at_ = std::max<size_t>(4096, 2 * records_.size());
  }
}

void Extender::NotedPods::Compact() {
  // By key, later records after earlier ones: the last of each run wins.
  std::vector<uint32_t> order(records_.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return KeyOf(records_[a]) < KeyOf(records_[b]); });
  std::string text;
  std::vector<Record> kept;
  for (size_t i = 0; i < order.size(); ++i) {
    const Record& r = records_[order[i]];
    if (i + 1 < order.size() && KeyOf(records_[order[i + 1]]) == KeyOf(r)) continue;  // a later one follows
    if (!r.counted) continue;
    Record moved = r;
    moved.at = text.size();
    text.append(text_, r.at, size_t{r.key_length} + r.created_length + r.uid_length);
    kept.push_back(std::move(moved));
  }
  text_ = std::move(text);
  records_ = std::move(kept);
}

std::vector<Extender::Listed> Extender::NotedPods::Take() {
  Compact();
  std::vector<Listed> out;
  out.reserve(records_.size());
  for (Record& r : records_) {
    const std::string_view all = std::string_view(text_).substr(r.at);
    Listed l;
    l.key = std::string(all.substr(0, r.key_length));
    l.created = std::string(all.substr(r.key_length, r.created_length));
    l.arrival.uid = std::string(all.substr(r.key_length + r.created_length, r.uid_length));
    l.arrival.shape = std::move(r.shape);
    out.push_back(std::move(l));
  }
  std::string().swap(text_);
  std::vector<Record>().swap(records_);
  return out;
}

void Extender::ForgetPod(const Json& pod) {
  learner_.Forget(ArrivalKey(pod));
}

Result<Extender::Policies> Extender::PoliciesFor(const Json& pod) const {
  // The first of the pod's annotations `keys` that is set, else the configured
  // value; `source` says which it was.
  auto choose = [&](std::string_view tessera_key, std::string_view hami_key, const std::string& configured,
                    const char* config_key, std::string& source) {
    for (std::string_view key : {tessera_key, hami_key}) {
      if (std::string v = kube::AnnotationOf(pod, key); !v.empty()) {
        source = "pod annotation " + std::string(key);
        return v;
      }
    }
    source = config_key;
    return configured;
  };
  Policies out;
  const std::string node_value = choose(kNodePolicyAnnotation, kHamiNodePolicyAnnotation,
                                        deps_.config.node_policy, "policy.node", out.node_source);
  TESSERA_ASSIGN_OR_RETURN_WRAP(out.node, NodePolicy(node_value), out.node_source);
  const std::string gpu_value = choose(kGpuPolicyAnnotation, kHamiGpuPolicyAnnotation,
                                       deps_.config.gpu_policy, "policy.gpu", out.gpu_source);
  TESSERA_ASSIGN_OR_RETURN_WRAP(out.gpu, GpuOrderOf(gpu_value), out.gpu_source);
  if (out.gpu) out.node = core::WithGpuOrder(std::move(out.node), *out.gpu);
  return out;
}

std::pair<int, std::string> Extender::FilterUnchecked(std::string_view body) {
  auto fail = [&](int code, const std::string& message) {
    ++counters_.filter_errors;
    log::Info("filter refused the request", {{"reason", message}});
    return std::pair<int, std::string>{code, DumpLenient(FilterResultJson(message))};
  };
  Args args;
  if (Status s = ReadArgs(body, args); !s) return fail(400, s.error().message);
  const Json no_pod = Json::object();
  const Json& pod = args.pod ? *args.pod : no_pod;
  if (!args.pod || !pod.is_object()) return fail(200, "pod " + PodKey(pod) + ": ExtenderArgs carries no Pod");
  auto request = core::DerivePodRequest(pod, deps_.config.resources);
  if (!request.ok()) return fail(200, "pod " + PodKey(pod) + ": " + request.error().message);
  if (auto policies = PoliciesFor(pod); !policies.ok()) {
    return fail(200, "pod " + PodKey(pod) + ": " + policies.error().message);
  }
  ClusterState::NodeVerdicts verdicts;
  if (!AsksForGpus(*request)) {
    deps_.state->FirstListings(args.names, verdicts.feasible);  // asks for no GPU: every node passes
  } else if (WantsDynamicMig(pod)) {
    // A MIG instance per device, on mig-dynamic GPUs only; not a vGPU arrival.
    deps_.state->Filter(*request, args.names, verdicts, Sharing::kDynamicMig);
  } else {
    Observe(pod, *request);  // an arrival, counted once however often it is filtered
    deps_.state->Filter(*request, args.names, verdicts);
  }
  // A pod whose earlier bind's outcome is unknown keeps its reservation until
  // that settles (ClusterState::Reserve): its GPUs there are its own, and a
  // bind elsewhere is refused, so that node is the one it fits.
  if (AsksForGpus(*request)) {
    if (auto held = deps_.state->ReservedNode(PodKey(pod)); held) {
      std::vector<uint32_t> first;
      deps_.state->FirstListings(args.names, first);
      verdicts = {};
      for (uint32_t i : first) {
        if (args.names[i] == *held) {
          verdicts.feasible.push_back(i);
        } else {
          verdicts.failed.emplace_back(i, "pod " + PodKey(pod) + " holds GPUs on node " + *held +
                                              " for a bind whose outcome is not known yet");
        }
      }
    }
  }
  // GPU room held for pods nominated after preemption (preemption.h) is not
  // given to pods of lower or equal priority.
  if (AsksForGpus(*request)) {
    deps_.state->ApplyHolds(PodKey(pod), PodPriority(pod), *request, args.names, verdicts);
  }
  // Fits nowhere: GPU-level preemption may make room (gpu_preemptor.h).
  if (verdicts.feasible.empty() && !verdicts.failed.empty() && deps_.on_unschedulable &&
      AsksForGpus(*request) && !WantsDynamicMig(pod)) {
    deps_.on_unschedulable(pod, *request, std::vector<std::string>(args.names.begin(), args.names.end()));
  }
  if (log::Enabled(log::Level::kDebug)) LogVerdicts(pod, args.names, verdicts);
  if (!args.node_list) return {200, wire::FilterResultText(args.names, verdicts.feasible, verdicts.failed)};
  // A NodeList came in: the answer carries the passing Node objects.
  Json result = FilterResultJson("");
  for (const auto& [i, reason] : verdicts.failed) result["FailedNodes"][std::string(args.names[i])] = reason;
  std::set<std::string_view> pass;
  for (uint32_t i : verdicts.feasible) pass.insert(args.names[i]);
  const Json& list = args.tree["Nodes"];
  Json items = Json::array();
  for (const Json& n : list["items"]) {
    // erase: a node listed twice is answered once
    if (n.is_object() && n.contains("metadata") && n["metadata"].is_object() &&
        pass.erase(n["metadata"].value("name", ""))) {
      items.push_back(n);
    }
  }
  result["Nodes"] = list;
  result["Nodes"]["items"] = std::move(items);
  return {200, DumpLenient(result)};
}

std::pair<int, std::string> Extender::PrioritizeUnchecked(std::string_view body) {
  Args args;
  if (!ReadArgs(body, args)) return {400, "[]"};
  ClusterState::NodeScores scores;
  bool scored = false;
  if (args.pod && args.pod->is_object()) {
    auto request = core::DerivePodRequest(*args.pod, deps_.config.resources);
    auto policies = request.ok() ? PoliciesFor(*args.pod) : Result<Policies>(request.error());
    if (request.ok() && policies.ok() && AsksForGpus(*request) && WantsDynamicMig(*args.pod)) {
      deps_.state->PrioritizeDynamicMig(*request, args.names, scores);
      scored = true;
    } else if (request.ok() && policies.ok() && AsksForGpus(*request)) {
      // Filter counted it already, unless it went to another replica; if
      // this pod made the mix relearn, it is scored with the new one.
      if (Observe(*args.pod, *request)) policies = PoliciesFor(*args.pod);
      deps_.state->Prioritize(*request, *policies->node, args.names, scores);
      scored = true;
    }
  }
  if (!scored) {
    // A pod filter refused (malformed request, unknown policy) or one asking
    // for no GPU: every node scores the same.
    deps_.state->FirstListings(args.names, scores.positions);
    scores.scores.assign(scores.positions.size(), 0);
  }
  return {200, wire::HostPriorityListText(args.names, scores.positions, scores.scores)};
}

std::pair<int, Json> Extender::BindUnchecked(const Json& args) {
  ++counters_.bind_requests;
  Timer timer(counters_.bind_micros);
  auto answer_error = [&](int code, const std::string& message) {
    ++counters_.bind_errors;
    return std::pair<int, Json>{code, Json{{"Error", message}}};
  };
  auto fail = [&](int code, const std::string& message) {
    auto text = [&](const char* field) {
      auto it = args.find(field);
      return it != args.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    log::Warn(
        "bind refused",
        {{"pod", text("PodNamespace") + "/" + text("PodName")}, {"node", text("Node")}, {"reason", message}});
    return answer_error(code, message);
  };
  if (!args.is_object()) return fail(400, "request body is not an ExtenderBindingArgs object");
  const std::string ns = args.value("PodNamespace", "");
  const std::string name = args.value("PodName", "");
  const std::string uid = args.value("PodUID", "");
  const std::string node = args.value("Node", "");
  if (name.empty() || node.empty()) return fail(400, "ExtenderBindingArgs needs PodName and Node");
  const std::string key = ns + "/" + name;
  // Logged once per not-ready episode (RefusalBeforeReady), not per bind.
  if (std::string refusal = RefusalBeforeReady(); !refusal.empty())
    return answer_error(200, "bind " + key + ": " + refusal);
  if (deps_.is_leader && !deps_.is_leader()) {
    ++counters_.bind_not_leader;
    const std::string& me = deps_.config.identity;
    std::string leader = deps_.leader_identity ? deps_.leader_identity() : "";
    std::string why;
    if (leader == me) {
      // The Lease names this process (from before a restart, or a renewal
      // that failed): it is not acting on it until it renews.
      why = " (the lease names it, but it has not renewed the lease within the renew deadline)";
    } else if (!leader.empty()) {
      why = " (the leader is " + leader + ")";
    }
    return fail(200,
                "tessera-scheduler " + me + " is not the leader" + why + "; only the leader binds, retry");
  }
  if (std::string held = deps_.bind_held ? deps_.bind_held() : ""; !held.empty()) {
    ++counters_.bind_settling;  // logged once per takeover by the scheduler, not per bind
    return answer_error(200, "bind " + key + ": " + held + "; retry");
  }
  auto pod = deps_.get_pod(ns, name);
  if (!pod.ok()) return fail(200, "bind " + key + ": cannot read the pod: " + pod.error().message);
  const std::string pod_uid = pod->contains("metadata") ? (*pod)["metadata"].value("uid", "") : "";
  if (!uid.empty() && !pod_uid.empty() && uid != pod_uid) {
    return fail(200, "bind " + key + ": pod UID is " + pod_uid + ", the scheduler asked for " + uid +
                         " (the pod was recreated)");
  }
  if (pod->contains("spec") && (*pod)["spec"].is_object()) {
    const std::string bound_to = (*pod)["spec"].value("nodeName", "");
    if (!bound_to.empty()) return fail(200, "bind " + key + ": the pod is already bound to node " + bound_to);
  }
  auto request = core::DerivePodRequest(*pod, deps_.config.resources);
  if (!request.ok()) return fail(200, "bind " + key + ": " + request.error().message);
  std::map<std::string, std::string> annotations;
  const bool gpu_pod = AsksForGpus(*request);
  std::string gpus = "none";  // for the log: container:uuid:MiB:cores%,...;container:...
  std::string why = "the pod asks for no GPU";
  if (gpu_pod) {
    auto policies = PoliciesFor(*pod);
    if (!policies.ok()) return fail(200, "bind " + key + ": " + policies.error().message);
    const bool mig = WantsDynamicMig(*pod);
    // The placement the policy chooses on this node: prioritize's cached
    // candidate while the node is unchanged, else evaluated anew.
    auto allocation =
        deps_.state->Reserve(key, *request, node, policies->node.get(), deps_.config.reservation_timeout,
                             mig ? Sharing::kDynamicMig : Sharing::kVgpu);
    if (!allocation.ok()) return fail(200, "bind " + key + ": " + allocation.error().message);
    // Room held for a pod nominated after preemption stays its own: a
    // placement that leaves a nominee of at least this priority without room
    // is given back (the nominee's own bind ends its hold).
    if (std::string blocked; !mig) {
      (void)deps_.state->ViewFor(key, PodPriority(*pod), node, &blocked);
      if (!blocked.empty()) {
        deps_.state->Unreserve(key);
        return fail(200, "bind " + key + ": " + blocked + "; retry");
      }
      deps_.state->ReleaseHold(key);
    }
    auto text = core::EncodeAllocation(*allocation);
    if (!text.ok()) {
      deps_.state->Unreserve(key);
      return fail(500, "bind " + key + ": " + text.error().message);
    }
    annotations[std::string(core::kAllocationAnnotation)] = *text;
    gpus = DescribeSlices(*allocation);
    why = "policy " + std::string(policies->node->name()) + ": node by " + policies->node_source +
          ", GPUs by " +
          (policies->gpu ? policies->gpu_source + " " + std::string(core::GpuOrderName(*policies->gpu))
                         : "the node policy (" + policies->gpu_source + " unset)");
    if (mig) {
      why = "dynamic MIG (" + std::string(kVgpuModeAnnotation) +
            "): the fullest mig-dynamic GPU with room, placement by core/mig's Placer";
    }
    // Per container, the GPUs the runtime should expose (wired by the webhook
    // into NVIDIA_VISIBLE_DEVICES through the Downward API). Not for MIG
    // instances: their MIG UUIDs exist only once tessera-node has created
    // them, and the parent GPU's UUID would expose the whole GPU.
    for (const core::ContainerAllocation& c : allocation->containers) {
      if (mig) break;
      const char* list = c.init ? "initContainers" : "containers";
      const Json& spec = (*pod)["spec"];
      if (!spec.contains(list) || !spec[list].is_array()) continue;
      for (size_t i = 0; i < spec[list].size(); ++i) {
        if (!spec[list][i].is_object() || spec[list][i].value("name", "") != c.container) continue;
        std::string uuids;
        std::string pinned;  // MPS shares: "<ordinal>=<MiB>M", the ordinal the container's CUDA sees
        int threads = 0;
        for (size_t k = 0; k < c.devices.size(); ++k) {
          const core::DeviceSlice& d = c.devices[k];
          uuids += (uuids.empty() ? "" : ",") + d.uuid;
          if (!d.mps) continue;
          pinned +=
              (pinned.empty() ? "" : ",") + std::to_string(k) + "=" + std::to_string(d.memory_mib) + "M";
          threads = std::max(threads, d.cores);
        }
        annotations[VisibleDevicesAnnotation(c.init, i)] = uuids;
        // The container's own limits, mounted into it alone by the webhook.
        if (auto limits = core::EncodeContainerLimits(*allocation, c.container); limits.ok())
          annotations[LimitsAnnotation(c.init, i)] = *limits;
        if (!pinned.empty()) {
          annotations[MpsThreadPercentageAnnotation(c.init, i)] = std::to_string(threads);
          annotations[MpsPinnedMemoryAnnotation(c.init, i)] = pinned;
        }
      }
    }
  }
  kube::ApiStatus bound = deps_.bind(ns, name, node, annotations);
  if (!bound.ok()) {
    const kube::ApiError& e = bound.error();
    // A 409 says the pod is bound already, perhaps by this pod's earlier
    // Binding whose answer was lost, holding this very reservation: the
    // informer settles it (or it expires). Other refusals give it back.
    const bool refused = e.http_status >= 400 && e.http_status < 500 && e.http_status != 409;
    if (gpu_pod && refused) deps_.state->Unreserve(key);
    return fail(200, "bind " + key + " to " + node + ": " + bound.error().message);
  }
  ++counters_.binds;
  log::Info("bound pod", {{"pod", key}, {"node", node}, {"gpus", gpus}, {"why", why}});
  // The reservation stays until the pod informer shows the annotation.
  return {200, Json{{"Error", ""}}};
}

// Arguments shaped unlike kube-scheduler's (a number where a string belongs)
// make nlohmann::json throw; the caller gets an answer with the reason instead.
std::pair<int, std::string> Extender::FilterBody(std::string_view body) {
  ++counters_.filter_requests;
  Timer timer(counters_.filter_micros);
  if (std::string refusal = RefusalBeforeReady(); !refusal.empty()) {
    ++counters_.filter_errors;
    return {200, DumpLenient(FilterResultJson(refusal))};
  }
  try {
    return FilterUnchecked(body);
  } catch (const std::exception& e) {
    ++counters_.filter_errors;
    return {400, DumpLenient(FilterResultJson(std::string("malformed ExtenderArgs: ") + e.what()))};
  }
}

std::pair<int, std::string> Extender::PrioritizeBody(std::string_view body) {
  ++counters_.prioritize_requests;
  Timer timer(counters_.prioritize_micros);
  // HostPriorityList has no error member: a status other than 200 is how an
  // extender says it failed (kube-scheduler then scores without it, and bind
  // refuses in turn).
  if (!RefusalBeforeReady().empty()) return {503, "[]"};
  try {
    return PrioritizeUnchecked(body);
  } catch (const std::exception&) {
    return {400, "[]"};
  }
}

std::pair<int, std::string> Extender::PreemptBody(std::string_view body) {
  ++counters_.preempt_requests;
  // ExtenderPreemptionResult has no error member: a status other than 200 is
  // how an extender says it failed (kube-scheduler gives up this attempt).
  if (std::string refusal = RefusalBeforeReady(); !refusal.empty()) {
    return {503, Json{{"Error", refusal}}.dump(-1, ' ', false, Json::error_handler_t::replace)};
  }
  PreemptionDeps deps;
  deps.state = deps_.state;
  deps.resources = deps_.config.resources;
  deps.get_pod = deps_.get_pod;
  deps.list_disruption_budgets = deps_.list_disruption_budgets;
  try {
    return ProcessPreemption(deps, body);
  } catch (const std::exception& e) {
    return {400, Json{{"Error", std::string("malformed ExtenderPreemptionArgs: ") + e.what()}}.dump(
                     -1, ' ', false, Json::error_handler_t::replace)};
  }
}

std::pair<int, Json> Extender::Filter(const Json& args) {
  std::string body;
  try {
    body = args.dump();
  } catch (const std::exception& e) {  // strings that are not UTF-8
    ++counters_.filter_requests;
    ++counters_.filter_errors;
    return {400, FilterResultJson(std::string("malformed ExtenderArgs: ") + e.what())};
  }
  auto [status, answer] = FilterBody(body);
  return {status, Json::parse(answer)};
}

std::pair<int, Json> Extender::Prioritize(const Json& args) {
  std::string body;
  try {
    body = args.dump();
  } catch (const std::exception&) {
    ++counters_.prioritize_requests;
    return {400, Json::array()};
  }
  auto [status, answer] = PrioritizeBody(body);
  return {status, Json::parse(answer)};
}

std::pair<int, Json> Extender::Bind(const Json& args) {
  try {
    return BindUnchecked(args);
  } catch (const std::exception& e) {
    ++counters_.bind_errors;
    return {400, Json{{"Error", std::string("malformed ExtenderBindingArgs: ") + e.what()}}};
  }
}

}  // namespace tessera::scheduler
