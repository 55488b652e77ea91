// What the plugin answers to the kubelet's Allocate and GetPreferredAllocation,
// as pure functions of the configuration and the current GPUs (no gRPC, no
// plugin memory): a restarted plugin answers the same, and nothing a running
// container depends on lives in the plugin process.
//
// Allocate's answer never depends on which pod is served: the kubelet does not
// say. The per-pod decision (which GPUs, how much memory and compute) reaches
// the container through the webhook's Downward-API env TESSERA_ALLOCATION; the
// plugin only provides the machinery (libvgpu, the preload file, a region dir).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/result.h"
#include "core/device.h"
#include "deviceplugin/v1beta1/api.pb.h"
#include "node/config.h"
#include "node/regions_in_flight.h"

namespace tessera::node {

// Where the preload file is mounted in a container (the dynamic linker's path;
// the rest of the container contract is contract/container_contract.h).
inline constexpr const char* kPreloadContainerPath = "/etc/ld.so.preload";

struct AllocateContext {
  const NodeConfig* config = nullptr;
  const std::vector<core::Gpu>* gpus = nullptr;
  // Names a fresh per-container region directory (a random UUID in production;
  // tests substitute a deterministic one).
  std::function<std::string()> new_region_name;
  // The Allocate request this container is part of: each region is added to
  // it before its record is written, so the monitor's clean-up keeps it until
  // the grace after the answer (regions_in_flight.h). May be null.
  RegionsInFlight::Request* in_flight = nullptr;
};

// Builds one container's response: mounts libvgpu (read-only), the preload file
// over /etc/ld.so.preload unless disabled, and a freshly created region dir
// (read-write); sets the pod-independent environment. Fails (and creates
// nothing) when a device ID is malformed or names an unknown GPU, or when
// libvgpu / the preload file is missing on the host — a container started
// without them would run unenforced.
Result<v1beta1::ContainerAllocateResponse> AllocateContainer(
    const AllocateContext& context, const v1beta1::ContainerAllocateRequest& request);

// The checks AllocateContainer makes before creating anything, alone: lets a
// multi-container request be refused as a whole before any region is made.
Status CheckContainerRequest(const AllocateContext& context,
                             const v1beta1::ContainerAllocateRequest& request);

// Chooses `allocation_size` devices: the must-include ones, then one replica on
// each further GPU (a container's vGPUs are on different GPUs), preferring GPUs
// with the most free replicas; only when GPUs run out does it repeat one.
Result<std::vector<std::string>> PreferredDevices(
    const std::vector<core::Gpu>& gpus, const v1beta1::ContainerPreferredAllocationRequest& request);

// A random RFC 4122 version-4 UUID.
std::string RandomUuid();

}  // namespace tessera::node
