// Agent: tessera-node's parts wired together. It owns the inventory source,
// the advertised DeviceState, the device-plugin server and the kubelet
// registrar; the inventory publisher and metrics plug in here later as further
// readers of DeviceState.
//
// Start order matters: discover -> write the preload file -> serve the plugin
// socket -> register with the kubelet -> follow health events.
//
// Thread-safety: Start/Stop from one controlling thread; devices() is
// thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/result.h"
#include "node/config.h"
#include "node/device_state.h"
#include "node/inventory.h"
#include "node/plugin_server.h"
#include "node/registrar.h"

namespace tessera::node {

// Applies the node's configuration to discovered GPUs: memory offered =
// physical × memory_scaling (rounded down), slots = split_count.
std::vector<core::Gpu> ApplyOffer(const NodeConfig& config, std::vector<core::Gpu> gpus);

// Writes the file mounted over a container's /etc/ld.so.preload: one line, the
// container path of libvgpu. Written atomically (temp file + rename) so a
// container never sees half a file.
Status WritePreloadFile(const NodeConfig& config);

class Agent {
 public:
  Agent(NodeConfig config, std::unique_ptr<InventorySource> inventory,
        std::function<std::string()> new_region_name = nullptr);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Fails on what an operator must fix (NVML unusable, the plugin dir or the
  // preload file not writable); a kubelet not yet there is waited for instead.
  Status Start();
  void Stop();

  const NodeConfig& config() const { return config_; }
  const DeviceState& devices() const { return state_; }
  int registrations() const { return registrar_.registrations(); }

 private:
  const NodeConfig config_;
  std::unique_ptr<InventorySource> inventory_;
  DeviceState state_;
  PluginServer plugin_;
  KubeletRegistrar registrar_;
  bool started_ = false;
};

}  // namespace tessera::node
