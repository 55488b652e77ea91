// Objects the plugin's unit tests build: Nodes with an inventory, GPU pods
// with tessera's or HAMi's allocation annotation. Test-only.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "core/allocation_codec.h"
#include "core/inventory_codec.h"

namespace tessera::kubectl::test {

// Matches a text that contains each of `parts`; a failure names them all.
inline ::testing::Matcher<const std::string&> HasSubstrs(std::initializer_list<std::string> parts) {
  std::vector<::testing::Matcher<const std::string&>> each;
  for (const std::string& part : parts) each.push_back(::testing::HasSubstr(part));
  return ::testing::AllOfArray(each);
}

inline constexpr const char* kGpu0 = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd";
inline constexpr const char* kGpu1 = "GPU-11111111-aaaa-bbbb-cccc-dddddddddddd";
inline constexpr const char* kHeartbeat = "2030-01-01T00:00:00Z";

inline nlohmann::json Node(const std::string& name, const std::string& inventory_text) {
  nlohmann::json node = {{"metadata", {{"name", name}}}};
  if (!inventory_text.empty())
    node["metadata"]["annotations"][std::string(core::kInventoryAnnotation)] = inventory_text;
  return node;
}

// Two 40000 MiB GPUs, 4 vGPUs each.
inline nlohmann::json GpuNode(const std::string& name, const std::string& heartbeat = kHeartbeat) {
  core::NodeInventory inventory;
  inventory.node = name;
  inventory.heartbeat = heartbeat;
  for (int i = 0; i < 2; ++i) {
    core::Gpu gpu;
    gpu.uuid = i == 0 ? kGpu0 : kGpu1;
    gpu.index = i;
    gpu.model = "NVIDIA A100-PCIE-40GB";
    gpu.memory_mib = 40000;
    gpu.slots = 4;
    inventory.gpus.push_back(gpu);
  }
  return Node(name, *core::EncodeInventory(inventory));
}

// GPU 0 (kGpu0) a 40000 MiB vGPU GPU with 4 slots; GPU 1 (kGpu1) an A100-80GB
// in mig-dynamic mode listing one instance, 1g.10gb at 6 ("MIG-made", held by
// ml/made/main).
inline nlohmann::json MigNode(const std::string& name) {
  core::NodeInventory inventory = *core::DecodeInventory(
      GpuNode(name)["metadata"]["annotations"][std::string(core::kInventoryAnnotation)].get<std::string>());
  core::Gpu& gpu = inventory.gpus[1];
  gpu.model = "NVIDIA A100-SXM4-80GB";
  gpu.memory_mib = 81920;
  gpu.slots = 0;
  gpu.mig_capable = true;
  gpu.mode = core::SharingMode::kMigDynamic;
  gpu.mig_devices = {{"MIG-made", "1g.10gb", 6, 1, 9728, 14, true, "ml/made/main"}};
  return Node(name, *core::EncodeInventory(inventory));
}

inline nlohmann::json GpuPod(const std::string& ns, const std::string& name, int64_t memory_mib, int cores) {
  return {{"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec",
           {{"schedulerName", "tessera-scheduler"},
            {"containers",
             {{{"name", "main"},
               {"resources",
                {{"limits",
                  {{"nvidia.com/gpu", "1"},
                   {"nvidia.com/gpumem", std::to_string(memory_mib)},
                   {"nvidia.com/gpucores", std::to_string(cores)}}}}}}}}}},
          {"status", {{"phase", "Pending"}}}};
}

// The pod as tessera-scheduler's bind leaves it: on `node`, its slice on `uuid`.
inline nlohmann::json PlacedPod(const std::string& ns, const std::string& name, const std::string& node,
                                const std::string& uuid, int64_t memory_mib, int cores) {
  nlohmann::json pod = GpuPod(ns, name, memory_mib, cores);
  core::PodAllocation allocation{node, {{"main", {{uuid, memory_mib, cores}}}}};
  pod["metadata"]["annotations"][std::string(core::kAllocationAnnotation)] =
      *core::EncodeAllocation(allocation);
  pod["spec"]["nodeName"] = node;
  pod["status"]["phase"] = "Running";
  return pod;
}

// A dynamic MIG pod as tessera-scheduler's bind leaves it: one instance of
// `profile` at `start` on the GPU `uuid` of `node`.
inline nlohmann::json MigPlacedPod(const std::string& ns, const std::string& name, const std::string& node,
                                   const std::string& uuid, const std::string& profile, int start,
                                   int64_t memory_mib) {
  nlohmann::json pod = PlacedPod(ns, name, node, uuid, memory_mib, 0);
  core::DeviceSlice device{uuid, memory_mib, 0};
  device.mig_profile = profile;
  device.mig_start = start;
  core::PodAllocation allocation{node, {{"main", {device}}}};
  pod["metadata"]["annotations"][std::string(core::kAllocationAnnotation)] =
      *core::EncodeAllocation(allocation);
  pod["metadata"]["annotations"]["nvidia.com/vgpu-mode"] = "mig";
  return pod;
}

}  // namespace tessera::kubectl::test
