// The CDI spec (Container Device Interface, spec version 0.6.0) tessera-dra
// writes for a prepared claim: kind tessera.io/gpu, one CDI device per
// allocated device (and share) of the claim, and the claim's container edits
// at the spec level, which the runtime applies once whichever of the
// claim's devices a container gets:
//  - mounts (bind): libvgpu read-only, the preload file over /etc/ld.so.preload
//    (unless disabled), the claim's region directory read-write, and its
//    limits directory read-only at /run/tessera/limits (libvgpu reads the
//    limits there whatever the environment says);
//  - env: TESSERA_ALLOCATION and TESSERA_CONTAINER_NAME (the limits, as the
//    scheduler's payload), TESSERA_LIMITS, CUDA_DEVICE_MEMORY_SHARED_CACHE,
//    NVIDIA_VISIBLE_DEVICES, and what the claim's GpuConfig sets;
//  - device nodes /dev/nvidiactl and /dev/nvidia-uvm when configured.
// Each device adds its GPU's /dev/nvidia<index> when device nodes are on.
//
// A claim of MIG partitions (mig_partitions.h) gets NVIDIA_VISIBLE_DEVICES
// with the instances' UUIDs and the device nodes only: the GPU isolates an
// instance, libvgpu has no part (as in tessera-node's MIG containers).
//
// Every container that gets a claim shares its region and limits: the
// claim's capacity is the containers' together (one libvgpu slice). The
// mounts' container paths are fixed, so a container gets one claim of ours
// at most (container_claims.h refuses two at prepare).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "dra/config.h"
#include "dra/prepared_claim.h"

namespace tessera::dra {

inline constexpr const char* kCdiVersion = "0.6.0";
inline constexpr const char* kPreloadContainerPath = "/etc/ld.so.preload";

// `claim` has its devices, region_dir and limits_dir set; `env` is
// "NAME=value" entries; `gpu_index_of` maps a device's UUID to its NVML index.
nlohmann::json BuildCdiSpec(const DraConfig& config, const PreparedClaim& claim,
                            const std::vector<std::string>& env,
                            const std::vector<std::pair<std::string, int>>& gpu_index_of);

// The spec's file name in the CDI directory: "tessera.io-gpu_<claim UID>.json".
std::string CdiSpecFileName(const std::string& claim_uid);
// The claim UID a file name of ours names, or "" for any other file.
std::string ClaimUidOfCdiSpecFile(const std::string& file_name);

}  // namespace tessera::dra
