#include "node/mig/mig_plugin_service.h"

#include <algorithm>

#include "base/log.h"

namespace tessera::node::mig {
namespace {
constexpr std::chrono::milliseconds kStreamWakeup{200};
}  // namespace

v1beta1::ListAndWatchResponse MigDeviceList(const std::vector<MigDevice>& devices,
                                            const std::string& resource) {
  v1beta1::ListAndWatchResponse response;
  for (const auto& d : devices) {
    if (d.resource != resource) continue;
    auto* device = response.add_devices();
    device->set_id(d.mig_uuid);
    device->set_health(d.healthy ? kHealthy : kUnhealthy);
  }
  return response;
}

Result<v1beta1::ContainerAllocateResponse> AllocateMigContainer(
    const std::vector<MigDevice>& devices, const std::string& resource,
    const v1beta1::ContainerAllocateRequest& request) {
  if (request.devices_ids().empty()) return Error{"the request names no devices"};
  std::string visible;
  for (const auto& id : request.devices_ids()) {
    auto it =
        std::find_if(devices.begin(), devices.end(), [&](const MigDevice& d) { return d.mig_uuid == id; });
    if (it == devices.end()) {
      return Error{"device '" + id + "' is not a MIG device of this node (was the MIG layout changed?)"};
    }
    if (it->resource != resource) {
      return Error{"device '" + id + "' is advertised as " + it->resource + ", not " + resource};
    }
    visible += (visible.empty() ? "" : ",") + id;
  }
  v1beta1::ContainerAllocateResponse response;
  (*response.mutable_envs())["NVIDIA_VISIBLE_DEVICES"] = visible;
  return response;
}

MigPluginService::MigPluginService(std::string resource, const MigDeviceState& state)
    : resource_(std::move(resource)), state_(state) {}

grpc::Status MigPluginService::GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                                      v1beta1::DevicePluginOptions* response) {
  response->set_pre_start_required(false);
  response->set_get_preferred_allocation_available(false);
  return grpc::Status::OK;
}

grpc::Status MigPluginService::ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  log::Info("kubelet opened ListAndWatch", {{"resource", resource_}});
  auto snapshot = state_.Get();
  uint64_t sent = snapshot.version;
  auto list = MigDeviceList(snapshot.devices, resource_);
  if (!writer->Write(list)) return grpc::Status::OK;
  while (!stopping() && !context->IsCancelled()) {
    if (state_.WaitForChange(sent, kStreamWakeup) == sent) continue;
    snapshot = state_.Get();
    sent = snapshot.version;
    auto next = MigDeviceList(snapshot.devices, resource_);
    if (next.SerializeAsString() == list.SerializeAsString()) continue;  // another resource changed
    list = std::move(next);
    log::Info("sending MIG devices to the kubelet",
              {{"resource", resource_}, {"devices", list.devices_size()}});
    if (!writer->Write(list)) break;
  }
  return grpc::Status::OK;
}

grpc::Status MigPluginService::Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                                        v1beta1::AllocateResponse* response) {
  auto snapshot = state_.Get();
  v1beta1::AllocateResponse answer;
  for (const auto& container : request->container_requests()) {
    auto one = AllocateMigContainer(snapshot.devices, resource_, container);
    if (!one.ok()) {
      log::Warn("MIG Allocate refused", {{"resource", resource_}, {"reason", one.error().message}});
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, one.error().message);
    }
    log::Info("MIG Allocate",
              {{"resource", resource_}, {"devices", one->envs().at("NVIDIA_VISIBLE_DEVICES")}});
    *answer.add_container_responses() = std::move(one).value();
  }
  *response = std::move(answer);
  return grpc::Status::OK;
}

}  // namespace tessera::node::mig
