#include "scheduler/projection.h"

#include <string>

#include "base/log.h"
#include "core/inventory_codec.h"

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;

// Moves the members `keys` of `from` (an object) into a new object.
template <size_t N>
Json Keep(Json& from, const std::string_view (&keys)[N]) {
  Json out = Json::object();
  if (!from.is_object()) return out;
  for (std::string_view key : keys) {
    if (auto it = from.find(key); it != from.end()) out[std::string(key)] = std::move(*it);
  }
  return out;
}

bool HasPrefix(const std::string& key, std::initializer_list<std::string_view> prefixes) {
  for (std::string_view p : prefixes) {
    if (key.starts_with(p)) return true;
  }
  return false;
}

// Keeps the annotations whose key starts with one of `prefixes`.
void KeepAnnotations(Json& meta, Json& from_meta, std::initializer_list<std::string_view> prefixes) {
  auto it = from_meta.find("annotations");
  if (it == from_meta.end() || !it->is_object()) return;
  Json kept = Json::object();
  for (auto& [key, value] : it->items()) {
    if (HasPrefix(key, prefixes)) kept[key] = std::move(value);
  }
  if (!kept.empty()) meta["annotations"] = std::move(kept);
}

// Each container's name and resources.
Json Containers(Json& list) {
  Json out = Json::array();
  if (!list.is_array()) return out;
  for (Json& c : list) {
    static constexpr std::string_view kKeys[] = {"name", "resources"};
    out.push_back(Keep(c, kKeys));
  }
  return out;
}

}  // namespace

void ProjectPod(Json& pod) {
  if (!pod.is_object()) return;
  Json out = Json::object();
  if (auto meta = pod.find("metadata"); meta != pod.end() && meta->is_object()) {
    static constexpr std::string_view kKeys[] = {
        "name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "labels"};
    Json m = Keep(*meta, kKeys);
    KeepAnnotations(m, *meta, {"tessera.io/", "nvidia.com/", "hami.io/"});
    out["metadata"] = std::move(m);
  }
  if (auto spec = pod.find("spec"); spec != pod.end() && spec->is_object()) {
    static constexpr std::string_view kKeys[] = {"nodeName", "schedulerName", "priority"};
    Json s = Keep(*spec, kKeys);
    for (const char* list : {"containers", "initContainers"}) {
      if (auto it = spec->find(list); it != spec->end()) s[list] = Containers(*it);
    }
    out["spec"] = std::move(s);
  }
  if (auto status = pod.find("status"); status != pod.end() && status->is_object()) {
    Json s = Json::object();
    if (auto phase = status->find("phase"); phase != status->end()) s["phase"] = std::move(*phase);
    if (auto n = status->find("nominatedNodeName"); n != status->end())
      s["nominatedNodeName"] = std::move(*n);
    if (auto conditions = status->find("conditions"); conditions != status->end() && conditions->is_array()) {
      for (Json& c : *conditions) {
        if (c.is_object() && c.value("type", "") == "PodScheduled" && c.value("status", "") == "False") {
          static constexpr std::string_view kKeys[] = {"type", "status", "reason", "message"};
          s["conditions"] = Json::array({Keep(c, kKeys)});
        }
      }
    }
    out["status"] = std::move(s);
  }
  pod = std::move(out);
}

void ProjectNode(Json& node) {
  if (!node.is_object()) return;
  Json out = Json::object();
  if (auto meta = node.find("metadata"); meta != node.end() && meta->is_object()) {
    // (Not the uid: no reader wants it.)
    static constexpr std::string_view kKeys[] = {"name", "resourceVersion", "labels"};
    Json m = Keep(*meta, kKeys);
    KeepAnnotations(m, *meta, {"tessera.io/"});
    if (auto a = m.find("annotations"); a != m.end()) {
      auto inv = a->find(std::string(core::kInventoryAnnotation));
      if (inv != a->end() && inv->is_string() &&
          inv->get_ref<const std::string&>().size() > kMaxInventoryBytes) {
        const size_t bytes = inv->get_ref<const std::string&>().size();
        a->erase(inv);
        (*a)[std::string(kRefusedInventoryAnnotation)] = std::to_string(bytes);
        log::Warn("node inventory annotation refused: longer than the scheduler reads",
                  {{"node", m.value("name", "")},
                   {"annotation", std::string(core::kInventoryAnnotation)},
                   {"bytes", bytes},
                   {"limit", kMaxInventoryBytes}});
      }
    }
    out["metadata"] = std::move(m);
  }
  if (auto spec = node.find("spec"); spec != node.end() && spec->is_object()) {
    static constexpr std::string_view kKeys[] = {"taints", "unschedulable"};
    out["spec"] = Keep(*spec, kKeys);
  }
  if (auto status = node.find("status"); status != node.end() && status->is_object()) {
    static constexpr std::string_view kKeys[] = {"addresses"};
    out["status"] = Keep(*status, kKeys);
  }
  node = std::move(out);
}

std::shared_ptr<const kube::FieldSelection> PodFields() {
  static const auto fields = [] {
    auto s = std::make_shared<kube::FieldSelection>();
    kube::FieldSelection& meta = s->Member("metadata");
    meta.Members(
        {"name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "labels"});
    meta.Member("annotations").member_prefixes = {"tessera.io/", "nvidia.com/", "hami.io/"};
    kube::FieldSelection& spec = s->Member("spec");
    spec.Members({"nodeName", "schedulerName", "priority"});
    for (const char* list : {"containers", "initContainers"})
      spec.Member(list).Members({"name", "resources"});
    kube::FieldSelection& status = s->Member("status");
    status.Members({"phase", "nominatedNodeName"});
    status.Member("conditions").Members({"type", "status", "reason", "message"});
    return std::shared_ptr<const kube::FieldSelection>(std::move(s));
  }();
  return fields;
}

std::shared_ptr<const kube::FieldSelection> NodeFields() {
  static const auto fields = [] {
    auto s = std::make_shared<kube::FieldSelection>();
    kube::FieldSelection& meta = s->Member("metadata");
    meta.Members({"name", "resourceVersion", "labels"});
    meta.Member("annotations").member_prefixes = {"tessera.io/"};
    s->Member("spec").Members({"taints", "unschedulable"});
    s->Member("status").Members({"addresses"});
    return std::shared_ptr<const kube::FieldSelection>(std::move(s));
  }();
  return fields;
}

}  // namespace tessera::scheduler
