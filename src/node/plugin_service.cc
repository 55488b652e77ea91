#include "node/plugin_service.h"

#include "base/log.h"
#include "contract/container_contract.h"

#include <algorithm>

#include "node/allocate.h"

namespace tessera::node {
namespace {
// Streams re-check for cancellation and shutdown at least this often.
constexpr std::chrono::milliseconds kStreamWakeup{200};
}  // namespace

v1beta1::ListAndWatchResponse DeviceList(const std::vector<core::Gpu>& gpus) {
  std::vector<const core::Gpu*> ordered;
  for (const auto& gpu : gpus) ordered.push_back(&gpu);
  std::stable_sort(ordered.begin(), ordered.end(), [](auto* a, auto* b) { return a->index < b->index; });

  v1beta1::ListAndWatchResponse response;
  for (const core::Gpu* gpu : ordered) {
    for (int replica = 0; replica < gpu->slots; ++replica) {
      auto* device = response.add_devices();
      device->set_id(MakeDeviceId(gpu->uuid, replica));
      device->set_health(gpu->healthy ? kHealthy : kUnhealthy);
      if (gpu->numa_node >= 0) device->mutable_topology()->add_nodes()->set_id(gpu->numa_node);
    }
  }
  return response;
}

DevicePluginService::DevicePluginService(const NodeConfig& config, const DeviceState& state,
                                         std::function<std::string()> new_region_name)
    : config_(config), state_(state), new_region_name_(std::move(new_region_name)) {}

grpc::Status DevicePluginService::GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                                         v1beta1::DevicePluginOptions* response) {
  response->set_pre_start_required(config_.pre_start_required);
  response->set_get_preferred_allocation_available(true);
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                                               grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  log::Info("kubelet opened ListAndWatch", {{"resource", config_.resource_name}});
  auto snapshot = state_.Get();
  uint64_t sent = snapshot.version;
  if (!writer->Write(DeviceList(snapshot.gpus))) return grpc::Status::OK;
  while (!stopping_ && !context->IsCancelled()) {
    if (state_.WaitForChange(sent, kStreamWakeup) == sent) continue;
    snapshot = state_.Get();
    sent = snapshot.version;
    auto list = DeviceList(snapshot.gpus);
    auto unhealthy = std::count_if(list.devices().begin(), list.devices().end(),
                                   [](const auto& d) { return d.health() != kHealthy; });
    log::Info("sending devices to the kubelet", {{"devices", list.devices_size()}, {"unhealthy", unhealthy}});
    if (!writer->Write(list)) break;  // the kubelet went away
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::GetPreferredAllocation(grpc::ServerContext*,
                                                         const v1beta1::PreferredAllocationRequest* request,
                                                         v1beta1::PreferredAllocationResponse* response) {
  auto snapshot = state_.Get();
  for (const auto& container : request->container_requests()) {
    auto chosen = PreferredDevices(snapshot.gpus, container);
    if (!chosen.ok()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, chosen.error().message);
    auto* out = response->add_container_responses();
    for (auto& id : *chosen) out->add_deviceids(std::move(id));
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                                           v1beta1::AllocateResponse* response) {
  auto snapshot = state_.Get();
  AllocateContext context{&config_, &snapshot.gpus, new_region_name_};
  // All or nothing: refuse the whole request before making any region.
  for (const auto& container : request->container_requests()) {
    if (auto s = CheckContainerRequest(context, container); !s.ok()) {
      log::Warn("Allocate refused", {{"reason", s.error().message}});
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, s.error().message);
    }
  }
  for (const auto& container : request->container_requests()) {
    auto answer = AllocateContainer(context, container);
    if (!answer.ok()) {
      log::Warn("Allocate refused", {{"reason", answer.error().message}});
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, answer.error().message);
    }
    log::Info("Allocate",
              {{"devices", container.devices_ids_size()},
               {"region", answer->annotations().at(std::string(contract::kRegionDirAnnotation))}});
    *response->add_container_responses() = std::move(answer).value();
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::PreStartContainer(grpc::ServerContext*,
                                                    const v1beta1::PreStartContainerRequest*,
                                                    v1beta1::PreStartContainerResponse*) {
  // Nothing to prepare per start: everything the container needs was mounted by Allocate.
  return grpc::Status::OK;
}

}  // namespace tessera::node
