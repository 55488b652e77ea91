// Which GPU of the node is in which sharing mode: the one place that says it
// (docs/sharing.md). Three inputs, one answer:
//
//  - the `sharing` key, a list of rules, each selecting GPUs and a mode:
//      sharing:
//      - {gpus: "0,1", mode: exclusive}
//      - {gpus: "NVIDIA A100-SXM4-80GB", mode: timeslice, replicas: 4, memory_split: equal}
//      - {gpus: "GPU-8f6e…", mode: mps, replicas: 2}
//      - {gpus: all, mode: vgpu}
//    `gpus` is "all", indices ("0,2" or a YAML list [0, 2]), a UUID, or a
//    model name (NVML's "NVIDIA A100-SXM4-80GB" or GFD's
//    "NVIDIA-A100-SXM4-80GB"). A selector matching no GPU of this node is
//    not an error (one file serves many nodes); a GPU matched by two rules is.
//  - `nvidia_config_file`: NVIDIA's device-plugin file (nvidia_config.h),
//    whose timeSlicing or mps section puts the GPUs its `devices` select in
//    that mode, as if written as rules;
//  - `mig_gpus` (with `mig_layout_file`) and `mig_dynamic_gpus`, kept as they
//    were: aliases of rules with mode mig / mig-dynamic.
// A GPU no input names is in vgpu mode (tessera's default, as before).
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "core/device.h"
#include "node/config.h"
#include "node/sharing/nvidia_config.h"

namespace tessera::node::sharing {

// The name of the replicas' resource when a rule names none: NVIDIA's, and
// with rename (`rename_by_default: true`) NVIDIA's renamed one.
inline constexpr std::string_view kReplicaResource = "nvidia.com/gpu";
inline constexpr std::string_view kSharedSuffix = ".shared";

// What a time-sliced container's memory is limited to (tessera's addition,
// enforced by libvgpu): nothing, or the GPU's memory / replicas per replica held.
enum class MemorySplit { kNone, kEqual };

// One entry of the `sharing` key, as written.
struct SharingRule {
  std::string gpus;  // the selector, as written ("all", "0,2", a UUID, a model)
  core::SharingMode mode = core::SharingMode::kVgpu;
  // timeslice: replicas per GPU (>= 1). mps: 0 = each client sized per request
  // by tessera-scheduler, >= 1 = NVIDIA's equal split into that many replicas.
  int replicas = 0;
  std::string resource;                                // timeslice/mps replicas: "" = kReplicaResource
  bool rename_by_default = false;                      // "" resource -> "nvidia.com/gpu.shared"
  std::optional<bool> fail_requests_greater_than_one;  // unset: false (timeslice), true (mps), as NVIDIA
  MemorySplit memory_split = MemorySplit::kNone;       // timeslice only
  int mps_active_thread_percentage = 0;                // mps: 1-100; 0 = 100 / replicas
  int64_t mps_pinned_memory_mib = 0;                   // mps: per client; 0 = memory / replicas
};

// Parses the `sharing` key's value (YAML text of a list; "" or "[]" = no
// rules). Errors name the entry and key: "sharing[1].replicas must be ...".
Result<std::vector<SharingRule>> ParseSharingRules(std::string_view yaml_text);

// The checks that need no GPU list: the rules parse, their keys fit their
// mode, mig/mig-dynamic rules select by index or "all" only. Called from
// node::Validate.
Status ValidateSharingSettings(const NodeConfig& config);

// Folds `sharing` rules of mode mig / mig-dynamic into `mig_gpus` /
// `mig_dynamic_gpus` (which MigManager and DynamicMig read), so the old keys
// and the list say the same thing. Setting a GPU in both places with
// different modes, or the old key explicitly beside a rule of its mode, is an
// error naming both. Called once after the configuration is assembled.
Status FoldMigRules(NodeConfig& config);

// One GPU's mode, resolved.
struct GpuMode {
  std::string uuid;
  int index = 0;
  core::SharingMode mode = core::SharingMode::kVgpu;
  int replicas = 0;           // timeslice: >= 1; mps: 0 (per request) or >= 1; others 0
  std::string resource_name;  // what its devices are advertised as (vgpu/exclusive: resource_name)
  bool renamed = false;       // replicas advertised under a name other than the plain one (GFD: -SHARED)
  bool fail_requests_greater_than_one = false;
  MemorySplit memory_split = MemorySplit::kNone;
  int mps_active_thread_percentage = 0;  // mps with replicas: resolved (100 / replicas unless set)
  int64_t mps_pinned_memory_mib = 0;     // mps with replicas: resolved (memory / replicas unless set)
  // Where the mode came from, for logs and errors: "sharing[2]",
  // "nvidia_config_file sharing.timeSlicing.resources[0]", "mig_gpus",
  // "mig_dynamic_gpus", "default".
  std::string source;
  bool operator==(const GpuMode&) const = default;
};

struct ModeAssignment {
  std::vector<GpuMode> gpus;  // one per GPU given, same order
  // Things worth one log line each: selectors that matched no GPU here, keys
  // of NVIDIA's file without effect.
  std::vector<std::string> notes;

  const GpuMode* Find(const std::string& uuid) const;
  // The GPUs advertised as replicas (timeslice, mps with replicas), by
  // resource name.
  std::map<std::string, std::vector<GpuMode>> ReplicaResources() const;
};

// Resolves every GPU's mode. `gpus` are the discovered GPUs (index, uuid,
// model, memory_mib = physical memory, mig_capable); `nvidia` the parsed
// nvidia_config_file (null: none). Errors, each naming its source: a GPU
// selected twice (rules, NVIDIA's file, the MIG keys); MPS on a GPU in a MIG
// mode or on MIG devices; an MPS memory limit above the GPU's memory;
// replicas of a resource name the vGPU devices are advertised as too (one
// plugin per resource name; docs/decisions.md); a resource name used by two
// modes.
Result<ModeAssignment> AssignModes(const NodeConfig& config, const std::vector<core::Gpu>& gpus,
                                   const NvidiaConfig* nvidia);

// The resource-name part of AssignModes' checks, alone: for an assignment
// put together from two (a reload that keeps some GPUs in their old mode).
// `modes.gpus` and `gpus` are parallel.
Status CheckResourceNames(const NodeConfig& config, const std::vector<core::Gpu>& gpus,
                          const ModeAssignment& modes);

}  // namespace tessera::node::sharing
