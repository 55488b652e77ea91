#include "node/mig/mig_manager.h"

#include "base/files.h"
#include "base/log.h"
#include "kube/typed_api.h"
#include "node/mig/mig_plugin_service.h"
#include "node/mig/node_events.h"

namespace tessera::node::mig {
namespace {

constexpr auto kTick = std::chrono::milliseconds(1000);

MigStrategy StrategyOf(const NodeConfig& config) {
  MigStrategy strategy = MigStrategy::kMixed;
  ParseMigStrategy(config.mig_strategy, strategy);
  return strategy;
}

MigGpuSelection SelectionOf(const NodeConfig& config) {
  auto selection = ParseMigGpus(config.mig_gpus);
  return selection.ok() ? *selection : MigGpuSelection{};
}

}  // namespace

MigManager::MigManager(const NodeConfig& config, host::MigDriver* driver, kube::Client* client,
                       InUseSource in_use)
    : config_(config),
      driver_(driver),
      client_(client),
      in_use_(std::move(in_use)),
      gpus_(SelectionOf(config)),
      strategy_(StrategyOf(config)),
      thread_(kTick, [this] { Tick(); }) {
  if (client_ != nullptr) {
    kube::InformerOptions options;
    options.type = kube::resources::kNodes;
    options.field_selector = "metadata.name=" + config_.node_name;
    node_ = std::make_unique<kube::Informer>(client_, options);
  }
}

MigManager::~MigManager() {
  Stop();
}

Status MigManager::Start() {
  auto gpus = driver_->List();
  if (!gpus.ok()) return gpus.error().Wrap("MIG: cannot list the GPUs");
  std::vector<std::string> watched(forwarded_gpus_.begin(), forwarded_gpus_.end());
  for (const auto& gpu : *gpus) {
    if (gpu.mig_capable && Manages(gpu.index)) watched.push_back(gpu.uuid);
  }
  TESSERA_RETURN_IF_ERROR(driver_->StartXidWatch(watched, [this](const host::MigXid& xid) { OnXid(xid); }));
  if (node_) node_->Start();
  log::Info("managing MIG", {{"layout_file", config_.mig_layout_file},
                             {"strategy", MigStrategyName(strategy_)},
                             {"gpus", config_.mig_gpus},
                             {"mig_capable_gpus", watched.size()}});
  thread_.Start();
  return Status::Ok();
}

void MigManager::Stop() {
  thread_.Stop();
  if (node_) node_->Stop();
  driver_->StopXidWatch();
  for (auto& [resource, plugin] : plugins_) {
    plugin.registrar->Stop();
    plugin.server->Stop();
  }
  plugins_.clear();
}

MigStatus MigManager::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

std::string MigManager::WantedConfig() const {
  if (node_) {
    if (auto node = node_->Get(config_.node_name)) {
      const auto& labels = (*node)["metadata"]["labels"];
      if (labels.is_object() && labels.contains(kMigConfigLabel) && labels[kMigConfigLabel].is_string()) {
        return labels[kMigConfigLabel].get<std::string>();
      }
    }
  }
  return config_.mig_config;
}

void MigManager::ReadLayoutFile() {
  const std::optional<FileIdentity> identity = IdentifyFile(config_.mig_layout_file);
  if (identity == file_identity_ && layout_generation_ > 0) return;
  file_identity_ = identity;
  ++layout_generation_;
  auto text = files::Read(config_.mig_layout_file);
  if (!text.ok()) {
    layout_ =
        Error{"cannot read the MIG layout file '" + config_.mig_layout_file + "': " + text.error().message};
  } else {
    layout_ = core::mig::ParseLayout(*text, config_.mig_layout_file);
  }
  log::Info("MIG layout file read", {{"file", config_.mig_layout_file},
                                     {"ok", layout_.ok()},
                                     {"error", layout_.ok() ? "" : layout_.error().message}});
}

void MigManager::Tick() {
  if (node_ && !node_->HasSynced()) return;  // the label decides; wait for the first list
  ReadLayoutFile();
  std::map<std::string, std::string> in_use = in_use_ ? in_use_() : std::map<std::string, std::string>{};
  auto gpus = driver_->List();
  if (!gpus.ok()) {
    log::Warn("MIG: cannot list the GPUs", {{"error", gpus.error().message}});
    return;
  }

  std::string signature;
  for (const auto& g : *gpus) {
    signature += std::to_string(g.index) + (g.mig_enabled ? "E" : "e") + (g.mig_pending ? "P" : "p");
  }
  std::set<std::string> held;
  for (const auto& [id, owner] : in_use) held.insert(id);

  const std::string wanted = WantedConfig();
  const auto now = std::chrono::steady_clock::now();
  const bool target_changed =
      !ever_applied_ || wanted != applied_config_ || layout_generation_ != applied_generation_;
  const bool unsettled = last_state_ && *last_state_ != ApplyState::kSuccess;
  const bool retry =
      unsettled && (signature != mode_signature_ || held != in_use_seen_ || now >= next_retry_);
  mode_signature_ = signature;
  in_use_seen_ = held;

  if (!wanted.empty() && (target_changed || retry)) {
    if (target_changed) {
      applied_config_ = wanted;
      applied_generation_ = layout_generation_;
      ever_applied_ = true;
      PatchLabels({{kMigConfigStateLabel, "pending"}});
    }
    Apply(*gpus, in_use);
    next_retry_ = now + std::chrono::seconds(config_.mig_retry_seconds);
    auto again = driver_->List();
    if (again.ok()) {
      mode_signature_.clear();
      for (const auto& g : *again) {
        mode_signature_ +=
            std::to_string(g.index) + (g.mig_enabled ? "E" : "e") + (g.mig_pending ? "P" : "p");
      }
      gpus = std::move(again);
    }
  } else if (wanted.empty() && target_changed && !ever_applied_) {
    ever_applied_ = true;
    applied_config_.clear();
    log::Info(
        "no MIG configuration named (no nvidia.com/mig.config label, no mig_config): MIG left as it is");
  }
  Publish(*gpus, in_use);
}

void MigManager::Apply(const std::vector<host::MigGpuState>&,
                       const std::map<std::string, std::string>& in_use) {
  {
    std::lock_guard lock(mu_);
    status_.config = applied_config_;
    ++status_.applies;
  }
  if (!layout_.ok()) {
    Report(ApplyState::kFailed, layout_.error().message + "; nothing applied");
    return;
  }
  ApplyRequest request;
  request.file = &*layout_;
  request.config = applied_config_;
  request.managed = [this](int index) { return Manages(index); };
  request.strategy = strategy_;
  for (const auto& [id, owner] : in_use) request.in_use.insert(id);
  ApplyResult result = ApplyLayout(*driver_, request);
  std::string message = "configuration '" + applied_config_ + "': " + ApplyStateName(result.state);
  if (!result.messages.empty()) message += ": " + result.Summary();
  Report(result.state, message);
}

void MigManager::Report(ApplyState state, const std::string& message) {
  {
    std::lock_guard lock(mu_);
    status_.state = state;
    status_.message = message;
  }
  PatchLabels({{kMigConfigStateLabel, ApplyStateName(state)}});
  if (last_state_ == state && last_message_ == message) return;  // once per outcome
  last_state_ = state;
  last_message_ = message;
  if (state == ApplyState::kSuccess) {
    log::Info("MIG layout applied", {{"message", message}});
  } else {
    log::Warn(state == ApplyState::kPending ? "MIG layout pending" : "MIG layout failed",
              {{"message", message}});
  }
  RecordEvent(state == ApplyState::kSuccess ? "Normal" : "Warning", ApplyStateReason(state), message);
}

void MigManager::Publish(const std::vector<host::MigGpuState>& gpus,
                         const std::map<std::string, std::string>& in_use) {
  auto devices = MigDevicesOf(
      gpus, [this](int index) { return Manages(index); }, strategy_);
  {
    std::lock_guard lock(mu_);
    for (auto& d : devices) {
      d.healthy = xid_health_.Healthy(d.parent_uuid, d.gpu_instance_id);
    }
  }
  for (auto& d : devices) {
    if (auto owner = in_use.find(d.mig_uuid); owner != in_use.end()) d.used_by = owner->second;
    EnsurePlugin(d.resource);
  }
  auto labels = MigNodeLabels(strategy_, devices, labels_written_);
  if (labels != labels_written_) {
    PatchLabels(labels);
    labels_written_.clear();
    for (auto& [k, v] : labels) {
      if (v) labels_written_[k] = v;
    }
  }
  state_.Set(std::move(devices));
}

void MigManager::EnsurePlugin(const std::string& resource) {
  if (plugins_.count(resource) > 0) return;
  // A resource the vGPU plugin also serves (single with resource_name
  // nvidia.com/gpu): the agent does not start that one then.
  Plugin& plugin = plugins_[resource];
  plugin.config = config_;
  plugin.config.resource_name = resource;
  plugin.config.pre_start_required = false;
  const MigDeviceState* state = &state_;
  plugin.server = std::make_unique<PluginServer>(
      plugin.config, [resource, state] { return std::make_unique<MigPluginService>(resource, *state); });
  plugin.registrar = std::make_unique<KubeletRegistrar>(plugin.config, *plugin.server);
  if (auto s = plugin.server->Start(); !s.ok()) {
    log::Warn("cannot serve a MIG device plugin (retried by the registrar)",
              {{"resource", resource}, {"error", s.error().message}});
  }
  plugin.registrar->Start();
}

void MigManager::OnXid(const host::MigXid& xid) {
  if (forward_xid_ && forwarded_gpus_.count(xid.gpu_uuid) > 0) {
    forward_xid_(xid);
    return;
  }
  {
    std::lock_guard lock(mu_);
    xid_health_.Record(xid);
  }
  log::Warn("critical XID on a MIG GPU; its MIG device(s) are unhealthy",
            {{"gpu", xid.gpu_uuid}, {"xid", xid.xid}, {"gpu_instance", xid.gpu_instance_id}});
  thread_.RunNow();
}

void MigManager::PatchLabels(const kube::StringPatch& labels) {
  if (client_ == nullptr) return;
  kube::NodesApi nodes(client_);
  if (auto patched = nodes.PatchLabels(config_.node_name, labels); !patched.ok()) {
    log::Warn("cannot label the node for MIG",
              {{"node", config_.node_name}, {"error", patched.error().message}});
  }
}

void MigManager::RecordEvent(const std::string& type, const std::string& reason, const std::string& message) {
  RecordNodeEvent(client_, config_.node_name, node_ ? node_->Get(config_.node_name) : std::nullopt, type,
                  reason, message);
}

}  // namespace tessera::node::mig
