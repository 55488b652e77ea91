// MigPluginService: the kubelet device-plugin service (v1beta1) of one MIG
// resource name — `nvidia.com/mig-1g.10gb` under the mixed strategy (one
// service, socket and registration per name, as NVIDIA's device plugin does),
// or `nvidia.com/gpu` under single.
//
// Devices are the MIG devices advertised as that resource, their IDs the MIG
// UUIDs. Allocate hands a container exactly its MIG devices the way the NVIDIA
// container toolkit expects them: NVIDIA_VISIBLE_DEVICES=<MIG UUID>[,...]; the
// runtime (and the simulated GPU) then shows the container one device per MIG
// device, with the instance's memory and SMs. No libvgpu is mounted: MIG
// isolates memory and compute in hardware.
//
// Thread-safety: gRPC calls the methods concurrently; all state is in the
// (synchronised) MigDeviceState.
#pragma once

#include <string>

#include "node/mig/mig_devices.h"
#include "node/plugin_service.h"

namespace tessera::node::mig {

// The devices of `resource` in `devices`, as ListAndWatch sends them.
v1beta1::ListAndWatchResponse MigDeviceList(const std::vector<MigDevice>& devices,
                                            const std::string& resource);

// One container's answer: NVIDIA_VISIBLE_DEVICES naming `device_ids`. Fails
// (naming the ID) when an ID is not a MIG device of `resource` on this node now.
Result<v1beta1::ContainerAllocateResponse> AllocateMigContainer(
    const std::vector<MigDevice>& devices, const std::string& resource,
    const v1beta1::ContainerAllocateRequest& request);

class MigPluginService final : public ServedDevicePlugin {
 public:
  // `state` must outlive the service.
  MigPluginService(std::string resource, const MigDeviceState& state);

  grpc::Status GetDevicePluginOptions(grpc::ServerContext* context, const v1beta1::Empty* request,
                                      v1beta1::DevicePluginOptions* response) override;
  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty* request,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override;
  grpc::Status Allocate(grpc::ServerContext* context, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override;

 private:
  const std::string resource_;
  const MigDeviceState& state_;
};

}  // namespace tessera::node::mig
