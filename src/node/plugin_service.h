// DevicePluginService: the kubelet-facing gRPC service (v1beta1.DevicePlugin).
// It answers from DeviceState and NodeConfig only, so any number of instances
// (one per server start) can share them.
//
// Thread-safety: gRPC calls the methods concurrently; all state is in
// DeviceState (synchronised) or immutable.
#pragma once

#include <atomic>
#include <functional>
#include <set>
#include <string>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "node/config.h"
#include "node/device_state.h"
#include "node/mig/dynamic_mig.h"
#include "node/regions_in_flight.h"

namespace tessera::node {

// The kubelet's health strings.
inline constexpr const char* kHealthy = "Healthy";
inline constexpr const char* kUnhealthy = "Unhealthy";

// The advertised list: slots devices per GPU, each carrying its GPU's health
// and NUMA node.
v1beta1::ListAndWatchResponse DeviceList(const std::vector<core::Gpu>& gpus);

// GetPreferredAllocation's answer for one container when some GPUs are in
// mig-dynamic mode (`dynamic_uuids`): the container that waits for MIG
// instances on `mig_gpus` (empty: none waits) gets one replica on each of
// those GPUs, so the kubelet's count follows the instances; any other
// container gets vGPU GPUs' replicas (PreferredDevices over them), and only
// when they do not suffice any replica.
Result<std::vector<std::string>> PreferredDevicesWithDynamic(
    const std::vector<core::Gpu>& gpus, const std::set<std::string>& dynamic_uuids,
    const std::set<std::string>& mig_gpus, const v1beta1::ContainerPreferredAllocationRequest& request);

// What PluginServer serves: a device-plugin service that can end its open
// ListAndWatch streams (the vGPU one below, or a MIG one, node/mig).
class ServedDevicePlugin : public v1beta1::DevicePlugin::Service {
 public:
  // Makes every open ListAndWatch stream return, so the server can shut down.
  void BeginShutdown() { stopping_ = true; }
  // Nothing to prepare per start: tessera's plugins give everything in
  // Allocate's answer. (Methods not overridden answer UNIMPLEMENTED.)
  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override {
    return grpc::Status::OK;
  }

 protected:
  // Whether BeginShutdown was called: open streams end.
  bool stopping() const { return stopping_.load(); }

 private:
  std::atomic<bool> stopping_{false};
};

class DevicePluginService final : public ServedDevicePlugin {
 public:
  // `config` and `state` (and `dynamic`, when given) must outlive the
  // service. With `dynamic`, its GPUs' replicas are advertised beside the
  // vGPU ones and a container whose devices are all on them is answered by
  // DynamicMig::Allocate (node/mig/dynamic_mig.h).
  // With `in_flight`, each Allocate's regions are registered there while it
  // runs (regions_in_flight.h); it must outlive the service.
  DevicePluginService(const NodeConfig& config, const DeviceState& state,
                      std::function<std::string()> new_region_name, mig::DynamicMig* dynamic = nullptr,
                      RegionsInFlight* in_flight = nullptr);

  grpc::Status GetDevicePluginOptions(grpc::ServerContext* context, const v1beta1::Empty* request,
                                      v1beta1::DevicePluginOptions* response) override;
  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty* request,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override;
  grpc::Status GetPreferredAllocation(grpc::ServerContext* context,
                                      const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override;
  grpc::Status Allocate(grpc::ServerContext* context, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override;

 private:
  const NodeConfig& config_;
  const DeviceState& state_;
  std::function<std::string()> new_region_name_;
  mig::DynamicMig* const dynamic_;
  RegionsInFlight* const in_flight_;
};

}  // namespace tessera::node
