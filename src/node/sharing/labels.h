// The Node labels of the node's sharing, as NVIDIA's GPU feature discovery
// writes them for its device plugin's sharing, so selectors written for
// NVIDIA's labels keep working:
//   nvidia.com/gpu.sharing-strategy  none | time-slicing | mps (| mixed: both
//                                    kinds of replicas on one node, tessera only)
//   nvidia.com/gpu.replicas          the replicas per shared GPU (the largest
//                                    when GPUs differ; 1 when none is shared)
//   nvidia.com/mps.capable           true when a GPU is in mps mode
//   nvidia.com/gpu.product           with replicas renamed: the shared GPUs'
//                                    product + "-SHARED" (GFD's rename rule);
//                                    not written otherwise (GFD's to write)
// and tessera's own:
//   tessera.io/gpu.sharing-modes     the modes present, sorted, '.'-joined
//                                    ("exclusive.timeslice.vgpu")
//
// Thread-safety: a pure function.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "node/sharing/gpu_modes.h"

namespace tessera::node::sharing {

inline constexpr const char* kSharingStrategyLabel = "nvidia.com/gpu.sharing-strategy";
inline constexpr const char* kReplicasLabel = "nvidia.com/gpu.replicas";
inline constexpr const char* kMpsCapableLabel = "nvidia.com/mps.capable";
inline constexpr const char* kProductLabel = "nvidia.com/gpu.product";
inline constexpr const char* kSharingModesLabel = "tessera.io/gpu.sharing-modes";

// `gpus` are the discovered GPUs (for their models), `modes` their modes.
std::map<std::string, std::optional<std::string>> SharingLabels(const ModeAssignment& modes,
                                                                const std::vector<core::Gpu>& gpus);

}  // namespace tessera::node::sharing
