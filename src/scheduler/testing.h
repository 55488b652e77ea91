// Test helpers shared by the scheduler's unit and integration tests: Node
// objects carrying a valid tessera.io/gpu-inventory annotation, and GPU pods
// (ReturnsOrAbort, the hang watchdog, is base/testing.h's). Header-only; not
// part of the library's interface.
//
// Inventories carry a heartbeat of the current time unless told otherwise, so
// a node made here counts as fresh for the default inventoryStaleSeconds
// (120 s); tests of staleness pass their own heartbeat and clock.
#pragma once

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/testing.h"
#include "core/allocation.h"
#include "core/inventory_codec.h"
#include "core/mig/geometry.h"
#include "kube/typed_api.h"

namespace tessera::scheduler::testing {

using ::tessera::testing::ReturnsOrAbort;

inline std::string GpuUuid(int node, int gpu) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "GPU-%08x-0000-4000-8000-%012x", node, gpu);
  return buf;
}

// An RFC 3339 heartbeat in the node agent's format (whole seconds, UTC).
inline std::string Heartbeat(std::chrono::system_clock::time_point t) {
  return kube::FormatMicroTime(t).substr(0, 19) + "Z";
}

// A Node with `gpus` GPUs of `memory_mib` each, `slots` vGPU slots per GPU;
// `heartbeat` "" = now.
inline nlohmann::json NodeWithGpus(const std::string& name, int node_id, int gpus, int64_t memory_mib,
                                   int slots = 10, const std::string& model = "NVIDIA A100-SXM4-80GB",
                                   const std::string& heartbeat = "") {
  core::NodeInventory inv;
  inv.node = name;
  inv.heartbeat = heartbeat.empty() ? Heartbeat(std::chrono::system_clock::now()) : heartbeat;
  for (int i = 0; i < gpus; ++i) {
    core::Gpu g;
    g.uuid = GpuUuid(node_id, i);
    g.index = i;
    g.model = model;
    g.memory_mib = memory_mib;
    g.sm_count = 108;
    g.numa_node = 0;
    g.slots = slots;
    inv.gpus.push_back(g);
  }
  auto text = core::EncodeInventory(inv);
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", name},
            {"annotations", {{std::string(core::kInventoryAnnotation), text.ok() ? *text : ""}}}}},
          {"spec", nlohmann::json::object()}};
}

// A Node with `gpus` A100-80GB GPUs in mig-dynamic mode (no vGPU slots) whose
// inventory lists `devices` (by GPU index) as tessera-node lists the MIG
// devices it created; `heartbeat` "" = now.
inline nlohmann::json NodeWithDynamicMigGpus(const std::string& name, int node_id, int gpus,
                                             const std::map<int, std::vector<core::MigDevice>>& devices = {},
                                             const std::string& heartbeat = "") {
  nlohmann::json node = NodeWithGpus(name, node_id, gpus, 81920, 0, "NVIDIA A100-SXM4-80GB", heartbeat);
  auto& text = node["metadata"]["annotations"][std::string(core::kInventoryAnnotation)];
  auto inv = core::DecodeInventory(text.get<std::string>());
  if (!inv.ok()) return node;
  for (core::Gpu& g : inv->gpus) {
    g.mig_capable = true;
    g.mode = core::SharingMode::kMigDynamic;
    if (auto it = devices.find(g.index); it != devices.end()) g.mig_devices = it->second;
  }
  auto encoded = core::EncodeInventory(*inv);
  text = encoded.ok() ? *encoded : "";
  return node;
}

// The MIG device an A100-80GB node lists once it created the instance the
// allocation's device `d` asks for (profile and start), held by `used_by`.
inline core::MigDevice ListedMigDevice(const core::DeviceSlice& d, const std::string& mig_uuid,
                                       const std::string& used_by) {
  const core::mig::Profile* p = core::mig::FindModel("A100-80GB")->FindProfile(d.mig_profile);
  if (p == nullptr) return {mig_uuid, d.mig_profile, d.mig_start, 0, 0, 0, true, used_by};
  return {mig_uuid,
          d.mig_profile,
          d.mig_start,
          static_cast<int>(p->memory_slices),
          static_cast<int64_t>(p->memory_mib),
          static_cast<int>(p->sm_count),
          true,
          used_by};
}

// A pod with one container asking for `gpus` vGPUs of `memory_mib` MiB and `cores` %.
inline nlohmann::json GpuPod(const std::string& ns, const std::string& name, int gpus, int64_t memory_mib,
                             int cores, const nlohmann::json& annotations = nlohmann::json::object()) {
  nlohmann::json limits = {{"nvidia.com/gpu", std::to_string(gpus)},
                           {"nvidia.com/gpumem", std::to_string(memory_mib)},
                           {"nvidia.com/gpucores", std::to_string(cores)}};
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"annotations", annotations}}},
          {"spec",
           {{"schedulerName", "tessera-scheduler"},
            {"containers", {{{"name", "app"}, {"image", "cuda"}, {"resources", {{"limits", limits}}}}}}}}};
}

// A pod asking for one dynamic MIG instance of at least `memory_mib` MiB
// (HAMi's nvidia.com/vgpu-mode: mig), with `cores` % of the SMs.
inline nlohmann::json MigPod(const std::string& ns, const std::string& name, int64_t memory_mib,
                             int cores = 0) {
  return GpuPod(ns, name, 1, memory_mib, cores, {{"nvidia.com/vgpu-mode", "mig"}});
}

}  // namespace tessera::scheduler::testing
