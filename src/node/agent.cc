#include "node/agent.h"

#include <httplib.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include "base/files.h"
#include "base/log.h"
#include "base/prometheus_text.h"
#include "host/paths.h"
#include "kube/typed_api.h"
#include "node/allocate.h"
#include "node/metrics.h"
#include "node/mig/mig_inventory.h"
#include "node/mig/node_events.h"

namespace tessera::node {

std::vector<core::Gpu> ApplyOffer(const NodeConfig& config, std::vector<core::Gpu> gpus) {
  for (auto& gpu : gpus) {
    gpu.memory_mib =
        static_cast<int64_t>(std::floor(static_cast<double>(gpu.memory_mib) * config.memory_scaling));
    gpu.slots = config.split_count;
    gpu.cores = static_cast<int>(std::lround(100.0 * config.core_scaling));
  }
  return gpus;
}

Status WritePreloadFile(const NodeConfig& config) {
  TESSERA_RETURN_IF_ERROR_WRAP(
      files::ReplaceAtomically(config.PreloadFileHostPath(), config.libvgpu_container_path + "\n"),
      "cannot install the preload file (is the libvgpu directory mounted?)");
  return Status::Ok();
}

namespace {

AgentDependencies WithInventory(std::unique_ptr<host::InventorySource> inventory,
                                std::function<std::string()> new_region_name) {
  AgentDependencies deps;
  deps.inventory = std::move(inventory);
  deps.new_region_name = std::move(new_region_name);
  return deps;
}

}  // namespace

Agent::Agent(NodeConfig config, std::unique_ptr<host::InventorySource> inventory,
             std::function<std::string()> new_region_name)
    : Agent(std::move(config), WithInventory(std::move(inventory), std::move(new_region_name))) {}

Agent::Agent(NodeConfig config, AgentDependencies dependencies)
    : config_(std::move(config)),
      deps_(std::move(dependencies)),
      // A fresh vGPU service per server start; it also serves the mig-dynamic
      // GPUs' replicas once StartDynamicMig made them.
      plugin_(config_,
              [this] {
                return std::make_unique<DevicePluginService>(
                    config_, state_,
                    deps_.new_region_name ? deps_.new_region_name : std::function<std::string()>(RandomUuid),
                    dynamic_.get(), &regions_in_flight_);
              }),
      registrar_(config_, plugin_),
      catalog_(config_.region_host_dir, host::kRegionFileName, /*clock=*/nullptr, &regions_in_flight_) {
  if (!deps_.inspector) deps_.inspector = std::make_unique<ProcFsInspector>(config_.region_container_dir);
}

Agent::~Agent() {
  Stop();
}

void Agent::RecordEvent(const ContainerRef& owner, const std::string& reason, const std::string& message) {
  if (!deps_.client) return;
  kube::EventSpec spec;
  std::optional<kube::Json> pod = pods_ ? pods_->Get(owner.pod_namespace, owner.pod_name) : std::nullopt;
  spec.involved_object = pod ? kube::MakeObjectReference(*pod)
                             : kube::Json{{"namespace", owner.pod_namespace}, {"name", owner.pod_name}};
  spec.involved_object["kind"] = "Pod";
  spec.involved_object["apiVersion"] = "v1";
  // An event about the pod as a whole (an overcommitted GPU) names no container.
  if (!owner.container_name.empty()) {
    spec.involved_object["fieldPath"] = "spec.containers{" + owner.container_name + "}";
  }
  spec.reason = reason;
  spec.message = message;
  spec.type = "Warning";
  spec.component = "tessera-node";
  spec.instance = config_.node_name;
  kube::EventsApi events(deps_.client.get());
  if (auto created = events.Create(owner.pod_namespace, spec); !created.ok()) {
    log::Warn("cannot record an event on the pod", {{"reason", reason},
                                                    {"pod", owner.pod_namespace + "/" + owner.pod_name},
                                                    {"error", created.error().message}});
  }
}

std::map<std::string, std::string> Agent::MigDevicesInUse() {
  std::map<std::string, std::string> held;
  if (!deps_.pod_resources) return held;
  auto listed = deps_.pod_resources->List();
  if (!listed.ok()) return held;
  for (const auto& container : *listed) {
    for (const auto& id : container.device_ids) {
      if (id.rfind("MIG-", 0) == 0) {
        held[id] = container.pod_namespace + "/" + container.pod_name + "/" + container.container_name;
      }
    }
  }
  return held;
}

std::optional<std::vector<mig::BoundPod>> Agent::BoundPods() const {
  const NodePods* pods = pods_.get();
  if (pods == nullptr || !pods->synced()) return std::nullopt;
  std::vector<mig::BoundPod> out;
  for (auto& p : pods->Allocations().pods) {
    mig::BoundPod bound{p.pod_namespace, p.pod_name, p.uid, "", std::move(p.allocation)};
    if (auto object = pods->Get(p.pod_namespace, p.pod_name)) {
      bound.created = kube::Json(*object).value("/metadata/creationTimestamp"_json_pointer, std::string());
    }
    out.push_back(std::move(bound));
  }
  return out;
}

Status Agent::StartDynamicMig(std::vector<core::Gpu>& gpus) {
  auto selection = mig::ParseMigDynamicGpus(config_.mig_dynamic_gpus);  // validated
  if (!selection.ok() || selection->empty()) return Status::Ok();
  if (!deps_.mig) return Error{"mig_dynamic_gpus is set but MIG cannot be managed here (no NVML MIG driver)"};
  mig::DynamicMigOptions options;
  options.gpus = *selection;
  options.resource_name = config_.resource_name;
  options.grace_seconds = config_.region_grace_seconds;
  options.interval = std::chrono::milliseconds(std::min(config_.monitor_interval_ms, 1000));
  mig::DynamicMig::HeldSource held;
  if (deps_.pod_resources) {
    held = [this]() -> Result<std::set<std::string>> {
      TESSERA_ASSIGN_OR_RETURN(auto listed, deps_.pod_resources->List());
      std::set<std::string> containers;
      for (const auto& c : listed) {
        if (c.resource_name == config_.resource_name && !c.device_ids.empty()) {
          containers.insert(c.pod_namespace + "/" + c.pod_name + "/" + c.container_name);
        }
      }
      return containers;
    };
  }
  dynamic_ = std::make_unique<mig::DynamicMig>(
      options, deps_.mig.get(), [this] { return BoundPods(); }, std::move(held),
      [this](const std::string& type, const std::string& reason, const std::string& message) {
        mig::RecordNodeEvent(deps_.client.get(), config_.node_name, std::nullopt, type, reason, message);
      });
  auto dynamic = dynamic_->Prepare(gpus);
  if (!dynamic.ok()) {
    dynamic_.reset();
    return dynamic.error();
  }
  std::erase_if(gpus, [&](const core::Gpu& gpu) { return dynamic_->Owns(gpu.uuid); });
  return Status::Ok();
}

std::optional<std::set<std::string>> Agent::GpusInUse() {
  if (!deps_.pod_resources) return std::nullopt;
  auto listed = deps_.pod_resources->List();
  if (!listed.ok()) return std::nullopt;
  std::set<std::string> gpus;
  for (const auto& container : *listed) {
    for (const auto& id : container.device_ids) {
      if (auto parsed = ParseDeviceId(id); parsed.ok()) gpus.insert(parsed->gpu_uuid);
    }
  }
  return gpus;
}

std::string Agent::Metrics() const {
  AgentStatus status;
  status.node_name = config_.node_name;
  status.version = "0.1.0";
  status.kubelet_registrations = registrar_.registrations();
  if (publisher_) status.publisher = publisher_->stats();
  auto snapshot = monitor_ ? monitor_->Latest() : nullptr;
  // MIG devices come and go with their instances: listed for the scrape,
  // those of layouts and those created on mig-dynamic GPUs (with the
  // container each was made for) alike.
  std::vector<MigDeviceMetrics> mig_devices;
  if (mig_ || dynamic_) {
    std::vector<mig::MigDevice> devices;
    if (mig_) devices = mig_->devices().Get().devices;
    if (dynamic_) {
      for (auto& d : dynamic_->Devices()) devices.push_back(std::move(d));
    }
    if (auto listed = deps_.mig->List(); listed.ok()) mig_devices = MigDeviceMetricsOf(devices, *listed);
  }
  std::string document =
      RenderMetrics(snapshot.get(), monitor_ ? monitor_->counters() : MonitorCounters{}, status, mig_devices);
  if (mps_) document += mps_->Metrics();
  return document;
}

Status Agent::StartMetricsServer() {
  if (config_.metrics_port == 0) return Status::Ok();
  auto server = std::make_unique<httplib::Server>();
  server->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(Metrics(), std::string(PrometheusText::kContentType));
  });
  // Alive while the monitor keeps passing: a wedged NVML call or file system
  // shows as a failing probe instead of silently stale metrics.
  server->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    auto snapshot = monitor_ ? monitor_->Latest() : nullptr;
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    const int64_t limit_ms = 3 * static_cast<int64_t>(config_.monitor_interval_ms) + 10000;
    if (snapshot && now_ms - snapshot->taken_unix_ms <= limit_ms) {
      res.set_content("ok\n", "text/plain");
    } else {
      res.status = 503;
      res.set_content("the monitor has not completed a pass recently\n", "text/plain");
    }
  });
  http_ = std::make_unique<HttpListener>(std::move(server));
  auto port = http_->Listen(config_.metrics_address, config_.metrics_port);
  if (!port.ok()) {
    http_.reset();
    return Error{"cannot listen for metrics on " + config_.metrics_address + ":" +
                 std::to_string(config_.metrics_port) + " (port in use? set metrics_port)"};
  }
  metrics_port_ = *port;
  log::Info("serving metrics", {{"url", "http://" + config_.metrics_address + ":" +
                                            std::to_string(metrics_port_) + "/metrics"}});
  return Status::Ok();
}

Status Agent::Start() {
  if (started_) return Status::Ok();
  TESSERA_ASSIGN_OR_RETURN_WRAP(std::vector<core::Gpu> gpus, deps_.inventory->Discover(), "GPU discovery");
  if (gpus.empty()) log::Warn("no GPUs found: advertising no devices");
  for (const auto& gpu : gpus) {
    log::Info("GPU found", {{"index", gpu.index},
                            {"uuid", gpu.uuid},
                            {"model", gpu.model},
                            {"memory_mib", gpu.memory_mib},
                            {"sms", gpu.sm_count},
                            {"numa", gpu.numa_node},
                            {"mig_capable", gpu.mig_capable},
                            {"links", gpu.links.size()},
                            {"healthy", gpu.healthy}});
  }
  // mig-dynamic GPUs take instances on demand: the pods bound here decide
  // them, so the pod list starts before the plugin serves.
  if (deps_.client) {
    pods_ = std::make_unique<NodePods>(deps_.client.get(), config_.node_name);
    pods_->Start();
  }
  // Each GPU's sharing mode (node/sharing): a bad configuration stops here.
  sharing_ =
      std::make_unique<sharing::SharingManager>(config_, deps_.client.get(), [this] { return GpusInUse(); });
  const std::function<std::string()> region_name =
      deps_.new_region_name ? deps_.new_region_name : std::function<std::string()>(RandomUuid);
  mps_ = std::make_unique<mps::MpsNode>(config_, deps_.client.get(), region_name, /*program=*/nullptr,
                                        &regions_in_flight_);
  mps_->InstallHook(*sharing_);
  for (const auto& [mode, setup] : deps_.container_setups) sharing_->SetContainerSetup(mode, setup);
  TESSERA_RETURN_IF_ERROR_WRAP(sharing_->Prepare(gpus, region_name, &regions_in_flight_), "sharing modes");
  mps_->Start(sharing_->modes(), gpus);
  TESSERA_RETURN_IF_ERROR(StartDynamicMig(gpus));
  // MIG-managed GPUs are offered as MIG devices, not vGPU slices.
  bool serve_vgpus = true;
  if (deps_.mig && !config_.mig_layout_file.empty()) {
    mig_ = std::make_unique<mig::MigManager>(config_, deps_.mig.get(), deps_.client.get(),
                                             [this] { return MigDevicesInUse(); });
    auto managed = [&](const core::Gpu& gpu) { return gpu.mig_capable && mig_->Manages(gpu.index); };
    for (const auto& gpu : gpus) {
      if (managed(gpu)) mig_gpus_.push_back(gpu);
    }
    std::erase_if(gpus, managed);
    if (config_.mig_strategy == "single" &&
        config_.resource_name == mig::MigResourceName(mig::MigStrategy::kSingle, "")) {
      // The kubelet knows one plugin per resource name: MIG devices take it.
      serve_vgpus = false;
      if (!gpus.empty()) {
        log::Warn("mig_strategy single advertises MIG devices as " + config_.resource_name +
                      "; GPUs outside MIG are not advertised (set resource_name to another name for them)",
                  {{"gpus", gpus.size()}});
      }
    }
  }
  if (!serve_vgpus && dynamic_) {
    return Error{
        "mig_strategy single advertises the MIG layout's devices as " + config_.resource_name +
        ", which the mig-dynamic GPUs are advertised as too: set resource_name to another name or use "
        "mig_strategy mixed"};
  }
  // Replicas of time-sliced (and NVIDIA-style MPS) GPUs are the replica
  // plugins'; a replica plugin serving resource_name leaves the vGPU one out.
  if (sharing_->ServesResource(config_.resource_name)) serve_vgpus = false;
  vgpu_candidates_ = gpus;
  state_.SetGpus(sharing_->ApplyModes(ApplyOffer(config_, std::move(gpus))));
  sharing_->OnModesChanged([this](const sharing::ModeAssignment& modes) {
    state_.SetGpus(sharing_->ApplyModes(ApplyOffer(config_, vgpu_candidates_)));
    mps_->ModesChanged(modes);
  });

  if (config_.ld_so_preload) TESSERA_RETURN_IF_ERROR(WritePreloadFile(config_));
  // Only Allocate needs libvgpu on the host; the enforcement-only role serves none.
  if (config_.device_plugin && ::access(config_.libvgpu_host_path.c_str(), R_OK) != 0) {
    log::Warn("libvgpu is not there yet: Allocate refuses GPU containers until it is",
              {{"path", config_.libvgpu_host_path}});
  }

  if (!config_.device_plugin) {
    // The enforcement-only role beside tessera-dra: its claims are the GPUs' users.
    log::Info("device_plugin is false: nothing advertised to the kubelet, no inventory published");
    serve_vgpus = false;
  }
  if (serve_vgpus) {
    TESSERA_RETURN_IF_ERROR(plugin_.Start());
    registrar_.Start();
  }
  if (auto s = deps_.inventory->StartHealthWatch(
          [this](const std::string& uuid, bool healthy, const std::string& reason) {
            const bool dynamic = dynamic_ && dynamic_->SetHealth(uuid, healthy);
            const bool replicated = sharing_->SetHealth(uuid, healthy);
            if (state_.SetHealth(uuid, healthy) || dynamic || replicated) {
              log::Warn(healthy ? "GPU healthy again" : "GPU unhealthy", {{"gpu", uuid}, {"reason", reason}});
            }
          });
      !s.ok()) {
    registrar_.Stop();
    plugin_.Stop();
    return s.error().Wrap("GPU health watch");
  }
  if (auto s = sharing_->Start(); !s.ok()) {
    registrar_.Stop();
    plugin_.Stop();
    return s.error().Wrap("replica device plugins");
  }
  started_ = true;

  if (deps_.client && config_.device_plugin) {
    publisher_ = std::make_unique<InventoryPublisher>(deps_.client.get(), state_, config_.node_name,
                                                      std::chrono::seconds(config_.heartbeat_seconds));
    // MIG GPUs are listed with their MIG devices and no vGPU slots, replica
    // GPUs with their mode and replicas.
    publisher_->SetExtraGpus([this] {
      std::vector<core::Gpu> listed;
      if (mig_) {
        listed =
            mig::MigInventoryGpus(mig_gpus_, mig_->devices().Get().devices, core::SharingMode::kMigStatic);
      }
      if (dynamic_) {
        for (auto& gpu : dynamic_->InventoryGpus()) listed.push_back(std::move(gpu));
      }
      for (auto& gpu : sharing_->InventoryGpus()) listed.push_back(std::move(gpu));
      return listed;
    });
    publisher_->SetExtraLabels([this] { return sharing_->Labels(); });
    publisher_->Start();
  }
  EnforcementPolicy policy;
  policy.kill_by_default = config_.active_oom_killer;
  policy.container_may_override = !config_.active_oom_killer_fixed;
  policy.tolerance_bytes = static_cast<uint64_t>(config_.memory_tolerance_mib) << 20;
  policy.compute_tolerance_percent = config_.compute_tolerance_percent;
  policy.compute_window_passes = config_.compute_window_passes;
  policy.compute_kill = config_.compute_enforcement == "kill";
  NodePods* pods = pods_.get();
  enforcer_ = std::make_unique<Enforcer>(
      policy, deps_.inspector.get(),
      [pods](const ContainerRef& owner, const std::string& gpu_uuid) -> std::optional<uint64_t> {
        if (pods == nullptr || !pods->synced()) return std::nullopt;
        auto mib = pods->MemoryLimitMib(owner.pod_namespace, owner.pod_name, owner.container_name, gpu_uuid);
        if (!mib || *mib <= 0) return std::nullopt;
        return static_cast<uint64_t>(*mib) << 20;
      },
      [pods](const ContainerRef& owner, const std::string& gpu_uuid) -> std::optional<int> {
        if (pods == nullptr || !pods->synced()) return std::nullopt;
        return pods->CoresPercent(owner.pod_namespace, owner.pod_name, owner.container_name, gpu_uuid);
      });
  MonitorOptions options;
  options.interval = std::chrono::milliseconds(config_.monitor_interval_ms);
  options.region_grace_seconds = config_.region_grace_seconds;
  options.resource_name = config_.resource_name;
  options.unplaced_pods = config_.unplaced_pods;
  options.dra_region_dir = config_.dra_region_dir;
  options.more_resource_names = [this] {
    std::set<std::string> names;
    for (const auto& [resource, replica_gpus] : sharing_->modes().ReplicaResources()) names.insert(resource);
    return names;
  };
  monitor_ = std::make_unique<NodeMonitor>(
      options, deps_.inventory.get(), &state_, &catalog_, deps_.pod_resources.get(), pods_.get(),
      deps_.inspector.get(), enforcer_.get(),
      [this](const ContainerRef& owner, const std::string& reason, const std::string& message) {
        RecordEvent(owner, reason, message);
      });
  monitor_->Start();
  if (dynamic_) {
    dynamic_->Start();
    if (mig_) {
      std::set<std::string> uuids;
      for (const auto& gpu : dynamic_->Advertised()) uuids.insert(gpu.uuid);
      mig_->ForwardXids(uuids, [this](const host::MigXid& xid) { dynamic_->OnXid(xid); });
    } else if (auto s = dynamic_->WatchXids(); !s.ok()) {
      Stop();
      return s.error().Wrap("mig-dynamic XID watch");
    }
  }
  if (mig_) {
    if (auto s = mig_->Start(); !s.ok()) {
      Stop();
      return s;
    }
  }
  if (auto s = StartMetricsServer(); !s.ok()) {
    Stop();
    return s;
  }
  return Status::Ok();
}

void Agent::Stop() {
  if (!started_) return;
  if (http_) {
    http_->Stop();  // safe right after Listen too (base/http_listener.h)
    http_.reset();
  }
  if (mig_) mig_->Stop();
  if (dynamic_) dynamic_->Stop();
  if (sharing_) sharing_->Stop();
  if (mps_) mps_->Stop();
  if (monitor_) monitor_->Stop();
  if (publisher_) publisher_->Stop();
  if (pods_) pods_->Stop();
  deps_.inventory->StopHealthWatch();
  registrar_.Stop();
  plugin_.Stop();
  started_ = false;
}

}  // namespace tessera::node
