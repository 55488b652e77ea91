// Which simulated devices a program may use, from the two variables that say
// so on a real system:
//  - NVIDIA_VISIBLE_DEVICES, which the NVIDIA container runtime reads to give a
//    container its GPUs' device nodes (so it limits CUDA and NVML alike), and
//  - CUDA_VISIBLE_DEVICES, which only the CUDA driver reads.
// Both list device indices, GPU UUIDs (prefixes accepted) and MIG device UUIDs
// ("MIG-..."). Shared by the simulated libcuda and NVML.
//
// Thread-safety: plain functions; the caller holds the state lock.
#pragma once

#include <vector>

#include "sim/state.h"

namespace tessera::sim {

// A device as a program sees it: a whole GPU, or a MIG device (one compute
// instance of one GPU instance of the GPU; slots in its GpuRecord).
struct DeviceRef {
  int gpu = -1;
  int gi_slot = -1;  // -1: the whole GPU
  int ci_slot = -1;
  bool mig() const { return gi_slot >= 0; }
  bool operator==(const DeviceRef& o) const {
    return gpu == o.gpu && gi_slot == o.gi_slot && ci_slot == o.ci_slot;
  }
};

// The devices a container exposes. `nvidia_visible_devices` is the variable's
// value (nullptr when unset): unset or "all" is every GPU; "none", "void" or
// empty is none; otherwise the GPUs and MIG devices listed, in order (entries
// that name nothing are skipped, as the runtime would refuse them).
std::vector<DeviceRef> ContainerDevices(const StateFile& state, const char* nvidia_visible_devices);

// The devices CUDA enumerates, in ordinal order, from a container's devices
// and CUDA_VISIBLE_DEVICES (`cuda_visible_devices`, nullptr when unset):
//  - a GPU in MIG mode offers only its MIG devices, and a process enumerates
//    at most one MIG device in all (as NVIDIA's drivers do: the first);
//  - CUDA_VISIBLE_DEVICES selects among them by index (into the enumeration
//    without it), GPU UUID (its first MIG device, for a GPU in MIG mode) or MIG
//    UUID, and ends at the first entry that names none of them or repeats one.
std::vector<DeviceRef> CudaDevices(const StateFile& state, const std::vector<DeviceRef>& container,
                                   const char* cuda_visible_devices);

}  // namespace tessera::sim
