// MIG geometry: the GPU-instance profiles of each MIG-capable model tessera
// knows (A30-24GB, A100-40GB, A100-80GB, H100-80GB, H200-141GB), where each
// profile may be placed, and which model a GPU is.
//
// A GPU is cut along two axes: memory slices (8 on GA100/GH100, 4 on the A30),
// the placement axis NVML's nvmlGpuInstancePlacement_t {start, size} counts in,
// and compute slices (7, or 4 on the A30), the "g" of a profile name. An
// instance occupies the memory slices [start, start + size) of its placement;
// a set of instances fits a GPU when
//   - each sits at one of its profile's documented starts,
//   - no two share a memory slice,
//   - their compute slices add up to at most the GPU's, and
//   - no profile has more instances than its instance limit.
// That is exactly what NVML enforces (nvidia-smi mig -lgipp lists the starts),
// so 7 x 1g fill an A100 (compute), 4g + 3g do too, and a 3g at start 4 and a
// 1g at start 6 cannot coexist (memory slice 6).
//
// The tables are published figures: docs/mig.md names the sources of each and
// the figures that are inferred rather than read off a GPU. At run time NVML is
// the authority; these tables let the scheduler and the layout planner work
// without a GPU, and the node agent can check them against NVML.
//
// Pure data and pure functions; thread-safe (the tables are immutable).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace tessera::core::mig {

// One GPU-instance profile of one model.
struct Profile {
  std::string name;         // "1g.10gb", "1g.10gb+me": mig-parted's and nvidia-smi's spelling
  uint32_t id = 0;          // nvmlGpuInstanceProfileInfo_t::id, the nvidia-smi mig -lgip "ID"
  uint32_t nvml_index = 0;  // NVML_GPU_INSTANCE_PROFILE_* (the `profile` argument of ...ProfileInfo)
  uint32_t compute_slices = 0;
  uint32_t memory_slices = 0;  // the placement size
  uint32_t max_instances = 0;  // instanceCount
  uint32_t sm_count = 0;
  uint64_t memory_mib = 0;  // memorySizeMB
  uint32_t copy_engines = 0, decoders = 0, jpegs = 0, ofas = 0;
  std::vector<uint32_t> starts;  // valid placement starts, ascending
  bool media_extension = false;  // a "+me" profile: all media engines, one instance at most
  bool inferred = false;         // some figure is inferred, not read off a GPU (docs/mig.md)
};

// A MIG-capable GPU model and its profiles.
struct Model {
  std::string key;  // "A100-80GB"
  uint32_t memory_slices = 0;
  uint32_t compute_slices = 0;
  // Ampere leaves a MIG mode change pending until a GPU reset; Hopper applies it at once.
  bool mode_change_needs_reset = false;
  // PCI device ids, as NVML's pciDeviceId and mig-parted's device-filter write
  // them: (device << 16) | 0x10DE.
  std::vector<uint32_t> pci_device_ids;
  std::vector<Profile> profiles;  // ascending by size (memory slices, then compute slices)

  // The profile named `name` (exact spelling, "1g.10gb+me"), or nullptr.
  const Profile* FindProfile(std::string_view name) const;
  // "1g.10gb, 1g.10gb+me, ..." for error messages.
  std::string ProfileNames() const;
  // The full-GPU profile (7g / 4g on the A30): the GPU's usable SMs and memory in MIG mode.
  const Profile& Whole() const;
};

// All models, in table order.
std::span<const Model> Models();
// The model with this key ("A100-80GB"; case-insensitive), or nullptr.
const Model* FindModel(std::string_view key);

// What the node knows of a GPU from NVML.
struct GpuIdentity {
  std::string name;            // nvmlDeviceGetName: "NVIDIA A100-SXM4-80GB"
  uint64_t memory_mib = 0;     // nvmlDeviceGetMemoryInfo total, MiB
  uint32_t pci_device_id = 0;  // nvmlPciInfo_t::pciDeviceId; 0 = unknown
};

// The model of a GPU: by PCI device id when it is one of the tables', else by
// the name's family token (A30, A100/A800, H100/H800, H200) and, where a family
// has several memory sizes, the memory. An error names the GPU and why no
// table applies (not MIG-capable, or a variant tessera has no table for, such
// as the H100 NVL's 94 GB).
Result<const Model*> RecogniseModel(const GpuIdentity& gpu);

// One GPU instance: a profile at a placement.
struct Instance {
  std::string profile;  // profile name
  uint32_t start = 0;   // first memory slice
  bool operator==(const Instance&) const = default;
  auto operator<=>(const Instance&) const = default;
};

// Whether `instances` can coexist on a GPU of `model` (rules above). The error
// names the first offending instance and the rule it breaks.
Status CheckInstances(const Model& model, std::span<const Instance> instances);

// Whether `candidate` can be added to `existing` (which must itself be valid).
bool CanAdd(const Model& model, std::span<const Instance> existing, const Instance& candidate);

// The memory slices [start, start + size) of an instance as a bit mask (bit i =
// slice i); 0 for an unknown profile.
uint32_t SliceMask(const Model& model, const Instance& instance);

// "1g.10gb@6" for messages.
std::string Describe(const Instance& instance);

}  // namespace tessera::core::mig
