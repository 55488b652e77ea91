#include "dra/dra_plugin.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/files.h"
#include "base/log.h"
#include "dra/v1/api.grpc.pb.h"
#include "dra/v1beta1/api.grpc.pb.h"
#include "pluginregistration/v1/api.grpc.pb.h"

namespace tessera::dra {
namespace {

namespace v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace v1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

Status ReplaceStaleSocket(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return Status::Ok();
  if (!S_ISSOCK(st.st_mode))
    return Error{"'" + path + "' exists and is not a socket; refusing to replace it"};
  if (::unlink(path.c_str()) != 0)
    return Error{"cannot remove stale socket '" + path + "': " + std::strerror(errno)};
  return Status::Ok();
}

// Time left before the call's deadline (a long time when it has none).
std::chrono::milliseconds TimeLeft(const grpc::ServerContext* context) {
  const auto deadline = context->deadline();
  const auto now = std::chrono::system_clock::now();
  if (deadline == std::chrono::system_clock::time_point::max()) return std::chrono::hours(1);
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
}

constexpr const char* kNoTimeLeft =
    "not prepared: too little of the call's deadline was left; the kubelet calls again";

template <typename Request, typename Response, typename DeviceSetter>
void PrepareAll(ClaimPreparer& preparer, const grpc::ServerContext* context, const Request& request,
                Response* response, DeviceSetter set_share) {
  for (const auto& claim : request.claims()) {
    auto& answer = (*response->mutable_claims())[claim.uid()];
    if (context->IsCancelled() || TimeLeft(context) < kDeadlineMargin) {
      answer.set_error(kNoTimeLeft);
      continue;
    }
    // The claim's reads stop where the margin begins.
    const auto deadline = std::chrono::steady_clock::now() + TimeLeft(context) - kDeadlineMargin;
    auto prepared = preparer.Prepare(claim.namespace_(), claim.name(), claim.uid(), deadline);
    if (!prepared.ok()) {
      log::Warn("NodePrepareResources: claim not prepared",
                {{"claim", claim.namespace_() + "/" + claim.name()}, {"error", prepared.error().message}});
      answer.set_error(prepared.error().message);
      continue;
    }
    for (const auto& d : prepared->devices) {
      auto* device = answer.add_devices();
      device->add_request_names(d.request.substr(0, d.request.find('/')));
      device->set_pool_name(d.pool);
      device->set_device_name(d.device);
      device->add_cdi_device_ids(CdiDeviceId(d));
      set_share(device, d.share_id);
    }
    log::Info("claim prepared", {{"claim", claim.namespace_() + "/" + claim.name()},
                                 {"devices", static_cast<int>(prepared->devices.size())}});
  }
}

template <typename Request, typename Response>
void UnprepareAll(ClaimPreparer& preparer, const grpc::ServerContext* context, const Request& request,
                  Response* response) {
  for (const auto& claim : request.claims()) {
    auto& answer = (*response->mutable_claims())[claim.uid()];
    if (context->IsCancelled() || TimeLeft(context) < kDeadlineMargin) {
      answer.set_error("not unprepared: too little of the call's deadline was left; the kubelet calls again");
      continue;
    }
    if (auto s = preparer.Unprepare(claim.uid()); !s.ok()) {
      answer.set_error(s.error().message);
    } else {
      log::Info("claim unprepared", {{"claim", claim.namespace_() + "/" + claim.name()}});
    }
  }
}

}  // namespace

class DraPlugin::Services {
 public:
  class V1 final : public v1::DRAPlugin::Service {
   public:
    explicit V1(ClaimPreparer& p) : preparer_(p) {}
    grpc::Status NodePrepareResources(grpc::ServerContext* context,
                                      const v1::NodePrepareResourcesRequest* request,
                                      v1::NodePrepareResourcesResponse* response) override {
      PrepareAll(preparer_, context, *request, response, [](v1::Device* d, const std::string& share) {
        if (!share.empty()) d->set_share_id(share);
      });
      return grpc::Status::OK;
    }
    grpc::Status NodeUnprepareResources(grpc::ServerContext* context,
                                        const v1::NodeUnprepareResourcesRequest* request,
                                        v1::NodeUnprepareResourcesResponse* response) override {
      UnprepareAll(preparer_, context, *request, response);
      return grpc::Status::OK;
    }

   private:
    ClaimPreparer& preparer_;
  };
  class V1beta1 final : public v1beta1::DRAPlugin::Service {
   public:
    explicit V1beta1(ClaimPreparer& p) : preparer_(p) {}
    grpc::Status NodePrepareResources(grpc::ServerContext* context,
                                      const v1beta1::NodePrepareResourcesRequest* request,
                                      v1beta1::NodePrepareResourcesResponse* response) override {
      PrepareAll(preparer_, context, *request, response, [](v1beta1::Device*, const std::string&) {});
      return grpc::Status::OK;
    }
    grpc::Status NodeUnprepareResources(grpc::ServerContext* context,
                                        const v1beta1::NodeUnprepareResourcesRequest* request,
                                        v1beta1::NodeUnprepareResourcesResponse* response) override {
      UnprepareAll(preparer_, context, *request, response);
      return grpc::Status::OK;
    }

   private:
    ClaimPreparer& preparer_;
  };
  class Registration final : public pluginregistration::Registration::Service {
   public:
    explicit Registration(const DraConfig& c) : config_(c) {}
    grpc::Status GetInfo(grpc::ServerContext*, const pluginregistration::InfoRequest*,
                         pluginregistration::PluginInfo* info) override {
      info->set_type("DRAPlugin");
      info->set_name(config_.driver_name);
      info->set_endpoint(config_.DraSocketPath());
      info->add_supported_versions("v1.DRAPlugin");
      info->add_supported_versions("v1beta1.DRAPlugin");
      return grpc::Status::OK;
    }
    grpc::Status NotifyRegistrationStatus(grpc::ServerContext*,
                                          const pluginregistration::RegistrationStatus* status,
                                          pluginregistration::RegistrationStatusResponse*) override {
      std::lock_guard lock(mu);
      registered = status->plugin_registered();
      error = status->error();
      if (registered) {
        log::Info("registered with the kubelet", {{"driver", config_.driver_name}});
      } else {
        log::Error("the kubelet refused the registration",
                   {{"driver", config_.driver_name}, {"error", error}});
      }
      return grpc::Status::OK;
    }
    std::mutex mu;
    bool registered = false;  // guarded by mu
    std::string error;        // guarded by mu

   private:
    const DraConfig& config_;
  };

  Services(const DraConfig& config, ClaimPreparer& preparer)
      : v1(preparer), v1beta1(preparer), registration(config) {}
  V1 v1;
  V1beta1 v1beta1;
  Registration registration;
};

DraPlugin::DraPlugin(const DraConfig& config, ClaimPreparer& preparer)
    : config_(config), services_(std::make_unique<Services>(config, preparer)) {}

DraPlugin::~DraPlugin() {
  Stop();
}

Status DraPlugin::Start() {
  if (dra_server_) return Status::Ok();
  TESSERA_RETURN_IF_ERROR(files::MakeDirs(config_.PluginDir(), 0750));
  TESSERA_RETURN_IF_ERROR(files::MakeDirs(config_.registry_dir, 0750));
  TESSERA_RETURN_IF_ERROR(ReplaceStaleSocket(config_.DraSocketPath()));
  TESSERA_RETURN_IF_ERROR(ReplaceStaleSocket(config_.RegistrationSocketPath()));

  grpc::ServerBuilder dra;
  dra.AddListeningPort("unix://" + config_.DraSocketPath(), grpc::InsecureServerCredentials());
  dra.RegisterService(&services_->v1);
  dra.RegisterService(&services_->v1beta1);
  dra_server_ = dra.BuildAndStart();
  if (!dra_server_) return Error{"cannot serve the DRA service on '" + config_.DraSocketPath() + "'"};

  grpc::ServerBuilder registration;
  registration.AddListeningPort("unix://" + config_.RegistrationSocketPath(),
                                grpc::InsecureServerCredentials());
  registration.RegisterService(&services_->registration);
  registration_server_ = registration.BuildAndStart();
  if (!registration_server_) {
    dra_server_->Shutdown();
    dra_server_.reset();
    ::unlink(config_.DraSocketPath().c_str());
    return Error{"cannot serve plugin registration on '" + config_.RegistrationSocketPath() + "'"};
  }
  log::Info("DRA plugin serving", {{"driver", config_.driver_name},
                                   {"dra_socket", config_.DraSocketPath()},
                                   {"registration_socket", config_.RegistrationSocketPath()}});
  return Status::Ok();
}

void DraPlugin::Stop() {
  const auto grace = std::chrono::system_clock::now() + std::chrono::seconds(2);
  if (registration_server_) {
    // The socket first: the kubelet deregisters when it disappears.
    ::unlink(config_.RegistrationSocketPath().c_str());
    registration_server_->Shutdown(grace);
    registration_server_->Wait();
    registration_server_.reset();
  }
  if (dra_server_) {
    dra_server_->Shutdown(grace);
    dra_server_->Wait();
    dra_server_.reset();
    ::unlink(config_.DraSocketPath().c_str());
  }
}

bool DraPlugin::registered() const {
  std::lock_guard lock(services_->registration.mu);
  return services_->registration.registered;
}

std::string DraPlugin::registration_error() const {
  std::lock_guard lock(services_->registration.mu);
  return services_->registration.error;
}

}  // namespace tessera::dra
