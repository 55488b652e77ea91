// PodIndex: the dashboard's typed projection of the GPU pods, fed by the
// scheduler's pod informer (its handlers call Upsert/Delete), never whole
// Pod objects (DESIGN: caches hold typed projections).
//
// A pod is kept while it asks for tessera resources or carries a
// tessera.io/allocation annotation, and is not Succeeded/Failed. What cannot
// be read is kept as a message beside the pod (an unreadable allocation
// annotation, a request that does not derive), so the dashboard shows the
// pod with its problem instead of hiding it.
//
// Thread-safety: all methods may be called concurrently; records are
// immutable once published.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/allocation.h"
#include "core/resource_config.h"
#include "core/score_fragmentation.h"
#include "scheduler/pod_digest.h"

namespace tessera::scheduler::dashboard {

struct PodRecord {
  std::string ns;
  std::string name;
  std::string node;     // spec.nodeName ("" = not bound yet)
  std::string phase;    // status.phase as the API server has it
  std::string created;  // metadata.creationTimestamp
  // The request, summarised: vGPUs over the app containers, and the first
  // GPU container's slice (per vGPU).
  int gpus = 0;
  int64_t memory_mib = 0;   // 0 with memory_percent < 0 = whole GPU
  int memory_percent = -1;  // < 0 = not given as a percentage
  int cores = 0;
  std::string request_error;  // the request does not derive (why)
  bool has_shape = false;     // `shape` is valid (the request derives and asks for GPUs)
  core::TaskShape shape;
  std::optional<core::PodAllocation> allocation;
  std::string allocation_error;  // an allocation annotation that cannot be read (why)
  // Why the pod waits: its PodScheduled=False condition (kube-scheduler's
  // reason and message, which carry the extender's per-node verdicts).
  std::string waiting_reason;
  std::string waiting_message;

  std::string key() const { return ns + "/" + name; }
  bool pending() const { return node.empty(); }
};

// A consistent copy of the index: records in key order ("ns/name").
struct PodsSnapshot {
  uint64_t generation = 0;
  std::vector<std::shared_ptr<const PodRecord>> pods;
};

class PodIndex {
 public:
  explicit PodIndex(core::ResourceConfig resources);

  // The pod as the informer delivers it (add or update), or its deletion.
  void Upsert(const nlohmann::json& pod);
  // The same with the pod's request and allocation derived once for every
  // handler (its ResourceConfig must be this index's).
  void Upsert(const PodDigest& pod);
  void Delete(const nlohmann::json& pod);

  // The record `pod` gives (nullopt when the dashboard does not keep it).
  std::optional<PodRecord> Project(const nlohmann::json& pod) const;
  std::optional<PodRecord> Project(const PodDigest& pod) const;

  // Bumped by every change; equal generations mean equal contents.
  uint64_t generation() const;
  PodsSnapshot Snapshot() const;

 private:
  const core::ResourceConfig resources_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const PodRecord>> pods_;  // guarded by mu_; by key
  uint64_t generation_ = 1;                                       // guarded by mu_
};

}  // namespace tessera::scheduler::dashboard
