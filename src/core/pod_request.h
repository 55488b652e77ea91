// Deriving what a pod asks for (PodRequest) from the Pod object itself, as the
// API server returns it (JSON). HAMi-compatible semantics:
//
//  - A container asks for GPUs when its resources name any of the count,
//    memory, memory-percentage or cores resources (ResourceConfig names).
//    limits are read first; requests are the fallback per resource. A value in
//    both must be equal (Kubernetes requires that of extended resources).
//  - Count missing -> config.default_gpu_count. Count 0 with nothing else ->
//    not a GPU container; count 0 with memory/cores -> rejected.
//  - gpumem (MiB per vGPU, 0 = not given) and gpumem-percentage are exclusive.
//    When neither is given: config.default_memory_mib if > 0, else
//    config.default_memory_percent if set, else the whole GPU.
//  - gpucores 0..100 (100 = exclusive, 0 = no compute limit); missing ->
//    config.default_cores. gpumem-percentage 1..100. Count 1..16.
//  - Sharing modes (issue 15): the pod annotation nvidia.com/vgpu-mode: mps
//    makes every GPU container an MPS share (ShareKind::kMps), and so does a
//    container asking for nvidia.com/mps-core (percent of the GPU's threads,
//    1..100, the alias of gpucores) or nvidia.com/mps-memory (whole GiB,
//    1..1024, converted to MiB; the alias of gpumem). An MPS share needs cores
//    1..100 after defaults and one GPU (a client reaches one daemon). An
//    alias beside its own name (mps-memory with gpumem or gpumem-percentage,
//    mps-core with gpucores), or beside an annotation other than mps, is
//    rejected. nvidia.com/vgpu-mode: exclusive asks whole GPUs
//    (ShareKind::kExclusive, cores 100, all memory; a smaller gpumem,
//    percentage or gpucores is rejected).
//  - nvidia.com/priority 0..2^31-1, kept as given (ContainerRequest::priority:
//    0 = high, 1 and above = low, as HAMi and CUDA); only a GPU container may
//    set it.
//  - Every value must be a whole, non-negative quantity ("3000", "3k").
//  - Init containers are derived into PodRequest::init_containers and do not
//    add to the app containers.
//  - GPU filters come from the pod annotations nvidia.com/use-gputype,
//    nouse-gputype, use-gpuuuid, nouse-gpuuuid (comma-separated).
//  - cpu_milli / host_memory_mib are left 0: kube-scheduler owns host
//    resources; only the trace benchmark fills them.
//
// A pod with no GPU container gives a PodRequest with no containers (not an
// error). Every rejection names the container and the field, and says what
// would be accepted. Nothing here does I/O; all functions are thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "core/request.h"
#include "core/resource_config.h"

namespace tessera::core {

// Pod annotations that restrict which GPUs a pod may use.
inline constexpr std::string_view kUseGpuTypeAnnotation = "nvidia.com/use-gputype";
inline constexpr std::string_view kNoUseGpuTypeAnnotation = "nvidia.com/nouse-gputype";
inline constexpr std::string_view kUseGpuUuidAnnotation = "nvidia.com/use-gpuuuid";
inline constexpr std::string_view kNoUseGpuUuidAnnotation = "nvidia.com/nouse-gpuuuid";
// HAMi's per-pod sharing mode: "mps" and "exclusive" pick ShareKind::kMps /
// kExclusive for every GPU container, "vgpu" (or HAMi's "hami-core") kVgpu,
// "mig" is dynamic MIG (scheduler/mig_placement.h); other values are ignored.
inline constexpr std::string_view kSharingModeAnnotation = "nvidia.com/vgpu-mode";

// The request of `pod` (a core/v1 Pod object) under `config`. Errors name the
// container and field: `container "app": nvidia.com/gpucores is 150; ...`.
Result<PodRequest> DerivePodRequest(const nlohmann::json& pod, const ResourceConfig& config);

// True when some container or init container of `pod` names one of the
// configured tessera resources, except the GPU count with the value zero (a
// malformed value counts as asking, so that the caller derives the request and
// reports the error). A zero gpumem, gpucores, percentage or priority asks:
// derivation makes such a container a GPU container or refuses it. Cheap
// pre-check for the webhook; never fails.
bool AsksForTesseraResources(const nlohmann::json& pod, const ResourceConfig& config);

// The resources a GPU container left out and derivation filled from defaults,
// for the webhook to write back under resources.limits so that the pod shows
// what it will get (and keeps it if the config changes later).
struct ContainerDefaults {
  bool init_container = false;  // index is into spec.initContainers, else spec.containers
  size_t index = 0;
  std::string container;
  // {resource name, quantity text}, in the order count, memory or percentage, cores.
  std::vector<std::pair<std::string, std::string>> limits_to_add;
  bool operator==(const ContainerDefaults&) const = default;
};

// One entry per GPU container that has something to add; empty when nothing
// is missing. Fails exactly when DerivePodRequest fails.
Result<std::vector<ContainerDefaults>> DefaultedLimits(const nlohmann::json& pod,
                                                       const ResourceConfig& config);

}  // namespace tessera::core
