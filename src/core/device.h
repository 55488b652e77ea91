// The physical GPUs of a node, as the node agent discovers them and the
// scheduler sees them. Devices are always identified by UUID, never by ordinal:
// ordinals differ between the host, NVML and a container's CUDA view.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::core {

enum class LinkKind {
  kNvlink,  // direct NVLink between the two GPUs
  kPcie,    // P2P over PCIe (same root complex / switch)
};

// A peer-to-peer path from one GPU to another on the same node.
struct GpuLink {
  std::string peer_uuid;
  LinkKind kind = LinkKind::kNvlink;
  int lanes = 1;  // NVLink link count (bandwidth grows with it); 1 for PCIe
  bool operator==(const GpuLink&) const = default;
};

// How a GPU is shared. A GPU in MIG mode offers MIG devices, never vGPU
// slices: static = the node applies a mig-parted layout and advertises its
// instances; dynamic = tessera-scheduler picks a profile and placement per
// request and the node creates the instance at Allocate (docs/mig.md).
enum class MigMode { kNone, kStatic, kDynamic };

// The sharing mode as operators read it on the dashboard and in kubectl
// tessera: "vgpu", "mig" (a layout the node applies), "mig-dynamic".
constexpr const char* SharingModeName(MigMode mode) {
  switch (mode) {
    case MigMode::kNone:
      return "vgpu";
    case MigMode::kStatic:
      return "mig";
    case MigMode::kDynamic:
      return "mig-dynamic";
  }
  return "vgpu";
}

// One MIG device of a GPU in MIG mode (a GPU instance and the compute instance
// spanning it), as the node agent reports it in the inventory.
struct MigDevice {
  std::string uuid;     // "MIG-..." of the compute instance
  std::string profile;  // GPU-instance profile, "1g.10gb"
  int start = 0;        // placement: first memory slice
  int size = 1;         // placement: memory slices
  int64_t memory_mib = 0;
  int sm_count = 0;
  bool healthy = true;
  // "<namespace>/<pod>/<container>" of the container holding it (the
  // kubelet's PodResources); "" = free.
  std::string used_by;
  bool operator==(const MigDevice&) const = default;
};

struct Gpu {
  std::string uuid;        // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  int index = 0;           // NVML index on the node (display only)
  std::string model;       // product name, e.g. "NVIDIA A100-SXM4-80GB"
  int64_t memory_mib = 0;  // total device memory offered for sharing (after memory scaling)
  int sm_count = 0;
  int numa_node = -1;  // -1 = unknown
  bool healthy = true;
  int slots = 10;  // how many vGPUs may share it (split count)
  // Compute offered for sharing, in percent of the GPU: 100 × the node's core
  // scaling (> 100 oversubscribes compute). A vGPU's cores are counted against
  // it; `gpucores: 100` still means the whole GPU, held exclusively.
  int cores = 100;
  bool mig_capable = false;
  std::vector<GpuLink> links;
  // "<namespace>/<name>" of a pod tessera-scheduler did not place that holds
  // the GPU whole (the node agent's unplaced_pods: whole-gpu); "" = none.
  std::string held_by;
  // kNone: offered as vGPU slices. Otherwise its MIG devices, by start.
  MigMode mig_mode = MigMode::kNone;
  std::vector<MigDevice> mig_devices;
  bool operator==(const Gpu&) const = default;

  // Whether slices may be placed on it: healthy, not held whole by a pod
  // tessera did not place, and not in MIG mode.
  bool usable() const { return healthy && held_by.empty() && mig_mode == MigMode::kNone; }
};

}  // namespace tessera::core
