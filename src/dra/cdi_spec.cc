#include "dra/cdi_spec.h"

#include "contract/container_contract.h"

namespace tessera::dra {
namespace {

constexpr const char* kSpecFilePrefix = "tessera.io-gpu_";
constexpr const char* kSpecFileSuffix = ".json";

nlohmann::json BindMount(const std::string& host, const std::string& container, bool read_only) {
  return {{"hostPath", host},
          {"containerPath", container},
          {"type", "bind"},
          {"options", {read_only ? "ro" : "rw", "nosuid", "nodev", "rbind"}}};
}

}  // namespace

nlohmann::json BuildCdiSpec(const DraConfig& config, const PreparedClaim& claim,
                            const std::vector<std::string>& env,
                            const std::vector<std::pair<std::string, int>>& gpu_index_of) {
  nlohmann::json common = {{"env", env}};
  if (!claim.region_dir.empty()) {  // a libvgpu slice (not a MIG instance)
    nlohmann::json mounts = nlohmann::json::array();
    mounts.push_back(BindMount(config.libvgpu_host_path, config.libvgpu_container_path, true));
    if (config.ld_so_preload)
      mounts.push_back(BindMount(config.PreloadFileHostPath(), kPreloadContainerPath, true));
    mounts.push_back(BindMount(claim.region_dir, config.region_container_dir, false));
    mounts.push_back(BindMount(claim.limits_dir, contract::kLimitsContainerDir, true));
    common["mounts"] = mounts;
  }
  if (config.device_nodes) {
    common["deviceNodes"] = {{{"path", "/dev/nvidiactl"}}, {{"path", "/dev/nvidia-uvm"}}};
  }
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : claim.devices) {
    nlohmann::json edits = nlohmann::json::object();
    if (config.device_nodes) {
      for (const auto& [uuid, index] : gpu_index_of) {
        if (uuid == d.uuid) edits["deviceNodes"] = {{{"path", "/dev/nvidia" + std::to_string(index)}}};
      }
      // A MIG instance is reached through its parent's device node (and the
      // capability files the NVIDIA runtime adds for NVIDIA_VISIBLE_DEVICES).
      if (d.mig_gpu_index >= 0)
        edits["deviceNodes"] = {{{"path", "/dev/nvidia" + std::to_string(d.mig_gpu_index)}}};
    }
    // A CDI device must edit something: an environment entry naming the
    // device keeps one that adds no device node valid.
    if (edits.empty())
      edits["env"] = {"TESSERA_DRA_DEVICE_" + std::to_string(devices.size()) + "=" + d.device};
    devices.push_back({{"name", d.cdi_name}, {"containerEdits", edits}});
  }
  return {{"cdiVersion", kCdiVersion},
          {"kind", kCdiKind},
          {"annotations",
           {{"tessera.io/claim", claim.ns + "/" + claim.name}, {"tessera.io/claim-uid", claim.uid}}},
          {"devices", devices},
          {"containerEdits", common}};
}

std::string CdiSpecFileName(const std::string& claim_uid) {
  return kSpecFilePrefix + claim_uid + kSpecFileSuffix;
}

std::string ClaimUidOfCdiSpecFile(const std::string& name) {
  const std::string prefix = kSpecFilePrefix, suffix = kSpecFileSuffix;
  if (name.size() <= prefix.size() + suffix.size()) return "";
  if (name.compare(0, prefix.size(), prefix) != 0) return "";
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return "";
  return name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
}

}  // namespace tessera::dra
