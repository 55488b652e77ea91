// PluginServer: serves DevicePluginService on the plugin's unix socket in the
// kubelet's plugin directory. Start() returns only once the socket accepts
// calls, which is what allows registering with the kubelet right after it.
// It can be stopped and started again (the kubelet deletes plugin sockets when
// it restarts; the registrar then starts the server again).
//
// Thread-safety: Start/Stop/SocketPresent may be called from any thread.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/grpcpp.h>

#include "base/result.h"
#include "node/config.h"
#include "node/device_state.h"
#include "node/plugin_service.h"

namespace tessera::node {

class PluginServer {
 public:
  // Serves the vGPU DevicePluginService. `config` and `state` must outlive the server.
  PluginServer(const NodeConfig& config, const DeviceState& state,
               std::function<std::string()> new_region_name);
  // Serves what `make_service` makes (a fresh service per start) on
  // config.PluginSocketPath(), for config.resource_name. `config` must outlive the server.
  PluginServer(const NodeConfig& config, std::function<std::unique_ptr<ServedDevicePlugin>()> make_service);
  ~PluginServer();
  PluginServer(const PluginServer&) = delete;
  PluginServer& operator=(const PluginServer&) = delete;

  // Replaces a stale socket file, binds, and serves. Idempotent while serving.
  Status Start();
  // Ends open streams, shuts the server down and removes its socket file (if
  // it is still the one this server created).
  void Stop();

  bool serving() const;
  // True when the socket file this server bound is still in place (not
  // deleted or replaced by someone else, e.g. a restarting kubelet).
  bool SocketPresent() const;

 private:
  const NodeConfig& config_;
  std::function<std::unique_ptr<ServedDevicePlugin>()> make_service_;

  mutable std::mutex mu_;
  std::unique_ptr<ServedDevicePlugin> service_;  // guarded by mu_; one per server start
  std::unique_ptr<grpc::Server> server_;         // guarded by mu_
  ino_t socket_inode_ = 0;                       // guarded by mu_
};

}  // namespace tessera::node
