#include "sim/device_list.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>
#include <string>

namespace tessera::sim {
namespace {

std::vector<std::string> Entries(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    out.push_back(item);
  }
  return out;
}

bool IsIndex(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// The MIG devices of a GPU in MIG mode, in instance order.
std::vector<DeviceRef> MigDevicesOf(const StateFile& f, int gpu) {
  std::vector<DeviceRef> out;
  const GpuRecord& g = f.gpus[gpu];
  if (g.mig_mode == 0) return out;
  for (int gi = 0; gi < kMaxGpuInstances; ++gi) {
    if (!g.gis[gi].in_use) continue;
    for (int ci = 0; ci < kMaxComputeInstances; ++ci) {
      if (g.gis[gi].cis[ci].in_use) out.push_back({gpu, gi, ci});
    }
  }
  return out;
}

// The device a UUID (prefix) names among all GPUs and their MIG devices.
bool FindByUuid(const StateFile& f, const std::string& uuid, DeviceRef* out) {
  for (int g = 0; g < static_cast<int>(f.gpu_count); ++g) {
    const GpuRecord& gpu = f.gpus[g];
    if (uuid.rfind("GPU-", 0) == 0 && std::string(gpu.uuid).rfind(uuid, 0) == 0) {
      *out = {g, -1, -1};
      return true;
    }
    if (uuid.rfind("MIG-", 0) != 0) continue;
    for (const DeviceRef& m : MigDevicesOf(f, g)) {
      if (MigDeviceUuid(gpu, gpu.gis[m.gi_slot], gpu.gis[m.gi_slot].cis[m.ci_slot]).rfind(uuid, 0) == 0) {
        *out = m;
        return true;
      }
    }
  }
  return false;
}

}  // namespace

std::vector<DeviceRef> ContainerDevices(const StateFile& f, const char* nvidia_visible_devices) {
  std::vector<DeviceRef> out;
  const std::string list = nvidia_visible_devices != nullptr ? nvidia_visible_devices : "all";
  if (list == "all") {
    for (int g = 0; g < static_cast<int>(f.gpu_count); ++g) out.push_back({g, -1, -1});
    return out;
  }
  for (const std::string& item : Entries(list)) {
    DeviceRef ref;
    if (IsIndex(item)) {
      const int index = std::atoi(item.c_str());
      if (index >= static_cast<int>(f.gpu_count)) continue;
      ref = {index, -1, -1};
    } else if (!FindByUuid(f, item, &ref)) {
      continue;  // "none", "void", unknown
    }
    if (std::find(out.begin(), out.end(), ref) == out.end()) out.push_back(ref);
  }
  return out;
}

std::vector<DeviceRef> CudaDevices(const StateFile& f, const std::vector<DeviceRef>& container,
                                   const char* cuda_visible_devices) {
  // What the container offers CUDA: whole GPUs not in MIG mode, and MIG devices.
  std::vector<DeviceRef> offered;
  for (const DeviceRef& d : container) {
    if (d.mig()) {
      offered.push_back(d);
    } else if (f.gpus[d.gpu].mig_mode != 0) {
      for (const DeviceRef& m : MigDevicesOf(f, d.gpu)) offered.push_back(m);
    } else {
      offered.push_back(d);
    }
  }
  // One MIG device per process: the first one a list names.
  auto enumerate = [](const std::vector<DeviceRef>& candidates) {
    std::vector<DeviceRef> out;
    bool have_mig = false;
    for (const DeviceRef& d : candidates) {
      if (d.mig() && have_mig) continue;
      have_mig = have_mig || d.mig();
      out.push_back(d);
    }
    return out;
  };
  const std::vector<DeviceRef> all = enumerate(offered);
  if (cuda_visible_devices == nullptr) return all;
  std::vector<DeviceRef> chosen;
  for (const std::string& item : Entries(cuda_visible_devices)) {
    DeviceRef ref;
    bool found = false;
    if (IsIndex(item)) {
      const size_t index = static_cast<size_t>(std::atoi(item.c_str()));
      found = index < all.size();
      if (found) ref = all[index];
    } else if (FindByUuid(f, item, &ref)) {
      if (!ref.mig() && f.gpus[ref.gpu].mig_mode != 0) {
        const std::vector<DeviceRef> migs = MigDevicesOf(f, ref.gpu);
        found = !migs.empty();
        if (found) ref = migs.front();
      } else {
        found = true;
      }
      found = found && std::find(offered.begin(), offered.end(), ref) != offered.end();
    }
    if (!found || std::find(chosen.begin(), chosen.end(), ref) != chosen.end()) break;
    chosen.push_back(ref);
  }
  return enumerate(chosen);
}

}  // namespace tessera::sim
