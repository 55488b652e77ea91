// The mutating admission webhook (POST /mutate, AdmissionReview v1).
//
// Only pods asking for tessera resources (core::AsksForTesseraResources) are
// touched; every other object is allowed without a patch. For a GPU pod the
// JSONPatch:
//  - sets spec.schedulerName to the configured scheduler;
//  - writes the defaults derivation filled (core::DefaultedLimits) under each
//    container's resources.limits, so the pod shows what it will get;
//  - wires the scheduler's decision into each GPU container through the
//    Downward API: TESSERA_ALLOCATION from
//    fieldRef metadata.annotations['tessera.io/allocation'] and a literal
//    TESSERA_CONTAINER_NAME=<container name>, and NVIDIA_VISIBLE_DEVICES from
//    the per-container annotation VisibleDevicesAnnotation() that bind writes
//    beside the allocation (the node agent's default visible_devices: webhook
//    leaves that variable to us); and, for a container that gives
//    nvidia.com/priority, CUDA_TASK_PRIORITY=<that value> (a literal: 0 =
//    high, 1 and above = low, the convention of HAMi, CUDA and libvgpu).
//    Variables the container already sets are left alone.
//    Each GPU container also gets a read-only Downward API volume with its own
//    limits annotation (LimitsAnnotation) at contract::kPodLimitsContainerDir,
//    unless it already mounts something there.
//    A pod asking for dynamic MIG (WantsDynamicMig, HAMi's
//    nvidia.com/vgpu-mode: mig) gets none of these variables: its device is a
//    MIG instance tessera-node creates at Allocate, whose answer sets
//    NVIDIA_VISIBLE_DEVICES to the instance's MIG UUID, and it runs without
//    libvgpu (the instance is isolated in hardware). It still gets the
//    scheduler name and the defaulted limits, which size its instance.
//    An MPS share's container (core::ShareKind::kMps) is wired the same way
//    (NVIDIA_VISIBLE_DEVICES names its GPU), plus
//    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
//    from the annotations bind writes (MpsThreadPercentageAnnotation): the
//    values must be in the environment before the program's cuInit, and
//    Allocate does not know the pod. tessera-node's Allocate adds the pipe
//    directory (core/allocation.h).
// Applying the patched pod again yields an empty patch (idempotent).
//
// Warnings (AdmissionReview response.warnings, shown by kubectl; the pod is
// still admitted): a pod with an MPS share and without spec.hostIPC: true.
// Pods asking only replica resources (nvidia.com/gpu.shared or any other
// name the node configuration gives time-sliced or MPS replicas) are not
// tessera's: they get no patch and no warning. The webhook cannot tell that
// such a resource is an MPS GPU's replicas (the name-to-mode mapping is in
// each node's configuration, not the scheduler's), so it cannot warn about
// their hostIPC either; docs/scheduler.md says so.
// Malformed or impossible requests are denied with a message naming the
// container and field (core's derivation errors, plus memory above the largest
// GPU the cluster has).
//
// GPU memory quotas (docs/scheduler.md, "Quotas on GPU memory and cores"): a
// ResourceQuota counts nvidia.com/gpumem as written, in MiB, so in a namespace
// with a quota on requests.<gpu memory resource> (ClusterView::gpu_memory_quota)
// a container whose memory is not in MiB -- gpumem-percentage P (given or
// defaulted), or no memory at all (the whole GPU, P = 100), or gpumem "0" --
// gets it rewritten: the percentage is removed from limits and requests and
// gpumem is written, in limits and wherever requests named the memory, as
// the MiB P % is on the GPUs the container could land on (core's rounding,
// memory * P / 100 rounded down: the allocation it would have had). That must
// be one number: every GPU of the cluster that the container could use were it
// empty and healthy (mode, GPU type and UUID filters; ClusterView::visit_gpus)
// must give the same MiB, else the pod is denied naming the quota, the
// percentage and the sizes, and told to ask gpumem in MiB or pin a GPU type.
// Denied too: such a container when no GPU it could use is known, when the
// namespace's quotas or the nodes are not known yet (NamespaceQuota::unknown),
// and in a dynamic MIG or exclusive pod (the memory it gets is not P % of a
// GPU in MiB it could be told to ask: a MIG profile's, a whole GPU's).
// Namespaces without such a quota, and containers that give MiB, are left as
// they were.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "core/device.h"
#include "scheduler/config.h"

namespace tessera::scheduler {

// What the webhook knows of a namespace's quotas on GPU memory.
struct NamespaceQuota {
  // Non-empty: it cannot tell whether the namespace has such a quota (the
  // quotas are not listed yet, or one of them is unreadable), and why.
  std::string unknown;
  // The ResourceQuotas of the namespace whose spec.hard names
  // requests.<gpu memory resource>, by name (empty: none).
  std::vector<std::string> quotas;
};

// What the webhook reads of the cluster beyond the pod; each part optional.
struct ClusterView {
  int64_t largest_gpu_mib = 0;  // 0 = unknown (the size check is skipped)
  // The namespace's GPU memory quotas; null = quotas are not looked at (no
  // rewrite: percentages stay percentages).
  std::function<NamespaceQuota(const std::string& ns)> gpu_memory_quota;
  // Calls `visit` for every GPU of every node known, or fails (why) when that
  // view is not complete. Null = no GPU is known.
  std::function<Status(const std::function<void(const core::Gpu&)>& visit)> visit_gpus;
};

// The JSONPatch (an array, possibly empty) for `pod`, or the reason to deny it.
// `largest_gpu_mib` 0 = unknown (skip that check).
Result<nlohmann::json> MutationPatch(const nlohmann::json& pod, const SchedulerConfig& config,
                                     int64_t largest_gpu_mib);
// The same with the quota rewrite: `ns` is the pod's namespace (the review's
// request.namespace; "" = the pod's metadata.namespace, else "default").
Result<nlohmann::json> MutationPatch(const nlohmann::json& pod, const SchedulerConfig& config,
                                     const ClusterView& view, const std::string& ns = "");

// The warnings for `pod` (empty when there are none, or when it is not a
// tessera pod or its request does not derive: then MutationPatch denies it).
std::vector<std::string> MutationWarnings(const nlohmann::json& pod, const SchedulerConfig& config);

// Answers an AdmissionReview v1 request with an AdmissionReview carrying the
// response (same uid). A review that cannot be read is denied with a reason.
nlohmann::json Mutate(const nlohmann::json& review, const SchedulerConfig& config, int64_t largest_gpu_mib);
nlohmann::json Mutate(const nlohmann::json& review, const SchedulerConfig& config, const ClusterView& view);

// The pod annotation carrying the comma-separated GPU UUIDs of one container,
// keyed by its position (container names can be too long for an annotation
// key): "tessera.io/visible-devices.0", init containers
// "tessera.io/visible-devices.init-0" (contract/container_contract.h, whose
// variable names the patch also uses).
std::string VisibleDevicesAnnotation(bool init_container, size_t index);

// The pod annotation carrying one container's limits (core::EncodeContainerLimits),
// keyed by position like the visible devices: "tessera.io/limits.0",
// "tessera.io/limits.init-0". Bind writes it for every container with a vGPU
// slice; the webhook mounts it into that container alone, read-only, as
// contract::kPodLimitsContainerDir/limits.json through a Downward API volume
// named LimitsVolumeName() (docs/security.md: limits a container cannot write
// before tessera-node knows its pod).
std::string LimitsAnnotation(bool init_container, size_t index);
std::string LimitsVolumeName(bool init_container, size_t index);

// The pod annotations bind writes for a container with MPS shares (the
// device's "mps" in the allocation), keyed by position like the visible
// devices: "tessera.io/mps-thread-percentage.<i>" = the cores ("50") and
// "tessera.io/mps-pinned-memory.<i>" = "<ordinal>=<memoryMiB>M[,...]" over the
// container's devices in allocation order ("0=8192M"). The webhook wires them
// into CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
// (Downward API) for every MPS container.
std::string MpsThreadPercentageAnnotation(bool init_container, size_t index);
std::string MpsPinnedMemoryAnnotation(bool init_container, size_t index);
inline constexpr std::string_view kMpsThreadPercentageEnv = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
inline constexpr std::string_view kMpsPinnedMemoryEnv = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";

// RFC 6901 escaping of one reference token ("~" -> "~0", "/" -> "~1").
std::string EscapeJsonPointer(std::string_view token);
std::string Base64Encode(std::string_view data);

}  // namespace tessera::scheduler
