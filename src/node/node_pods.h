// NodePods: the pods bound to this node, as the API server has them (an
// informer with fieldSelector spec.nodeName=<node>), and what the scheduler
// allocated to each: the `tessera.io/allocation` annotation it wrote with the
// Binding. This is the authority on a container's limits — the container's own
// environment and its region are derived from it and can be changed from
// inside; the annotation cannot.
//
// Thread-safety: all members may be called from any thread after Start.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/allocation.h"
#include "core/node_state.h"
#include "kube/client.h"
#include "kube/informer.h"

namespace tessera::node {

struct PodGpuAllocation {
  std::string pod_namespace;
  std::string pod_name;
  std::string uid;
  core::PodAllocation allocation;
};

struct NodeAllocations {
  std::vector<PodGpuAllocation> pods;  // pods that hold GPUs (annotation present, not terminal)
  std::vector<std::string> problems;   // "<ns>/<name>: why its annotation was not counted"
};

// Pure: the GPU-holding pods among `pods`. A malformed annotation is a
// problem, not an allocation.
NodeAllocations AllocationsOf(const std::vector<kube::Json>& pods);

// A GPU pod bound here that tessera-scheduler did not place: not finished,
// no allocation annotation, and a container (or init container) asking for
// `resource_name`.
struct UnplacedPod {
  std::string pod_namespace;
  std::string pod_name;
  std::string uid;
  std::string key() const { return pod_namespace + "/" + pod_name; }
};

// Pure: the unplaced GPU pods among `pods`.
std::vector<UnplacedPod> UnplacedGpuPodsOf(const std::vector<kube::Json>& pods,
                                           const std::string& resource_name);

// Pure: the node's GPUs with every allocation accounted: what the scheduler
// allocated here, overcommit included (GpuState::Overcommit says where), so
// that the gauges show an overcommit instead of hiding the pods behind it.
// Only allocations naming a GPU this node does not have (or an invalid slice)
// are left out, each reported in `problems`.
core::NodeState AllocatedState(const std::string& node, const std::vector<core::Gpu>& gpus,
                               const NodeAllocations& allocations, std::vector<std::string>* problems);

class NodePods {
 public:
  NodePods(kube::Client* client, const std::string& node_name);
  ~NodePods();
  void Start();
  void Stop();
  bool synced() const;

  NodeAllocations Allocations() const;
  std::vector<UnplacedPod> UnplacedGpuPods(const std::string& resource_name) const;
  std::optional<kube::Json> Get(const std::string& ns, const std::string& name) const;
  // Memory (MiB) the scheduler allocated to `container` of the pod on `gpu_uuid`;
  // nullopt when the pod, the container or the GPU is not in an allocation.
  std::optional<int64_t> MemoryLimitMib(const std::string& ns, const std::string& pod,
                                        const std::string& container, const std::string& gpu_uuid) const;
  // Cores (percent) likewise; nullopt as above.
  std::optional<int> CoresPercent(const std::string& ns, const std::string& pod, const std::string& container,
                                  const std::string& gpu_uuid) const;

 private:
  // The slice the scheduler allocated to `container` of a live pod on
  // `gpu_uuid`; nullopt as above.
  std::optional<core::DeviceSlice> SliceOf(const std::string& ns, const std::string& pod,
                                           const std::string& container, const std::string& gpu_uuid) const;

  std::unique_ptr<kube::Informer> informer_;
};

}  // namespace tessera::node
