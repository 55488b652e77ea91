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

constexpr std::string_view kContainers = "allocation: containers";

std::string ContainerWhere(size_t i, const std::string& name) {
  return ElementWhere(kContainers, i, name.empty() ? name : "\"" + name + "\"");
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
      TESSERA_RETURN_IF_ERROR(
          CheckRange(dwhere, "memoryMiB", d.memory_mib, 0, kMaxGpuMemoryMiB, "(no limit)"));
      TESSERA_RETURN_IF_ERROR(CheckRange(dwhere, "cores", d.cores, 0, 100, "(no limit)", "(exclusive)"));
      if (!d.mig_profile.empty()) {
        if (d.uuid.rfind("GPU-", 0) != 0) {
          return Error{dwhere + ": a MIG instance to create names its parent GPU (\"GPU-…\"), not \"" +
                       d.uuid + "\""};
        }
        if (d.mig_profile.size() > kMaxMigProfileNameLength) {
          return Error{dwhere + ": \"mig.profile\" is \"" + d.mig_profile.substr(0, 40) +
                       "\"; expected a MIG profile name such as 1g.10gb"};
        }
        TESSERA_RETURN_IF_ERROR(CheckRange(dwhere, "mig.start", d.mig_start, 0, kMaxMigStart));
      } else if (d.mig_start != 0) {
        return Error{dwhere + ": \"mig.start\" without a profile"};
      }
      if (d.mps) {
        if (!d.mig_profile.empty())
          return Error{dwhere + ": both \"mps\" and \"mig\"; a device is one or the other"};
        if (d.uuid.rfind("GPU-", 0) != 0) {
          return Error{dwhere + ": an MPS share names its GPU (\"GPU-…\"), not \"" + d.uuid + "\""};
        }
        TESSERA_RETURN_IF_ERROR(CheckRange(dwhere, "memoryMiB", d.memory_mib, 1, kMaxGpuMemoryMiB,
                                           "(an MPS share's pinned limit)"));
        TESSERA_RETURN_IF_ERROR(
            CheckRange(dwhere, "cores", d.cores, 1, 100, "(an MPS share's active-thread percentage)"));
      }
    }
  }
  return Status::Ok();
}

Result<nlohmann::json> AllocationToJson(const PodAllocation& allocation) {
  TESSERA_RETURN_IF_ERROR(ValidateAllocation(allocation));
  json containers = JsonArrayOf(allocation.containers, [](const ContainerAllocation& c) {
    json devices = JsonArrayOf(c.devices, [](const DeviceSlice& d) {
      json out{{"uuid", d.uuid}, {"memoryMiB", d.memory_mib}, {"cores", d.cores}};
      // Optional: only for a dynamic MIG instance, so vGPU payloads stay as agreed.
      if (!d.mig_profile.empty()) out["mig"] = json{{"profile", d.mig_profile}, {"start", d.mig_start}};
      if (d.mps) out["mps"] = true;  // optional: only for an MPS share
      return out;
    });
    json entry = {{"name", c.container}, {"devices", std::move(devices)}};
    if (c.init) entry["init"] = true;  // optional: absent means an app container
    return entry;
  });
  return json{
      {"version", kAllocationVersion}, {"node", allocation.node}, {"containers", std::move(containers)}};
}

Result<std::string> EncodeContainerLimits(const PodAllocation& pod, const std::string& container) {
  for (const auto& c : pod.containers) {
    if (c.container != container) continue;
    PodAllocation one;
    one.node = pod.node;
    ContainerAllocation entry = c;
    std::erase_if(entry.devices, [](const DeviceSlice& d) { return !d.mig_profile.empty(); });
    if (entry.devices.empty()) return Error{"container '" + container + "' has no vGPU slice"};
    one.containers.push_back(std::move(entry));
    return EncodeAllocation(one);
  }
  return Error{"the allocation has no container '" + container + "'"};
}

Result<std::string> EncodeAllocation(const PodAllocation& allocation) {
  return EncodeWith(allocation, AllocationToJson);
}

Result<PodAllocation> AllocationFromJson(const nlohmann::json& j) {
  TESSERA_RETURN_IF_ERROR(CheckEnvelope(j, kAllocationVersion, kPayload));
  PodAllocation out;
  TESSERA_ASSIGN_OR_RETURN(out.node, ReadString(j, "node", "allocation"));
  auto read_container = [](const json& c, size_t i,
                           const std::string& item_where) -> Result<ContainerAllocation> {
    ContainerAllocation ca;
    TESSERA_ASSIGN_OR_RETURN(ca.container, ReadString(c, "name", item_where));
    const std::string where = ContainerWhere(i, ca.container);
    if (auto init = c.find("init"); init != c.end()) {
      if (!init->is_boolean()) {
        return Error{where + ": \"init\" is " + std::string(init->type_name()) + "; expected true or false"};
      }
      ca.init = init->get<bool>();
    }
    auto read_device = [](const json& d, size_t, const std::string& dwhere) -> Result<DeviceSlice> {
      DeviceSlice slice;
      TESSERA_ASSIGN_OR_RETURN(slice.uuid, ReadString(d, "uuid", dwhere));
      // Read within bounds that fit the fields.
      TESSERA_ASSIGN_OR_RETURN(slice.memory_mib, ReadInt(d, "memoryMiB", dwhere, 0, kMaxGpuMemoryMiB));
      TESSERA_ASSIGN_OR_RETURN(slice.cores, ReadInt(d, "cores", dwhere, 0, 100));
      // Added within version 1, optional: a dynamic MIG instance to create.
      if (d.contains("mig")) {
        const json& m = d["mig"];
        const std::string mwhere = dwhere + ".mig";
        if (!m.is_object()) return Error{mwhere + ": expected an object {\"profile\":…,\"start\":…}"};
        TESSERA_ASSIGN_OR_RETURN(slice.mig_profile, ReadString(m, "profile", mwhere));
        if (slice.mig_profile.empty()) return Error{mwhere + ": \"profile\" is empty; expected e.g. 1g.10gb"};
        TESSERA_ASSIGN_OR_RETURN(slice.mig_start, ReadInt(m, "start", mwhere, 0, kMaxMigStart));
      }
      // Added within version 1, optional: an MPS client share.
      if (auto mps = d.find("mps"); mps != d.end()) {
        if (!mps->is_boolean()) {
          return Error{dwhere + ": \"mps\" is " + std::string(mps->type_name()) + "; expected true or false"};
        }
        slice.mps = mps->get<bool>();
      }
      return slice;
    };
    TESSERA_ASSIGN_OR_RETURN(
        ca.devices, ReadObjects<DeviceSlice>(c, "devices", where, where + ".devices",
                                             "{\"uuid\":…,\"memoryMiB\":…,\"cores\":…}", read_device));
    return ca;
  };
  TESSERA_ASSIGN_OR_RETURN(out.containers,
                           ReadObjects<ContainerAllocation>(j, "containers", "allocation", kContainers,
                                                            "{\"name\":…,\"devices\":[…]}", read_container));
  TESSERA_RETURN_IF_ERROR(ValidateAllocation(out));
  return out;
}

Result<PodAllocation> DecodeAllocation(std::string_view text) {
  return DecodeWith(text, kPayload, AllocationFromJson);
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
