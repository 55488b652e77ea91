// DraPlugin: the kubelet-facing half of tessera-dra.
//  - The DRA service (k8s.io.kubelet.pkg.apis.dra.v1 and v1beta1 DRAPlugin,
//    both on one socket) on <plugins_dir>/<driver>/dra.sock. Each claim of a
//    call is prepared or unprepared by the ClaimPreparer; a claim's failure
//    is its `error` in the answer, the others are still served. Claims are
//    taken in order while the call's deadline (the kubelet's 45 s) leaves at
//    least kDeadlineMargin; the rest are answered with an error the kubelet
//    retries, so the answer always arrives in time. A claim's own API reads
//    (the claim, the pods it is reserved for) are not started within the
//    margin either.
//  - Plugin registration (pluginregistration.Registration) on
//    <registry_dir>/<driver>-reg.sock: GetInfo answers type DRAPlugin, the
//    driver name, the DRA socket's path and the versions v1.DRAPlugin then
//    v1beta1.DRAPlugin; NotifyRegistrationStatus is recorded and logged.
// Start() serves the DRA socket before the registration socket, so the
// kubelet can call as soon as it registers the plugin; Stop() removes the
// registration socket first (the kubelet deregisters), then the DRA socket.
//
// Thread-safety: Start/Stop from one thread; the services run on gRPC's.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/grpcpp.h>

#include "base/result.h"
#include "dra/claim_preparer.h"
#include "dra/config.h"

namespace tessera::dra {

inline constexpr std::chrono::milliseconds kDeadlineMargin{2000};

class DraPlugin {
 public:
  // `config` and `preparer` must outlive the plugin.
  DraPlugin(const DraConfig& config, ClaimPreparer& preparer);
  ~DraPlugin();
  DraPlugin(const DraPlugin&) = delete;
  DraPlugin& operator=(const DraPlugin&) = delete;

  Status Start();
  void Stop();

  // What the kubelet's last NotifyRegistrationStatus said.
  bool registered() const;
  std::string registration_error() const;

  class Services;

 private:
  const DraConfig& config_;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> dra_server_;
  std::unique_ptr<grpc::Server> registration_server_;
};

}  // namespace tessera::dra
