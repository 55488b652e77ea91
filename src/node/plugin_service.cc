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

Result<std::vector<std::string>> PreferredDevicesWithDynamic(
    const std::vector<core::Gpu>& gpus, const std::set<std::string>& dynamic_uuids,
    const std::set<std::string>& mig_gpus, const v1beta1::ContainerPreferredAllocationRequest& request) {
  auto on_dynamic = [&](const std::string& id) {
    auto parsed = ParseDeviceId(id);
    return parsed.ok() && dynamic_uuids.count(parsed->gpu_uuid) > 0;
  };
  const size_t size = request.allocation_size() < 0 ? 0 : static_cast<size_t>(request.allocation_size());
  if (!mig_gpus.empty() && request.must_include_deviceids().empty()) {
    // One replica on each GPU the waiting container's instances are on.
    std::vector<std::string> chosen;
    for (const auto& uuid : mig_gpus) {
      for (const auto& id : request.available_deviceids()) {
        auto parsed = ParseDeviceId(id);
        if (parsed.ok() && parsed->gpu_uuid == uuid) {
          chosen.push_back(id);
          break;
        }
      }
    }
    if (chosen.size() == size) return chosen;
    // Not on those GPUs: still on mig-dynamic ones, so Allocate knows it for a MIG container.
    v1beta1::ContainerPreferredAllocationRequest dynamic = request;
    dynamic.clear_available_deviceids();
    for (const auto& id : request.available_deviceids()) {
      if (on_dynamic(id)) dynamic.add_available_deviceids(id);
    }
    if (static_cast<size_t>(dynamic.available_deviceids_size()) >= size)
      return PreferredDevices(gpus, dynamic);
  }
  v1beta1::ContainerPreferredAllocationRequest vgpus = request;
  vgpus.clear_available_deviceids();
  for (const auto& id : request.available_deviceids()) {
    if (!on_dynamic(id)) vgpus.add_available_deviceids(id);
  }
  const bool must_dynamic = std::any_of(request.must_include_deviceids().begin(),
                                        request.must_include_deviceids().end(), on_dynamic);
  if (!must_dynamic && static_cast<size_t>(vgpus.available_deviceids_size()) >= size) {
    return PreferredDevices(gpus, vgpus);
  }
  return PreferredDevices(gpus, request);
}

DevicePluginService::DevicePluginService(const NodeConfig& config, const DeviceState& state,
                                         std::function<std::string()> new_region_name,
                                         mig::DynamicMig* dynamic, RegionsInFlight* in_flight)
    : config_(config),
      state_(state),
      new_region_name_(std::move(new_region_name)),
      dynamic_(dynamic),
      in_flight_(in_flight) {}

grpc::Status DevicePluginService::GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                                         v1beta1::DevicePluginOptions* response) {
  response->set_pre_start_required(config_.pre_start_required);
  response->set_get_preferred_allocation_available(true);
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                                               grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  log::Info("kubelet opened ListAndWatch", {{"resource", config_.resource_name}});
  // The vGPU GPUs and, in mig-dynamic mode, the dynamic GPUs' replicas.
  auto advertised = [this](std::vector<core::Gpu> gpus) {
    if (dynamic_ != nullptr) {
      for (auto& gpu : dynamic_->Advertised()) gpus.push_back(std::move(gpu));
    }
    return DeviceList(gpus);
  };
  auto snapshot = state_.Get();
  uint64_t sent = snapshot.version;
  uint64_t sent_dynamic = dynamic_ != nullptr ? dynamic_->version() : 0;
  if (!writer->Write(advertised(snapshot.gpus))) return grpc::Status::OK;
  while (!stopping() && !context->IsCancelled()) {
    const bool moved = state_.WaitForChange(sent, kStreamWakeup) != sent;
    const uint64_t dynamic_version = dynamic_ != nullptr ? dynamic_->version() : 0;
    if (!moved && dynamic_version == sent_dynamic) continue;
    sent_dynamic = dynamic_version;
    snapshot = state_.Get();
    sent = snapshot.version;
    auto list = advertised(snapshot.gpus);
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
  std::set<std::string> dynamic_uuids;
  if (dynamic_ != nullptr) {
    for (const auto& gpu : dynamic_->Advertised()) {
      dynamic_uuids.insert(gpu.uuid);
      snapshot.gpus.push_back(gpu);
    }
  }
  for (const auto& container : request->container_requests()) {
    auto chosen =
        dynamic_uuids.empty()
            ? PreferredDevices(snapshot.gpus, container)
            : PreferredDevicesWithDynamic(
                  snapshot.gpus, dynamic_uuids,
                  dynamic_->PreferredGpus(static_cast<size_t>(std::max(0, container.allocation_size()))),
                  container);
    if (!chosen.ok()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, chosen.error().message);
    auto* out = response->add_container_responses();
    for (auto& id : *chosen) out->add_deviceids(std::move(id));
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                                           v1beta1::AllocateResponse* response) {
  auto snapshot = state_.Get();
  RegionsInFlight::Request in_flight(in_flight_);
  AllocateContext context{&config_, &snapshot.gpus, new_region_name_, &in_flight};
  // A container whose devices are all on mig-dynamic GPUs gets a MIG
  // instance (node/mig/dynamic_mig.h); any other one a vGPU slice's machinery.
  auto dynamic_devices = [this](const v1beta1::ContainerAllocateRequest& container) {
    int n = 0;
    for (const auto& id : container.devices_ids()) {
      auto parsed = ParseDeviceId(id);
      n += dynamic_ != nullptr && parsed.ok() && dynamic_->Owns(parsed->gpu_uuid);
    }
    return n;
  };
  // All or nothing: refuse the whole request before making any region.
  for (const auto& container : request->container_requests()) {
    const int on_dynamic = dynamic_devices(container);
    if (on_dynamic > 0 && on_dynamic != container.devices_ids_size()) {
      const std::string reason =
          "the devices mix mig-dynamic GPUs and vGPU GPUs: a container gets MIG instances or vGPU slices, "
          "not both";
      log::Warn("Allocate refused", {{"reason", reason}});
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, reason);
    }
    if (on_dynamic > 0) continue;
    if (auto s = CheckContainerRequest(context, container); !s.ok()) {
      log::Warn("Allocate refused", {{"reason", s.error().message}});
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, s.error().message);
    }
  }
  for (const auto& container : request->container_requests()) {
    if (dynamic_devices(container) > 0) {
      auto answer = dynamic_->Allocate(container);
      if (!answer.ok()) {
        log::Warn("Allocate refused (mig-dynamic)", {{"reason", answer.error().message}});
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, answer.error().message);
      }
      log::Info("Allocate (mig-dynamic)", {{"devices", answer->envs().at(contract::kVisibleDevicesEnv)}});
      *response->add_container_responses() = std::move(answer).value();
      continue;
    }
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

}  // namespace tessera::node
