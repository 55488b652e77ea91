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

constexpr EnumSpelling<LinkKind> kLinkKinds[] = {{LinkKind::kNvlink, "nvlink"}, {LinkKind::kPcie, "pcie"}};
// The "mig" object's own spelling of the two MIG modes, which inventories
// carried before the per-GPU "mode" existed and still carry for older readers.
constexpr EnumSpelling<SharingMode> kMigModes[] = {{SharingMode::kMigStatic, "static"},
                                                   {SharingMode::kMigDynamic, "dynamic"}};

constexpr bool IsReplicaMode(SharingMode mode) {
  return mode == SharingMode::kTimeslice || mode == SharingMode::kMps;
}

// "<namespace>/<pod>/<container>": three non-empty parts.
bool IsContainerPath(const std::string& text) {
  if (text.size() > kMaxUsedByLength) return false;
  const auto a = text.find('/');
  if (a == std::string::npos || a == 0) return false;
  const auto b = text.find('/', a + 1);
  if (b == std::string::npos || b == a + 1 || b + 1 == text.size()) return false;
  return text.find('/', b + 1) == std::string::npos;
}

Status ValidateMode(const Gpu& g, const std::string& where) {
  if (ParseSharingMode(SharingModeName(g.mode)) != g.mode) {  // a value outside the enum
    return Error{where + ": \"mode\" is not one of " + std::string(kSharingModeList)};
  }
  if (g.mode == SharingMode::kTimeslice) {
    return CheckRange(where, "replicas", g.replicas, 1, kMaxReplicas,
                      "(a time-sliced GPU advertises replicas)");
  }
  if (g.mode == SharingMode::kMps) {
    return CheckRange(where, "replicas", g.replicas, 0, kMaxReplicas, "(sized MPS shares)",
                      "(NVIDIA-style equal replicas)");
  }
  if (g.replicas != 0) {
    return Error{where + ": \"replicas\" is " + std::to_string(g.replicas) + " but the GPU is in " +
                 SharingModeName(g.mode) + " mode; only timeslice and mps GPUs advertise replicas"};
  }
  return Status::Ok();
}

Status ValidateMig(const Gpu& g, const std::string& where, std::set<std::string>& mig_uuids) {
  if (!IsMigMode(g.mode)) {
    if (!g.mig_devices.empty()) return Error{where + ": lists MIG devices but is not in MIG mode"};
    return Status::Ok();
  }
  if (!g.mig_capable) return Error{where + ": in MIG mode but \"migCapable\" is false"};
  uint32_t taken = 0;
  for (size_t k = 0; k < g.mig_devices.size(); ++k) {
    const MigDevice& d = g.mig_devices[k];
    const std::string dwhere = where + ".mig.devices[" + std::to_string(k) + "]";
    if (d.uuid.size() < 5 || d.uuid.size() > kMaxMigUuidLength || d.uuid.rfind("MIG-", 0) != 0) {
      return Error{dwhere + ": \"uuid\" is \"" + d.uuid.substr(0, 80) +
                   "\"; expected the MIG device's UUID, \"MIG-...\""};
    }
    if (!mig_uuids.insert(d.uuid).second) return Error{dwhere + ": uuid appears more than once on this node"};
    if (d.profile.empty() || d.profile.size() > kMaxMigProfileLength) {
      return Error{dwhere + ": \"profile\" is \"" + d.profile.substr(0, 40) +
                   "\"; expected a MIG profile name such as 1g.10gb"};
    }
    TESSERA_RETURN_IF_ERROR(CheckRange(dwhere, "start", d.start, 0, kMaxMigSlices - 1));
    TESSERA_RETURN_IF_ERROR(CheckRange(dwhere, "size", d.size, 1, kMaxMigSlices - d.start, {},
                                       "(memory slices from start to the GPU's last)"));
    const uint32_t mask = ((1u << d.size) - 1) << d.start;
    if ((taken & mask) != 0) {
      return Error{dwhere + ": memory slices " + std::to_string(d.start) + ".." +
                   std::to_string(d.start + d.size - 1) + " overlap another MIG device of this GPU"};
    }
    taken |= mask;
    TESSERA_RETURN_IF_ERROR(
        CheckRange(dwhere, "memoryMiB", d.memory_mib, 0, g.memory_mib, {}, "(the GPU's memory)"));
    if (d.sm_count < 0)
      return Error{dwhere + ": \"smCount\" is " + std::to_string(d.sm_count) + "; expected >= 0"};
    if (!d.used_by.empty() && !IsContainerPath(d.used_by)) {
      return Error{dwhere + ": \"usedBy\" is \"" + d.used_by.substr(0, 80) +
                   "\"; expected <namespace>/<pod>/<container>"};
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateInventory(const NodeInventory& inv) {
  if (inv.node.empty()) return Error{"inventory: \"node\" is empty; expected the node's name"};
  if (!IsRfc3339Timestamp(inv.heartbeat)) {
    return Error{"inventory: \"heartbeat\" is \"" + inv.heartbeat +
                 "\"; expected an RFC 3339 time such as 2026-11-22T02:31:53Z"};
  }
  std::set<std::string> uuids;
  std::set<std::string> mig_uuids;
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
    TESSERA_RETURN_IF_ERROR(ValidateMode(g, where));
    TESSERA_RETURN_IF_ERROR(ValidateMig(g, where, mig_uuids));
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
      return json{{"peer", l.peer_uuid}, {"kind", SpellingOf(kLinkKinds, l.kind)}, {"lanes", l.lanes}};
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
                    {"mode", SharingModeName(g.mode)},
                    {"links", std::move(links)}});
    if (IsReplicaMode(g.mode)) gpus.back()["replicas"] = g.replicas;
    if (!g.held_by.empty()) gpus.back()["heldBy"] = g.held_by;
    if (IsMigMode(g.mode)) {
      json devices = JsonArrayOf(g.mig_devices, [](const MigDevice& d) {
        json out{{"uuid", d.uuid},      {"profile", d.profile},      {"start", d.start},
                 {"size", d.size},      {"memoryMiB", d.memory_mib}, {"smCount", d.sm_count},
                 {"healthy", d.healthy}};
        if (!d.used_by.empty()) out["usedBy"] = d.used_by;
        return out;
      });
      gpus.back()["mig"] = json{{"mode", SpellingOf(kMigModes, g.mode)}, {"devices", std::move(devices)}};
    }
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
  auto read_gpu = [](const json& g, size_t i, const std::string& item_where) -> Result<Gpu> {
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
    // Added within version 1: absent in inventories of older agents, whose
    // GPUs were vGPU unless a "mig" object says which MIG mode.
    std::optional<SharingMode> mode;
    if (g.contains("mode")) {
      TESSERA_ASSIGN_OR_RETURN(const std::string name, ReadString(g, "mode", where));
      mode = ParseSharingMode(name);
      if (!mode) {
        return Error{where + ": \"mode\" is \"" + name.substr(0, 40) + "\"; expected one of " +
                     std::string(kSharingModeList)};
      }
      gpu.mode = *mode;
    }
    // Added with "mode", optional: only for timeslice and mps GPUs.
    if (g.contains("replicas")) {
      TESSERA_ASSIGN_OR_RETURN(gpu.replicas, ReadInt(g, "replicas", where, 0, kMaxReplicas));
    }
    // Added within version 1, optional: present only for a GPU in MIG mode
    // (an older reader ignores it and sees the GPU's slots, which are 0).
    // Before "mode" existed its own "mode" was the only place saying which.
    if (mode && IsMigMode(*mode) && !g.contains("mig")) {
      return Error{where + ": \"mode\" is \"" + SharingModeName(*mode) +
                   "\" but the GPU has no \"mig\" object listing its MIG devices"};
    }
    if (g.contains("mig")) {
      const json& m = g["mig"];
      const std::string mwhere = where + ".mig";
      if (!m.is_object()) return Error{mwhere + ": expected an object {\"mode\":…,\"devices\":[…]}"};
      TESSERA_ASSIGN_OR_RETURN(const std::string mig_mode, ReadString(m, "mode", mwhere));
      const std::optional<SharingMode> spelled = ValueSpelled(kMigModes, mig_mode);
      if (!spelled) {
        return Error{mwhere + ": \"mode\" is \"" + mig_mode.substr(0, 40) +
                     "\"; expected \"static\" or \"dynamic\" (omit \"mig\" for a GPU not in MIG mode)"};
      }
      if (mode && *mode != *spelled) {
        return Error{mwhere + ": \"mode\" is \"" + mig_mode + "\" but the GPU's \"mode\" is \"" +
                     SharingModeName(*mode) + "\"; they must agree (mig + static, mig-dynamic + dynamic)"};
      }
      gpu.mode = *spelled;
      auto read_device = [](const json& d, size_t, const std::string& dwhere) -> Result<MigDevice> {
        MigDevice device;
        TESSERA_ASSIGN_OR_RETURN(device.uuid, ReadString(d, "uuid", dwhere));
        TESSERA_ASSIGN_OR_RETURN(device.profile, ReadString(d, "profile", dwhere));
        TESSERA_ASSIGN_OR_RETURN(device.start, ReadInt(d, "start", dwhere, 0, kMaxMigSlices - 1));
        TESSERA_ASSIGN_OR_RETURN(device.size, ReadInt(d, "size", dwhere, 1, kMaxMigSlices));
        TESSERA_ASSIGN_OR_RETURN(device.memory_mib, ReadInt(d, "memoryMiB", dwhere, 0, kMaxGpuMemoryMiB));
        TESSERA_ASSIGN_OR_RETURN(device.sm_count, ReadInt(d, "smCount", dwhere, 0, INT32_MAX));
        TESSERA_ASSIGN_OR_RETURN(device.healthy, ReadBool(d, "healthy", dwhere));
        if (d.contains("usedBy")) {
          TESSERA_ASSIGN_OR_RETURN(device.used_by, ReadString(d, "usedBy", dwhere));
        }
        return device;
      };
      TESSERA_ASSIGN_OR_RETURN(
          gpu.mig_devices, ReadObjects<MigDevice>(m, "devices", mwhere, mwhere + ".devices",
                                                  "{\"uuid\":…,\"profile\":…,\"start\":…,…}", read_device));
    }
    auto read_link = [](const json& l, size_t, const std::string& lwhere) -> Result<GpuLink> {
      GpuLink link;
      TESSERA_ASSIGN_OR_RETURN(link.peer_uuid, ReadString(l, "peer", lwhere));
      TESSERA_RETURN_IF_ERROR(ValidateDeviceUuid(link.peer_uuid, lwhere + ": peer"));
      TESSERA_ASSIGN_OR_RETURN(const std::string kind, ReadString(l, "kind", lwhere));
      const std::optional<LinkKind> spelled = ValueSpelled(kLinkKinds, kind);
      if (!spelled) return Error{lwhere + ": \"kind\" is \"" + kind + "\"; expected \"nvlink\" or \"pcie\""};
      link.kind = *spelled;
      TESSERA_ASSIGN_OR_RETURN(link.lanes, ReadInt(l, "lanes", lwhere, 1, kMaxLinkLanes));
      return link;
    };
    TESSERA_ASSIGN_OR_RETURN(gpu.links,
                             ReadObjects<GpuLink>(g, "links", where, where + ".links",
                                                  "{\"peer\":…,\"kind\":…,\"lanes\":…}", read_link));
    return gpu;
  };
  TESSERA_ASSIGN_OR_RETURN(
      out.gpus, ReadObjects<Gpu>(j, "gpus", "inventory", kGpus, "{\"uuid\":…,\"index\":…,…}", read_gpu));
  TESSERA_RETURN_IF_ERROR(ValidateInventory(out));
  return out;
}

Result<NodeInventory> DecodeInventory(std::string_view text) {
  return DecodeWith(text, kPayload, InventoryFromJson);
}

}  // namespace tessera::core
