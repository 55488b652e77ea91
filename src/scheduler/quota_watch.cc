#include "scheduler/quota_watch.h"

#include "base/log.h"

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;

const kube::ResourceType kResourceQuotas{"/api/v1", "v1", "ResourceQuota", "resourcequotas", true};

// metadata.<field> when it is a string, else "".
std::string MetaString(const Json& object, const char* field) {
  if (!object.is_object()) return "";
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return "";
  auto it = meta->find(field);
  return it != meta->end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

GpuMemoryQuotaIndex::GpuMemoryQuotaIndex(const std::string& gpu_memory_resource)
    : quota_key_("requests." + gpu_memory_resource) {}

void GpuMemoryQuotaIndex::Upsert(const Json& quota) {
  const std::string ns = MetaString(quota, "namespace");
  const std::string name = MetaString(quota, "name");
  Entry entry;
  if (!quota.is_object()) {
    entry.unreadable = "not an object";
  } else if (name.empty()) {
    entry.unreadable = "it has no metadata.name";
  } else if (auto spec = quota.find("spec"); spec != quota.end() && !spec->is_object()) {
    entry.unreadable = "spec is not an object";
  } else if (spec != quota.end()) {
    auto hard = spec->find("hard");
    if (hard != spec->end() && !hard->is_object()) {
      entry.unreadable = "spec.hard is not an object";
    } else if (hard != spec->end()) {
      // Whatever its value: a quota on the resource (the API server has
      // checked the quantity; the webhook only needs to know it is counted).
      entry.limits_memory = hard->contains(quota_key_);
    }
  }
  if (!entry.unreadable.empty()) {
    log::Warn("resource quota unreadable: percentage pods in its namespace are refused until it is fixed",
              {{"quota", ns + "/" + name}, {"error", entry.unreadable}});
  }
  std::lock_guard lock(mu_);
  by_namespace_[ns][name] = std::move(entry);
}

void GpuMemoryQuotaIndex::Delete(const Json& quota) {
  const std::string ns = MetaString(quota, "namespace");
  std::lock_guard lock(mu_);
  auto it = by_namespace_.find(ns);
  if (it == by_namespace_.end()) return;
  it->second.erase(MetaString(quota, "name"));
  if (it->second.empty()) by_namespace_.erase(it);
}

NamespaceQuota GpuMemoryQuotaIndex::Lookup(const std::string& ns) const {
  NamespaceQuota out;
  std::lock_guard lock(mu_);
  auto it = by_namespace_.find(ns);
  if (it == by_namespace_.end()) return out;
  for (const auto& [name, entry] : it->second) {
    if (!entry.unreadable.empty()) {
      out.unknown += (out.unknown.empty() ? "" : "; ") + std::string("ResourceQuota \"") + name +
                     "\" cannot be read: " + entry.unreadable;
    } else if (entry.limits_memory) {
      out.quotas.push_back(name);
    }
  }
  return out;
}

GpuMemoryQuotaWatch::GpuMemoryQuotaWatch(kube::Client* client, const std::string& gpu_memory_resource)
    : index_(gpu_memory_resource) {
  kube::InformerOptions options;
  options.type = kResourceQuotas;
  informer_ = std::make_unique<kube::Informer>(client, options);
  informer_->AddHandler({[this](const Json& q) { index_.Upsert(q); },
                         [this](const Json&, const Json& q) { index_.Upsert(q); },
                         [this](const Json& q) { index_.Delete(q); }});
}

GpuMemoryQuotaWatch::~GpuMemoryQuotaWatch() {
  Stop();
}

void GpuMemoryQuotaWatch::Start() {
  informer_->Start();
}

void GpuMemoryQuotaWatch::Stop() {
  informer_->Stop();
}

bool GpuMemoryQuotaWatch::HasSynced() const {
  return informer_->HasSynced();
}

NamespaceQuota GpuMemoryQuotaWatch::Lookup(const std::string& ns) const {
  if (!informer_->HasSynced()) {
    NamespaceQuota out;
    out.unknown = "the ResourceQuotas are not listed yet";
    if (std::string error = informer_->Stats().last_error; !error.empty())
      out.unknown += " (last error: " + error + ")";
    return out;
  }
  return index_.Lookup(ns);
}

}  // namespace tessera::scheduler
