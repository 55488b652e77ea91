#include "scheduler/dashboard/pod_index.h"

#include "core/allocation_codec.h"
#include "core/pod_request.h"
#include "kube/client.h"

namespace tessera::scheduler::dashboard {

using Json = nlohmann::json;

PodIndex::PodIndex(core::ResourceConfig resources) : resources_(std::move(resources)) {}

std::optional<PodRecord> PodIndex::Project(const Json& pod) const {
  return Project(PodDigest(pod, resources_));
}

std::optional<PodRecord> PodIndex::Project(const PodDigest& digest) const {
  const Json& pod = digest.pod();
  if (!pod.is_object() || digest.terminal()) return std::nullopt;
  const std::string& annotation = digest.allocation_text();
  if (annotation.empty() && !core::AsksForTesseraResources(pod, resources_)) return std::nullopt;
  PodRecord r;
  r.ns = kube::NamespaceOf(pod);
  r.name = kube::NameOf(pod);
  if (r.name.empty()) return std::nullopt;
  const Json& spec = pod.contains("spec") && pod["spec"].is_object() ? pod["spec"] : Json::object();
  const Json& status = pod.contains("status") && pod["status"].is_object() ? pod["status"] : Json::object();
  const Json& meta =
      pod.contains("metadata") && pod["metadata"].is_object() ? pod["metadata"] : Json::object();
  auto text = [](const Json& o, const char* key) {
    auto it = o.find(key);
    return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  r.node = text(spec, "nodeName");
  r.phase = text(status, "phase");
  r.created = text(meta, "creationTimestamp");
  if (const Result<core::PodRequest>& request = digest.request(); request.ok()) {
    for (const auto& c : request->containers) {
      if (c.gpus <= 0) continue;
      if (r.gpus == 0) {
        r.memory_mib = c.memory_mib;
        r.memory_percent = c.memory_percent.value_or(-1);
        r.cores = c.cores;
      }
      r.gpus += c.gpus;
    }
    if (r.gpus > 0) {
      r.has_shape = true;
      r.shape = core::ShapeOf(*request);
    }
  } else {
    r.request_error = request.error().message;
  }
  if (!annotation.empty()) {
    if (const Result<core::PodAllocation>& decoded = digest.allocation(); decoded.ok()) {
      r.allocation = decoded.value();
    } else {
      r.allocation_error =
          std::string(core::kAllocationAnnotation) + " cannot be read: " + decoded.error().message;
    }
  }
  if (auto conditions = status.find("conditions"); conditions != status.end() && conditions->is_array()) {
    for (const Json& c : *conditions) {
      if (!c.is_object() || text(c, "type") != "PodScheduled" || text(c, "status") != "False") continue;
      r.waiting_reason = text(c, "reason");
      r.waiting_message = text(c, "message");
    }
  }
  return r;
}

void PodIndex::Upsert(const Json& pod) {
  Upsert(PodDigest(pod, resources_));
}

void PodIndex::Upsert(const PodDigest& digest) {
  std::optional<PodRecord> record = Project(digest);  // outside the lock
  const std::string key = kube::NamespaceOf(digest.pod()) + "/" + kube::NameOf(digest.pod());
  std::lock_guard lock(mu_);
  if (!record) {
    if (pods_.erase(key)) ++generation_;
    return;
  }
  pods_[key] = std::make_shared<const PodRecord>(std::move(*record));
  ++generation_;
}

void PodIndex::Delete(const Json& pod) {
  const std::string key = kube::NamespaceOf(pod) + "/" + kube::NameOf(pod);
  std::lock_guard lock(mu_);
  if (pods_.erase(key)) ++generation_;
}

uint64_t PodIndex::generation() const {
  std::lock_guard lock(mu_);
  return generation_;
}

PodsSnapshot PodIndex::Snapshot() const {
  PodsSnapshot s;
  std::lock_guard lock(mu_);
  s.generation = generation_;
  s.pods.reserve(pods_.size());
  for (const auto& [key, record] : pods_) s.pods.push_back(record);
  return s;
}

}  // namespace tessera::scheduler::dashboard
