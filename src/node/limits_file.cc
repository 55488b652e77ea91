#include "node/limits_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "base/files.h"
#include "base/log.h"
#include "contract/container_contract.h"
#include "core/allocation_codec.h"

namespace tessera::node {

std::string LimitsDirName(const std::string& region_name) {
  return region_name + ".limits";
}

Status MakeLimitsDirectory(const std::string& root, const std::string& region_name, std::string& path) {
  path = files::Join(root, LimitsDirName(region_name));
  if (::mkdir(path.c_str(), 0755) != 0) {
    return Error{"cannot create limits directory '" + path + "': " + std::strerror(errno)};
  }
  return Status::Ok();
}

Result<std::string> EncodeContainerLimits(const core::PodAllocation& pod, const std::string& container) {
  for (const auto& c : pod.containers) {
    if (c.container != container) continue;
    core::PodAllocation one;
    one.node = pod.node;
    core::ContainerAllocation entry = c;
    // A MIG instance is isolated by the GPU; libvgpu does not run there.
    std::erase_if(entry.devices, [](const core::DeviceSlice& d) { return !d.mig_profile.empty(); });
    if (entry.devices.empty()) return Error{"container '" + container + "' has no vGPU slice"};
    one.containers.push_back(std::move(entry));
    return core::EncodeAllocation(one);
  }
  return Error{"the allocation has no container '" + container + "'"};
}

int WriteContainerLimits(const std::string& root, const std::vector<RegionDir>& regions,
                         const NodeAllocations& allocations) {
  int written = 0;
  for (const auto& region : regions) {
    if (!region.owner) continue;
    const std::string dir = files::Join(root, LimitsDirName(region.name));
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    const PodGpuAllocation* pod = nullptr;
    for (const auto& p : allocations.pods) {
      if (p.pod_namespace == region.owner->pod_namespace && p.pod_name == region.owner->pod_name) pod = &p;
    }
    if (pod == nullptr) continue;
    auto text = EncodeContainerLimits(pod->allocation, region.owner->container_name);
    if (!text.ok()) continue;  // e.g. a container of the pod without a slice
    const std::string path = files::Join(dir, contract::kLimitsFileName);
    if (auto old = files::Read(path); old.ok() && *old == *text) continue;
    if (auto s = files::ReplaceAtomically(path, *text); !s.ok()) {
      log::Warn("cannot write a container's limits file", {{"path", path}, {"error", s.error().message}});
      continue;
    }
    log::Info("wrote a container's limits file",
              {{"region", region.name},
               {"pod", region.owner->pod_namespace + "/" + region.owner->pod_name},
               {"container", region.owner->container_name}});
    ++written;
  }
  return written;
}

}  // namespace tessera::node
