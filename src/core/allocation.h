// What the scheduler decided for a pod: per container, which GPUs (by UUID) and
// how much of each. Written to the pod as the `tessera.io/allocation`
// annotation, read back by the scheduler after a restart, and handed to
// libvgpu inside the container as TESSERA_ALLOCATION.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::core {

// One vGPU: a share of one physical GPU.
struct DeviceSlice {
  std::string uuid;
  int64_t memory_mib = 0;
  int cores = 0;  // percent of the GPU's compute; 100 = exclusive use
  // Dynamic MIG (docs/mig.md): the MIG instance tessera-node creates on the GPU
  // `uuid` for this device, as a GPU-instance profile name ("1g.10gb") and a
  // placement start (memory slice). "" = a vGPU slice. (The `{}` keeps
  // {uuid, memory, cores} initialisers free of -Wmissing-field-initializers.)
  std::string mig_profile{};
  int mig_start = 0;
  // An MPS client share of the GPU `uuid`, which is in mps mode (see below).
  bool mps{false};
  bool operator==(const DeviceSlice&) const = default;
};

// How tessera-node reads an MPS share (issue 15; the codec in
// allocation_codec.h, the placement rules in fit.h).
//
// tessera-scheduler places a container annotated nvidia.com/vgpu-mode: mps,
// or asking nvidia.com/mps-core / nvidia.com/mps-memory, only on GPUs the
// inventory lists in mode "mps" with replicas 0. Each of its devices in
// `tessera.io/allocation` then reads
//
//   {"uuid": "GPU-…", "memoryMiB": 8192, "cores": 50, "mps": true}
//
//  - uuid: the physical GPU, whose MPS control daemon the client must reach
//    (CUDA_MPS_PIPE_DIRECTORY of that GPU's daemon: the node's part).
//  - memoryMiB: the client's pinned device-memory limit, always > 0 (a
//    request for "the whole GPU" is resolved to the GPU's memory at
//    placement): CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="<ordinal>=<memoryMiB>M",
//    with <ordinal> the device's position in the container's CUDA view (the
//    order of the container's devices here and in NVIDIA_VISIBLE_DEVICES,
//    0 for the first), joined by "," for several devices.
//  - cores: the client's active-thread percentage, 1..100:
//    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<cores>. An MPS container has one
//    device: a client reaches one GPU's daemon, so a request for more is
//    refused when the pod's request is derived (pod_request.h), and
//    tessera-node refuses such a container too.
//  - "mps": true is written only for MPS shares; absent = false. An older
//    node ignores it and treats the device as a vGPU slice of the same size.
//
// Allocate does not know the pod, and the variables must be set before the
// program's cuInit, so they reach the container like the allocation itself:
// bind writes, per MPS container (by position i, init containers "init-i"),
// "tessera.io/mps-thread-percentage.<i>" = "<cores>" and
// "tessera.io/mps-pinned-memory.<i>" = "0=<memoryMiB>M" (as above), and the
// webhook wires them into CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT through the Downward API (unless the
// container sets them itself; scheduler/webhook.h). The node adds the pipe
// directory; it may also derive the same values from TESSERA_ALLOCATION.
//
// Memory and cores are counted against the GPU exactly like a vGPU slice's
// (NodeState), so the sum of the shares on a GPU never exceeds what its
// inventory offers. libvgpu, if present in the container, would also apply
// memoryMiB and cores from TESSERA_ALLOCATION; for an MPS share MPS does
// that, so the node decides whether libvgpu is added (docs/sharing.md).

struct ContainerAllocation {
  std::string container;  // container name within the pod
  std::vector<DeviceSlice> devices;
  // An init container: it runs alone before the app containers, so on each GPU
  // the pod reserves the larger of its init and app usage, not the sum.
  bool init = false;
  bool operator==(const ContainerAllocation&) const = default;
};

struct PodAllocation {
  std::string node;
  std::vector<ContainerAllocation> containers;
  bool operator==(const PodAllocation&) const = default;
};

}  // namespace tessera::core
