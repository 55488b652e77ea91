#include "node/node_pods.h"

#include "core/allocation_codec.h"

namespace tessera::node {

NodeAllocations AllocationsOf(const std::vector<kube::Json>& pods) {
  NodeAllocations out;
  for (const auto& pod : pods) {
    const std::string text = kube::AnnotationOf(pod, core::kAllocationAnnotation);
    if (text.empty() || kube::IsPodTerminal(pod)) continue;
    auto allocation = core::DecodeAllocation(text);
    if (!allocation.ok()) {
      out.problems.push_back(kube::KeyOf(pod) + ": " + allocation.error().message);
      continue;
    }
    out.pods.push_back(PodGpuAllocation{kube::NamespaceOf(pod), kube::NameOf(pod), kube::UidOf(pod),
                                        std::move(allocation).value()});
  }
  return out;
}

namespace {

// Whether a container's resources ask for `resource`: a quantity other than 0
// under limits or requests (an extended resource is a whole number).
bool AsksFor(const kube::Json& container, const std::string& resource) {
  auto resources = container.find("resources");
  if (resources == container.end() || !resources->is_object()) return false;
  for (const char* kind : {"limits", "requests"}) {
    auto list = resources->find(kind);
    if (list == resources->end() || !list->is_object()) continue;
    auto q = list->find(resource);
    if (q == list->end()) continue;
    if (q->is_string() && !q->get_ref<const std::string&>().empty() &&
        q->get_ref<const std::string&>() != "0")
      return true;
    if (q->is_number() && q->get<double>() > 0) return true;
  }
  return false;
}

}  // namespace

std::vector<UnplacedPod> UnplacedGpuPodsOf(const std::vector<kube::Json>& pods,
                                           const std::string& resource_name) {
  std::vector<UnplacedPod> out;
  for (const auto& pod : pods) {
    if (kube::IsPodTerminal(pod) || !kube::AnnotationOf(pod, core::kAllocationAnnotation).empty()) continue;
    auto spec = pod.find("spec");
    if (spec == pod.end() || !spec->is_object()) continue;
    bool asks = false;
    for (const char* list : {"containers", "initContainers"}) {
      auto containers = spec->find(list);
      if (containers == spec->end() || !containers->is_array()) continue;
      for (const auto& c : *containers) asks = asks || (c.is_object() && AsksFor(c, resource_name));
    }
    if (asks) out.push_back({kube::NamespaceOf(pod), kube::NameOf(pod), kube::UidOf(pod)});
  }
  return out;
}

core::NodeState AllocatedState(const std::string& node, const std::vector<core::Gpu>& gpus,
                               const NodeAllocations& allocations, std::vector<std::string>* problems) {
  core::NodeState state(node, gpus);
  for (const auto& pod : allocations.pods) {
    if (auto s = state.Account(pod.allocation); !s.ok() && problems != nullptr) {
      problems->push_back(pod.pod_namespace + "/" + pod.pod_name + ": " + s.error().message);
    }
  }
  return state;
}

NodePods::NodePods(kube::Client* client, const std::string& node_name) {
  kube::InformerOptions options;
  options.type = kube::resources::kPods;
  options.field_selector = "spec.nodeName=" + node_name;
  informer_ = std::make_unique<kube::Informer>(client, options);
}

NodePods::~NodePods() {
  Stop();
}

void NodePods::Start() {
  informer_->Start();
}

void NodePods::Stop() {
  informer_->Stop();
}

bool NodePods::synced() const {
  return informer_->HasSynced();
}

NodeAllocations NodePods::Allocations() const {
  return AllocationsOf(informer_->List());
}

std::vector<UnplacedPod> NodePods::UnplacedGpuPods(const std::string& resource_name) const {
  return UnplacedGpuPodsOf(informer_->List(), resource_name);
}

std::optional<kube::Json> NodePods::Get(const std::string& ns, const std::string& name) const {
  return informer_->Get(ns + "/" + name);
}

std::optional<core::DeviceSlice> NodePods::SliceOf(const std::string& ns, const std::string& pod,
                                                   const std::string& container,
                                                   const std::string& gpu_uuid) const {
  auto object = Get(ns, pod);
  if (!object || kube::IsPodTerminal(*object)) return std::nullopt;
  auto allocation = core::DecodeAllocation(kube::AnnotationOf(*object, core::kAllocationAnnotation));
  if (!allocation.ok()) return std::nullopt;
  for (const auto& c : allocation->containers) {
    if (c.container != container) continue;
    for (const auto& d : c.devices) {
      if (d.uuid == gpu_uuid) return d;
    }
  }
  return std::nullopt;
}

std::optional<int64_t> NodePods::MemoryLimitMib(const std::string& ns, const std::string& pod,
                                                const std::string& container,
                                                const std::string& gpu_uuid) const {
  auto slice = SliceOf(ns, pod, container, gpu_uuid);
  return slice ? std::optional<int64_t>(slice->memory_mib) : std::nullopt;
}

std::optional<int> NodePods::CoresPercent(const std::string& ns, const std::string& pod,
                                          const std::string& container, const std::string& gpu_uuid) const {
  auto slice = SliceOf(ns, pod, container, gpu_uuid);
  return slice ? std::optional<int>(slice->cores) : std::nullopt;
}

}  // namespace tessera::node
