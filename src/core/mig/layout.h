// mig-parted layout files, and the per-GPU plan a node derives from one.
//
// The format is NVIDIA mig-parted's `version: v1` spec, as operators already
// write it (the GPU operator's config-default.yaml reads unchanged):
//
//   version: v1
//   mig-configs:
//     all-balanced:                       # a configuration: a list of entries
//       - device-filter: ["0x20B210DE"]   # optional: PCI device ids (one string or a list)
//         devices: all                    # or a list of GPU indices: [0, 1]
//         mig-enabled: true
//         mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
//
// Selection follows mig-parted: an entry selects the GPUs whose PCI device id
// its filter lists (no filter: any) and whose index its `devices` names; when
// several entries select a GPU the last one decides (mig-parted applies them
// in order); a GPU no entry selects is left as it is. A GPU that is not
// MIG-capable is left alone by `devices: all` and by `mig-enabled: false`, and
// is an error when an entry names it by index to enable MIG (as mig-parted).
//
// A plan places every instance explicitly (start slice), packing large
// profiles first and keeping the GPU's current instances where the layout
// still names them, so re-applying a layout changes nothing. Each GPU's plan is
// all-or-nothing: a GPU whose entry cannot be met gets an error, never part
// of its layout.
//
// Pure functions of their inputs; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "core/mig/geometry.h"

namespace tessera::core::mig {

// One entry of a configuration.
struct LayoutEntry {
  std::vector<uint32_t> device_filter;  // PCI device ids, (device << 16) | vendor; empty = any GPU
  bool all_devices = true;              // `devices: all`
  std::vector<int> devices;             // else these indices
  bool mig_enabled = false;
  // Profile name -> count, in the file's order of keys ("1g.10gb+me" as written).
  std::vector<std::pair<std::string, int>> mig_devices;
  int line = 0;  // 1-based line of the entry in the file, for messages
};

struct LayoutFile {
  std::string source;  // the file's name, for messages
  std::map<std::string, std::vector<LayoutEntry>> configs;
};

// Parses a layout file. `source` names it in errors. An error names the key
// path and line ("config.yaml:12: mig-configs.custom[1].devices: must be 'all'
// or a list of GPU indices, got 'some'") and says what is accepted.
Result<LayoutFile> ParseLayout(std::string_view yaml, const std::string& source);

// A GPU of the node as the planner needs it.
struct NodeGpu {
  int index = 0;  // NVML index, as mig-parted's `devices` counts
  GpuIdentity identity;
  bool mig_capable = true;  // false when NVML says MIG is not supported
  // Instances on it now: the plan keeps those the layout still names where
  // they are, so that applying a layout twice creates and destroys nothing.
  std::vector<Instance> current;
};

enum class GpuAction {
  kLeave,    // not selected, or not MIG-capable and not asked to be: touch nothing
  kDisable,  // MIG mode off (no instances)
  kEnable,   // MIG mode on with exactly `instances`
};

struct GpuPlan {
  int index = 0;
  GpuAction action = GpuAction::kLeave;
  std::string model;                // Model::key; empty when not recognised
  std::vector<Instance> instances;  // kEnable: every instance, placed; sorted by start
  int entry = -1;                   // the entry that selected it (0-based), -1 when none
  std::string note;                 // kLeave: why
};

struct GpuFailure {
  int index = 0;
  Error error;  // names the GPU, the configuration and entry, and the cause
};

// Every GPU of the node is in exactly one of `plans` and `failures`.
struct NodePlan {
  std::string config;
  std::vector<GpuPlan> plans;
  std::vector<GpuFailure> failures;
};

// The plan of configuration `config_name` (the node's nvidia.com/mig.config
// label) for `gpus`. Fails as a whole when the configuration does not exist or
// an entry names a GPU index the node lacks; otherwise per GPU (unknown
// profile, a profile this model lacks, more than the geometry holds, MIG on a
// GPU without it or without a tessera table).
Result<NodePlan> ResolveLayout(const LayoutFile& file, std::string_view config_name,
                               std::span<const NodeGpu> gpus);

// Places `counts` (profile name -> instances) on a GPU of `model`: every
// instance at an explicit start, large profiles first, the instances of
// `prefer` kept where the counts allow. Fails naming the cause when a profile
// is not the model's or when they cannot all fit.
Result<std::vector<Instance>> PackInstances(const Model& model,
                                            std::span<const std::pair<std::string, int>> counts,
                                            std::span<const Instance> prefer = {});

// What exists on a GPU now.
struct ExistingInstance {
  Instance instance;
  bool in_use = false;           // a container uses it: never destroyed by a diff
  uint32_t gpu_instance_id = 0;  // NVML's id, carried through for the caller
};

// The steps from what exists to what is wanted. Destroy before create. An
// instance in use that the wanted set lacks is `blocked` (left in place and
// reported); a wanted instance that cannot be created while it stays is
// `deferred`. Applying `destroy` then `create` yields `keep` + `blocked` +
// `create`, always a valid set.
struct InstanceDiff {
  std::vector<ExistingInstance> keep;
  std::vector<ExistingInstance> destroy;
  std::vector<ExistingInstance> blocked;
  std::vector<Instance> create;
  std::vector<Instance> deferred;
  bool complete() const { return blocked.empty() && deferred.empty(); }
};

InstanceDiff DiffInstances(const Model& model, std::span<const Instance> wanted,
                           std::span<const ExistingInstance> existing);

}  // namespace tessera::core::mig
