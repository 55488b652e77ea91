// SharingManager: tessera-node's sharing half (docs/sharing.md). It resolves
// each GPU's mode (gpu_modes.h) at start, serves one replica device plugin
// per replica resource name (replica_service.h; each its own socket and
// registration), lists the replica GPUs for the inventory and computes the
// GFD-style labels (labels.h).
//
// `nvidia_config_file` may be a directory of NVIDIA config files (NVIDIA's
// ConfigMap with several keys, mounted): the Node's label
// `nvidia.com/device-plugin.config` names the file to use, as NVIDIA's
// config-manager does; without the label, `nvidia_config_default`, else the
// directory's only file, else no NVIDIA sharing.
//
// At runtime it follows `nvidia_config_file` (re-read when its size, inode or
// modification time changes, or the label names another file, checked once a
// second). A GPU moves to the mode
// the file now gives it only while no container uses it (the kubelet's
// PodResources); otherwise it keeps its mode, and the manager says so in the
// log and in an Event on the Node (reason SharingModeKept), and moves it once
// it is free. A file that no longer parses, or whose modes conflict, changes
// nothing (Event SharingConfigRejected). The rest of the node configuration
// is read at start only.
//
// Thread-safety: Prepare/Start/Stop from one controlling thread; the
// accessors from any thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/periodic_thread.h"
#include "kube/client.h"
#include "kube/informer.h"
#include "node/config.h"
#include "node/file_identity.h"
#include "node/plugin_server.h"
#include "node/regions_in_flight.h"
#include "node/registrar.h"
#include "node/sharing/container_setup.h"
#include "node/sharing/gpu_modes.h"
#include "node/sharing/replica_service.h"

namespace tessera::node::sharing {

// The Node label naming the NVIDIA config file (NVIDIA's config-manager's).
inline constexpr const char* kDevicePluginConfigLabel = "nvidia.com/device-plugin.config";

// The NVIDIA file in force: `config.nvidia_config_file` itself, or with a
// directory the file the label (nullopt: none) or the default names; "" = none.
// Errors name the label or key and the directory.
Result<std::string> NvidiaConfigPath(const NodeConfig& config, const std::optional<std::string>& label);

class SharingManager {
 public:
  // The GPU UUIDs containers hold now; nullopt when it cannot be known (no
  // PodResources): then no GPU moves at runtime.
  using InUseSource = std::function<std::optional<std::set<std::string>>()>;
  // Called (on the manager's thread) after a runtime change of the modes, so
  // the vGPU plugin's list follows.
  using ModesChanged = std::function<void(const ModeAssignment& modes)>;

  // `config` and `client` (null: no Kubernetes, no Events) must outlive the manager.
  SharingManager(const NodeConfig& config, kube::Client* client, InUseSource in_use);
  ~SharingManager();
  SharingManager(const SharingManager&) = delete;
  SharingManager& operator=(const SharingManager&) = delete;

  // The container hook of a mode (container_setup.h). timeslice's is
  // TimesliceContainerSetup unless replaced. Call before Start.
  void SetContainerSetup(core::SharingMode mode, ContainerSetup setup) { setups_[mode] = std::move(setup); }
  void OnModesChanged(ModesChanged changed) { changed_ = std::move(changed); }

  // Resolves the modes of the discovered `gpus` (physical memory), reading
  // nvidia_config_file. An error is a bad configuration; it names the key or
  // file and the node should not start.
  Status Prepare(const std::vector<core::Gpu>& gpus, std::function<std::string()> new_region_name,
                 RegionsInFlight* in_flight = nullptr);

  ModeAssignment modes() const;
  // Whether `uuid` is advertised as replicas here (and so not by the vGPU plugin).
  bool Replicated(const std::string& uuid) const;
  // Whether a replica plugin serves `resource` (the vGPU plugin then must not).
  bool ServesResource(const std::string& resource) const;
  // The vGPU plugin's GPUs with their modes: vgpu, exclusive (one device:
  // slots 1), mps sized per request, mig-dynamic. Replica GPUs are left out.
  std::vector<core::Gpu> ApplyModes(std::vector<core::Gpu> gpus) const;
  // The replica GPUs as the inventory lists them: mode, replicas, no slots.
  std::vector<core::Gpu> InventoryGpus() const;
  std::map<std::string, std::optional<std::string>> Labels() const;
  // Marks a replica GPU's health; true when it was one of them and changed.
  bool SetHealth(const std::string& uuid, bool healthy);
  const ReplicaState& replicas() const { return state_; }

  // Serves the replica plugins and follows nvidia_config_file.
  Status Start();
  void Stop();
  // One pass of the thread (tests call it directly).
  void Tick();

 private:
  struct Plugin {
    NodeConfig config;  // the agent's, with this resource's name (and so its socket)
    std::unique_ptr<PluginServer> server;
    std::unique_ptr<KubeletRegistrar> registrar;
  };

  // Publishes `modes` (replica state, plugins); mu_ not held.
  void Apply(ModeAssignment modes);
  void EnsurePlugin(const std::string& resource);
  void RecordEvent(const std::string& type, const std::string& reason, const std::string& message);
  // The Node's nvidia.com/device-plugin.config label, as last seen.
  std::optional<std::string> ConfigLabel();
  Result<NvidiaConfig> ReadNvidia(const std::optional<std::string>& label);

  const NodeConfig& config_;
  kube::Client* const client_;
  const InUseSource in_use_;
  ContainerSetups setups_;  // set before Start, then read-only
  ModesChanged changed_;
  std::vector<core::Gpu> discovered_;  // Prepare; then read-only
  ReplicaState state_;

  mutable std::mutex mu_;
  ModeAssignment modes_;  // guarded by mu_

  std::unique_ptr<kube::Informer> node_;  // this Node, for its label (directory mode with Kubernetes)

  // Thread only (and Prepare):
  std::optional<std::string> label_;
  std::string path_;  // the file read last
  std::optional<FileIdentity> file_identity_;
  std::optional<ModeAssignment> wanted_;  // the file's modes not applied yet (a GPU in use)
  std::string last_report_;
  std::map<std::string, Plugin> plugins_;
  PeriodicThread thread_;  // last: stopped first
};

}  // namespace tessera::node::sharing
