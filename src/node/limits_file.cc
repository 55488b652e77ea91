#include "node/limits_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/files.h"
#include "base/log.h"
#include "contract/container_contract.h"
#include "core/allocation_codec.h"
#include "node/device_state.h"

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

std::string EncodeUnplacedLimits(UnplacedPodsPolicy policy, const std::vector<std::string>& gpu_uuids) {
  if (policy == UnplacedPodsPolicy::kRefuse) return R"({"version":1,"unplaced":"refuse"})";
  std::string gpus;
  for (const auto& uuid : gpu_uuids) gpus += (gpus.empty() ? "\"" : ",\"") + uuid + "\"";
  return R"({"version":1,"unplaced":"whole-gpu","gpus":[)" + gpus + "]}";
}

int WriteContainerLimits(const std::string& root, const std::vector<RegionDir>& regions,
                         const NodeAllocations& allocations, const std::vector<UnplacedPod>& unplaced,
                         UnplacedPodsPolicy policy) {
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
    Result<std::string> text = Error{"no allocation"};
    if (pod != nullptr) {
      text = core::EncodeContainerLimits(pod->allocation, region.owner->container_name);
    } else {
      for (const auto& u : unplaced) {
        if (u.pod_namespace != region.owner->pod_namespace || u.pod_name != region.owner->pod_name) continue;
        std::vector<std::string> gpus;
        for (const auto& id : region.record ? region.record->device_ids : std::vector<std::string>{}) {
          auto parsed = ParseDeviceId(id);
          if (parsed.ok() && std::find(gpus.begin(), gpus.end(), parsed->gpu_uuid) == gpus.end())
            gpus.push_back(parsed->gpu_uuid);
        }
        text = EncodeUnplacedLimits(policy, gpus);
      }
    }
    if (!text.ok()) continue;  // not known yet, or a container of the pod without a slice
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
