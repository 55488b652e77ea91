#include "node/sharing/replica_service.h"

#include <algorithm>
#include <map>

#include "base/log.h"
#include "contract/container_contract.h"
#include "node/device_state.h"

namespace tessera::node::sharing {
namespace {

constexpr std::chrono::milliseconds kStreamWakeup{200};

const ReplicaGpu* FindGpu(const std::vector<ReplicaGpu>& gpus, const std::string& uuid) {
  for (const auto& gpu : gpus) {
    if (gpu.gpu.uuid == uuid) return &gpu;
  }
  return nullptr;
}

}  // namespace

v1beta1::ListAndWatchResponse ReplicaDeviceList(const std::vector<ReplicaGpu>& gpus) {
  std::vector<const ReplicaGpu*> ordered;
  for (const auto& gpu : gpus) ordered.push_back(&gpu);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](auto* a, auto* b) { return a->gpu.index < b->gpu.index; });
  v1beta1::ListAndWatchResponse response;
  for (const ReplicaGpu* gpu : ordered) {
    for (int replica = 0; replica < gpu->mode.replicas; ++replica) {
      auto* device = response.add_devices();
      device->set_id(MakeDeviceId(gpu->gpu.uuid, replica));
      device->set_health(gpu->gpu.healthy ? kHealthy : kUnhealthy);
      if (gpu->gpu.numa_node >= 0) device->mutable_topology()->add_nodes()->set_id(gpu->gpu.numa_node);
    }
  }
  return response;
}

Result<ShareRequest> ShareOf(const std::vector<ReplicaGpu>& gpus, const std::string& resource,
                             const v1beta1::ContainerAllocateRequest& request) {
  if (request.devices_ids().empty()) return Error{"the request for '" + resource + "' names no devices"};
  ShareRequest share;
  share.resource_name = resource;
  std::map<std::string, size_t> at;  // uuid -> place in share.gpus
  const ReplicaGpu* first = nullptr;
  for (const auto& id : request.devices_ids()) {
    auto parsed = ParseDeviceId(id);
    const ReplicaGpu* gpu = parsed.ok() ? FindGpu(gpus, parsed->gpu_uuid) : nullptr;
    if (gpu == nullptr || gpu->mode.resource_name != resource || parsed->replica < 0 ||
        parsed->replica >= gpu->mode.replicas) {
      return Error{"invalid allocation request for '" + resource + "': unknown device: " + id};
    }
    if (first == nullptr) first = gpu;
    if (gpu->mode.mode != first->mode.mode) {
      return Error{"invalid allocation request for '" + resource + "': devices of GPUs in modes " +
                   core::SharingModeName(first->mode.mode) + " and " + core::SharingModeName(gpu->mode.mode)};
    }
    share.device_ids.push_back(id);
    auto [it, inserted] = at.emplace(gpu->gpu.uuid, share.gpus.size());
    if (inserted) {
      SharedGpu shared;
      shared.uuid = gpu->gpu.uuid;
      shared.host_index = gpu->gpu.index;
      shared.container_ordinal = static_cast<int>(share.gpus.size());
      shared.memory_mib = gpu->gpu.memory_mib;
      shared.replicas = gpu->mode.replicas;
      share.gpus.push_back(shared);
    }
    ++share.gpus[it->second].held;
  }
  share.mode = first->mode.mode;
  // NVIDIA's rule and words: a shared replica is an access, not an amount.
  for (const auto& id : request.devices_ids()) {
    const ReplicaGpu* gpu = FindGpu(gpus, ParseDeviceId(id)->gpu_uuid);
    if (gpu->mode.fail_requests_greater_than_one && request.devices_ids_size() > 1) {
      return Error{"request for '" + resource + ": " + std::to_string(request.devices_ids_size()) +
                   "' too large: maximum request size for shared resources is 1"};
    }
  }
  for (SharedGpu& shared : share.gpus) {
    const GpuMode& mode = FindGpu(gpus, shared.uuid)->mode;
    if (share.mode == core::SharingMode::kMps) {
      shared.active_thread_percentage = std::min(100, mode.mps_active_thread_percentage * shared.held);
      shared.memory_limit_mib = std::min(shared.memory_mib, mode.mps_pinned_memory_mib * shared.held);
    } else if (mode.memory_split == MemorySplit::kEqual && shared.replicas > 0) {
      shared.memory_limit_mib = shared.memory_mib * std::min(shared.held, shared.replicas) / shared.replicas;
    }
  }
  return share;
}

Result<v1beta1::ContainerAllocateResponse> AllocateShare(const ShareRequest& share,
                                                         const ContainerSetups& setups) {
  v1beta1::ContainerAllocateResponse response;
  std::string visible;
  for (const auto& gpu : share.gpus) visible += (visible.empty() ? "" : ",") + gpu.uuid;
  if (auto hook = setups.find(share.mode); hook != setups.end() && hook->second) {
    TESSERA_ASSIGN_OR_RETURN(ContainerEdits edits, hook->second(share));
    for (auto& [name, value] : edits.env) (*response.mutable_envs())[name] = std::move(value);
    for (auto& mount : edits.mounts) {
      auto* out = response.add_mounts();
      out->set_container_path(mount.container_path);
      out->set_host_path(mount.host_path);
      out->set_read_only(mount.read_only);
    }
    for (auto& [name, value] : edits.annotations) (*response.mutable_annotations())[name] = std::move(value);
  }
  // The GPUs are the plugin's to say, whatever a hook set.
  (*response.mutable_envs())[contract::kVisibleDevicesEnv] = visible;
  return response;
}

ReplicaPluginService::ReplicaPluginService(std::string resource, const ReplicaState& state,
                                           const ContainerSetups& setups)
    : resource_(std::move(resource)), state_(state), setups_(setups) {}

std::vector<ReplicaGpu> ReplicaPluginService::Mine() const {
  std::vector<ReplicaGpu> mine = state_.Get().value;
  std::erase_if(mine, [&](const ReplicaGpu& gpu) { return gpu.mode.resource_name != resource_; });
  return mine;
}

grpc::Status ReplicaPluginService::GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                                          v1beta1::DevicePluginOptions* response) {
  response->set_pre_start_required(false);
  response->set_get_preferred_allocation_available(false);
  return grpc::Status::OK;
}

grpc::Status ReplicaPluginService::ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                                                grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  log::Info("kubelet opened ListAndWatch", {{"resource", resource_}});
  uint64_t sent = state_.Get().version;
  if (!writer->Write(ReplicaDeviceList(Mine()))) return grpc::Status::OK;
  while (!stopping() && !context->IsCancelled()) {
    if (state_.WaitForChange(sent, kStreamWakeup) == sent) continue;
    sent = state_.Get().version;
    auto list = ReplicaDeviceList(Mine());
    log::Info("sending replicas to the kubelet", {{"resource", resource_}, {"devices", list.devices_size()}});
    if (!writer->Write(list)) break;
  }
  return grpc::Status::OK;
}

grpc::Status ReplicaPluginService::Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                                            v1beta1::AllocateResponse* response) {
  const std::vector<ReplicaGpu> gpus = Mine();
  std::vector<ShareRequest> shares;
  for (const auto& container : request->container_requests()) {
    auto share = ShareOf(gpus, resource_, container);
    if (!share.ok()) {
      log::Warn("Allocate refused", {{"resource", resource_}, {"reason", share.error().message}});
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, share.error().message);
    }
    shares.push_back(std::move(share).value());
  }
  for (const auto& share : shares) {
    auto answer = AllocateShare(share, setups_);
    if (!answer.ok()) {
      log::Warn("Allocate refused", {{"resource", resource_}, {"reason", answer.error().message}});
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, answer.error().message);
    }
    log::Info("Allocate (replicas)", {{"resource", resource_},
                                      {"mode", core::SharingModeName(share.mode)},
                                      {"devices", answer->envs().at(contract::kVisibleDevicesEnv)}});
    *response->add_container_responses() = std::move(answer).value();
  }
  return grpc::Status::OK;
}

}  // namespace tessera::node::sharing
