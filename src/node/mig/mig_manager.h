// MigManager: tessera-node's MIG half. It keeps the node's MIG-managed GPUs
// in the layout its Node's `nvidia.com/mig.config` label names (from the
// mig-parted file `mig_layout_file`), advertises their MIG devices to the
// kubelet, and labels the node as NVIDIA's GPU operator does.
//
// Its thread, once a second:
//  - reads the label (a watch of this Node; `mig_config` when it has none or
//    without Kubernetes) and the layout file (re-read when its size, inode or
//    modification time changes), and applies the layout (layout_applier.h)
//    when either changed — without a restart — and again, while the last
//    outcome was not success, when a GPU's MIG mode changed (a reset), when the
//    set of MIG devices containers hold changed, or every `mig_retry_seconds`;
//  - sets `nvidia.com/mig.config.state` to pending when it starts on a new
//    configuration, then success, pending (a GPU waits for a reset, or an
//    instance in use blocks the layout) or failed, with the reason in an Event
//    on the Node (one per outcome, not per attempt);
//  - lists the MIG devices of the managed GPUs (with the containers holding
//    them, from the kubelet's PodResources), serves one device plugin per
//    resource name (each its own socket and registration, as NVIDIA's device
//    plugin does; a resource whose devices are gone stays registered with
//    none), and writes the GFD-style labels (mig_devices.h).
// XID events of the managed GPUs reach their MIG devices: one naming a GPU
// instance marks that device unhealthy; a GPU-wide one all of the GPU's. As
// for whole GPUs, unhealthy is sticky until tessera-node restarts.
//
// Thread-safety: Start/Stop from one controlling thread; accessors anywhere.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "base/periodic_thread.h"
#include "core/mig/layout.h"
#include "host/nvml_mig.h"
#include "kube/client.h"
#include "kube/informer.h"
#include "kube/typed_api.h"
#include "node/config.h"
#include "node/file_identity.h"
#include "node/mig/layout_applier.h"
#include "node/mig/mig_devices.h"
#include "node/mig/mig_settings.h"
#include "node/mig/xid_health.h"
#include "node/plugin_server.h"
#include "node/registrar.h"

namespace tessera::node::mig {

// What the last attempt came to, for logs, metrics and tests.
struct MigStatus {
  std::string config;  // the configuration last applied ("" = none named)
  std::optional<ApplyState> state;
  std::string message;
  int applies = 0;  // attempts so far
};

class MigManager {
 public:
  // Which MIG UUIDs containers hold: device ID -> "<namespace>/<pod>/<container>".
  using InUseSource = std::function<std::map<std::string, std::string>()>;

  // `config`, `driver` and `client` (null: no Kubernetes) must outlive the manager.
  MigManager(const NodeConfig& config, host::MigDriver* driver, kube::Client* client, InUseSource in_use);
  ~MigManager();
  MigManager(const MigManager&) = delete;
  MigManager& operator=(const MigManager&) = delete;

  Status Start();
  void Stop();

  // Whether GPU `index` is MIG-managed (mig_gpus) — the vGPU plugin leaves those out.
  bool Manages(int index) const { return gpus_.Contains(index); }
  // The driver has one XID watch, which Start takes: XIDs of `gpu_uuids`
  // (GPUs this manager does not manage: the mig-dynamic ones) are watched too
  // and handed to `to` instead. Call before Start.
  void ForwardXids(std::set<std::string> gpu_uuids, std::function<void(const host::MigXid&)> to) {
    forwarded_gpus_ = std::move(gpu_uuids);
    forward_xid_ = std::move(to);
  }
  const MigDeviceState& devices() const { return state_; }
  MigStatus status() const;

  // One pass of the thread (tests call it directly).
  void Tick();

 private:
  struct Plugin {
    NodeConfig config;  // the agent's, with this resource's name (and so its socket)
    std::unique_ptr<PluginServer> server;
    std::unique_ptr<KubeletRegistrar> registrar;
  };

  std::string WantedConfig() const;
  void ReadLayoutFile();
  void Apply(const std::vector<host::MigGpuState>& gpus, const std::map<std::string, std::string>& in_use);
  void Report(ApplyState state, const std::string& message);
  void Publish(const std::vector<host::MigGpuState>& gpus, const std::map<std::string, std::string>& in_use);
  void EnsurePlugin(const std::string& resource);
  void OnXid(const host::MigXid& xid);
  void PatchLabels(const kube::StringPatch& labels);
  void RecordEvent(const std::string& type, const std::string& reason, const std::string& message);

  const NodeConfig& config_;
  host::MigDriver* const driver_;
  kube::Client* const client_;
  const InUseSource in_use_;
  const MigGpuSelection gpus_;
  const MigStrategy strategy_;
  MigDeviceState state_;
  std::unique_ptr<kube::Informer> node_;  // this Node, for its nvidia.com/mig.config label

  mutable std::mutex mu_;
  MigStatus status_;         // guarded by mu_
  MigXidHealth xid_health_;  // guarded by mu_
  // ForwardXids (set before Start, then read only):
  std::set<std::string> forwarded_gpus_;
  std::function<void(const host::MigXid&)> forward_xid_;

  // Thread only:
  std::optional<FileIdentity> file_identity_;
  Result<core::mig::LayoutFile> layout_{Error{"not read yet"}};
  uint64_t layout_generation_ = 0;  // bumps when the file's contents are read again
  std::string applied_config_;
  uint64_t applied_generation_ = 0;
  bool ever_applied_ = false;
  std::optional<ApplyState> last_state_;
  std::string last_message_;
  std::string mode_signature_;
  std::set<std::string> in_use_seen_;
  std::chrono::steady_clock::time_point next_retry_{};
  std::map<std::string, std::optional<std::string>> labels_written_;
  std::map<std::string, Plugin> plugins_;
  PeriodicThread thread_;  // last: stopped first
};

}  // namespace tessera::node::mig
