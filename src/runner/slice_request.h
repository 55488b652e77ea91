// SliceRequest: what `tessera run` asks for, and how it maps onto the core
// engine's PodRequest (one container, named "job").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "core/request.h"

namespace tessera::runner {

struct SliceRequest {
  int gpus = 1;
  int64_t memory_mib = 0;              // per GPU; 0 with no percent = the whole GPU's memory
  std::optional<int> memory_percent;   // per GPU, 1..100
  int cores = 0;                       // percent per GPU; 0 = no compute limit, 100 = exclusive
  std::vector<std::string> gpu_types;  // model must contain one of these (case-insensitive)
  std::string policy = "gpu-binpack";  // a core policy name (CorePolicyName): how GPUs are chosen
  // How libvgpu holds `cores` (GPU_CORE_UTILIZATION_POLICY, docs/compute.md):
  // "default" lets a job alone on its GPU use idle time beyond its quota,
  // "force" never, "disable" does not limit compute at all.
  std::string core_policy = "default";
};

// Parses --gpumem: a whole number of MiB ("3000"), a Kubernetes quantity of
// bytes with a binary/decimal suffix ("3Gi", "1500Mi", "2G"), or a percentage
// of the GPU ("25%"). Sets memory_mib or memory_percent of `request`.
Status ParseGpuMemory(std::string_view text, SliceRequest& request);

// Checks ranges (gpus 1..16, cores 0..100, policy and core policy names) with
// messages naming the flag.
Status Validate(const SliceRequest& request);

core::PodRequest ToPodRequest(const SliceRequest& request);

// The core policy (core::MakePolicy) --policy names: gpu-binpack (the
// default), gpu-spread, node-binpack, node-spread, tessera — the names of
// tessera-scheduler and `tessera simulate`. The old spellings binpack and
// spread (GPU level) are still taken as gpu-binpack / gpu-spread.
Result<std::string> CorePolicyName(const SliceRequest& request);
// A warning for a deprecated --policy spelling; "" when there is none.
std::string PolicyDeprecation(const SliceRequest& request);

}  // namespace tessera::runner
