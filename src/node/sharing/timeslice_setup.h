// The timeslice mode's container hook (container_setup.h): what tessera adds
// to NVIDIA's time-slicing.
//  - libvgpu, the preload file and a region directory, as for a vGPU
//    container (node/allocate.h), its record naming the replicas' resource:
//    the monitor ties the region to the pod through the kubelet's
//    PodResources, so per-container metrics work on time-sliced GPUs too;
//  - libvgpu told to give the container its GPUs whole
//    (TESSERA_UNPLACED_PODS=whole-gpu: kube-scheduler, not tessera-scheduler,
//    placed it) and not to throttle compute (time-slicing shares it);
//  - with memory_split equal, CUDA_DEVICE_MEMORY_LIMIT_<ordinal> = the GPU's
//    memory × held / replicas, which libvgpu enforces.
// Fails as node::AllocateContainer does (libvgpu missing on the host: the
// split would go unenforced).
//
// Thread-safety: the hook is thread-safe if `new_region_name` is.
#pragma once

#include <functional>
#include <string>

#include "node/config.h"
#include "node/regions_in_flight.h"
#include "node/sharing/container_setup.h"

namespace tessera::node::sharing {

// `config` (and `in_flight`, when given: each call's region is registered
// there until the call returns, node/regions_in_flight.h) must outlive the hook.
ContainerSetup TimesliceContainerSetup(const NodeConfig& config, std::function<std::string()> new_region_name,
                                       RegionsInFlight* in_flight = nullptr);

}  // namespace tessera::node::sharing
