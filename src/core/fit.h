// Fit: can a pod run on a node, and on which GPUs?
//
// For a NodeState and a PodRequest, FitNode returns one feasible placement
// (chosen by a GpuOrder and the topology preference) or the reasons it does
// not fit: per GPU (unhealthy, filtered by type or UUID, no free slot, not
// enough memory or cores, exclusivity) and per node (host CPU/memory, too few
// usable GPUs). Scoring policies (policy.h) build on these functions; the
// scheduler extender, `tessera run` and the trace benchmark all use them.
//
// Rules:
//  * Every vGPU of a container is on a different physical GPU of the node.
//  * memory_percent resolves against each candidate GPU's memory; memory 0
//    with no percent means the whole GPU's memory.
//  * cores = 100 means the vGPU holds its GPU alone: the GPU must be idle, and
//    nothing else may join it afterwards.
//  * Sharing modes (docs/scheduler.md "Sharing modes"): a vGPU slice goes
//    only on a vgpu GPU, or on an exclusive GPU when it asks for the whole GPU
//    (all its memory: gpumem 0 or equal to it, or percentage 100; cores 0 or
//    100), where it holds the GPU whole (cores 100). An MPS share
//    (ShareKind::kMps) goes only on an mps GPU with replicas 0, accounted like
//    a slice; ShareKind::kExclusive only on exclusive GPUs. Time-sliced GPUs
//    and MPS GPUs with replicas take nothing from tessera: kube-scheduler
//    counts their replicas. MIG GPUs take MIG instances (mig_placement.h).
//  * App containers are placed in sequence; each sees what the previous ones of
//    the same pod took. Init containers are placed each on its own against the
//    node (they run alone before the app containers and do not add to them).
//
// Pure functions of their inputs; no I/O; thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/allocation.h"
#include "core/node_state.h"
#include "core/request.h"

namespace tessera::core {

enum class GpuReason {
  kFits,
  kUnhealthy,
  kHeldByUnplacedPod,  // a pod tessera did not place holds it whole (Gpu::held_by)
  kUuidNotAllowed,     // use-gpuuuid / nouse-gpuuuid
  kTypeNotAllowed,     // use-gputype / nouse-gputype
  kHeldExclusively,    // another vGPU holds the GPU with cores = 100
  kNeedsExclusive,     // the request has cores = 100 but the GPU is in use
  kNoFreeSlot,         // all vGPU slots of the GPU are taken
  kInsufficientMemory,
  kInsufficientCores,
  kUsedBySameContainer,  // a container's vGPUs must be on distinct GPUs
  kInMigMode,            // the GPU offers MIG devices, not vGPU slices (Gpu::mode)
  kReplicasOnly,         // time-sliced, or MPS split into replicas: kube-scheduler counts them
  kModeMismatch,         // the GPU's mode takes another kind of share (ShareKind)
  kNeedsWholeGpu,        // an exclusive GPU takes only whole-GPU requests
};

std::string_view ReasonName(GpuReason reason);

// The verdict for one GPU and one container. `asked`/`free` carry the numbers
// of a memory (MiB) or cores (%) shortfall, or slots for kNoFreeSlot.
struct GpuCheck {
  GpuReason reason = GpuReason::kFits;
  int64_t memory_mib = 0;  // the resolved per-vGPU memory for this GPU
  int64_t asked = 0;
  int64_t free = 0;
  int cores = 0;  // the resolved per-vGPU cores for this GPU (100 on an exclusive GPU)
  bool fits() const { return reason == GpuReason::kFits; }
};

// Checks one GPU for one vGPU of `container`. `pending` is usage already taken
// on this GPU by earlier containers of the same pod.
GpuCheck CheckGpu(const GpuState& gpu, const ContainerRequest& container, const GpuFilter& filter,
                  const GpuUsage& pending = {});

// CheckGpu(node.gpus()[gpu], ...), the same verdict, reading the node's
// compact view of the GPU (NodeState::gpu_views) in the usual case — a vGPU
// slice on a usable vGPU-mode GPU, no UUID or type filter — and the whole
// GpuState otherwise. What the per-node loops of the scheduler call.
GpuCheck CheckGpuOf(const NodeState& node, int gpu, const ContainerRequest& container,
                    const GpuFilter& filter, const GpuUsage& pending = {});

// Case-insensitive substring match of the model against use/nouse types, and
// exact match of the UUID against use/nouse UUIDs.
bool TypeAllowed(const GpuFilter& filter, std::string_view model);
bool UuidAllowed(const GpuFilter& filter, std::string_view uuid);

struct GpuRejection {
  std::string container;
  int gpu = -1;
  std::string uuid;
  GpuCheck check;
  std::string message;  // e.g. "GPU-ab12 (#1): not enough memory: 3000 MiB asked, 1024 MiB free"
};

enum class NodeReason {
  kFits,
  kInsufficientCpu,
  kInsufficientHostMemory,
  kNotEnoughGpus,  // some container cannot find enough GPUs; see rejections
};

struct SlicePlacement {
  int gpu = -1;  // index into NodeState::gpus()
  int64_t memory_mib = 0;
  int cores = 0;
  bool mps{false};  // an MPS share (the GPU is in mps mode); DeviceSlice::mps
  bool operator==(const SlicePlacement&) const = default;
};

struct ContainerPlacement {
  int container = -1;  // index into PodRequest::containers or ::init_containers
  bool init = false;
  std::vector<SlicePlacement> slices;
  bool operator==(const ContainerPlacement&) const = default;
};

// Where each GPU container of a pod goes on one node (GPU indices, not UUIDs;
// ToAllocation turns it into the PodAllocation written to the pod).
struct Placement {
  std::vector<ContainerPlacement> containers;
  bool operator==(const Placement&) const = default;
};

// How to order equally suitable GPUs inside a node.
enum class GpuOrder {
  kBinpack,  // fullest first (least free milli-GPU), then lowest index
  kSpread,   // emptiest first, then lowest index
};

struct FitResult {
  bool fits = false;
  Placement placement;  // valid when fits
  NodeReason node_reason = NodeReason::kFits;
  std::string message;                   // one line for a person, empty when it fits
  std::vector<GpuRejection> rejections;  // per GPU, for the container that did not fit
};

// Whether `container` asks for all of `gpu`: its memory (gpumem 0 or equal to
// the GPU's, or percentage 100) and cores 0 or 100. Such a vGPU request may
// take an exclusive GPU.
bool AsksForWholeGpu(const Gpu& gpu, const ContainerRequest& container);

// Host resources a pod asks for.
HostResources HostDemandOf(const PodRequest& pod);

// Chooses `count` GPUs from `candidates` (GPU indices, most preferred first):
// a set whose GPUs are all NVLink-connected wins, then fewer NUMA nodes, then
// more NVLink lanes, then the candidates' order. Without topology information
// this is simply the first `count` candidates. Empty if too few candidates.
std::vector<int> ChooseGpus(const NodeState& node, std::span<const int> candidates, int count);

// Does `pod` fit on `node`? When it does, `placement` is the one the GpuOrder
// and topology preference pick.
FitResult FitNode(const NodeState& node, const PodRequest& pod, GpuOrder order = GpuOrder::kBinpack);

// FitNode(node, pod).fits, without building a placement or a message (the
// extender's filter asks only this, then FitNode for the reason of a node that
// does not fit). Pods with one GPU app container are counted directly; others
// go through FitNode, where each container sees the GPUs earlier ones took.
bool FitsNode(const NodeState& node, const PodRequest& pod);

// The allocation to write into the pod / apply to the node.
PodAllocation ToAllocation(const NodeState& node, const PodRequest& pod, const Placement& placement);

}  // namespace tessera::core
