// Dynamic MIG placement on one node (issue 14 item 3, the scheduler's half):
// where each GPU container of a pod that asked for MIG (HAMi's annotation
// `nvidia.com/vgpu-mode: mig`) gets a MIG instance created for it, among the
// node's GPUs in `mig-dynamic` mode.
//
// Per vGPU of a container: the request is its memory (gpumem MiB; a percent
// of the GPU's memory; none = the whole GPU) and its gpucores as a share of
// the GPU's SMs. On every dynamic GPU the filter allows, core/mig's Placer
// picks the smallest profile that holds it and the placement that keeps the
// GPU most useful (docs/mig.md, "Dynamic placement"), beside the instances the
// inventory lists, the pending ones and those already placed for earlier
// vGPUs of the pod. Among the GPUs that have room, the fullest (most memory
// slices taken) wins, so whole GPUs stay free for large requests; then the
// highest Placer::Value after the placement; then the lowest index. A
// container's vGPUs go to distinct GPUs, as vGPU slices do.
//
// Which pods: only those with the annotation (docs/decisions.md). A GPU in
// `mig-dynamic` mode takes nothing else, and such a pod nothing else.
//
// Pure functions; thread-safe (the Placers are built once, immutable).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "core/allocation.h"
#include "core/mig/geometry.h"
#include "core/node_state.h"
#include "core/request.h"

namespace tessera::scheduler {

inline constexpr std::string_view kVgpuModeAnnotation = "nvidia.com/vgpu-mode";
inline constexpr std::string_view kVgpuModeMig = "mig";

// Whether the pod asks for dynamic MIG: its annotation nvidia.com/vgpu-mode
// is "mig" (case-insensitive).
bool WantsDynamicMig(const nlohmann::json& pod);

// An instance placed on a GPU for a reserved or bound pod. The node may list
// it already (created) or not yet; PlaceDynamicMig counts one that the
// inventory lists too (same GPU, profile and start) once.
struct PendingMigInstance {
  std::string gpu_uuid;
  core::mig::Instance instance;
};

struct MigDevicePlacement {
  int gpu = -1;  // index into NodeState::gpus()
  core::mig::Instance instance;
  uint64_t memory_mib = 0;  // the profile's
  // What the choice of GPU was made on: the GPU's memory slices taken before
  // this instance (of `memory_slices`), and Placer::Value with it.
  int slices_used_before = 0;
  int memory_slices = 0;
  double value_after = 0;
};

struct MigContainerPlacement {
  int container = -1;  // index into PodRequest::containers or ::init_containers
  bool init = false;
  std::vector<MigDevicePlacement> devices;
};

// The instances for every GPU container of `pod` on `node`, or an error that
// says why not, per GPU ("GPU-… (#0, NVIDIA A100-SXM4-80GB): no free placement
// …", "not in mig-dynamic mode"). Init containers are placed beside the app
// containers' instances (an instance is created per container, and init
// containers' instances are not shared).
Result<std::vector<MigContainerPlacement>> PlaceDynamicMig(
    const core::NodeState& node, const core::PodRequest& pod,
    const std::vector<PendingMigInstance>& pending = {});

// The allocation for those placements: per device the parent GPU's UUID, the
// profile's memory, cores 0, and the profile and start to create.
core::PodAllocation ToMigAllocation(const core::NodeState& node, const core::PodRequest& pod,
                                    const std::vector<MigContainerPlacement>& placements);

// How good a node is for the pod whose placements these are, for prioritize:
// per device the GPU's fullness before it (memory slices taken / the GPU's
// memory slices) plus Placer::Value after it scaled below one fullness step
// (value / (memory slices + 1)), averaged over the devices. So the fullest
// GPU with room wins across nodes as PlaceDynamicMig's choice does inside
// one, then the placement that leaves the GPU most useful. In [0, 1];
// 0 for no devices.
double MigPlacementScore(const std::vector<MigContainerPlacement>& placements);

// An allocation split by kind: the vGPU slices (containers without any left
// out) and the MIG instances (devices with a "mig" member), by parent GPU.
struct SplitAllocation {
  core::PodAllocation vgpu;
  std::vector<PendingMigInstance> mig;
};
SplitAllocation SplitByKind(const core::PodAllocation& allocation);

// Whether `instance` can be held on `node`: its GPU is there, in mig-dynamic
// mode, of a model with a MIG table that has the profile at that start. It
// does not look at other instances (overlaps are the Placer's to report).
Status CheckMigInstance(const core::NodeState& node, const PendingMigInstance& instance);

}  // namespace tessera::scheduler
