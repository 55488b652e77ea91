#include "node/claim_regions.h"

#include <sys/stat.h>

#include <limits>

#include "base/files.h"
#include "contract/container_contract.h"
#include "core/allocation_codec.h"

namespace tessera::node {

ClaimLimits ReadClaimLimits(const std::string& root, const std::string& region_name) {
  ClaimLimits limits;
  const std::string dir = files::Join(root, region_name + ".limits");
  const std::string path = files::Join(dir, contract::kLimitsFileName);
  auto fail = [&](const std::string& why) {
    limits.memory_bytes.clear();
    limits.cores.clear();
    limits.error = path + ": " + why;
    return limits;
  };
  struct stat st {};
  // lstat: only the directory tessera-dra made, not a link planted in its place.
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return fail("no limits directory");
  auto text = files::Read(path);
  if (!text.ok()) return fail("cannot be read");
  auto payload = core::DecodeAllocation(*text);
  if (!payload.ok()) return fail(payload.error().message);
  if (payload->containers.size() != 1 || payload->containers[0].container.rfind("claim:", 0) != 0) {
    return fail("not one entry named claim:<namespace>/<name>");
  }
  limits.claim = payload->containers[0].container.substr(6);
  for (const auto& slice : payload->containers[0].devices) {
    if (slice.uuid.empty()) return fail("a device without a UUID");
    if (slice.memory_mib < 0 || slice.memory_mib > (std::numeric_limits<int64_t>::max() >> 20) ||
        slice.cores < 0 || slice.cores > 100) {
      return fail("memory or cores out of range on " + slice.uuid);
    }
    limits.memory_bytes[slice.uuid] += static_cast<uint64_t>(slice.memory_mib) << 20;
    limits.cores[slice.uuid] += slice.cores;
  }
  return limits;
}

Result<std::vector<RegionDir>> ScanClaimRegions(const std::string& root,
                                                const std::string& region_file_name) {
  // The directory walk and region reading are RegionCatalog's; claim regions
  // have no Allocate record (the checkpoint is tessera-dra's), only limits.
  TESSERA_ASSIGN_OR_RETURN(auto dirs, RegionCatalog(root, region_file_name).Scan());
  for (auto& dir : dirs) {
    dir.record.reset();
    dir.record_error.clear();
    dir.claim = ReadClaimLimits(root, dir.name);
  }
  return dirs;
}

std::string ClaimUidOfCdiDevice(const std::string& cdi_device_id) {
  const size_t eq = cdi_device_id.find('=');
  if (eq == std::string::npos) return "";
  const std::string name = cdi_device_id.substr(eq + 1);
  // A UID is 36 characters; tessera-dra appends "-<device>[-<share>]".
  if (name.size() < 38 || name[36] != '-' || !IsRegionDirName(name.substr(0, 36))) return "";
  return name.substr(0, 36);
}

void AssignClaimOwners(std::vector<RegionDir>& dirs, const std::vector<ContainerDevices>& containers) {
  for (auto& dir : dirs) {
    if (!dir.claim) continue;
    dir.owner.reset();
    for (const auto& c : containers) {
      for (const auto& id : c.cdi_devices) {
        if (ClaimUidOfCdiDevice(id) == dir.name) {
          dir.owner = ContainerRef{c.pod_namespace, c.pod_name, c.container_name};
          break;
        }
      }
      if (dir.owner) break;
    }
  }
}

}  // namespace tessera::node
