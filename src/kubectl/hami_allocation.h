// HAMi's record of a placement, read so that `kubectl tessera` shows pods
// that HAMi placed (a cluster moving from HAMi to tessera has both).
//
// HAMi writes the pod annotation `hami.io/vgpu-devices-allocated`: per
// container, in the order of spec.containers, a list of devices, each
// "UUID,TYPE,MEMORY_MIB,CORES"; devices end with ':' and containers with ';':
//
//   GPU-0fc3eda5-…,NVIDIA,3000,30:;            one container, one device
//   GPU-a,NVIDIA,1000,0:GPU-b,NVIDIA,1000,0:;;  two devices, second container none
//
// and the node it chose as `hami.io/vgpu-node`. Only what HAMi publishes is
// read; nothing here writes HAMi's annotations. No I/O; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "core/allocation.h"

namespace tessera::kubectl {

inline constexpr std::string_view kHamiAllocatedAnnotation = "hami.io/vgpu-devices-allocated";
inline constexpr std::string_view kHamiNodeAnnotation = "hami.io/vgpu-node";

// The devices of each container, container i of the result being spec's
// container i (names come from `container_names`; entries past it are named
// "#<i>"). Containers without devices are left out. A device whose fields are
// not four, whose memory or cores is not a whole non-negative number, or whose
// UUID is empty makes the whole value an error that names the entry.
Result<std::vector<core::ContainerAllocation>> DecodeHamiAllocation(
    std::string_view text, const std::vector<std::string>& container_names);

}  // namespace tessera::kubectl
