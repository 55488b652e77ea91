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
  bool operator==(const DeviceSlice&) const = default;
};

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
