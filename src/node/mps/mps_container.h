// What a container on an MPS GPU gets at Allocate (docs/sharing.md#mps): its
// GPU's pipe directory, mounted, and the client variables
//   CUDA_MPS_PIPE_DIRECTORY=<kPipeContainerPath>
//   CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<pct>
//   CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=<container ordinal>=<MiB>M
// The share comes from NVIDIA's replica split (the replica plugin resolves it
// for the replicas held, node/sharing/container_setup.h) or, for a GPU whose
// clients tessera-scheduler sizes, from the request's gpucores / gpumem
// (ClientEnv).
//
// An MPS client reaches one control daemon (one CUDA_MPS_PIPE_DIRECTORY), and
// tessera runs one daemon per GPU: a container gets one MPS GPU, as NVIDIA's
// plugin enforces with failRequestsGreaterThanOne. Allocate is refused while
// the GPU's daemon is not running: without one, CUDA would run the container
// as an ordinary process, with no limits at all.
//
// libvgpu stays (docs/decisions.md): replica containers get it through the
// `with_libvgpu` hook (the timeslice mode's: per-container metrics, the pinned
// memory enforced a second time, compute left to MPS); sized containers are
// vGPU-plugin containers and keep it with their allocation.
//
// Thread-safety: the hook is a pure function of its argument and of
// MpsDaemons (itself thread-safe).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "base/result.h"
#include "node/mps/mps_daemons.h"
#include "node/sharing/container_setup.h"

namespace tessera::node::mps {

// Where a container finds its GPU's pipe directory.
inline constexpr const char* kPipeContainerPath = "/run/tessera/mps";

inline constexpr const char* kPipeDirectoryEnv = "CUDA_MPS_PIPE_DIRECTORY";
inline constexpr const char* kActiveThreadPercentageEnv = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
inline constexpr const char* kPinnedMemoryLimitEnv = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";

// The client variables for a share of one GPU: `percentage` 1–100 (0: leave
// the daemon's default), `memory_mib` 1..`gpu_memory_mib` (0: the daemon's
// default), seen by the client as device `ordinal`. Errors name the bad value.
Result<std::map<std::string, std::string>> ClientEnv(int ordinal, int percentage, int64_t memory_mib,
                                                     int64_t gpu_memory_mib);

// The hook for mode mps of the replica plugin (node/sharing/container_setup.h):
// `with_libvgpu`'s edits (null: none) and then the MPS ones over them.
// `daemons` must outlive it.
sharing::ContainerSetup MpsContainerSetup(const MpsDaemons* daemons,
                                          sharing::ContainerSetup with_libvgpu = nullptr);

// The pipe directory of a sized client's GPU: the mount and
// CUDA_MPS_PIPE_DIRECTORY; the limits come with the pod (docs/sharing.md#mps).
// Refused while the daemon is down.
Result<sharing::ContainerEdits> PipeDirectoryEdits(const MpsDaemons& daemons, const std::string& gpu_uuid);

// The same for the vGPU plugin's Allocate (node/allocate.h), which has only
// the configuration: the daemon of `gpu_uuid` under `root`, alive as
// `control_binary` says (its pid file and /proc).
Result<sharing::ContainerEdits> PipeDirectoryEdits(const std::string& root, const std::string& control_binary,
                                                   const std::string& gpu_uuid);

}  // namespace tessera::node::mps
