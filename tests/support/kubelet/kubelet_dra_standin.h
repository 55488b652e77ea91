// KubeletDraStandIn: the kubelet's side of Dynamic Resource Allocation, for
// tests. It speaks the real gRPC protocols over unix sockets, as a kubelet of
// Kubernetes 1.34-1.37 does:
//
// Plugin registration (pluginregistration.Registration, served by the plugin):
//  - watches the registry directory (a kubelet's
//    /var/lib/kubelet/plugins_registry) with inotify, and scans it at Start.
//    Every unix socket whose name does not start with '.' is a plugin to
//    register, whatever its name (the DRA helper's convention is
//    <driver>-reg.sock, the kubelet does not require it). Subdirectories are
//    not walked (a kubelet would; tessera does not use them);
//  - for each: GetInfo (a socket that exists but does not listen yet is
//    waited for, up to registration_timeout, like the kubelet's blocking
//    dial); the type must be "DRAPlugin" (others have no handler
//    here); then the DRA handler's checks: a driver name, a non-empty
//    supported_versions list of which the first entry the kubelet knows is
//    chosen ("v1.DRAPlugin", else "v1beta1.DRAPlugin", in the plugin's order),
//    an absolute endpoint path not already registered for the same driver;
//  - NotifyRegistrationStatus(true), or (false, why) on refusal. A refused
//    socket is tried again later with a doubling delay (the kubelet's
//    reconciler retries with exponential back-off), unless retries are off;
//  - a removed socket deregisters its plugin; a socket re-created under the
//    same name (a restarted plugin: a delete seen by inotify, or a new inode)
//    is deregistered and registered anew. Restart() forgets every registration and registers the sockets
//    present, as a restarted kubelet does.
//  Whether the DRA endpoint accepted a connection at registration time is
//  recorded (the kubelet registers either way and connects on demand; a plugin
//  should start its DRA server before the registration server).
//
// The DRA service (k8s.io.kubelet.pkg.apis.dra.v1 / v1beta1 DRAPlugin):
//  - NodePrepareResources / NodeUnprepareResources call the driver's plugin
//    over its real socket with the chosen service, waiting at most
//    `connect_timeout` (1 s in the kubelet) for the connection and giving each
//    call a deadline of `call_timeout` (the kubelet's 45 s). With several
//    registrations for a driver (rolling update) the most recent one whose
//    connection is up is used, else the most recent;
//  - answers from a v1beta1 plugin are converted to v1 (no share_id);
//  - the answer is judged as the kubelet judges it: an unknown claim UID, a
//    claim's error, or claims left out each make the call fail, with the
//    kubelet's wording, in `kubelet_error`.
//
// Thread-safety: all public members are safe from any thread. Registration
// happens on the stand-in's own thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "dra/v1/api.grpc.pb.h"
#include "pluginregistration/v1/api.grpc.pb.h"

namespace tessera::testing {

namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;

struct KubeletDraOptions {
  // The registry directory to watch; must exist. Keep paths short: unix socket
  // paths are limited to 107 bytes.
  std::string registry_dir;
  // Deadline of each NodePrepareResources / NodeUnprepareResources call
  // (the kubelet's defaultClientCallTimeout).
  std::chrono::milliseconds call_timeout{std::chrono::seconds(45)};
  // How long a call waits for the plugin's connection to become ready.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(1)};
  // Deadline of GetInfo and NotifyRegistrationStatus.
  std::chrono::milliseconds registration_timeout{std::chrono::seconds(10)};
  // First delay before a refused socket is tried again; doubles per failure up
  // to `retry_max`. Zero: a refused socket is not retried until it changes.
  std::chrono::milliseconds retry_initial{std::chrono::milliseconds(500)};
  std::chrono::milliseconds retry_max{std::chrono::seconds(122)};
};

class KubeletDraStandIn {
 public:
  // The DRA gRPC services this kubelet knows, in its order of preference.
  static constexpr const char* kServiceV1 = "v1.DRAPlugin";
  static constexpr const char* kServiceV1beta1 = "v1beta1.DRAPlugin";

  // One pass of registration for one socket.
  struct RegistrationAttempt {
    std::string socket_path;
    bool got_info = false;  // GetInfo answered
    pluginregistration::PluginInfo info;
    bool accepted = false;
    std::string rejection;       // why not, when !accepted (also sent to the plugin)
    std::string chosen_service;  // kServiceV1 or kServiceV1beta1, when accepted
    // The endpoint accepted a connection within connect_timeout during
    // registration (only probed for accepted plugins).
    bool dra_endpoint_was_serving = false;
    bool notified = false;  // NotifyRegistrationStatus reached the plugin
    std::string notify_error;
  };

  // A registration the kubelet currently holds.
  struct Plugin {
    std::string driver;
    std::string endpoint;
    std::string registration_socket;
    std::string service;
  };

  // The outcome of one NodePrepareResources / NodeUnprepareResources call.
  template <typename Response>
  struct CallResult {
    grpc::Status status;   // the gRPC outcome
    std::string service;   // the service called; empty when no plugin was found
    std::string endpoint;  // the socket called
    Response response;     // in v1 terms, whichever version was called
    // Empty when the kubelet accepts the answer; otherwise its error
    // ("NodePrepareResources failed for claim ns/name: ...", ...).
    std::string kubelet_error;
  };
  using PrepareResult = CallResult<drav1::NodePrepareResourcesResponse>;
  using UnprepareResult = CallResult<drav1::NodeUnprepareResourcesResponse>;

  explicit KubeletDraStandIn(KubeletDraOptions options);
  ~KubeletDraStandIn();
  KubeletDraStandIn(const KubeletDraStandIn&) = delete;
  KubeletDraStandIn& operator=(const KubeletDraStandIn&) = delete;

  // Starts watching (and registers the sockets already there). Returns false
  // when the directory cannot be watched.
  bool Start();
  // Stops watching; every registration is forgotten (nothing is sent to the
  // plugins, as with a kubelet that stops).
  void Stop();
  // A kubelet restart: Stop, then Start. The plugins' sockets are left alone;
  // each is registered again (new GetInfo and NotifyRegistrationStatus).
  bool Restart();

  const std::string& registry_dir() const { return options_.registry_dir; }

  std::vector<RegistrationAttempt> attempts() const;
  // How many registrations were removed (socket gone or replaced) so far.
  size_t deregistrations() const;
  std::vector<Plugin> plugins() const;
  // The plugin calls for `driver` would use, if any.
  bool HasPlugin(const std::string& driver) const;

  // Wait for a condition on the registration state; false on timeout.
  bool WaitForAttempts(size_t count, std::chrono::milliseconds timeout) const;
  bool WaitForPlugin(const std::string& driver, std::chrono::milliseconds timeout) const;
  bool WaitForNoPlugin(const std::string& driver, std::chrono::milliseconds timeout) const;
  bool WaitForDeregistrations(size_t count, std::chrono::milliseconds timeout) const;

  // The kubelet's calls to the DRA plugin registered for `driver`.
  PrepareResult NodePrepareResources(const std::string& driver, const std::vector<drav1::Claim>& claims);
  UnprepareResult NodeUnprepareResources(const std::string& driver, const std::vector<drav1::Claim>& claims);

  // A Claim as the kubelet names it.
  static drav1::Claim MakeClaim(const std::string& ns, const std::string& name, const std::string& uid);

 private:
  struct FileIdentity {
    unsigned long long device = 0;
    unsigned long long inode = 0;
    bool operator==(const FileIdentity&) const = default;
  };
  struct Registered {
    FileIdentity identity;
    std::shared_ptr<Plugin> plugin;
    std::shared_ptr<grpc::Channel> channel;  // to the DRA endpoint
  };
  struct Refused {
    FileIdentity identity;
    std::chrono::steady_clock::time_point next_attempt;
    std::chrono::milliseconds backoff{0};
  };
  struct Target {
    std::shared_ptr<Plugin> plugin;
    std::shared_ptr<grpc::Channel> channel;
  };

  void Run();
  // Brings the registrations in line with the sockets in the directory.
  // Returns when the next retry is due (time_point::max() for none).
  // `removed`: sockets the watch saw deleted since the last pass.
  std::chrono::steady_clock::time_point Reconcile(const std::set<std::string>& removed);
  void Register(const std::string& path, const FileIdentity& identity);
  std::string Validate(const pluginregistration::PluginInfo& info, std::string* service) const;
  bool FindTarget(const std::string& driver, Target* target) const;
  bool WaitForConnection(const std::shared_ptr<grpc::Channel>& channel) const;
  // One DRA plugin call (`method`) as the kubelet makes it, over the service
  // version the plugin registered: `rpc(stub, context, request, response)`
  // makes the call on either version's stub. `unregistered` is the kubelet's
  // error when no plugin of `driver` is registered.
  template <typename Result, typename V1Request, typename V1beta1Request, typename V1beta1Response,
            typename Rpc>
  Result CallPlugin(const std::string& driver, const std::vector<drav1::Claim>& claims, const char* method,
                    const std::string& unregistered, Rpc rpc) const;

  const KubeletDraOptions options_;

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::vector<RegistrationAttempt> attempts_;     // guarded by mu_
  size_t deregistrations_ = 0;                    // guarded by mu_
  std::map<std::string, Registered> registered_;  // guarded by mu_; by registration socket path
  std::vector<std::shared_ptr<Plugin>> order_;    // guarded by mu_; registration order
  std::map<std::string, Refused> refused_;        // only touched by the watch thread

  int inotify_fd_ = -1;
  int wake_fds_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace tessera::testing
