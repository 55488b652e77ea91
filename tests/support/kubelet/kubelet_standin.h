// KubeletStandIn: the kubelet's side of the device-plugin API (v1beta1), for
// tests. It speaks the real gRPC protocol over unix sockets, like a kubelet:
//  - serves Registration on <dir>/kubelet.sock and checks each RegisterRequest
//    the way the kubelet does (API version, resource name shape, endpoint a
//    plain file name in the same dir);
//  - dials the plugin back on <dir>/<endpoint>. It records whether the
//    plugin's socket was already answering at registration time (a real
//    kubelet fails the plugin otherwise), then consumes ListAndWatch in the
//    background, keeping the latest device list;
//  - calls GetDevicePluginOptions, GetPreferredAllocation, Allocate and
//    PreStartContainer on request;
//  - Restart(): stops serving, deletes kubelet.sock and every other socket in
//    the dir (as a starting kubelet clears its plugin dir) and serves again.
//
// Thread-safety: all public members are safe from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "deviceplugin/v1beta1/api.grpc.pb.h"

namespace tessera::testing {

class KubeletStandIn {
 public:
  struct Registration {
    v1beta1::RegisterRequest request;
    bool accepted = false;            // passed the kubelet's checks
    std::string rejection;            // why not, when !accepted
    bool plugin_was_serving = false;  // the endpoint answered GetDevicePluginOptions during Register
    v1beta1::DevicePluginOptions plugin_options;
  };

  // `dir` is the plugin directory (must exist; keep it short: unix socket
  // paths are limited to 107 bytes).
  explicit KubeletStandIn(std::string dir);
  ~KubeletStandIn();
  KubeletStandIn(const KubeletStandIn&) = delete;
  KubeletStandIn& operator=(const KubeletStandIn&) = delete;

  // Serves Registration on <dir>/kubelet.sock. Returns false if binding failed.
  bool Start();
  // Stops serving and closes the stream to the plugin; kubelet.sock is removed.
  void Stop();
  // A kubelet restart: Stop, delete every socket in the dir (as a starting
  // kubelet does; `wipe_plugin_sockets` false keeps the others), Start.
  bool Restart(bool wipe_plugin_sockets = true);

  std::string socket_path() const { return dir_ + "/kubelet.sock"; }

  std::vector<Registration> registrations() const;
  // Waits until at least `count` registrations were recorded.
  bool WaitForRegistrations(size_t count, std::chrono::milliseconds timeout) const;

  // The latest list received on ListAndWatch, and how many lists arrived so far
  // (since Start; Restart resets neither).
  std::vector<v1beta1::Device> devices() const;
  uint64_t device_lists_received() const;
  // Waits until the latest list satisfies `predicate`.
  bool WaitForDevices(const std::function<bool(const std::vector<v1beta1::Device>&)>& predicate,
                      std::chrono::milliseconds timeout) const;

  // Calls on the most recently accepted plugin.
  grpc::Status GetDevicePluginOptions(v1beta1::DevicePluginOptions* response);
  grpc::Status Allocate(const v1beta1::AllocateRequest& request, v1beta1::AllocateResponse* response);
  grpc::Status GetPreferredAllocation(const v1beta1::PreferredAllocationRequest& request,
                                      v1beta1::PreferredAllocationResponse* response);
  grpc::Status PreStartContainer(const v1beta1::PreStartContainerRequest& request);

 private:
  class RegistrationService;

  void OnRegister(const v1beta1::RegisterRequest& request, Registration& record);
  void StartWatch(const std::string& endpoint_path);
  void StopWatch();
  std::unique_ptr<v1beta1::DevicePlugin::Stub> PluginStub() const;

  const std::string dir_;
  std::unique_ptr<RegistrationService> service_;
  std::unique_ptr<grpc::Server> server_;

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::vector<Registration> registrations_;             // guarded by mu_
  std::string plugin_endpoint_path_;                    // guarded by mu_
  std::vector<v1beta1::Device> devices_;                // guarded by mu_
  uint64_t lists_received_ = 0;                         // guarded by mu_
  std::shared_ptr<grpc::ClientContext> watch_context_;  // guarded by mu_
  std::thread watch_thread_;                            // joined outside mu_
  std::mutex watch_mu_;                                 // serialises StartWatch/StopWatch
};

}  // namespace tessera::testing
