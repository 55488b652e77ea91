#include "node/mps/mps_node.h"

#include <chrono>

#include "base/log.h"
#include "node/mig/node_events.h"
#include "node/mps/mps_container.h"
#include "node/mps/mps_gpus.h"
#include "node/sharing/timeslice_setup.h"

namespace tessera::node::mps {
namespace {

MpsDaemonsOptions OptionsOf(const NodeConfig& config) {
  MpsDaemonsOptions options;
  options.root = config.mps_root;
  return options;
}

}  // namespace

MpsNode::MpsNode(const NodeConfig& config, kube::Client* client, std::function<std::string()> new_region_name,
                 std::unique_ptr<ControlProgram> program, RegionsInFlight* in_flight)
    : config_(config),
      client_(client),
      new_region_name_(std::move(new_region_name)),
      in_flight_(in_flight),
      daemons_(OptionsOf(config),
               program ? std::move(program)
                       : SystemControlProgram(config.mps_control_binary, std::chrono::seconds(10)),
               [this](const std::string& type, const std::string& reason, const std::string& message) {
                 mig::RecordNodeEvent(client_, config_.node_name, std::nullopt, type, reason, message);
               }) {}

MpsNode::~MpsNode() = default;

void MpsNode::InstallHook(sharing::SharingManager& sharing) {
  sharing.SetContainerSetup(
      core::SharingMode::kMps,
      MpsContainerSetup(&daemons_, sharing::TimesliceContainerSetup(config_, new_region_name_, in_flight_)));
}

void MpsNode::Start(const sharing::ModeAssignment& modes, const std::vector<core::Gpu>& discovered) {
  discovered_ = discovered;
  if (auto status = daemons_.Apply(MpsGpusOf(modes, discovered_)); !status.ok()) {
    log::Warn("MPS control daemons not all running; retried every monitor interval",
              {{"error", status.error().message}});
  }
  daemons_.StartChecking(std::chrono::milliseconds(config_.monitor_interval_ms));
}

void MpsNode::ModesChanged(const sharing::ModeAssignment& modes) {
  if (auto status = daemons_.Apply(MpsGpusOf(modes, discovered_)); !status.ok()) {
    log::Warn("MPS control daemons not all running after the mode change; retried every monitor interval",
              {{"error", status.error().message}});
  }
}

void MpsNode::Stop() {
  daemons_.StopAll();
}

}  // namespace tessera::node::mps
