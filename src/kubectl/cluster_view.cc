#include "kubectl/cluster_view.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "core/allocation_codec.h"
#include "core/inventory_codec.h"
#include "core/mig/geometry.h"
#include "core/pod_request.h"
#include "kube/client.h"
#include "kube/typed_api.h"
#include "kubectl/hami_allocation.h"

namespace tessera::kubectl {
namespace {

NodeView ViewNode(const Json& object, const ViewOptions& options) {
  NodeView view;
  view.name = kube::NameOf(object);
  const Json* annotations = nullptr;
  if (object.contains("metadata") && object["metadata"].is_object() &&
      object["metadata"].contains("annotations") && object["metadata"]["annotations"].is_object()) {
    annotations = &object["metadata"]["annotations"];
  }
  const std::string key(core::kInventoryAnnotation);
  if (annotations == nullptr || !annotations->contains(key)) return view;
  if (!(*annotations)[key].is_string()) {
    view.inventory = InventoryState::kCorrupt;
    view.inventory_error = key + " is not a string";
    return view;
  }
  auto inventory = core::DecodeInventory((*annotations)[key].get<std::string>());
  if (!inventory.ok()) {
    view.inventory = InventoryState::kCorrupt;
    view.inventory_error = inventory.error().message;
    return view;
  }
  view.inventory = InventoryState::kOk;
  view.heartbeat = inventory->heartbeat;
  view.state = core::NodeState(view.name, inventory->gpus);
  for (const core::Gpu& gpu : inventory->gpus) {
    if (!core::IsMigMode(gpu.mode)) continue;
    for (const core::MigDevice& d : gpu.mig_devices) {
      MigInstanceView m;
      m.gpu_uuid = gpu.uuid;
      m.gpu_index = gpu.index;
      m.profile = d.profile;
      m.start = d.start;
      m.size = d.size;
      m.memory_mib = d.memory_mib;
      m.mig_uuid = d.uuid;
      m.healthy = d.healthy;
      m.used_by = d.used_by;
      view.mig.push_back(std::move(m));
    }
  }
  if (auto beat = kube::ParseMicroTime(inventory->heartbeat); beat.ok()) {
    view.heartbeat_age_seconds =
        std::chrono::duration_cast<std::chrono::seconds>(options.now - *beat).count();
    view.stale = options.stale_after.count() > 0 && view.heartbeat_age_seconds > options.stale_after.count();
  }
  return view;
}

std::vector<std::string> ContainerNames(const Json& pod) {
  std::vector<std::string> names;
  const Json* containers = nullptr;
  if (pod.contains("spec") && pod["spec"].is_object() && pod["spec"].contains("containers") &&
      pod["spec"]["containers"].is_array()) {
    containers = &pod["spec"]["containers"];
  }
  if (containers == nullptr) return names;
  for (const Json& c : *containers) names.push_back(c.is_object() ? c.value("name", "") : "");
  return names;
}

std::string StringAt(const Json& object, const char* pointer) {
  const Json::json_pointer p(pointer);
  if (!object.contains(p) || !object[p].is_string()) return "";
  return object[p].get<std::string>();
}

PodView ViewPod(Json object, const ViewOptions& options) {
  PodView view;
  view.ns = kube::NamespaceOf(object);
  view.name = kube::NameOf(object);
  view.node = StringAt(object, "/spec/nodeName");
  view.bound = !view.node.empty();
  view.phase = StringAt(object, "/status/phase");
  view.scheduler_name = StringAt(object, "/spec/schedulerName");
  view.terminal = kube::IsPodTerminal(object);
  view.asks_gpu = core::AsksForTesseraResources(object, options.resources);
  std::string mode = kube::AnnotationOf(object, kVgpuModeAnnotation);
  std::transform(mode.begin(), mode.end(), mode.begin(), [](unsigned char c) { return std::tolower(c); });
  view.asks_dynamic_mig = mode == "mig";

  const std::string tessera = kube::AnnotationOf(object, core::kAllocationAnnotation);
  const std::string hami = kube::AnnotationOf(object, kHamiAllocatedAnnotation);
  if (!tessera.empty()) {
    view.source = AllocationSource::kTessera;
    auto allocation = core::DecodeAllocation(tessera);
    if (!allocation.ok()) {
      view.allocation_error = std::string(core::kAllocationAnnotation) + ": " + allocation.error().message;
    } else {
      view.containers = allocation->containers;
      if (view.node.empty()) view.node = allocation->node;
    }
  } else if (!hami.empty()) {
    view.source = AllocationSource::kHami;
    auto containers = DecodeHamiAllocation(hami, ContainerNames(object));
    if (!containers.ok()) {
      view.allocation_error = std::string(kHamiAllocatedAnnotation) + ": " + containers.error().message;
    } else {
      view.containers = *containers;
      if (view.node.empty()) view.node = kube::AnnotationOf(object, kHamiNodeAnnotation);
    }
  }
  view.object = std::move(object);
  return view;
}

// The memory slices of `profile` on `gpu`'s model; 0 when no table has it.
int ProfileSize(const core::Gpu& gpu, const std::string& profile) {
  auto model = core::mig::RecogniseModel({gpu.model, static_cast<uint64_t>(gpu.memory_mib), 0});
  if (!model.ok()) return 0;
  const core::mig::Profile* p = (*model)->FindProfile(profile);
  return p == nullptr ? 0 : static_cast<int>(p->memory_slices);
}

// Splits the pod's devices into slices (`slices`) and MIG instances, checks
// that every instance's GPU is on `node` and in MIG mode, and only then
// accounts both: all or nothing, so a bad allocation leaves the node as it was.
Status AccountPod(NodeView& node, const PodView& pod) {
  core::PodAllocation slices{pod.node, {}};
  struct Claim {
    const core::DeviceSlice* device;
    const std::string* container;
    const core::Gpu* gpu;
  };
  std::vector<Claim> claims;
  for (const core::ContainerAllocation& c : pod.containers) {
    core::ContainerAllocation kept{c.container, {}, c.init};
    for (const core::DeviceSlice& d : c.devices) {
      if (d.mig_profile.empty()) {
        kept.devices.push_back(d);
        continue;
      }
      const std::string what =
          "MIG instance " + d.mig_profile + "@" + std::to_string(d.mig_start) + " on GPU " + d.uuid;
      const int g = node.state.IndexOf(d.uuid);
      if (g < 0) return Error{what + ": node " + node.name + " has no such GPU"};
      const core::Gpu& gpu = node.state.gpus()[static_cast<size_t>(g)].gpu;
      if (!core::IsMigMode(gpu.mode)) return Error{what + ": the GPU is not in MIG mode"};
      claims.push_back({&d, &c.container, &gpu});
    }
    if (!kept.devices.empty()) slices.containers.push_back(std::move(kept));
  }
  if (!slices.containers.empty()) TESSERA_RETURN_IF_ERROR(node.state.Account(slices));
  for (const Claim& claim : claims) {
    const core::DeviceSlice& d = *claim.device;
    auto listed = std::find_if(node.mig.begin(), node.mig.end(), [&](const MigInstanceView& m) {
      return m.gpu_uuid == d.uuid && m.profile == d.mig_profile && m.start == d.mig_start && m.pod.empty();
    });
    if (listed == node.mig.end()) {
      MigInstanceView m;
      m.gpu_uuid = d.uuid;
      m.gpu_index = claim.gpu->index;
      m.profile = d.mig_profile;
      m.start = d.mig_start;
      m.size = ProfileSize(*claim.gpu, d.mig_profile);
      m.memory_mib = d.memory_mib;
      node.mig.push_back(std::move(m));
      listed = node.mig.end() - 1;
    }
    listed->pod = pod.key();
    listed->container = *claim.container;
  }
  return Status::Ok();
}

}  // namespace

std::string MigInstanceView::Placement() const {
  return std::to_string(start) + ":" + (size > 0 ? std::to_string(size) : "?");
}

std::string MigInstanceView::Holder() const {
  if (!pod.empty()) return pod + "/" + container;
  return used_by;
}

const char* AllocationSourceName(AllocationSource source) {
  switch (source) {
    case AllocationSource::kNone:
      return "none";
    case AllocationSource::kTessera:
      return "tessera";
    case AllocationSource::kHami:
      return "hami";
  }
  return "none";
}

const NodeView* ClusterView::FindNode(const std::string& name) const {
  auto it = std::lower_bound(nodes.begin(), nodes.end(), name,
                             [](const NodeView& n, const std::string& key) { return n.name < key; });
  return it != nodes.end() && it->name == name ? &*it : nullptr;
}

const PodView* ClusterView::FindPod(const std::string& ns, const std::string& name) const {
  for (const PodView& p : pods) {
    if (p.ns == ns && p.name == name) return &p;
  }
  return nullptr;
}

ClusterView BuildClusterView(std::vector<Json> nodes, std::vector<Json> pods, const ViewOptions& options) {
  ClusterView view;
  view.nodes.reserve(nodes.size());
  for (const Json& node : nodes) view.nodes.push_back(ViewNode(node, options));
  std::sort(view.nodes.begin(), view.nodes.end(),
            [](const NodeView& a, const NodeView& b) { return a.name < b.name; });
  view.pods.reserve(pods.size());
  for (Json& pod : pods) view.pods.push_back(ViewPod(std::move(pod), options));
  std::sort(view.pods.begin(), view.pods.end(),
            [](const PodView& a, const PodView& b) { return a.ns != b.ns ? a.ns < b.ns : a.name < b.name; });

  std::map<std::string, NodeView*> by_name;
  for (NodeView& node : view.nodes) by_name[node.name] = &node;
  for (PodView& pod : view.pods) {
    if (pod.containers.empty() || pod.terminal || pod.node.empty()) continue;
    auto found = by_name.find(pod.node);
    NodeView* node = found == by_name.end() ? nullptr : found->second;
    if (node == nullptr) {
      pod.accounting_error = "node " + pod.node + " does not exist";
      continue;
    }
    if (node->inventory != InventoryState::kOk) {
      pod.accounting_error = "node " + pod.node + " has no readable GPU inventory";
      continue;
    }
    if (auto accounted = AccountPod(*node, pod); !accounted.ok()) {
      pod.accounting_error = accounted.error().message;
      node->problems.push_back("pod " + pod.key() + ": " + accounted.error().message);
      continue;
    }
    node->pods.push_back(pod.key());
  }
  for (NodeView& node : view.nodes) {
    std::stable_sort(node.mig.begin(), node.mig.end(),
                     [](const MigInstanceView& a, const MigInstanceView& b) {
                       return a.gpu_index != b.gpu_index ? a.gpu_index < b.gpu_index : a.start < b.start;
                     });
  }
  return view;
}

}  // namespace tessera::kubectl
