// MpsNode: tessera-node's MPS half as the agent drives it (docs/sharing.md#mps),
// so that the agent needs a handful of lines:
//
//   mps_ = std::make_unique<mps::MpsNode>(config_, client, new_region_name);
//   mps_->InstallHook(*sharing_);                  // before SharingManager::Start
//   mps_->Start(sharing_->modes(), discovered);     // after Prepare
//   sharing_->OnModesChanged([..](const auto& m) { ...; mps_->ModesChanged(m); });
//   mps_->Stop();                                  // in Agent::Stop
//   document += mps_->Metrics();                   // in Agent::Metrics
//
// It owns the MpsDaemons (one control daemon per mps GPU, checked every
// monitor interval, reported as Events on the Node) and gives the replica
// plugin the mps hook: the timeslice mode's libvgpu edits with the MPS ones
// over them (mps_container.h).
//
// Thread-safety: Start/Stop/InstallHook from the agent's controlling thread;
// ModesChanged and Metrics from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "core/device.h"
#include "kube/client.h"
#include "node/config.h"
#include "node/mps/mps_daemons.h"
#include "node/sharing/sharing_manager.h"

namespace tessera::node::mps {

class MpsNode {
 public:
  // `config` and `client` (null: no Events) must outlive it. `program` null:
  // the config's mps_control_binary, run for real.
  // `in_flight` (may be null) registers the containers' regions while they
  // are made (node/regions_in_flight.h).
  MpsNode(const NodeConfig& config, kube::Client* client, std::function<std::string()> new_region_name,
          std::unique_ptr<ControlProgram> program = nullptr, RegionsInFlight* in_flight = nullptr);
  ~MpsNode();

  void InstallHook(sharing::SharingManager& sharing);
  // Starts the daemons of `modes`' mps GPUs (`discovered`: physical memory)
  // and checks them every monitor interval. A daemon that cannot start is
  // logged and reported, and retried by the checks: the node still starts.
  void Start(const sharing::ModeAssignment& modes, const std::vector<core::Gpu>& discovered);
  // After a runtime change of the modes: daemons for GPUs that entered mps
  // mode, `quit` for those that left it.
  void ModesChanged(const sharing::ModeAssignment& modes);
  void Stop();

  std::string Metrics() const { return daemons_.Metrics(); }
  MpsDaemons& daemons() { return daemons_; }

 private:
  const NodeConfig& config_;
  kube::Client* const client_;
  const std::function<std::string()> new_region_name_;
  RegionsInFlight* const in_flight_;
  std::vector<core::Gpu> discovered_;  // Start; then read-only
  MpsDaemons daemons_;
};

}  // namespace tessera::node::mps
