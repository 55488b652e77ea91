// libvgpu's configuration: what this container was granted, read once from the
// environment at start.
//
// Sources, in order of precedence:
//  1. TESSERA_ALLOCATION — the scheduler's decision (JSON, the pod annotation
//     tessera.io/allocation), per device UUID. TESSERA_CONTAINER_NAME selects
//     this container's entry (optional when there is exactly one entry).
//  2. HAMi's variables, so HAMi pod specs and images work unchanged:
//     CUDA_DEVICE_MEMORY_LIMIT[_<i>] (bytes, or with suffix k/m/g; 0 = no limit),
//     CUDA_DEVICE_SM_LIMIT[_<i>] (percent). <i> is the CUDA ordinal as the
//     container sees it — HAMi's contract; tessera resolves it to a UUID once.
// A malformed TESSERA_ALLOCATION is reported (Config::problems) and ignored in
// favour of the HAMi variables; nothing here aborts.
//
// A container whose pod tessera-scheduler did not place has no
// TESSERA_ALLOCATION; tessera-node's Allocate tells libvgpu what such a
// container gets (TESSERA_UNPLACED_PODS: "refuse" = no device is visible, even
// with CUDA_DISABLE_CONTROL; "whole-gpu" = only the GPUs behind the kubelet's
// device IDs, TESSERA_KUBELET_GPUS, with no limit unless HAMi's variables set
// one). Without TESSERA_UNPLACED_PODS (tessera run, a container libvgpu was
// put in by hand) nothing changes.
//
// A limits file overrides all of the above (docs/security.md): the container
// can change its own environment (for the processes it starts), but not a file
// on a read-only mount. tessera-node mounts one at
// contract::kLimitsContainerDir, which libvgpu looks at whatever the
// environment says; without that directory TESSERA_LIMITS may name one
// (`tessera run`). Its content is the allocation payload with one container
// entry. When it applies, TESSERA_ALLOCATION, HAMi's limit variables and
// CUDA_DISABLE_CONTROL are ignored (a line says so when they disagree); when
// it is configured but not written yet, the environment applies until it
// appears (Runtime re-reads it); when it cannot be read or parsed, no device
// is visible.
//
// Other variables: CUDA_DEVICE_MEMORY_SHARED_CACHE / TESSERA_REGION (region
// path), CUDA_OVERSUBSCRIBE, ACTIVE_OOM_KILLER, CUDA_DISABLE_CONTROL,
// GPU_CORE_UTILIZATION_POLICY, CUDA_TASK_PRIORITY, LIBCUDA_LOG_LEVEL.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "contract/container_contract.h"

namespace tessera::vgpu {

inline constexpr const char* kDefaultRegionPath = "/tmp/tessera/vgpu.region";
inline constexpr int kMaxConfigDevices = 16;

struct DeviceGrant {
  std::string uuid;
  uint64_t memory_bytes = 0;  // 0 = no memory limit
  int cores = 0;              // percent; 0 or 100 = no compute limit
};

enum class ConfigSource { kNone, kHami, kAllocation };

// TESSERA_UNPLACED_PODS: what a container without an allocation gets.
enum class UnplacedPolicy { kUnset, kRefuse, kWholeGpu };

struct Config {
  bool control_disabled = false;  // CUDA_DISABLE_CONTROL: pass everything through
  int log_level = 2;
  ConfigSource source = ConfigSource::kNone;

  // From TESSERA_ALLOCATION (source == kAllocation): only these devices are visible.
  std::vector<DeviceGrant> grants;

  // From HAMi's variables, by container-visible CUDA ordinal. -1 = not set.
  int64_t hami_memory_default = -1;
  int64_t hami_memory_by_index[kMaxConfigDevices];
  int hami_cores_default = -1;
  int hami_cores_by_index[kMaxConfigDevices];

  // Applies only while source != kAllocation.
  UnplacedPolicy unplaced = UnplacedPolicy::kUnset;
  std::vector<std::string> kubelet_gpus;  // TESSERA_KUBELET_GPUS (UUIDs)

  bool oversubscribe = false;
  bool oom_killer = false;
  std::string region_path = kDefaultRegionPath;
  std::string core_policy = "default";  // force | disable | default
  // CUDA_TASK_PRIORITY, as the webhook passes nvidia.com/priority: lower is
  // more important (CUDA's and HAMi's convention). 0 (also when unset) =
  // high, 1 and above = low.
  int priority = 0;

  // The limits file (see above): its path ("" = none configured), and what
  // became of it.
  std::string limits_path;
  bool limits_from_file = false;  // grants (source kAllocation) are the file's
  bool limits_pending = false;    // configured, not there yet: the environment applies meanwhile
  bool limits_unusable = false;   // there, but unreadable or invalid: no device is visible

  std::vector<std::string> problems;  // each worth one log line

  Config();
  // The grant for a device, by UUID (allocation source only), or nullptr.
  const DeviceGrant* grant_for(const char* uuid) const;
  // Memory limit in bytes for a device seen at container ordinal `index` with
  // `uuid`; 0 = unlimited.
  uint64_t memory_limit_for(const char* uuid, int index) const;
  int cores_for(const char* uuid, int index) const;
  // Whether the container sees only some devices (device_visible says which):
  // those of its allocation, none when the node refuses it (even with
  // CUDA_DISABLE_CONTROL), the kubelet's under unplaced_pods: whole-gpu.
  bool filters_devices() const {
    if (unplaced_refused() || limits_unusable) return true;
    if (control_disabled) return false;
    return source == ConfigSource::kAllocation || unplaced == UnplacedPolicy::kWholeGpu;
  }
  // Whether the container may see this device at all ("" = a device whose
  // UUID could not be read).
  bool device_visible(const char* uuid) const;
  // The container was not placed by tessera-scheduler and the node refuses it GPUs.
  bool unplaced_refused() const {
    return source != ConfigSource::kAllocation && unplaced == UnplacedPolicy::kRefuse;
  }
};

// Environment lookup seam so tests need not touch the real environment.
using EnvLookup = const char* (*)(void* context, const char* name);

Config load_config(EnvLookup lookup, void* context);
Config load_config_from_process_env();

// The limits file to use: kLimitsFileName in `fixed_dir` when that directory
// exists (tessera-node's read-only mount; the environment cannot move it),
// else the variable `env_name` (TESSERA_LIMITS) from the environment, else "".
std::string resolve_limits_path(EnvLookup lookup, void* context, const char* fixed_dir,
                                const char* env_name = contract::kLimitsEnv);

// Applies the pod's own limits file (contract::kPodLimitsContainerDir: the
// limits annotation bind wrote, mounted read-only by the webhook) while the
// node's limits file is not configured or not there yet, so that limits the
// container cannot write hold from the first call rather than the
// environment's. The node's file, once there, wins (refresh picks it up).
// Nothing changes when `text` is nullptr without `read_error` (not mounted: a
// pod admitted before the webhook wired it) or blank (no annotation: the pod
// was not placed by tessera-scheduler); unreadable or invalid makes no device
// visible, as for the node's file. A file named by the environment
// (TESSERA_POD_LIMITS, where the directory does not exist: tests) is only as
// trustworthy as the environment: its limits apply but, like the
// environment's, a new process is held to the stricter of them and the
// region's (`from_fixed_dir` false).
void apply_pod_limits_file(Config& config, const std::string& path, const char* text,
                           const std::string& read_error, bool from_fixed_dir = true);

// Applies the limits file at `path` to `config` (see the top of this file).
// `text` is its content, nullptr when it does not exist; `read_error` says why
// it could not be read otherwise ("" when it could).
void apply_limits_file(Config& config, const std::string& path, const char* text,
                       const std::string& read_error);

// Parses a limits file's content: the allocation payload with exactly one
// container entry, whose devices are the grants; or, for a pod tessera did
// not place, {"version": 1, "unplaced": "refuse"} (no grant) or
// {"version": 1, "unplaced": "whole-gpu", "gpus": ["GPU-…", …]} (those GPUs,
// unlimited), which also sets *unplaced when given.
bool parse_limits(const char* json, std::vector<DeviceGrant>* grants, std::string* error,
                  UnplacedPolicy* unplaced = nullptr);

// Reads a file of at most 1 MiB. False with *missing when it does not exist,
// false with *error when it cannot be read.
bool read_small_file(const std::string& path, std::string* text, std::string* error, bool* missing);

// "3000", "512k", "1500m", "2g" (case-insensitive, powers of 1024). Returns
// false for anything else (empty, negative, garbage, overflow).
bool parse_memory_size(const char* text, uint64_t* bytes);
// "true"/"1"/"yes"/"on" (case-insensitive) -> true; anything else false.
bool parse_bool(const char* text);

// Parses TESSERA_ALLOCATION and selects this container's devices.
bool parse_allocation(const char* json, const char* container_name, std::vector<DeviceGrant>* grants,
                      std::string* error);

}  // namespace tessera::vgpu
