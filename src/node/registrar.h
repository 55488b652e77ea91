// KubeletRegistrar: keeps the plugin registered with the kubelet.
//
// A background loop polls (every kubelet_poll_ms) two files in the plugin dir:
//  - the plugin's own socket: a restarting kubelet deletes every socket there,
//    so when ours is gone (or replaced) the server is started again;
//  - kubelet.sock: when it appears, or is replaced by a new one (a new inode or
//    change time: the kubelet restarted), the plugin registers again.
// Registration always happens with the plugin's socket already serving.
// Failed registrations are retried on the next poll.
//
// Polling rather than inotify: it needs nothing from the host's inotify limits,
// survives the directory itself being recreated, and a second of latency is
// well inside what a kubelet restart takes anyway.
//
// Thread-safety: Start/Stop from one controlling thread; counters from any.
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include "base/periodic_thread.h"
#include "base/result.h"
#include "node/config.h"
#include "node/file_identity.h"
#include "node/plugin_server.h"

namespace tessera::node {

// Sends one RegisterRequest (version v1beta1, endpoint = the socket's file
// name, the resource name and options) to <plugin_dir>/kubelet.sock.
Status RegisterWithKubelet(const NodeConfig& config);

class KubeletRegistrar {
 public:
  // `config` and `plugin` must outlive the registrar.
  KubeletRegistrar(const NodeConfig& config, PluginServer& plugin);
  ~KubeletRegistrar();

  void Start() { thread_.Start(); }
  void Stop() { thread_.Stop(); }

  // Successful registrations so far (for logs, tests, later metrics).
  int registrations() const { return registrations_.load(); }

 private:
  void Tick();

  const NodeConfig& config_;
  PluginServer& plugin_;
  // Loop-thread only:
  std::optional<FileIdentity> registered_with_;
  bool logged_waiting_ = false;
  std::string last_error_;
  std::atomic<int> registrations_{0};
  PeriodicThread thread_;  // Tick every kubelet_poll_ms; last: stopped first
};

}  // namespace tessera::node
