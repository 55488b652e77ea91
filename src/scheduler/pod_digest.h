// PodDigest: what the scheduler's readers of one pod event derive from it —
// the decoded tessera.io/allocation annotation and the GPU request — worked
// out once and shared. ClusterState, the dashboard's pod index and (at start)
// the workload learner each read a pod; decoding its allocation and deriving
// its request once per reader was a fifth of the scheduler's start at 40,000
// pods (docs/benchmarks.md, "Scheduler at scale").
//
// Each is computed on first use: a reader that needs neither pays nothing.
// The digest refers to the pod: it must not outlive it. Not thread-safe (one
// informer handler uses it at a time).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "core/allocation.h"
#include "core/request.h"
#include "core/resource_config.h"

namespace tessera::scheduler {

class PodDigest {
 public:
  PodDigest(const nlohmann::json& pod, const core::ResourceConfig& resources);

  const nlohmann::json& pod() const { return pod_; }
  bool terminal() const { return terminal_; }
  // The tessera.io/allocation annotation ("" = none).
  const std::string& allocation_text() const { return allocation_text_; }
  // core::DecodeAllocation(allocation_text()); only for a non-empty text.
  const Result<core::PodAllocation>& allocation() const;
  // core::DerivePodRequest(pod, resources).
  const Result<core::PodRequest>& request() const;

 private:
  const nlohmann::json& pod_;
  const core::ResourceConfig& resources_;
  bool terminal_ = false;
  std::string allocation_text_;
  mutable std::optional<Result<core::PodAllocation>> allocation_;
  mutable std::optional<Result<core::PodRequest>> request_;
};

}  // namespace tessera::scheduler
