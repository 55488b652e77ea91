// Which namespaces limit GPU memory with a ResourceQuota, for the webhook
// (webhook.h: in such a namespace a container's gpumem-percentage, or its
// whole GPU, is rewritten into gpumem MiB so that the quota counts it).
//
// GpuMemoryQuotaIndex keeps, per namespace, the ResourceQuotas whose
// spec.hard names requests.<gpu memory resource> (the name from the config,
// e.g. requests.nvidia.com/gpumem: Kubernetes quotas an extended resource
// only under the requests. prefix). A quota object that cannot be read (spec
// or spec.hard not an object, no name) is kept as unreadable: until it is
// replaced or deleted, its namespace is "unknown" (NamespaceQuota::unknown),
// and the webhook denies the pods it would have to rewrite there rather than
// let them past an unseen quota. Other namespaces are not affected.
//
// GpuMemoryQuotaWatch feeds the index from an informer on resourcequotas in
// all namespaces (list + watch, kube/informer.h; RBAC: deploy/scheduler). Until
// the first list has been applied every namespace is unknown, with the
// informer's last error (an API server that is down, a 403 for missing RBAC);
// once listed, a later outage keeps the last known quotas while the informer
// retries.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "kube/client.h"
#include "kube/informer.h"
#include "scheduler/webhook.h"

namespace tessera::scheduler {

class GpuMemoryQuotaIndex {
 public:
  // `gpu_memory_resource`: the container resource, e.g. "nvidia.com/gpumem".
  explicit GpuMemoryQuotaIndex(const std::string& gpu_memory_resource);

  void Upsert(const nlohmann::json& quota);
  void Delete(const nlohmann::json& quota);
  // What is known of `ns`'s quotas (assuming every quota has been seen).
  NamespaceQuota Lookup(const std::string& ns) const;
  // "requests.<gpu memory resource>".
  const std::string& quota_key() const { return quota_key_; }

 private:
  struct Entry {
    bool limits_memory = false;  // spec.hard names quota_key_
    std::string unreadable;      // non-empty: why the object cannot be read
  };
  const std::string quota_key_;
  mutable std::mutex mu_;
  std::map<std::string, std::map<std::string, Entry>> by_namespace_;  // guarded by mu_; ns -> name -> entry
};

class GpuMemoryQuotaWatch {
 public:
  GpuMemoryQuotaWatch(kube::Client* client, const std::string& gpu_memory_resource);
  ~GpuMemoryQuotaWatch();  // stops
  GpuMemoryQuotaWatch(const GpuMemoryQuotaWatch&) = delete;
  GpuMemoryQuotaWatch& operator=(const GpuMemoryQuotaWatch&) = delete;

  void Start();
  void Stop();
  bool HasSynced() const;
  // Unknown until the quotas have been listed once.
  NamespaceQuota Lookup(const std::string& ns) const;

 private:
  GpuMemoryQuotaIndex index_;
  std::unique_ptr<kube::Informer> informer_;
};

}  // namespace tessera::scheduler
