#include "node/sharing/sharing_manager.h"

#include <sys/stat.h>

#include <filesystem>

#include "base/log.h"
#include "kube/typed_api.h"
#include "node/mig/node_events.h"
#include "node/sharing/labels.h"
#include "node/sharing/timeslice_setup.h"

namespace tessera::node::sharing {
namespace {

constexpr auto kTick = std::chrono::milliseconds(1000);

bool IsReplicated(const GpuMode& mode) {
  return mode.replicas > 0 &&
         (mode.mode == core::SharingMode::kTimeslice || mode.mode == core::SharingMode::kMps);
}

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return !path.empty() && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::optional<std::string> LabelOf(const kube::Json& node) {
  const auto& labels = node["metadata"]["labels"];
  if (labels.is_object() && labels.contains(kDevicePluginConfigLabel) &&
      labels[kDevicePluginConfigLabel].is_string()) {
    return labels[kDevicePluginConfigLabel].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

Result<std::string> NvidiaConfigPath(const NodeConfig& config, const std::optional<std::string>& label) {
  const std::string& dir = config.nvidia_config_file;
  if (!IsDirectory(dir)) return dir;
  std::string name;
  std::string named_by;
  if (label) {
    name = *label;
    named_by = std::string("the Node label ") + kDevicePluginConfigLabel;
  } else if (!config.nvidia_config_default.empty()) {
    name = config.nvidia_config_default;
    named_by = "nvidia_config_default";
  } else {
    std::vector<std::string> files;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      const std::string file = entry.path().filename().string();
      if (entry.is_regular_file(ec) && !file.starts_with(".")) files.push_back(file);
    }
    if (files.size() != 1) return std::string();  // no label, no default, several files: none
    name = files[0];
    named_by = "the only file of nvidia_config_file";
  }
  if (name.empty() || name.find('/') != std::string::npos || name.starts_with(".")) {
    return Error{named_by + " '" + name + "' is not a file name in nvidia_config_file '" + dir + "'"};
  }
  const std::string path = dir + "/" + name;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Error{named_by + " names '" + name + "', which is not a file in nvidia_config_file '" + dir + "'"};
  }
  return path;
}

std::optional<std::string> SharingManager::ConfigLabel() {
  if (!node_ || !node_->HasSynced()) return label_;
  auto node = node_->Get(config_.node_name);
  return node ? LabelOf(*node) : std::nullopt;
}

Result<NvidiaConfig> SharingManager::ReadNvidia(const std::optional<std::string>& label) {
  path_.clear();
  file_identity_.reset();
  TESSERA_ASSIGN_OR_RETURN(path_, NvidiaConfigPath(config_, label));
  if (path_.empty()) return NvidiaConfig{};
  file_identity_ = IdentifyFile(path_);
  return ReadNvidiaConfigFile(path_);
}

SharingManager::SharingManager(const NodeConfig& config, kube::Client* client, InUseSource in_use)
    : config_(config), client_(client), in_use_(std::move(in_use)), thread_(kTick, [this] { Tick(); }) {}

SharingManager::~SharingManager() {
  Stop();
}

Status SharingManager::Prepare(const std::vector<core::Gpu>& gpus,
                               std::function<std::string()> new_region_name, RegionsInFlight* in_flight) {
  discovered_ = gpus;
  if (setups_.count(core::SharingMode::kTimeslice) == 0) {
    setups_[core::SharingMode::kTimeslice] =
        TimesliceContainerSetup(config_, std::move(new_region_name), in_flight);
  }
  if (client_ != nullptr && IsDirectory(config_.nvidia_config_file)) {
    // The label decides at start too: the Node read once (the watch follows it later).
    kube::NodesApi nodes(client_);
    if (auto node = nodes.Get(config_.node_name); node.ok()) {
      label_ = LabelOf(*node);
    } else {
      log::Warn("cannot read the Node for its nvidia.com/device-plugin.config label; using the default",
                {{"error", node.error().message}});
    }
    kube::InformerOptions options;
    options.type = kube::resources::kNodes;
    options.field_selector = "metadata.name=" + config_.node_name;
    node_ = std::make_unique<kube::Informer>(client_, options);
  }
  TESSERA_ASSIGN_OR_RETURN(const NvidiaConfig nvidia, ReadNvidia(label_));
  if (!path_.empty()) log::Info("NVIDIA config file", {{"file", path_}, {"label", label_.value_or("")}});
  TESSERA_ASSIGN_OR_RETURN(ModeAssignment modes, AssignModes(config_, discovered_, &nvidia));
  for (const auto& note : modes.notes) log::Info("sharing: " + note);
  for (const auto& gpu : modes.gpus) {
    log::Info("GPU sharing mode", {{"index", gpu.index},
                                   {"uuid", gpu.uuid},
                                   {"mode", core::SharingModeName(gpu.mode)},
                                   {"replicas", gpu.replicas},
                                   {"resource", gpu.resource_name},
                                   {"source", gpu.source}});
  }
  std::vector<ReplicaGpu> replicas;
  for (size_t g = 0; g < modes.gpus.size(); ++g) {
    if (IsReplicated(modes.gpus[g])) replicas.push_back(ReplicaGpu{discovered_[g], modes.gpus[g]});
  }
  state_.Set(std::move(replicas));
  std::lock_guard lock(mu_);
  modes_ = std::move(modes);
  return Status::Ok();
}

ModeAssignment SharingManager::modes() const {
  std::lock_guard lock(mu_);
  return modes_;
}

bool SharingManager::Replicated(const std::string& uuid) const {
  std::lock_guard lock(mu_);
  const GpuMode* mode = modes_.Find(uuid);
  return mode != nullptr && IsReplicated(*mode);
}

bool SharingManager::ServesResource(const std::string& resource) const {
  std::lock_guard lock(mu_);
  return modes_.ReplicaResources().count(resource) > 0;
}

std::vector<core::Gpu> SharingManager::ApplyModes(std::vector<core::Gpu> gpus) const {
  std::lock_guard lock(mu_);
  std::erase_if(gpus, [&](const core::Gpu& gpu) {
    const GpuMode* mode = modes_.Find(gpu.uuid);
    return mode != nullptr && IsReplicated(*mode);
  });
  for (auto& gpu : gpus) {
    const GpuMode* mode = modes_.Find(gpu.uuid);
    if (mode == nullptr) continue;
    gpu.mode = mode->mode;
    // Whole, to one container at a time: one device for the kubelet's count.
    if (mode->mode == core::SharingMode::kExclusive) gpu.slots = 1;
  }
  return gpus;
}

std::vector<core::Gpu> SharingManager::InventoryGpus() const {
  std::vector<core::Gpu> listed;
  for (const auto& replica : state_.Get().value) {
    core::Gpu gpu = replica.gpu;
    gpu.mode = replica.mode.mode;
    gpu.replicas = replica.mode.replicas;
    gpu.slots = 0;  // no vGPU slices: kube-scheduler counts the replicas
    listed.push_back(std::move(gpu));
  }
  return listed;
}

std::map<std::string, std::optional<std::string>> SharingManager::Labels() const {
  return SharingLabels(modes(), discovered_);
}

bool SharingManager::SetHealth(const std::string& uuid, bool healthy) {
  return state_.Edit([&](std::vector<ReplicaGpu>& gpus) {
    for (auto& gpu : gpus) {
      if (gpu.gpu.uuid == uuid && gpu.gpu.healthy != healthy) {
        gpu.gpu.healthy = healthy;
        return true;
      }
    }
    return false;
  });
}

Status SharingManager::Start() {
  for (const auto& [resource, gpus] : modes().ReplicaResources()) EnsurePlugin(resource);
  if (node_) node_->Start();
  if (!config_.nvidia_config_file.empty()) thread_.Start();
  return Status::Ok();
}

void SharingManager::Stop() {
  thread_.Stop();
  if (node_) node_->Stop();
  for (auto& [resource, plugin] : plugins_) {
    plugin.registrar->Stop();
    plugin.server->Stop();
  }
  plugins_.clear();
}

void SharingManager::EnsurePlugin(const std::string& resource) {
  if (plugins_.count(resource) > 0) return;
  Plugin& plugin = plugins_[resource];
  plugin.config = config_;
  plugin.config.resource_name = resource;
  plugin.config.pre_start_required = false;
  const ReplicaState* state = &state_;
  const ContainerSetups* setups = &setups_;
  plugin.server = std::make_unique<PluginServer>(plugin.config, [resource, state, setups] {
    return std::make_unique<ReplicaPluginService>(resource, *state, *setups);
  });
  plugin.registrar = std::make_unique<KubeletRegistrar>(plugin.config, *plugin.server);
  if (auto s = plugin.server->Start(); !s.ok()) {
    log::Warn("cannot serve a replica device plugin (retried by the registrar)",
              {{"resource", resource}, {"error", s.error().message}});
  }
  plugin.registrar->Start();
  log::Info("serving replicas", {{"resource", resource}});
}

void SharingManager::RecordEvent(const std::string& type, const std::string& reason,
                                 const std::string& message) {
  if (message == last_report_) return;  // one Event per outcome, not per pass
  last_report_ = message;
  (type == "Warning" ? log::Warn : log::Info)(message, {{"reason", reason}});
  mig::RecordNodeEvent(client_, config_.node_name, std::nullopt, type, reason, message);
}

void SharingManager::Apply(ModeAssignment modes) {
  std::vector<ReplicaGpu> replicas;
  for (size_t g = 0; g < modes.gpus.size(); ++g) {
    if (IsReplicated(modes.gpus[g])) replicas.push_back(ReplicaGpu{discovered_[g], modes.gpus[g]});
  }
  // Health is the watch's: keep what it said.
  for (auto& replica : replicas) {
    for (const auto& old : state_.Get().value) {
      if (old.gpu.uuid == replica.gpu.uuid) replica.gpu.healthy = old.gpu.healthy;
    }
  }
  state_.Set(std::move(replicas));
  for (const auto& [resource, gpus] : modes.ReplicaResources()) EnsurePlugin(resource);
  {
    std::lock_guard lock(mu_);
    modes_ = modes;
  }
  if (changed_) changed_(modes);
}

void SharingManager::Tick() {
  // The file in force changed (the label names another), or its contents did.
  const std::optional<std::string> label = ConfigLabel();
  const auto path = NvidiaConfigPath(config_, label);
  const bool other_file = label != label_ || !path.ok() || *path != path_;
  if (other_file || (!path_.empty() && IdentifyFile(path_) != file_identity_)) {
    label_ = label;
    auto nvidia = ReadNvidia(label);
    Result<ModeAssignment> wanted =
        nvidia.ok() ? AssignModes(config_, discovered_, &*nvidia) : Result<ModeAssignment>(nvidia.error());
    if (!wanted.ok()) {
      wanted_.reset();
      RecordEvent("Warning", "SharingConfigRejected",
                  "nvidia_config_file changed but is not applied; the GPUs keep their modes: " +
                      wanted.error().message);
      return;
    }
    log::Info("nvidia_config_file read again", {{"file", config_.nvidia_config_file}});
    wanted_ = std::move(wanted).value();
  }
  if (!wanted_) return;

  // GPU by GPU: the new mode where no container holds the GPU.
  const ModeAssignment current = modes();
  const std::optional<std::set<std::string>> in_use = in_use_ ? in_use_() : std::nullopt;
  ModeAssignment next = *wanted_;
  std::string kept;
  for (size_t g = 0; g < next.gpus.size(); ++g) {
    const GpuMode& was = current.gpus[g];
    if (next.gpus[g] == was) continue;
    const bool busy = !in_use || in_use->count(was.uuid) > 0;
    if (!busy) continue;
    kept += (kept.empty() ? "" : "; ") +
            ("GPU " + std::to_string(was.index) + " stays " + core::SharingModeName(was.mode) +
             " (the file now says " + core::SharingModeName(next.gpus[g].mode) + ")");
    next.gpus[g] = was;
  }
  if (auto s = CheckResourceNames(config_, discovered_, next); !s.ok()) {
    RecordEvent("Warning", "SharingModeKept",
                "nvidia_config_file's modes wait: with the GPUs in use kept as they are they conflict: " +
                    s.error().message);
    return;
  }
  if (!(next.gpus == current.gpus)) {
    for (size_t g = 0; g < next.gpus.size(); ++g) {
      if (next.gpus[g] == current.gpus[g]) continue;
      log::Info("GPU sharing mode changed", {{"index", next.gpus[g].index},
                                             {"from", core::SharingModeName(current.gpus[g].mode)},
                                             {"to", core::SharingModeName(next.gpus[g].mode)},
                                             {"replicas", next.gpus[g].replicas},
                                             {"resource", next.gpus[g].resource_name}});
    }
    Apply(next);
  }
  if (!kept.empty()) {
    RecordEvent("Warning", "SharingModeKept",
                kept + ": " +
                    (in_use ? "containers use it; it moves once they are gone"
                            : "whether containers use it cannot be told (no PodResources)"));
    return;
  }
  wanted_.reset();
  RecordEvent("Normal", "SharingModesApplied",
              "nvidia_config_file applied: every GPU is in the mode it gives");
}

}  // namespace tessera::node::sharing
