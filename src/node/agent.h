// Agent: tessera-node's parts wired together. It owns the inventory source,
// the advertised DeviceState, the device-plugin server and the kubelet
// registrar; with an API client, the inventory publisher and the watch of this
// node's pods; the monitor (GPU sampling, regions, cleanup, enforcement) and
// the metrics endpoint.
//
// Start order matters: discover -> write the preload file -> serve the plugin
// socket -> register with the kubelet -> follow health events -> watch pods
// and publish the inventory -> monitor -> serve metrics.
//
// Thread-safety: Start/Stop from one controlling thread; the accessors are
// thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>

#include "base/http_listener.h"
#include "base/result.h"
#include "host/inventory.h"
#include "host/nvml_mig.h"
#include "kube/client.h"
#include "node/config.h"
#include "node/device_state.h"
#include "node/enforcer.h"
#include "node/inventory_publisher.h"
#include "node/mig/dynamic_mig.h"
#include "node/mig/mig_manager.h"
#include "node/mps/mps_node.h"
#include "node/node_monitor.h"
#include "node/node_pods.h"
#include "node/plugin_server.h"
#include "node/pod_resources.h"
#include "node/process_inspector.h"
#include "node/region_catalog.h"
#include "node/registrar.h"
#include "node/sharing/container_setup.h"
#include "node/sharing/sharing_manager.h"

namespace tessera::node {

// Applies the node's configuration to discovered GPUs: memory offered =
// physical × memory_scaling (rounded down), compute offered = 100 % ×
// core_scaling (rounded), slots = split_count.
std::vector<core::Gpu> ApplyOffer(const NodeConfig& config, std::vector<core::Gpu> gpus);

// Writes the file mounted over a container's /etc/ld.so.preload: one line, the
// container path of libvgpu. Written atomically (temp file + rename) so a
// container never sees half a file.
Status WritePreloadFile(const NodeConfig& config);

// What the agent talks to besides the kubelet's device-plugin socket. Only the
// inventory is required; the rest default as noted.
struct AgentDependencies {
  std::unique_ptr<host::InventorySource> inventory;
  std::shared_ptr<kube::Client> client;               // null: no API server (no inventory annotation)
  std::unique_ptr<PodResourcesSource> pod_resources;  // null: regions are never attributed nor removed
  std::unique_ptr<ProcessInspector> inspector;        // null: /proc
  std::function<std::string()> new_region_name;       // null: random UUIDs
  // MIG through NVML; with mig_layout_file set, the MIG-managed GPUs are
  // MigManager's (node/mig) and leave the vGPU list; with mig_dynamic_gpus,
  // the mig-dynamic GPUs are DynamicMig's. null: MIG not managed.
  std::unique_ptr<host::MigDriver> mig;
  // The replica plugin's container hooks by mode (node/sharing/container_setup.h):
  // mps's from node/mps; timeslice's defaults to sharing's own.
  sharing::ContainerSetups container_setups;
};

class Agent {
 public:
  Agent(NodeConfig config, AgentDependencies dependencies);
  Agent(NodeConfig config, std::unique_ptr<host::InventorySource> inventory,
        std::function<std::string()> new_region_name = nullptr);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Fails on what an operator must fix (NVML unusable, the plugin dir or the
  // preload file not writable, the metrics port taken); a kubelet or an API
  // server not there yet is waited for instead.
  Status Start();
  void Stop();

  const NodeConfig& config() const { return config_; }
  const DeviceState& devices() const { return state_; }
  int registrations() const { return registrar_.registrations(); }
  // The port the metrics endpoint listens on (0 when there is none).
  int metrics_port() const { return metrics_port_; }
  // The Prometheus document /metrics serves.
  std::string Metrics() const;
  NodeMonitor& monitor() { return *monitor_; }
  // The MIG half; null when MIG is not managed.
  mig::MigManager* mig() { return mig_.get(); }
  // The mig-dynamic GPUs; null when there are none.
  mig::DynamicMig* dynamic_mig() { return dynamic_.get(); }
  // Each GPU's sharing mode and the replica plugins; null before Start.
  sharing::SharingManager* sharing() { return sharing_.get(); }

 private:
  void RecordEvent(const ContainerRef& owner, const std::string& reason, const std::string& message);
  Status StartMetricsServer();
  // MIG UUIDs the kubelet has given containers (PodResources) -> "<ns>/<pod>/<container>".
  std::map<std::string, std::string> MigDevicesInUse();
  // Prepares the mig-dynamic GPUs among `gpus` (and takes them out of it).
  Status StartDynamicMig(std::vector<core::Gpu>& gpus);
  // The pods bound here with their allocations; nullopt until the list has synced.
  std::optional<std::vector<mig::BoundPod>> BoundPods() const;
  // The GPUs containers hold (PodResources); nullopt without PodResources.
  std::optional<std::set<std::string>> GpusInUse();

  const NodeConfig config_;
  AgentDependencies deps_;
  DeviceState state_;
  // Regions whose Allocate runs or just answered: kept by the clean-up.
  RegionsInFlight regions_in_flight_;
  PluginServer plugin_;
  KubeletRegistrar registrar_;
  RegionCatalog catalog_;
  std::unique_ptr<NodePods> pods_;
  std::unique_ptr<InventoryPublisher> publisher_;
  std::unique_ptr<Enforcer> enforcer_;
  std::unique_ptr<NodeMonitor> monitor_;
  std::unique_ptr<mig::MigManager> mig_;
  std::unique_ptr<mig::DynamicMig> dynamic_;  // before plugin_ serves (Start), read by its services
  std::vector<core::Gpu> mig_gpus_;           // the MIG-managed GPUs as discovered (Start; then read-only)
  std::unique_ptr<sharing::SharingManager> sharing_;
  std::unique_ptr<mps::MpsNode> mps_;       // the mps GPUs' control daemons and container hook
  std::vector<core::Gpu> vgpu_candidates_;  // the GPUs outside MIG as discovered (Start; then read-only)
  std::unique_ptr<HttpListener> http_;
  int metrics_port_ = 0;
  bool started_ = false;
};

}  // namespace tessera::node
