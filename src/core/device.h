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
  bool operator==(const Gpu&) const = default;

  // Whether slices may be placed on it: healthy and not held whole by a pod
  // tessera did not place.
  bool usable() const { return healthy && held_by.empty(); }
};

}  // namespace tessera::core
