#include "dra/gpu_config.h"

#include <set>

#include "dra/config.h"

namespace tessera::dra {

void GpuConfig::MergeFrom(const GpuConfig& later) {
  if (later.compute_policy) compute_policy = later.compute_policy;
  if (later.priority) priority = later.priority;
  if (later.oversubscription) oversubscription = later.oversubscription;
}

Result<GpuConfig> ParseGpuConfig(const nlohmann::json& p) {
  if (!p.is_object()) return Error{"the parameters are not an object"};
  const auto string_field = [&](const char* key) -> Result<std::string> {
    const auto it = p.find(key);
    if (it == p.end()) return Error{std::string("'") + key + "' is missing"};
    if (!it->is_string()) return Error{std::string("'") + key + "' is not a string"};
    return it->get<std::string>();
  };
  TESSERA_ASSIGN_OR_RETURN(const std::string api_version, string_field("apiVersion"));
  if (api_version != kConfigApiVersion) {
    return Error{"apiVersion '" + api_version + "' is not " + kConfigApiVersion};
  }
  TESSERA_ASSIGN_OR_RETURN(const std::string kind, string_field("kind"));
  if (kind != kGpuConfigKind) return Error{"kind '" + kind + "' is not " + kGpuConfigKind};

  GpuConfig config;
  for (const auto& [key, value] : p.items()) {
    if (key == "apiVersion" || key == "kind") continue;
    if (key == "sharing") {
      if (!value.is_object()) return Error{"'sharing' is not an object"};
      for (const auto& [skey, svalue] : value.items()) {
        if (skey != "strategy") {
          return Error{"unknown field 'sharing." + skey + "' (known: sharing.strategy)"};
        }
        if (!svalue.is_string()) return Error{"'sharing.strategy' is not a string"};
        const auto strategy = svalue.get<std::string>();
        if (strategy == "TimeSlicing" || strategy == "MPS") {
          return Error{"sharing.strategy '" + strategy +
                       "' is not supported by tessera-dra: its shares are vGPU slices enforced by libvgpu "
                       "(use strategy vGPU, or tessera-node's sharing modes)"};
        }
        if (strategy != "vGPU") return Error{"sharing.strategy '" + strategy + "' is not one of vGPU"};
      }
    } else if (key == "computePolicy") {
      if (!value.is_string()) return Error{"'computePolicy' is not a string"};
      const auto policy = value.get<std::string>();
      if (policy != "default" && policy != "force" && policy != "disable") {
        return Error{"computePolicy '" + policy + "' is not one of default, force, disable"};
      }
      config.compute_policy = policy;
    } else if (key == "priority") {
      if (!value.is_number_integer()) return Error{"'priority' is not an integer"};
      const auto priority = value.get<int64_t>();
      if (priority < 0 || priority > 1) {
        return Error{"priority " + std::to_string(priority) + " is not 0 (high) or 1 (low)"};
      }
      config.priority = static_cast<int>(priority);
    } else if (key == "oversubscription") {
      if (!value.is_boolean()) return Error{"'oversubscription' is not a boolean"};
      config.oversubscription = value.get<bool>();
    } else {
      return Error{"unknown field '" + key +
                   "' (known: apiVersion, kind, sharing, computePolicy, priority, oversubscription)"};
    }
  }
  return config;
}

}  // namespace tessera::dra
