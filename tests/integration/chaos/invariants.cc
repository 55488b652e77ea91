#include "invariants.h"

#include <map>

#include "core/allocation_codec.h"
#include "core/inventory_codec.h"

namespace tessera::chaos {

using Json = nlohmann::json;

namespace {

std::string Annotation(const Json& object, const std::string& key) {
  const Json annotations = object.value("/metadata/annotations"_json_pointer, Json::object());
  return annotations.is_object() ? annotations.value(key, "") : "";
}

std::string PodName(const Json& pod) {
  return pod.value("/metadata/namespace"_json_pointer, "") + "/" +
         pod.value("/metadata/name"_json_pointer, "");
}

}  // namespace

std::vector<std::string> FindViolations(const std::vector<Json>& nodes, const std::vector<Json>& pods) {
  struct GpuUse {
    const core::Gpu* gpu = nullptr;
    std::string node;
    int64_t memory_mib = 0;
    int cores = 0;
    int slices = 0;
    bool exclusive = false;
    std::vector<std::string> pods{};
  };
  std::map<std::string, core::NodeInventory> inventories;  // by node name
  for (const Json& node : nodes) {
    auto inventory = core::DecodeInventory(Annotation(node, std::string(core::kInventoryAnnotation)));
    if (inventory.ok()) inventories[node.value("/metadata/name"_json_pointer, "")] = *inventory;
  }
  std::map<std::string, GpuUse> use;  // by GPU UUID
  for (auto& [name, inventory] : inventories) {
    for (const core::Gpu& gpu : inventory.gpus) use[gpu.uuid] = GpuUse{.gpu = &gpu, .node = name};
  }

  std::vector<std::string> violations;
  for (const Json& pod : pods) {
    const std::string node = pod.value("/spec/nodeName"_json_pointer, "");
    const std::string phase = pod.value("/status/phase"_json_pointer, "");
    if (node.empty() || phase == "Succeeded" || phase == "Failed") continue;
    const std::string text = Annotation(pod, std::string(core::kAllocationAnnotation));
    if (text.empty()) {
      violations.push_back("pod " + PodName(pod) + " is bound to " + node + " without an allocation");
      continue;
    }
    auto allocation = core::DecodeAllocation(text);
    if (!allocation.ok()) {
      violations.push_back("pod " + PodName(pod) +
                           " has an unreadable allocation: " + allocation.error().message);
      continue;
    }
    if (allocation->node != node) {
      violations.push_back("pod " + PodName(pod) + " is bound to " + node + " but allocated on " +
                           allocation->node);
      continue;
    }
    for (const auto& container : allocation->containers) {
      for (const auto& slice : container.devices) {
        auto it = use.find(slice.uuid);
        if (it == use.end() || it->second.node != node) {
          violations.push_back("pod " + PodName(pod) + " holds " + slice.uuid + ", not a GPU of " + node);
          continue;
        }
        GpuUse& u = it->second;
        u.memory_mib += slice.memory_mib;
        u.cores += slice.cores;
        u.slices += 1;
        u.exclusive = u.exclusive || slice.cores >= 100;
        u.pods.push_back(PodName(pod));
      }
    }
  }
  for (const auto& [uuid, u] : use) {
    if (u.slices == 0) continue;
    std::string over;
    if (u.memory_mib > u.gpu->memory_mib) {
      over +=
          " memory " + std::to_string(u.memory_mib) + " of " + std::to_string(u.gpu->memory_mib) + " MiB;";
    }
    if (u.cores > u.gpu->cores)
      over += " cores " + std::to_string(u.cores) + " of " + std::to_string(u.gpu->cores) + ";";
    if (u.slices > u.gpu->slots)
      over += " slices " + std::to_string(u.slices) + " of " + std::to_string(u.gpu->slots) + ";";
    if (u.exclusive && u.slices > 1)
      over += " an exclusive slice beside " + std::to_string(u.slices - 1) + " other(s);";
    if (over.empty()) continue;
    std::string holders;
    for (const std::string& pod : u.pods) holders += (holders.empty() ? "" : ", ") + pod;
    violations.push_back("GPU " + uuid + " on " + u.node + " is over capacity:" + over + " held by " +
                         holders);
  }
  return violations;
}

}  // namespace tessera::chaos
