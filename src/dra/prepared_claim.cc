#include "dra/prepared_claim.h"

#include "dra/config.h"

namespace tessera::dra {

nlohmann::json PreparedClaimToJson(const PreparedClaim& c) {
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : c.devices) {
    devices.push_back({{"request", d.request},
                       {"pool", d.pool},
                       {"device", d.device},
                       {"shareID", d.share_id},
                       {"cdiName", d.cdi_name},
                       {"uuid", d.uuid},
                       {"memoryMiB", d.memory_mib},
                       {"cores", d.cores},
                       {"migGpu", d.mig_gpu_index},
                       {"migProfile", d.mig_profile_id},
                       {"migStart", d.mig_start},
                       {"migGpuInstance", d.mig_gpu_instance_id},
                       {"migParentUUID", d.mig_parent_uuid},
                       {"migProfileName", d.mig_profile}});
  }
  return {{"version", 1},
          {"namespace", c.ns},
          {"name", c.name},
          {"uid", c.uid},
          {"devices", devices},
          {"cdiSpecPath", c.cdi_spec_path},
          {"regionDir", c.region_dir},
          {"limitsDir", c.limits_dir},
          {"cdiSpec", c.cdi_spec}};
}

Result<PreparedClaim> PreparedClaimFromJson(const nlohmann::json& j) {
  try {
    if (j.at("version").get<int>() != 1) return Error{"checkpoint version is not 1"};
    PreparedClaim c;
    c.ns = j.at("namespace").get<std::string>();
    c.name = j.at("name").get<std::string>();
    c.uid = j.at("uid").get<std::string>();
    for (const auto& d : j.at("devices")) {
      PreparedDevice device;
      device.request = d.at("request").get<std::string>();
      device.pool = d.at("pool").get<std::string>();
      device.device = d.at("device").get<std::string>();
      device.share_id = d.at("shareID").get<std::string>();
      device.cdi_name = d.at("cdiName").get<std::string>();
      device.uuid = d.at("uuid").get<std::string>();
      device.memory_mib = d.at("memoryMiB").get<int64_t>();
      device.cores = d.at("cores").get<int>();
      device.mig_gpu_index = d.value("migGpu", -1);
      device.mig_profile_id = d.value("migProfile", 0u);
      device.mig_start = d.value("migStart", 0u);
      device.mig_gpu_instance_id = d.value("migGpuInstance", 0u);
      device.mig_parent_uuid = d.value("migParentUUID", "");
      device.mig_profile = d.value("migProfileName", "");
      c.devices.push_back(std::move(device));
    }
    c.cdi_spec_path = j.at("cdiSpecPath").get<std::string>();
    c.region_dir = j.at("regionDir").get<std::string>();
    c.limits_dir = j.at("limitsDir").get<std::string>();
    c.cdi_spec = j.at("cdiSpec");
    return c;
  } catch (const nlohmann::json::exception& e) {
    return Error{std::string("malformed checkpoint: ") + e.what()};
  }
}

std::string CdiDeviceId(const PreparedDevice& device) {
  return std::string(kCdiKind) + "=" + device.cdi_name;
}

}  // namespace tessera::dra
