#include "node/sharing/timeslice_setup.h"

#include "contract/container_contract.h"
#include "node/allocate.h"

namespace tessera::node::sharing {

ContainerSetup TimesliceContainerSetup(const NodeConfig& config, std::function<std::string()> new_region_name,
                                       RegionsInFlight* in_flight) {
  return [&config, new_region_name, in_flight](const ShareRequest& share) -> Result<ContainerEdits> {
    NodeConfig replica_config = config;
    replica_config.resource_name = share.resource_name;  // the region's record names the replicas' resource
    replica_config.visible_devices = VisibleDevicesMode::kDeviceIds;
    replica_config.unplaced_pods = UnplacedPodsPolicy::kWholeGpu;
    replica_config.disable_core_limit = true;
    std::vector<core::Gpu> gpus;
    for (const auto& shared : share.gpus) {
      core::Gpu gpu;
      gpu.uuid = shared.uuid;
      gpu.index = shared.host_index;
      gpu.slots = shared.replicas;
      gpus.push_back(gpu);
    }
    v1beta1::ContainerAllocateRequest request;
    for (const auto& id : share.device_ids) request.add_devices_ids(id);
    RegionsInFlight::Request request_in_flight(in_flight);
    AllocateContext context{&replica_config, &gpus, new_region_name, &request_in_flight};
    TESSERA_ASSIGN_OR_RETURN(const v1beta1::ContainerAllocateResponse answer,
                             AllocateContainer(context, request));
    ContainerEdits edits;
    for (const auto& [name, value] : answer.envs()) edits.env[name] = value;
    for (const auto& mount : answer.mounts()) {
      edits.mounts.push_back(ContainerMount{mount.container_path(), mount.host_path(), mount.read_only()});
    }
    for (const auto& [name, value] : answer.annotations()) edits.annotations[name] = value;
    for (const auto& shared : share.gpus) {
      if (shared.memory_limit_mib > 0) {
        edits.env[std::string(contract::kMemoryLimitEnv) + "_" + std::to_string(shared.container_ordinal)] =
            std::to_string(shared.memory_limit_mib) + "m";
      }
    }
    return edits;
  };
}

}  // namespace tessera::node::sharing
