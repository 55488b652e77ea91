// The per-mode hook of the replica device plugin (replica_service.h): what a
// container holding replicas of time-sliced or MPS GPUs gets besides the GPUs
// themselves. The replica service computes the share (which GPUs, in which
// container ordinal, how many replicas of each, the equal split) and asks the
// hook of the GPUs' mode for the rest:
//   - timeslice: sharing's own (libvgpu for per-container metrics, and the
//     memory split when configured);
//   - mps: src/node/mps's (the MPS pipe directory mounted,
//     CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
//     CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="<ordinal>=<MiB>M,...").
// The service sets NVIDIA_VISIBLE_DEVICES itself (the GPUs' UUIDs in ordinal
// order) and merges the edits into its answer; a hook's error refuses the
// container's Allocate with that message.
//
// Thread-safety: a hook is called from gRPC threads concurrently; it must be
// thread-safe (a pure function of its argument and immutable state).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/result.h"
#include "core/device.h"

namespace tessera::node::sharing {

// One GPU of a container's share.
struct SharedGpu {
  std::string uuid;
  int host_index = 0;         // NVML index on the node
  int container_ordinal = 0;  // CUDA's ordinal inside the container (its place in NVIDIA_VISIBLE_DEVICES)
  int64_t memory_mib = 0;     // the GPU's physical memory
  int replicas = 0;           // replicas the GPU is advertised as
  int held = 0;               // of them this container holds (>= 1)
  // The share resolved from the GPU's mode settings for `held` replicas:
  // mps: thread percentage min(100, per-replica × held) and pinned memory
  // min(memory, per-replica × held); timeslice with memory_split equal:
  // memory_limit_mib = memory × held / replicas. 0 = no limit.
  int active_thread_percentage = 0;
  int64_t memory_limit_mib = 0;
};

// What the hook is asked about: one container of one Allocate.
struct ShareRequest {
  core::SharingMode mode = core::SharingMode::kTimeslice;
  std::string resource_name;            // the replicas' resource
  std::vector<std::string> device_ids;  // as the kubelet sent them
  std::vector<SharedGpu> gpus;          // by container_ordinal
};

struct ContainerMount {
  std::string container_path;
  std::string host_path;
  bool read_only = true;
};

// What the hook adds to the container's Allocate answer.
struct ContainerEdits {
  std::map<std::string, std::string> env;
  std::vector<ContainerMount> mounts;
  std::map<std::string, std::string> annotations;
};

using ContainerSetup = std::function<Result<ContainerEdits>(const ShareRequest& request)>;

// The hooks by mode; a mode without one gets only NVIDIA_VISIBLE_DEVICES.
using ContainerSetups = std::map<core::SharingMode, ContainerSetup>;

}  // namespace tessera::node::sharing
