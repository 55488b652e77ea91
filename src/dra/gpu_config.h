// GpuConfig: the opaque configuration a ResourceClaim or DeviceClass gives
// tessera-dra's devices (status.allocation.devices.config entries whose
// opaque.driver is tessera-dra's):
//
//   apiVersion: tessera.io/v1alpha1
//   kind: GpuConfig
//   sharing: {strategy: vGPU}          # the only strategy tessera-dra enforces
//   computePolicy: default|force|disable   # GPU_CORE_UTILIZATION_POLICY
//   priority: 0                        # CUDA_TASK_PRIORITY: 0 high, 1 low
//   oversubscription: false            # CUDA_OVERSUBSCRIBE (host memory beyond the limit)
//
// Decoded strictly, as NVIDIA's driver decodes claim configs: an unknown or
// wrongly typed field, another apiVersion or kind is an error naming it, which
// NodePrepareResources returns for the claim (the kubelet puts it in the
// pod's events).
//
// Thread-safety: plain values and functions.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace tessera::dra {

struct GpuConfig {
  // Fields not set stay unset so that a later config (the claim's after the
  // class's) overrides only what it names.
  std::optional<std::string> compute_policy;
  std::optional<int> priority;
  std::optional<bool> oversubscription;

  // `later`'s set fields over this one's.
  void MergeFrom(const GpuConfig& later);
  bool operator==(const GpuConfig&) const = default;
};

// Decodes one opaque `parameters` object.
Result<GpuConfig> ParseGpuConfig(const nlohmann::json& parameters);

}  // namespace tessera::dra
