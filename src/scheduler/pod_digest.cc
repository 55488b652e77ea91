#include "scheduler/pod_digest.h"

#include "core/allocation_codec.h"
#include "core/pod_request.h"
#include "kube/client.h"

namespace tessera::scheduler {

PodDigest::PodDigest(const nlohmann::json& pod, const core::ResourceConfig& resources)
    : pod_(pod),
      resources_(resources),
      terminal_(kube::IsPodTerminal(pod)),
      allocation_text_(kube::AnnotationOf(pod, core::kAllocationAnnotation)) {}

const Result<core::PodAllocation>& PodDigest::allocation() const {
  if (!allocation_) allocation_.emplace(core::DecodeAllocation(allocation_text_));
  return *allocation_;
}

const Result<core::PodRequest>& PodDigest::request() const {
  if (!request_) request_.emplace(core::DerivePodRequest(pod_, resources_));
  return *request_;
}

}  // namespace tessera::scheduler
