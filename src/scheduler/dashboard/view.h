// View: one immutable picture of the cluster for the dashboard, and the JSON
// answers of its API rendered from it.
//
// ViewBuilder::Build assembles a View from the scheduler's ClusterState (under
// its reader lock, only comparing versions and copying the nodes that
// changed), the PodIndex, the usage collector's last snapshot and the workload
// mix. Everything derived per node (its fragmentation under the mix) is kept
// with the node and recomputed only when the node or the mix changes; the
// overview and the namespaces are rendered once per build, so a request for
// them costs a string copy whatever the size of the cluster. Lists (nodes,
// pods) are paginated per request from the View, outside every lock.
//
// Fragmentation is core's (core/score_fragmentation.h): per node, the free
// GPU share (milli-GPU) the typical requests cannot use, weighted by their
// popularity; the cluster's figure is the sum over nodes divided by the free
// share of all usable GPUs. The typical requests are the `tessera` policy's
// learned mix, or, before it has learned one, the mix of the GPU pods the
// dashboard knows.
//
// Thread-safety: a View is immutable; ViewBuilder is used from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/node_state.h"
#include "core/score_fragmentation.h"
#include "scheduler/cluster_state.h"
#include "scheduler/dashboard/pod_index.h"
#include "scheduler/dashboard/usage.h"

namespace tessera::scheduler::dashboard {

// One MIG instance of a GPU in MIG mode, as the node page and the GPU page
// show it: one the node lists (created), one the scheduler holds for a bound
// or reserved pod that the node does not list yet (dynamic MIG: tessera-node
// creates it at Allocate), or both, matched by GPU, profile and start as the
// scheduler matches them (ClusterState).
struct MigInstanceRecord {
  std::string gpu_uuid;
  int gpu_index = 0;
  std::string profile;  // "1g.10gb"
  int start = 0;        // first memory slice
  int size = 0;         // memory slices; 0 = unknown (a profile with no table)
  int64_t memory_mib = 0;
  std::string uuid;  // the MIG device's; "" = not created yet
  bool healthy = true;
  std::string used_by;  // the node's "<ns>/<pod>/<container>" ("" = free, or not listed)
  std::string pod;      // "ns/name" of the pod the scheduler holds it for ("" = none)

  bool held() const { return !pod.empty() || !used_by.empty(); }
};

struct NodeRecord {
  std::string name;
  uint64_t epoch = 0;
  uint64_t version = 0;
  bool has_inventory = false;
  std::string error;  // no usable inventory (why)
  std::string heartbeat;
  core::NodeState state;
  uint64_t mig_version = 0;            // ClusterState's, of the claims `mig` was built from
  std::vector<MigInstanceRecord> mig;  // by GPU index, then start
  uint64_t mix_key = 0;                // the mix `fragment_milli` was computed under (0 = none)
  double fragment_milli = 0;
  int64_t free_milli = 0;

  // "ok", "stale" is decided per View; here: "ok", "no-inventory", "unreadable".
  const char* InventoryStatus() const;
};

// What the dashboard says about its sources besides the data.
struct SourceStatus {
  std::string api_error;  // "" = the API server answered the last probe
  int64_t api_checked_ms = 0;
  int64_t api_ok_ms = 0;  // the last probe it answered (0 = never)
  std::string not_ready;  // the scheduler's NotReadyReason
};

struct MixInput {
  uint64_t key = 0;  // changes when the mix does (0 = no mix)
  core::WorkloadMix mix;
  std::string source;  // "learned" (the tessera policy's) or "pods" (the known GPU pods)
};

struct View {
  uint64_t generation = 0;
  int64_t built_ms = 0;
  SourceStatus status;
  std::vector<std::shared_ptr<const NodeRecord>> nodes;  // by name
  std::vector<char> stale;                               // by index of `nodes`
  std::unordered_map<std::string, uint32_t> node_index;  // name -> index of `nodes`
  std::shared_ptr<const PodsSnapshot> pods;              // by key
  // Indexes into pods->pods, per node (bound pods).
  std::shared_ptr<const std::unordered_map<std::string, std::vector<uint32_t>>> pods_by_node;
  std::shared_ptr<const UsageSnapshot> usage;
  MixInput mix;
  std::string overview_json;
  std::string namespaces_json;

  const NodeRecord* FindNode(const std::string& name) const;
  const GpuUsageRecord* UsageOf(const std::string& uuid) const;
};

// An answer of the JSON API: HTTP status and body.
struct ApiAnswer {
  int status = 200;
  std::string body;
};

// The query of a list page (all optional).
struct ListQuery {
  std::string offset, limit, q, sort, ns, state, node;
};

class ViewBuilder {
 public:
  // A new View; the previous one's unchanged parts are shared.
  std::shared_ptr<const View> Build(const ClusterState& state, const PodIndex& pods,
                                    std::shared_ptr<const UsageSnapshot> usage, MixInput mix,
                                    SourceStatus status, int64_t now_ms);
  // The mix of the known GPU pods (the fallback of MixInput), keyed so that
  // the key changes only when the mix does.
  MixInput MixOfPods(const PodsSnapshot& pods);

 private:
  std::shared_ptr<const View> last_;
  uint64_t generation_ = 0;
  uint64_t pods_mix_key_ = 0;
  uint64_t pods_mix_generation_ = 0;  // the pods' generation pods_mix_ was counted from
  core::WorkloadMix pods_mix_;
};

// The JSON API over a View (docs/dashboard.md lists the fields).
ApiAnswer NodesPage(const View& view, const ListQuery& query);
ApiAnswer NodeDetail(const View& view, const std::string& name);
ApiAnswer GpuDetail(const View& view, const std::string& node, const std::string& uuid);
ApiAnswer PodsPage(const View& view, const ListQuery& query);

}  // namespace tessera::scheduler::dashboard
