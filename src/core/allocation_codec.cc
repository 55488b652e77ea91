#include "core/allocation_codec.h"

#include <set>
#include <string>

#include "core/codec.h"
#include "core/resource_config.h"

namespace tessera::core {
namespace {

using nlohmann::json;
using namespace codec_detail;

constexpr std::string_view kPayload = "allocation";

std::string ContainerWhere(size_t i, const std::string& name) {
  std::string where = "allocation: containers[" + std::to_string(i) + "]";
  if (!name.empty()) where += " (\"" + name + "\")";
  return where;
}

}  // namespace

Status ValidateAllocation(const PodAllocation& allocation) {
  if (allocation.node.empty()) {
    return Error{"allocation: \"node\" is empty; expected the name of the node the pod is bound to"};
  }
  if (allocation.containers.empty()) {
    return Error{"allocation: \"containers\" is empty; expected at least one container entry"};
  }
  std::set<std::string> names;
  for (size_t i = 0; i < allocation.containers.size(); ++i) {
    const ContainerAllocation& c = allocation.containers[i];
    const std::string where = ContainerWhere(i, c.container);
    if (c.container.empty()) return Error{where + ": \"name\" is empty; expected the container's name"};
    if (!names.insert(c.container).second) {
      return Error{where + ": container \"" + c.container +
                   "\" appears more than once; each needs one entry"};
    }
    if (c.devices.empty()) return Error{where + ": \"devices\" is empty; expected at least one device"};
    if (c.devices.size() > contract::kMaxDevicesPerContainer) {
      return Error{where + ": " + std::to_string(c.devices.size()) + " devices; a container holds at most " +
                   std::to_string(contract::kMaxDevicesPerContainer)};
    }
    std::set<std::string> uuids;
    for (size_t j = 0; j < c.devices.size(); ++j) {
      const DeviceSlice& d = c.devices[j];
      const std::string dwhere = where + ".devices[" + std::to_string(j) + "]";
      Status s = ValidateDeviceUuid(d.uuid, dwhere);
      if (!s) return s;
      if (!uuids.insert(d.uuid).second) {
        return Error{dwhere + ": uuid \"" + d.uuid +
                     "\" appears twice in this container; each vGPU of a container is on a different GPU"};
      }
      if (d.memory_mib < 0 || d.memory_mib > kMaxGpuMemoryMiB) {
        return Error{dwhere + ": \"memoryMiB\" is " + std::to_string(d.memory_mib) +
                     "; expected 0 (no limit) to " + std::to_string(kMaxGpuMemoryMiB)};
      }
      if (d.cores < 0 || d.cores > 100) {
        return Error{dwhere + ": \"cores\" is " + std::to_string(d.cores) +
                     "; expected 0 (no limit) to 100 (exclusive)"};
      }
    }
  }
  return Status::Ok();
}

Result<nlohmann::json> AllocationToJson(const PodAllocation& allocation) {
  TESSERA_RETURN_IF_ERROR(ValidateAllocation(allocation));
  json containers = json::array();
  for (const ContainerAllocation& c : allocation.containers) {
    json devices = json::array();
    for (const DeviceSlice& d : c.devices) {
      devices.push_back({{"uuid", d.uuid}, {"memoryMiB", d.memory_mib}, {"cores", d.cores}});
    }
    json entry = {{"name", c.container}, {"devices", std::move(devices)}};
    if (c.init) entry["init"] = true;  // optional: absent means an app container
    containers.push_back(std::move(entry));
  }
  return json{
      {"version", kAllocationVersion}, {"node", allocation.node}, {"containers", std::move(containers)}};
}

Result<std::string> EncodeAllocation(const PodAllocation& allocation) {
  TESSERA_ASSIGN_OR_RETURN(const json j, AllocationToJson(allocation));
  return j.dump();
}

Result<PodAllocation> AllocationFromJson(const nlohmann::json& j) {
  if (!j.is_object()) {
    return Error{std::string("allocation: expected a JSON object such as {\"version\":1,...}, got ") +
                 j.type_name()};
  }
  TESSERA_RETURN_IF_ERROR(CheckVersion(j, kAllocationVersion, kPayload));
  PodAllocation out;
  TESSERA_ASSIGN_OR_RETURN(out.node, ReadString(j, "node", "allocation"));
  TESSERA_ASSIGN_OR_RETURN(const json* containers, ReadArray(j, "containers", "allocation"));
  for (size_t i = 0; i < containers->size(); ++i) {
    const json& c = (*containers)[i];
    std::string where = ContainerWhere(i, "");
    if (!c.is_object()) return Error{where + ": expected an object {\"name\":…,\"devices\":[…]}"};
    ContainerAllocation ca;
    TESSERA_ASSIGN_OR_RETURN(ca.container, ReadString(c, "name", where));
    where = ContainerWhere(i, ca.container);
    if (auto init = c.find("init"); init != c.end()) {
      if (!init->is_boolean()) {
        return Error{where + ": \"init\" is " + std::string(init->type_name()) + "; expected true or false"};
      }
      ca.init = init->get<bool>();
    }
    TESSERA_ASSIGN_OR_RETURN(const json* devices, ReadArray(c, "devices", where));
    for (size_t k = 0; k < devices->size(); ++k) {
      const json& d = (*devices)[k];
      const std::string dwhere = where + ".devices[" + std::to_string(k) + "]";
      if (!d.is_object())
        return Error{dwhere + ": expected an object {\"uuid\":…,\"memoryMiB\":…,\"cores\":…}"};
      DeviceSlice slice;
      TESSERA_ASSIGN_OR_RETURN(slice.uuid, ReadString(d, "uuid", dwhere));
      // Read within bounds that fit the fields.
      TESSERA_ASSIGN_OR_RETURN(slice.memory_mib, ReadInt(d, "memoryMiB", dwhere, 0, kMaxGpuMemoryMiB));
      TESSERA_ASSIGN_OR_RETURN(slice.cores, ReadInt(d, "cores", dwhere, 0, 100));
      ca.devices.push_back(std::move(slice));
    }
    out.containers.push_back(std::move(ca));
  }
  TESSERA_RETURN_IF_ERROR(ValidateAllocation(out));
  return out;
}

Result<PodAllocation> DecodeAllocation(std::string_view text) {
  TESSERA_ASSIGN_OR_RETURN(const json j, ParseJsonText(text, kPayload));
  return AllocationFromJson(j);
}

Result<ContainerAllocation> SelectContainerAllocation(const PodAllocation& allocation,
                                                      std::string_view container_name) {
  if (container_name.empty()) {
    if (allocation.containers.size() == 1) return allocation.containers[0];
    return Error{
        "allocation has " + std::to_string(allocation.containers.size()) +
        " container entries and no container name was given; set TESSERA_CONTAINER_NAME to one of them"};
  }
  for (const ContainerAllocation& c : allocation.containers) {
    if (c.container == container_name) return c;
  }
  std::string known;
  for (const ContainerAllocation& c : allocation.containers)
    known += (known.empty() ? "\"" : ", \"") + c.container + "\"";
  return Error{"allocation has no entry for container \"" + std::string(container_name) + "\"; it has " +
               known};
}

}  // namespace tessera::core
