#include "scheduler/extender.h"

#include <chrono>
#include <set>

#include "core/allocation_codec.h"
#include "core/pod_request.h"
#include "scheduler/webhook.h"

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;
using Micros = std::chrono::microseconds;

std::string Annotation(const Json& pod, std::string_view key) {
  const Json* ann = nullptr;
  if (pod.contains("metadata") && pod["metadata"].is_object() && pod["metadata"].contains("annotations") &&
      pod["metadata"]["annotations"].is_object()) {
    ann = &pod["metadata"]["annotations"];
  }
  if (!ann) return "";
  auto v = ann->find(std::string(key));
  return v != ann->end() && v->is_string() ? v->get<std::string>() : "";
}

class Timer {
 public:
  explicit Timer(std::atomic<uint64_t>& sink) : sink_(sink), start_(std::chrono::steady_clock::now()) {}
  ~Timer() { sink_ += std::chrono::duration_cast<Micros>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::atomic<uint64_t>& sink_;
  std::chrono::steady_clock::time_point start_;
};

// The node names of ExtenderArgs: NodeNames when given, else Nodes.items.
Result<std::vector<std::string>> NodeNamesOf(const Json& args) {
  std::vector<std::string> names;
  auto nn = args.find("NodeNames");
  if (nn != args.end() && nn->is_array()) {
    for (const Json& n : *nn) {
      if (!n.is_string()) return Error{"NodeNames must be an array of strings"};
      names.push_back(n.get<std::string>());
    }
    return names;
  }
  auto nodes = args.find("Nodes");
  if (nodes != args.end() && nodes->is_object() && nodes->contains("items") && (*nodes)["items"].is_array()) {
    for (const Json& n : (*nodes)["items"]) {
      if (n.is_object() && n.contains("metadata") && n["metadata"].is_object()) {
        names.push_back(n["metadata"].value("name", ""));
      }
    }
    return names;
  }
  return Error{"ExtenderArgs carries neither NodeNames nor Nodes"};
}

Result<core::PodRequest> RequestOf(const Json& args, const SchedulerConfig& config) {
  auto pod = args.find("Pod");
  if (pod == args.end() || !pod->is_object()) return Error{"ExtenderArgs carries no Pod"};
  return core::DerivePodRequest(*pod, config.resources);
}

}  // namespace

Extender::Extender(ExtenderDeps deps) : deps_(std::move(deps)) {
  for (const std::string& name : core::PolicyNames()) {
    auto p = core::MakePolicy(name);
    if (p.ok()) policies_[name] = std::move(p).value();
  }
}

Result<const core::Policy*> Extender::NodePolicy(const std::string& value) const {
  std::string name = value;
  if (value == "binpack") name = "node-binpack";
  if (value == "spread") name = "node-spread";
  auto it = policies_.find(name);
  if (it == policies_.end() || it->second->picks_uniformly()) {
    return Error{"'" + value + "' is not a node policy (binpack, spread, tessera, gpu-binpack, gpu-spread)"};
  }
  return it->second.get();
}

Result<Extender::Policies> Extender::PoliciesFor(const Json& pod) const {
  Policies out;
  std::string node_value = deps_.config.node_policy;
  std::string node_source = "policy.node";
  for (auto key : {kNodePolicyAnnotation, kHamiNodePolicyAnnotation}) {
    if (std::string v = Annotation(pod, key); !v.empty()) {
      node_value = v;
      node_source = "pod annotation " + std::string(key);
      break;
    }
  }
  auto node = NodePolicy(node_value);
  if (!node.ok()) return node.error().Wrap(node_source);
  out.node = *node;
  std::string gpu_value = deps_.config.gpu_policy;
  std::string gpu_source = "policy.gpu";
  for (auto key : {kGpuPolicyAnnotation, kHamiGpuPolicyAnnotation}) {
    if (std::string v = Annotation(pod, key); !v.empty()) {
      gpu_value = v;
      gpu_source = "pod annotation " + std::string(key);
      break;
    }
  }
  if (gpu_value == "binpack") {
    out.gpu = core::GpuOrder::kBinpack;
  } else if (gpu_value == "spread") {
    out.gpu = core::GpuOrder::kSpread;
  } else {
    return Error{gpu_source + ": '" + gpu_value + "' is not binpack or spread"};
  }
  return out;
}

std::pair<int, Json> Extender::FilterUnchecked(const Json& args) {
  ++counters_.filter_requests;
  Timer timer(counters_.filter_micros);
  Json result = {{"Nodes", nullptr},
                 {"NodeNames", nullptr},
                 {"FailedNodes", Json::object()},
                 {"FailedAndUnresolvableNodes", Json::object()},
                 {"Error", ""}};
  auto fail = [&](int code, const std::string& message) {
    ++counters_.filter_errors;
    result["Error"] = message;
    return std::pair<int, Json>{code, result};
  };
  if (!args.is_object()) return fail(400, "request body is not an ExtenderArgs object");
  auto names = NodeNamesOf(args);
  if (!names.ok()) return fail(400, names.error().message);
  auto request = RequestOf(args, deps_.config);
  if (!request.ok()) {
    const Json pod = args.contains("Pod") ? args["Pod"] : Json::object();
    return fail(200, "pod " + PodKey(pod) + ": " + request.error().message);
  }
  if (auto policies = PoliciesFor(args["Pod"]); !policies.ok()) {
    return fail(200, "pod " + PodKey(args["Pod"]) + ": " + policies.error().message);
  }
  ClusterState::FilterOutcome outcome;
  if (request->containers.empty() && request->init_containers.empty()) {
    outcome.feasible = *names;  // asks for no GPU: every node passes
  } else {
    outcome = deps_.state->Filter(*request, *names);
  }
  for (auto& [node, reason] : outcome.failed) result["FailedNodes"][node] = reason;
  const bool as_node_list = !args.contains("NodeNames") || !args["NodeNames"].is_array();
  if (as_node_list) {
    std::set<std::string> pass(outcome.feasible.begin(), outcome.feasible.end());
    Json items = Json::array();
    for (const Json& n : args["Nodes"]["items"]) {
      if (n.is_object() && pass.count(n["metadata"].value("name", ""))) items.push_back(n);
    }
    Json list = args["Nodes"];
    list["items"] = std::move(items);
    result["Nodes"] = std::move(list);
  } else {
    result["NodeNames"] = outcome.feasible;
  }
  return {200, result};
}

std::pair<int, Json> Extender::PrioritizeUnchecked(const Json& args) {
  ++counters_.prioritize_requests;
  Timer timer(counters_.prioritize_micros);
  if (!args.is_object()) return {400, Json::array()};
  auto names = NodeNamesOf(args);
  if (!names.ok()) return {400, Json::array()};
  Json list = Json::array();
  auto request = RequestOf(args, deps_.config);
  auto policies = request.ok() ? PoliciesFor(args["Pod"]) : Result<Policies>(request.error());
  if (!request.ok() || !policies.ok() || (request->containers.empty() && request->init_containers.empty())) {
    // Filter already reported the error; here every node scores the same.
    for (const std::string& n : *names) list.push_back({{"Host", n}, {"Score", 0}});
    return {200, list};
  }
  std::vector<int> scores = deps_.state->Prioritize(*request, *policies->node, *names);
  for (size_t i = 0; i < names->size(); ++i) list.push_back({{"Host", (*names)[i]}, {"Score", scores[i]}});
  return {200, list};
}

std::pair<int, Json> Extender::BindUnchecked(const Json& args) {
  ++counters_.bind_requests;
  Timer timer(counters_.bind_micros);
  auto fail = [&](int code, const std::string& message) {
    ++counters_.bind_errors;
    return std::pair<int, Json>{code, Json{{"Error", message}}};
  };
  if (!args.is_object()) return fail(400, "request body is not an ExtenderBindingArgs object");
  const std::string ns = args.value("PodNamespace", "");
  const std::string name = args.value("PodName", "");
  const std::string uid = args.value("PodUID", "");
  const std::string node = args.value("Node", "");
  if (name.empty() || node.empty()) return fail(400, "ExtenderBindingArgs needs PodName and Node");
  const std::string key = ns + "/" + name;
  if (deps_.is_leader && !deps_.is_leader()) {
    ++counters_.bind_not_leader;
    std::string leader = deps_.leader_identity ? deps_.leader_identity() : "";
    return fail(200, "tessera-scheduler " + deps_.config.identity + " is not the leader" +
                         (leader.empty() ? std::string() : " (the leader is " + leader + ")") +
                         "; only the leader binds, retry");
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
  const bool gpu_pod = !request->containers.empty() || !request->init_containers.empty();
  if (gpu_pod) {
    auto policies = PoliciesFor(*pod);
    if (!policies.ok()) return fail(200, "bind " + key + ": " + policies.error().message);
    auto allocation =
        deps_.state->Reserve(key, *request, node, policies->gpu, deps_.config.reservation_timeout);
    if (!allocation.ok()) return fail(200, "bind " + key + ": " + allocation.error().message);
    auto text = core::EncodeAllocation(*allocation);
    if (!text.ok()) {
      deps_.state->Unreserve(key);
      return fail(500, "bind " + key + ": " + text.error().message);
    }
    annotations[std::string(core::kAllocationAnnotation)] = *text;
    // Per container, the GPUs the runtime should expose (wired by the webhook
    // into NVIDIA_VISIBLE_DEVICES through the Downward API).
    for (const core::ContainerAllocation& c : allocation->containers) {
      const char* list = c.init ? "initContainers" : "containers";
      const Json& spec = (*pod)["spec"];
      if (!spec.contains(list) || !spec[list].is_array()) continue;
      for (size_t i = 0; i < spec[list].size(); ++i) {
        if (!spec[list][i].is_object() || spec[list][i].value("name", "") != c.container) continue;
        std::string uuids;
        for (const core::DeviceSlice& d : c.devices) uuids += (uuids.empty() ? "" : ",") + d.uuid;
        annotations[VisibleDevicesAnnotation(c.init, i)] = uuids;
      }
    }
  }
  kube::ApiStatus bound = deps_.bind(ns, name, node, annotations);
  if (!bound.ok()) {
    const kube::ApiError& e = bound.error();
    const bool refused = e.http_status >= 400 && e.http_status < 500;
    if (gpu_pod && refused) deps_.state->Unreserve(key);
    return fail(200, "bind " + key + " to " + node + ": " + bound.error().message);
  }
  ++counters_.binds;
  // The reservation stays until the pod informer shows the annotation.
  return {200, Json{{"Error", ""}}};
}

// Arguments shaped unlike kube-scheduler's (a number where a string belongs)
// make nlohmann::json throw; the caller gets an answer with the reason instead.
std::pair<int, Json> Extender::Filter(const Json& args) {
  try {
    return FilterUnchecked(args);
  } catch (const std::exception& e) {
    ++counters_.filter_errors;
    return {400, Json{{"Nodes", nullptr},
                      {"NodeNames", nullptr},
                      {"FailedNodes", Json::object()},
                      {"FailedAndUnresolvableNodes", Json::object()},
                      {"Error", std::string("malformed ExtenderArgs: ") + e.what()}}};
  }
}

std::pair<int, Json> Extender::Prioritize(const Json& args) {
  try {
    return PrioritizeUnchecked(args);
  } catch (const std::exception&) {
    return {400, Json::array()};
  }
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
