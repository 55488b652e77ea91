#include "core/resource_config.h"

#include <array>
#include <string>
#include <utility>

namespace tessera::core {

Status ResourceConfig::Validate() const {
  const std::array<std::pair<const char*, const std::string*>, 7> names = {{
      {"gpu_count_name", &gpu_count_name},
      {"gpu_memory_name", &gpu_memory_name},
      {"gpu_memory_percent_name", &gpu_memory_percent_name},
      {"gpu_cores_name", &gpu_cores_name},
      {"gpu_priority_name", &gpu_priority_name},
      {"mps_cores_name", &mps_cores_name},
      {"mps_memory_name", &mps_memory_name},
  }};
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].second->empty()) {
      return Error{std::string("resource config: ") + names[i].first +
                   " is empty; give a resource name such as nvidia.com/gpu"};
    }
    for (size_t j = 0; j < i; ++j) {
      if (*names[i].second == *names[j].second) {
        return Error{std::string("resource config: ") + names[i].first + " and " + names[j].first +
                     " are both \"" + *names[i].second + "\"; each resource needs its own name"};
      }
    }
  }
  if (default_memory_mib < 0 || default_memory_mib > kMaxGpuMemoryMiB) {
    return Error{"resource config: default_memory_mib is " + std::to_string(default_memory_mib) +
                 "; it must be 0 (whole GPU) up to " + std::to_string(kMaxGpuMemoryMiB) + " MiB"};
  }
  if (default_memory_percent && (*default_memory_percent < 1 || *default_memory_percent > 100)) {
    return Error{"resource config: default_memory_percent is " + std::to_string(*default_memory_percent) +
                 "; it must be 1..100 or unset"};
  }
  if (default_cores < 0 || default_cores > 100) {
    return Error{"resource config: default_cores is " + std::to_string(default_cores) +
                 "; it must be 0 (no compute limit) up to 100 (exclusive)"};
  }
  if (default_gpu_count < 1 || default_gpu_count > kMaxGpusPerContainer) {
    return Error{"resource config: default_gpu_count is " + std::to_string(default_gpu_count) +
                 "; it must be 1.." + std::to_string(kMaxGpusPerContainer)};
  }
  return Status::Ok();
}

}  // namespace tessera::core
