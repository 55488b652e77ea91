// The container contract: what tessera's parts agree on about a GPU
// container, spelled once. The scheduler writes the allocation annotation, the
// webhook wires it into the container's environment, tessera-node's Allocate
// and `tessera run` set the rest of the environment, and libvgpu reads all of
// it inside the container; core encodes and decodes the allocation payload.
// Each of them takes the names and bounds from here, so none can drift.
//
// No dependencies beyond the standard library's string_view: libvgpu, which
// may depend on nothing but libc (DESIGN.md), includes it too. Everything here
// is constexpr; nothing allocates.
//
// The allocation payload (version 1), the text of the pod annotation
// `tessera.io/allocation` and of the container variable TESSERA_ALLOCATION:
//
//   {"version": 1, "node": "node-a",
//    "containers": [{"name": "app", "init": false,
//                    "devices": [{"uuid": "GPU-…", "memoryMiB": 3000, "cores": 30}]}]}
//
// Rules every reader and writer applies (core::ValidateAllocation, libvgpu's
// parse_allocation; a test feeds both the same inputs):
//  - "version" the integer 1; "node" a non-empty string;
//  - "containers" a non-empty array; each entry an object with a non-empty
//    "name" unique in the payload, an optional boolean "init", and a
//    non-empty "devices" array of at most kMaxDevicesPerContainer objects;
//  - each device: "uuid" a device UUID (IsValidDeviceUuid), not repeated in
//    its container; "memoryMiB" an integer 0 (no limit) to kMaxMemoryMiB;
//    "cores" an integer 0 (no limit) to kMaxCoresPercent (100 = exclusive);
//  - every one of these members is required unless said optional; members a
//    reader does not know are ignored; anything incompatible bumps "version".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera::contract {

// --- Pod annotations -------------------------------------------------------
// The scheduler's decision, written with the Binding.
inline constexpr std::string_view kAllocationAnnotation = "tessera.io/allocation";
// Per container, keyed by its index (names can exceed an annotation key's 63
// characters): the prefix, then `<i>` for app containers and `init-<i>` for
// init containers. The GPU UUIDs the container runtime should expose, which
// the webhook wires into NVIDIA_VISIBLE_DEVICES.
inline constexpr std::string_view kVisibleDevicesAnnotationPrefix = "tessera.io/visible-devices.";
inline constexpr std::string_view kVisibleDevicesInitInfix = "init-";
// Per container, keyed the same way: its limits (core::EncodeContainerLimits,
// what tessera-node's limits file holds), written by bind. The webhook mounts
// it into that container alone as a Downward API file at
// kPodLimitsContainerDir/kLimitsFileName (read-only, like every Downward API
// volume), so libvgpu has limits the container cannot write from its first
// call, before tessera-node has tied the container to its pod.
inline constexpr std::string_view kLimitsAnnotationPrefix = "tessera.io/limits.";
// The host directory Allocate made for a container (on the device plugin's answer).
inline constexpr std::string_view kRegionDirAnnotation = "tessera.io/region-dir";

// --- Container environment: tessera's own ----------------------------------
inline constexpr const char* kAllocationEnv = "TESSERA_ALLOCATION";         // the payload above
inline constexpr const char* kContainerNameEnv = "TESSERA_CONTAINER_NAME";  // which entry is ours
inline constexpr const char* kRegionEnv = "TESSERA_REGION";                 // region file path
// For a container whose pod tessera-scheduler did not place (no allocation):
// what it gets ("refuse" or "whole-gpu") and the GPUs behind the kubelet's
// device IDs (comma-separated UUIDs). Set by tessera-node's Allocate.
inline constexpr const char* kUnplacedPodsEnv = "TESSERA_UNPLACED_PODS";
inline constexpr const char* kKubeletGpusEnv = "TESSERA_KUBELET_GPUS";
inline constexpr std::string_view kUnplacedRefuse = "refuse";
inline constexpr std::string_view kUnplacedWholeGpu = "whole-gpu";
// Device memory charged per process and device for its CUDA context.
inline constexpr const char* kContextOverheadEnv = "TESSERA_CONTEXT_OVERHEAD";
// The container's limits as a file it cannot write (docs/security.md): the
// allocation payload above with this container's entry only. tessera-node
// mounts it read-only at kLimitsContainerDir/kLimitsFileName, a path libvgpu
// looks at whatever the environment says; elsewhere (`tessera run`)
// TESSERA_LIMITS names it.
inline constexpr const char* kLimitsEnv = "TESSERA_LIMITS";
inline constexpr const char* kLimitsContainerDir = "/run/tessera/limits";
inline constexpr const char* kLimitsFileName = "limits.json";
// The Downward API directory of the container's own limits annotation (see
// kLimitsAnnotationPrefix); libvgpu reads kLimitsFileName there while the
// node's limits file is not there. Where the directory does not exist,
// TESSERA_POD_LIMITS may name the file (tests); an empty file (the pod was not
// placed by tessera-scheduler) means none.
inline constexpr const char* kPodLimitsContainerDir = "/run/tessera/pod-limits";
inline constexpr const char* kPodLimitsEnv = "TESSERA_POD_LIMITS";
// The `tessera run` job a process belongs to (the ledger's job id), for the
// job's own use; no part of tessera reads it back.
inline constexpr const char* kJobIdEnv = "TESSERA_JOB_ID";

// --- Container environment: HAMi's names, kept so HAMi pod specs work --------
inline constexpr const char* kMemoryLimitEnv = "CUDA_DEVICE_MEMORY_LIMIT";  // also _<i>
inline constexpr const char* kSmLimitEnv = "CUDA_DEVICE_SM_LIMIT";          // also _<i>
inline constexpr const char* kSharedCacheEnv = "CUDA_DEVICE_MEMORY_SHARED_CACHE";
inline constexpr const char* kOversubscribeEnv = "CUDA_OVERSUBSCRIBE";
inline constexpr const char* kOomKillerEnv = "ACTIVE_OOM_KILLER";
inline constexpr const char* kDisableControlEnv = "CUDA_DISABLE_CONTROL";
inline constexpr const char* kCorePolicyEnv = "GPU_CORE_UTILIZATION_POLICY";
inline constexpr std::string_view kCorePolicyDefault = "default";  // hold the quota only beside other tenants
inline constexpr std::string_view kCorePolicyForce = "force";      // always hold the quota
inline constexpr std::string_view kCorePolicyDisable = "disable";  // never limit
inline constexpr const char* kTaskPriorityEnv = "CUDA_TASK_PRIORITY";
inline constexpr const char* kLogLevelEnv = "LIBCUDA_LOG_LEVEL";
// What the boolean variables above (CUDA_OVERSUBSCRIBE, ACTIVE_OOM_KILLER,
// CUDA_DISABLE_CONTROL) are set to when a part turns them on.
inline constexpr std::string_view kEnvTrue = "true";

// --- Container environment: NVIDIA's ---------------------------------------
// The container runtime's: the GPUs it exposes, as UUIDs or kVisibleDevicesAll.
inline constexpr const char* kVisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES";
inline constexpr std::string_view kVisibleDevicesAll = "all";
// The CUDA driver's: the devices a process enumerates, and an MPS control
// daemon's pipe and log directories.
inline constexpr const char* kCudaVisibleDevicesEnv = "CUDA_VISIBLE_DEVICES";
inline constexpr const char* kMpsPipeDirectoryEnv = "CUDA_MPS_PIPE_DIRECTORY";
inline constexpr const char* kMpsLogDirectoryEnv = "CUDA_MPS_LOG_DIRECTORY";

// --- Process environment: tessera's simulated GPU --------------------------
// Read by src/sim's libcuda.so.1 and libnvidia-ml.so.1 in every process that
// loads them; `tessera run`, `demo` and `sim` set them so that a job and the
// tools see one shared set of simulated GPUs.
inline constexpr const char* kSimGpusEnv = "TESSERA_SIM_GPUS";    // e.g. 2xA100-80GB
inline constexpr const char* kSimStateEnv = "TESSERA_SIM_STATE";  // the shared state directory

// --- The allocation payload ------------------------------------------------
inline constexpr int kAllocationVersion = 1;
inline constexpr int64_t kMaxMemoryMiB = int64_t{1} << 20;  // 1 TiB of device memory per GPU
inline constexpr int kMaxCoresPercent = 100;
inline constexpr size_t kMaxDevicesPerContainer = 16;

// --- Resources and priority --------------------------------------------------
// The extended resource a GPU slice is requested with, unless configured
// otherwise (HAMi's name): tessera-node's default resource_name, and the
// default of core's ResourceConfig::gpu_count_name.
inline constexpr std::string_view kDefaultGpuResource = "nvidia.com/gpu";
// Priority (nvidia.com/priority, passed as CUDA_TASK_PRIORITY).
// CUDA's and HAMi's sense: 0 (also when unset) is high, 1 and above is low.
constexpr bool IsHighPriority(int priority) {
  return priority <= 0;
}

namespace detail {
constexpr bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
// 8-4-4-4-12 hex digits separated by '-'.
constexpr bool IsHexGroups(std::string_view s) {
  constexpr size_t kGroups[] = {8, 4, 4, 4, 12};
  size_t pos = 0;
  for (size_t g = 0; g < 5; ++g) {
    for (size_t i = 0; i < kGroups[g]; ++i, ++pos) {
      if (pos >= s.size() || !IsHex(s[pos])) return false;
    }
    if (g < 4) {
      if (pos >= s.size() || s[pos] != '-') return false;
      ++pos;
    }
  }
  return pos == s.size();
}
// A MIG instance ID: 1 to 4 digits (NVML's are below 100), so that the
// longest UUID fits the region's 64-byte field with its NUL.
constexpr bool IsInstanceId(std::string_view s) {
  if (s.empty() || s.size() > 4) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}
}  // namespace detail

// A device UUID as NVML and CUDA print them: GPU-<8-4-4-4-12 hex>, a MIG
// device MIG-<8-4-4-4-12 hex>, or the older MIG-GPU-<hex groups>/<gi>/<ci>.
constexpr bool IsValidDeviceUuid(std::string_view uuid) {
  if (uuid.starts_with("GPU-")) return detail::IsHexGroups(uuid.substr(4));
  if (uuid.starts_with("MIG-GPU-")) {
    std::string_view rest = uuid.substr(8);
    const size_t first = rest.find('/');
    if (first == std::string_view::npos || !detail::IsHexGroups(rest.substr(0, first))) return false;
    rest.remove_prefix(first + 1);
    const size_t second = rest.find('/');
    if (second == std::string_view::npos) return false;
    return detail::IsInstanceId(rest.substr(0, second)) && detail::IsInstanceId(rest.substr(second + 1));
  }
  if (uuid.starts_with("MIG-")) return detail::IsHexGroups(uuid.substr(4));
  return false;
}

static_assert(IsValidDeviceUuid("GPU-1a2b3c4d-0000-1111-2222-333344445555"));
static_assert(IsValidDeviceUuid("MIG-1a2b3c4d-0000-1111-2222-333344445555"));
static_assert(IsValidDeviceUuid("MIG-GPU-1a2b3c4d-0000-1111-2222-333344445555/1/0"));
static_assert(!IsValidDeviceUuid("GPU-1"));
static_assert(!IsValidDeviceUuid("gpu-1a2b3c4d-0000-1111-2222-333344445555"));
static_assert(!IsValidDeviceUuid("MIG-GPU-1a2b3c4d-0000-1111-2222-333344445555/12345/0"));
// The longest valid UUID fits a 64-byte field with its NUL (libvgpu's region).
static_assert(std::string_view("MIG-GPU-1a2b3c4d-0000-1111-2222-333344445555/9999/9999").size() < 64);

}  // namespace tessera::contract
