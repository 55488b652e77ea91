// The replica device plugin (v1beta1) of one resource name: the replicas of
// time-sliced GPUs, or of MPS GPUs split NVIDIA-style (gpu_modes.h). One
// service, socket and registration per resource name, as the kubelet wants.
//
// Devices are "<GPU uuid>::<n>", n in [0, replicas) (NVIDIA's annotated IDs),
// each with its GPU's health and NUMA node. kube-scheduler counts them;
// tessera-scheduler does not place these pods.
//
// Allocate, per container: every ID must be a replica of this resource on
// this node ("invalid allocation request for '<resource>': unknown device:
// <id>", NVIDIA's words); with failRequestsGreaterThanOne on the GPU, more
// than one replica is refused with NVIDIA's message ("request for
// 'nvidia.com/gpu: 2' too large: maximum request size for shared resources is
// 1"). The answer sets NVIDIA_VISIBLE_DEVICES to the GPUs' UUIDs (in the order
// their first replica came) and merges what the GPUs' mode hook adds
// (container_setup.h). The whole request is refused before any hook runs when
// one container is refused.
//
// Thread-safety: gRPC calls the methods concurrently; the state is a
// Versioned (synchronised), the hooks are thread-safe by contract.
#pragma once

#include <string>
#include <vector>

#include "core/device.h"
#include "node/plugin_service.h"
#include "node/sharing/container_setup.h"
#include "node/sharing/gpu_modes.h"
#include "node/versioned.h"

namespace tessera::node::sharing {

// One GPU advertised as replicas: the discovered GPU (physical memory) and its mode.
struct ReplicaGpu {
  core::Gpu gpu;
  GpuMode mode;
  bool operator==(const ReplicaGpu&) const = default;
};

using ReplicaState = Versioned<std::vector<ReplicaGpu>>;

// The devices of `gpus`, as ListAndWatch sends them (by GPU index).
v1beta1::ListAndWatchResponse ReplicaDeviceList(const std::vector<ReplicaGpu>& gpus);

// One container's share: checks the IDs as Allocate does and resolves the
// share (GPU order, replicas held, the equal split). All IDs must be on GPUs
// of one mode (a resource name is one mode, gpu_modes.h).
Result<ShareRequest> ShareOf(const std::vector<ReplicaGpu>& gpus, const std::string& resource,
                             const v1beta1::ContainerAllocateRequest& request);

// The answer for a share: NVIDIA_VISIBLE_DEVICES plus the mode's hook's edits.
Result<v1beta1::ContainerAllocateResponse> AllocateShare(const ShareRequest& share,
                                                         const ContainerSetups& setups);

class ReplicaPluginService final : public ServedDevicePlugin {
 public:
  // `state` and `setups` must outlive the service.
  ReplicaPluginService(std::string resource, const ReplicaState& state, const ContainerSetups& setups);

  grpc::Status GetDevicePluginOptions(grpc::ServerContext* context, const v1beta1::Empty* request,
                                      v1beta1::DevicePluginOptions* response) override;
  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty* request,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override;
  grpc::Status Allocate(grpc::ServerContext* context, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override;

 private:
  // The GPUs of this resource now.
  std::vector<ReplicaGpu> Mine() const;

  const std::string resource_;
  const ReplicaState& state_;
  const ContainerSetups& setups_;
};

}  // namespace tessera::node::sharing
