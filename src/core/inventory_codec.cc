#include "core/inventory_codec.h"

#include <set>
#include <string>

#include "core/codec.h"
#include "core/resource_config.h"

namespace tessera::core {
namespace {

using nlohmann::json;
using namespace codec_detail;

constexpr std::string_view kPayload = "inventory";

constexpr std::string_view kGpus = "inventory: gpus";

const char* KindName(LinkKind kind) {
  return kind == LinkKind::kNvlink ? "nvlink" : "pcie";
}

}  // namespace

Status ValidateInventory(const NodeInventory& inv) {
  if (inv.node.empty()) return Error{"inventory: \"node\" is empty; expected the node's name"};
  if (!IsRfc3339Timestamp(inv.heartbeat)) {
    return Error{"inventory: \"heartbeat\" is \"" + inv.heartbeat +
                 "\"; expected an RFC 3339 time such as 2026-11-22T02:31:53Z"};
  }
  std::set<std::string> uuids;
  std::set<int> indexes;
  for (size_t i = 0; i < inv.gpus.size(); ++i) {
    const Gpu& g = inv.gpus[i];
    const std::string where = ElementWhere(kGpus, i, g.uuid);
    Status s = ValidateDeviceUuid(g.uuid, where);
    if (!s) return s;
    if (!uuids.insert(g.uuid).second) return Error{where + ": uuid appears more than once on this node"};
    TESSERA_RETURN_IF_ERROR(CheckRange(where, "index", g.index, 0, kMaxGpuIndex));
    if (!indexes.insert(g.index).second) {
      return Error{where + ": \"index\" " + std::to_string(g.index) + " is used by another GPU of this node"};
    }
    if (g.model.empty())
      return Error{where + ": \"model\" is empty; expected the product name, e.g. NVIDIA A100"};
    TESSERA_RETURN_IF_ERROR(CheckRange(where, "memoryMiB", g.memory_mib, 0, kMaxGpuMemoryMiB));
    if (g.sm_count < 0)
      return Error{where + ": \"smCount\" is " + std::to_string(g.sm_count) + "; expected >= 0"};
    if (g.numa_node < -1) {
      return Error{where + ": \"numaNode\" is " + std::to_string(g.numa_node) +
                   "; expected -1 (unknown) or >= 0"};
    }
    TESSERA_RETURN_IF_ERROR(CheckRange(where, "slots", g.slots, 0, kMaxSlots));
    TESSERA_RETURN_IF_ERROR(
        CheckRange(where, "cores", g.cores, 1, kMaxCoresPercent, {}, "(percent of the GPU offered)"));
    if (!g.held_by.empty()) {
      const auto slash = g.held_by.find('/');
      if (slash == std::string::npos || slash == 0 || slash + 1 == g.held_by.size() ||
          g.held_by.size() > kMaxHeldByLength) {
        return Error{where + ": \"heldBy\" is \"" + g.held_by.substr(0, 80) +
                     "\"; expected <namespace>/<pod name> of the pod holding the GPU"};
      }
    }
  }
  for (size_t i = 0; i < inv.gpus.size(); ++i) {
    const Gpu& g = inv.gpus[i];
    std::set<std::string> peers;
    for (size_t k = 0; k < g.links.size(); ++k) {
      const GpuLink& l = g.links[k];
      const std::string where = ElementWhere(kGpus, i, g.uuid) + ".links[" + std::to_string(k) + "]";
      if (l.peer_uuid == g.uuid) return Error{where + ": \"peer\" is the GPU itself; links connect two GPUs"};
      if (!uuids.contains(l.peer_uuid)) {
        return Error{where + ": \"peer\" \"" + l.peer_uuid +
                     "\" is not a GPU of this inventory; links must name GPUs listed in \"gpus\""};
      }
      if (!peers.insert(l.peer_uuid).second) {
        return Error{where + ": peer " + l.peer_uuid + " is listed twice; give one link per peer"};
      }
      if (l.kind != LinkKind::kNvlink && l.kind != LinkKind::kPcie) {
        return Error{where + ": \"kind\" is not nvlink or pcie"};
      }
      TESSERA_RETURN_IF_ERROR(CheckRange(where, "lanes", l.lanes, 1, kMaxLinkLanes));
    }
  }
  return Status::Ok();
}

Result<nlohmann::json> InventoryToJson(const NodeInventory& inv) {
  TESSERA_RETURN_IF_ERROR(ValidateInventory(inv));
  json gpus = json::array();
  for (const Gpu& g : inv.gpus) {
    json links = JsonArrayOf(g.links, [](const GpuLink& l) {
      return json{{"peer", l.peer_uuid}, {"kind", KindName(l.kind)}, {"lanes", l.lanes}};
    });
    gpus.push_back({{"uuid", g.uuid},
                    {"index", g.index},
                    {"model", g.model},
                    {"memoryMiB", g.memory_mib},
                    {"smCount", g.sm_count},
                    {"numaNode", g.numa_node},
                    {"healthy", g.healthy},
                    {"slots", g.slots},
                    {"cores", g.cores},
                    {"migCapable", g.mig_capable},
                    {"links", std::move(links)}});
    if (!g.held_by.empty()) gpus.back()["heldBy"] = g.held_by;
  }
  return json{{"version", kInventoryVersion},
              {"node", inv.node},
              {"heartbeat", inv.heartbeat},
              {"gpus", std::move(gpus)}};
}

Result<std::string> EncodeInventory(const NodeInventory& inv) {
  return EncodeWith(inv, InventoryToJson);
}

Result<NodeInventory> InventoryFromJson(const nlohmann::json& j) {
  TESSERA_RETURN_IF_ERROR(CheckEnvelope(j, kInventoryVersion, kPayload));
  NodeInventory out;
  TESSERA_ASSIGN_OR_RETURN(out.node, ReadString(j, "node", "inventory"));
  TESSERA_ASSIGN_OR_RETURN(out.heartbeat, ReadString(j, "heartbeat", "inventory"));
  auto read_gpu = [&out](const json& g, size_t i, const std::string& item_where) -> Status {
    Gpu gpu;
    TESSERA_ASSIGN_OR_RETURN(gpu.uuid, ReadString(g, "uuid", item_where));
    const std::string where = ElementWhere(kGpus, i, gpu.uuid);
    // Integers are read within bounds that fit their fields.
    TESSERA_ASSIGN_OR_RETURN(gpu.index, ReadInt(g, "index", where, 0, kMaxGpuIndex));
    TESSERA_ASSIGN_OR_RETURN(gpu.model, ReadString(g, "model", where));
    TESSERA_ASSIGN_OR_RETURN(gpu.memory_mib, ReadInt(g, "memoryMiB", where, 0, kMaxGpuMemoryMiB));
    TESSERA_ASSIGN_OR_RETURN(gpu.sm_count, ReadInt(g, "smCount", where, 0, INT32_MAX));
    TESSERA_ASSIGN_OR_RETURN(gpu.numa_node, ReadInt(g, "numaNode", where, -1, INT32_MAX));
    TESSERA_ASSIGN_OR_RETURN(gpu.healthy, ReadBool(g, "healthy", where));
    TESSERA_ASSIGN_OR_RETURN(gpu.slots, ReadInt(g, "slots", where, 0, kMaxSlots));
    // Added within version 1: absent in inventories of older agents, which
    // offered 100 %. Present, it is checked like every other field.
    if (g.contains("cores")) {
      TESSERA_ASSIGN_OR_RETURN(gpu.cores, ReadInt(g, "cores", where, 1, kMaxCoresPercent));
    }
    // Added within version 1, optional: present only while a pod tessera did
    // not place holds the GPU whole.
    if (g.contains("heldBy")) {
      TESSERA_ASSIGN_OR_RETURN(gpu.held_by, ReadString(g, "heldBy", where));
    }
    TESSERA_ASSIGN_OR_RETURN(gpu.mig_capable, ReadBool(g, "migCapable", where));
    auto read_link = [&gpu](const json& l, size_t, const std::string& lwhere) -> Status {
      GpuLink link;
      TESSERA_ASSIGN_OR_RETURN(link.peer_uuid, ReadString(l, "peer", lwhere));
      TESSERA_RETURN_IF_ERROR(ValidateDeviceUuid(link.peer_uuid, lwhere + ": peer"));
      TESSERA_ASSIGN_OR_RETURN(const std::string kind, ReadString(l, "kind", lwhere));
      if (kind == "nvlink") {
        link.kind = LinkKind::kNvlink;
      } else if (kind == "pcie") {
        link.kind = LinkKind::kPcie;
      } else {
        return Error{lwhere + ": \"kind\" is \"" + kind + "\"; expected \"nvlink\" or \"pcie\""};
      }
      TESSERA_ASSIGN_OR_RETURN(link.lanes, ReadInt(l, "lanes", lwhere, 1, kMaxLinkLanes));
      gpu.links.push_back(std::move(link));
      return Status::Ok();
    };
    TESSERA_RETURN_IF_ERROR(ReadEachObject(g, "links", where, where + ".links",
                                           "{\"peer\":…,\"kind\":…,\"lanes\":…}", read_link));
    out.gpus.push_back(std::move(gpu));
    return Status::Ok();
  };
  TESSERA_RETURN_IF_ERROR(
      ReadEachObject(j, "gpus", "inventory", kGpus, "{\"uuid\":…,\"index\":…,…}", read_gpu));
  TESSERA_RETURN_IF_ERROR(ValidateInventory(out));
  return out;
}

Result<NodeInventory> DecodeInventory(std::string_view text) {
  return DecodeWith(text, kPayload, InventoryFromJson);
}

}  // namespace tessera::core
