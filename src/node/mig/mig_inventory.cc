#include "node/mig/mig_inventory.h"

#include <algorithm>

namespace tessera::node::mig {

std::vector<core::Gpu> MigInventoryGpus(const std::vector<core::Gpu>& managed,
                                        const std::vector<MigDevice>& devices, core::SharingMode mode) {
  std::vector<core::Gpu> out;
  out.reserve(managed.size());
  for (core::Gpu gpu : managed) {
    gpu.mig_capable = true;
    gpu.mode = mode;
    gpu.slots = 0;
    gpu.mig_devices.clear();
    for (const MigDevice& d : devices) {
      if (d.parent_uuid != gpu.uuid) continue;
      core::MigDevice entry;
      entry.uuid = d.mig_uuid;
      entry.profile = d.profile;
      entry.start = static_cast<int>(d.start);
      entry.size = static_cast<int>(std::max<uint32_t>(d.size, 1));
      entry.memory_mib = static_cast<int64_t>(d.memory_mib);
      // NVML's MIG memory figure never exceeds the GPU's; should a driver say
      // otherwise, the GPU's figure follows rather than the inventory failing.
      gpu.memory_mib = std::max(gpu.memory_mib, entry.memory_mib);
      entry.sm_count = static_cast<int>(d.sm_count);
      entry.healthy = d.healthy;
      entry.used_by = d.used_by;
      gpu.mig_devices.push_back(std::move(entry));
    }
    std::sort(gpu.mig_devices.begin(), gpu.mig_devices.end(),
              [](const core::MigDevice& a, const core::MigDevice& b) { return a.start < b.start; });
    out.push_back(std::move(gpu));
  }
  return out;
}

}  // namespace tessera::node::mig
