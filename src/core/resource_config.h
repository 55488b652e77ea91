// The names under which pods ask for GPU slices, and the values used when a
// pod leaves some of them out. The defaults match HAMi, so HAMi pod specs work
// unchanged; the scheduler's YAML config fills this struct (all fields
// optional there).
//
// Thread-safety: a plain value; read it from many threads, copy to change it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/result.h"
#include "contract/container_contract.h"

namespace tessera::core {

// Upper bounds that keep a request sane. A container with more vGPUs than any
// node has GPUs can never be placed; memory past kMaxGpuMemoryMiB is almost
// always a unit mistake ("gpumem: 8Gi" is 8 Gi MiB, not 8 GiB).
inline constexpr int kMaxGpusPerContainer = 16;
inline constexpr int64_t kMaxGpuMemoryMiB = contract::kMaxMemoryMiB;  // 1 TiB of device memory per GPU

struct ResourceConfig {
  // Resource names (extended resources under resources.limits / requests).
  std::string gpu_count_name = "nvidia.com/gpu";                         // number of vGPUs
  std::string gpu_memory_name = "nvidia.com/gpumem";                     // MiB per vGPU
  std::string gpu_memory_percent_name = "nvidia.com/gpumem-percentage";  // % of the GPU's memory per vGPU
  std::string gpu_cores_name = "nvidia.com/gpucores";                    // % of the GPU's compute per vGPU
  std::string gpu_priority_name = "nvidia.com/priority";                 // task priority, passed through
  // The seed platform's MPS resources, aliases that make the container an MPS
  // share (ShareKind::kMps): percent of the GPU's threads, and GiB of memory.
  std::string mps_cores_name = "nvidia.com/mps-core";
  std::string mps_memory_name = "nvidia.com/mps-memory";

  // Memory per vGPU when a container gives neither gpumem nor gpumem-percentage.
  // 0 = the whole GPU (unless default_memory_percent is set).
  int64_t default_memory_mib = 0;
  // Used instead when default_memory_mib is 0 and this is set (1..100).
  std::optional<int> default_memory_percent;
  // Compute percent per vGPU when gpucores is not given (0 = no compute limit).
  int default_cores = 0;
  // vGPU count for a container that gives memory, percentage or cores but no count.
  int default_gpu_count = 1;

  // Checks the config itself: non-empty, distinct names; defaults within the
  // ranges a request would be held to. The error names the field.
  Status Validate() const;
};

}  // namespace tessera::core
