#include "node/registrar.h"

#include "base/log.h"

#include <chrono>

#include "deviceplugin/v1beta1/api.grpc.pb.h"

namespace tessera::node {
namespace {
constexpr const char* kApiVersion = "v1beta1";
constexpr auto kRegisterTimeout = std::chrono::seconds(10);
}  // namespace

Status RegisterWithKubelet(const NodeConfig& config) {
  auto channel =
      grpc::CreateChannel("unix://" + config.KubeletSocketPath(), grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  v1beta1::RegisterRequest request;
  request.set_version(kApiVersion);
  request.set_endpoint(config.PluginSocketName());
  request.set_resource_name(config.resource_name);
  request.mutable_options()->set_pre_start_required(config.pre_start_required);
  request.mutable_options()->set_get_preferred_allocation_available(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRegisterTimeout);
  v1beta1::Empty response;
  grpc::Status status = stub->Register(&context, request, &response);
  if (!status.ok()) {
    return Error{"registering " + config.resource_name + " with the kubelet at " +
                 config.KubeletSocketPath() + " failed: " + status.error_message()};
  }
  return Status::Ok();
}

KubeletRegistrar::KubeletRegistrar(const NodeConfig& config, PluginServer& plugin)
    : config_(config),
      plugin_(plugin),
      thread_(std::chrono::milliseconds(config.kubelet_poll_ms), [this] { Tick(); }) {}

KubeletRegistrar::~KubeletRegistrar() {
  Stop();
}

void KubeletRegistrar::Tick() {
  // Our socket first: registering an endpoint that does not answer would fail
  // in the kubelet.
  if (!plugin_.SocketPresent()) {
    if (plugin_.serving())
      log::Warn("the plugin socket was removed; serving again", {{"socket", config_.PluginSocketPath()}});
    plugin_.Stop();
    if (auto s = plugin_.Start(); !s.ok()) {
      log::Error("cannot serve the device plugin", {{"error", s.error().message}});
      return;
    }
    registered_with_.reset();
  }

  auto kubelet = IdentifyFile(config_.KubeletSocketPath(), /*socket_only=*/true);
  if (!kubelet) {
    if (!logged_waiting_)
      log::Info("waiting for the kubelet socket", {{"socket", config_.KubeletSocketPath()}});
    logged_waiting_ = true;
    registered_with_.reset();
    return;
  }
  logged_waiting_ = false;
  if (registered_with_ == kubelet) return;

  if (registered_with_) log::Info("the kubelet socket was recreated (kubelet restart); registering again");
  if (auto s = RegisterWithKubelet(config_); !s.ok()) {
    if (s.error().message != last_error_)
      log::Warn("registration failed; retrying", {{"error", s.error().message}});
    last_error_ = s.error().message;
    return;
  }
  last_error_.clear();
  registered_with_ = kubelet;
  ++registrations_;
  log::Info("registered with the kubelet",
            {{"resource", config_.resource_name}, {"endpoint", config_.PluginSocketName()}});
}

}  // namespace tessera::node
