// The physical GPUs of a node, as the node agent discovers them and the
// scheduler sees them. Devices are always identified by UUID, never by ordinal:
// ordinals differ between the host, NVML and a container's CUDA view.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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

// How a GPU is shared, chosen per GPU in the node agent's configuration and
// published in the inventory:
//   kVgpu        tessera's vGPU slices (memory + cores, enforced by libvgpu);
//   kExclusive   handed out whole, to one container at a time;
//   kTimeslice   advertised as `replicas` interchangeable replicas that
//                kube-scheduler counts (NVIDIA's time-slicing);
//   kMps         one MPS control daemon; clients are limited by an
//                active-thread percentage and a pinned memory limit, either
//                sized per request by tessera-scheduler (replicas == 0) or
//                split equally into `replicas` (NVIDIA's sharing.mps);
//   kMigStatic   MIG: the node applies a layout and advertises its instances;
//   kMigDynamic  MIG: tessera-scheduler picks a profile and placement per
//                request and the node creates the instance at Allocate
//                (docs/mig.md).
enum class SharingMode { kVgpu, kExclusive, kTimeslice, kMps, kMigStatic, kMigDynamic };

// The mode as operators write it in the node configuration and read it on the
// dashboard and in kubectl tessera: "vgpu", "exclusive", "timeslice", "mps",
// "mig" (a layout the node applies), "mig-dynamic".
constexpr const char* SharingModeName(SharingMode mode) {
  switch (mode) {
    case SharingMode::kVgpu:
      return "vgpu";
    case SharingMode::kExclusive:
      return "exclusive";
    case SharingMode::kTimeslice:
      return "timeslice";
    case SharingMode::kMps:
      return "mps";
    case SharingMode::kMigStatic:
      return "mig";
    case SharingMode::kMigDynamic:
      return "mig-dynamic";
  }
  return "vgpu";
}

// For error messages: every spelling SharingModeName gives.
inline constexpr std::string_view kSharingModeList = "vgpu, exclusive, timeslice, mps, mig or mig-dynamic";

// The inverse of SharingModeName: exactly those spellings (case-sensitive),
// nullopt for anything else.
constexpr std::optional<SharingMode> ParseSharingMode(std::string_view name) {
  for (SharingMode mode : {SharingMode::kVgpu, SharingMode::kExclusive, SharingMode::kTimeslice,
                           SharingMode::kMps, SharingMode::kMigStatic, SharingMode::kMigDynamic}) {
    if (name == SharingModeName(mode)) return mode;
  }
  return std::nullopt;
}

// Whether the GPU offers MIG devices (and never vGPU slices).
constexpr bool IsMigMode(SharingMode mode) {
  return mode == SharingMode::kMigStatic || mode == SharingMode::kMigDynamic;
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
  SharingMode mode = SharingMode::kVgpu;
  // Replicas the node advertises for a kTimeslice GPU (>= 1) or a kMps GPU
  // split NVIDIA-style (sharing.mps); 0 otherwise. kube-scheduler counts them,
  // not tessera-scheduler.
  int replicas = 0;
  // In a MIG mode: its MIG devices, by start. Empty otherwise.
  std::vector<MigDevice> mig_devices;
  bool operator==(const Gpu&) const = default;

  // Whether vGPU slices may be placed on it: healthy, not held whole by a pod
  // tessera did not place, and in vGPU mode.
  bool usable() const { return healthy && held_by.empty() && mode == SharingMode::kVgpu; }
};

}  // namespace tessera::core
