// Multi-Instance GPU in NVML, at the level of the physical GPU: MIG mode
// (taking effect at once when no process has a context on the GPU), GPU
// instance profiles with the geometry of catalog.cc, their placements and
// remaining capacity, GPU instances (create, with or without a placement;
// destroy; list; look up; describe), and the MIG device handles that stand for
// compute instances. Instances live in the shared state, so they persist across
// processes until destroyed. Compute instances are nvml_compute_instances.cc.
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "sim/nvml_internal.h"

namespace tessera::sim::nvml {
namespace {

bool MigCapable(int gpu) {
  return ModelOf(gpu).mig_memory_slices > 0;
}

uint32_t ComputeSlicesUsed(int gpu) {
  uint32_t used = 0;
  for (const GpuInstanceRecord& gi : Gpu(gpu).gis) {
    if (!gi.in_use) continue;
    const MigProfile* p = GiProfile(gpu, gi);
    if (p) used += p->compute_slices;
  }
  return used;
}

bool PlacementFree(int gpu, uint32_t start, uint32_t size) {
  for (const GpuInstanceRecord& gi : Gpu(gpu).gis) {
    if (gi.in_use && start < gi.start + gi.size && gi.start < start + size) return false;
  }
  return true;
}

uint32_t InstancesOf(int gpu, uint32_t profile_id) {
  uint32_t n = 0;
  for (const GpuInstanceRecord& gi : Gpu(gpu).gis) n += gi.in_use && gi.profile_id == profile_id;
  return n;
}

// A start slice where `p` fits now, or -1 (memory slices, compute slices, instance limit).
int FindPlacement(int gpu, const MigProfile& p, int wanted_start) {
  if (InstancesOf(gpu, p.id) >= p.max_instances) return -1;
  if (ComputeSlicesUsed(gpu) + p.compute_slices > ModelOf(gpu).mig_compute_slices) return -1;
  int free_slot = -1;
  for (int i = 0; i < kMaxGpuInstances; ++i) {
    if (!Gpu(gpu).gis[i].in_use) free_slot = i;
  }
  if (free_slot < 0) return -1;
  for (uint32_t s : p.placement_starts) {
    if (wanted_start >= 0 && static_cast<int>(s) != wanted_start) continue;
    if (PlacementFree(gpu, s, p.memory_slices)) return static_cast<int>(s);
  }
  return -1;
}

// What the MIG calls on a GPU handle have in common: a MIG device handle is
// NVML_ERROR_INVALID_ARGUMENT, a GPU that cannot do MIG (or, with kEnabled,
// whose MIG mode is off) NVML_ERROR_NOT_SUPPORTED; body(gpu) runs under the
// state lock.
enum class MigMode { kAny, kEnabled };

template <typename Body>
nvmlReturn_t OnMigGpu(nvmlDevice_t device, MigMode need, Body&& body) noexcept {
  return NvmlEntry(device, [&](const nvmlDevice_st& d) -> nvmlReturn_t {
    if (d.gi >= 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (!MigCapable(d.gpu)) return NVML_ERROR_NOT_SUPPORTED;
    StateLock state_lock(*Library().state);
    if (need == MigMode::kEnabled && Gpu(d.gpu).mig_mode == 0) return NVML_ERROR_NOT_SUPPORTED;
    return body(d.gpu);
  });
}

// The figures of GPU instance profile `profile` (an NVML_GPU_INSTANCE_PROFILE_*
// enumerator) in nvmlGpuInstanceProfileInfo_t or, with its name, _v2_t.
template <typename Info>
nvmlReturn_t GpuInstanceProfileInfo(nvmlDevice_t device, unsigned profile, Info* info) {
  return OnMigGpu(device, MigMode::kEnabled, [&](int gpu) {
    const MigProfile* p = FindMigProfileByEnum(ModelOf(gpu), profile);
    if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    info->id = p->id;
    info->isP2pSupported = 0;
    info->sliceCount = p->compute_slices;
    info->instanceCount = p->max_instances;
    info->multiprocessorCount = p->sm_count;
    info->copyEngineCount = p->copy_engines;
    info->decoderCount = p->decoders;
    info->encoderCount = 0;
    info->jpegCount = p->jpegs;
    info->ofaCount = p->ofas;
    info->memorySizeMB = p->memory_mib;
    if constexpr (std::is_same_v<Info, nvmlGpuInstanceProfileInfo_v2_t>) {
      std::snprintf(info->name, sizeof(info->name), "MIG %s", p->name.c_str());
    }
    return NVML_SUCCESS;
  });
}

nvmlReturn_t CreateGpuInstance(nvmlDevice_t device, unsigned int profileId, int wanted_start,
                               nvmlGpuInstance_t* out) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return OnMigGpu(device, MigMode::kEnabled, [&](int gpu) {
    const MigProfile* p = FindMigProfileById(ModelOf(gpu), profileId);
    if (p == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const int start = FindPlacement(gpu, *p, wanted_start);
    if (start < 0) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    GpuRecord& g = Gpu(gpu);
    for (int i = 0; i < kMaxGpuInstances; ++i) {
      GpuInstanceRecord& gi = g.gis[i];
      if (gi.in_use) continue;
      std::memset(static_cast<void*>(&gi), 0, sizeof(gi));
      gi.in_use = 1;
      gi.id = g.next_gi_id++;
      gi.profile_id = p->id;
      gi.start = static_cast<uint32_t>(start);
      gi.size = p->memory_slices;
      gi.next_ci_id = 0;
      *out = &Library().gis[gpu][i];
      return NVML_SUCCESS;
    }
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
  });
}

}  // namespace

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode, unsigned int* pendingMode) {
  if (currentMode == nullptr || pendingMode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return OnMigGpu(device, MigMode::kAny, [&](int gpu) {
    *currentMode = Gpu(gpu).mig_mode;
    *pendingMode = Gpu(gpu).mig_mode;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t* activationStatus) {
  if (activationStatus == nullptr || mode > 1) return NVML_ERROR_INVALID_ARGUMENT;
  return OnMigGpu(device, MigMode::kAny, [&](int gpu) {
    // Takes effect at once when the GPU is idle (the simulator's "reset").
    Library().state->ReclaimDeadLocked();
    for (const ProcessRecord& p : File()->processes) {
      if (p.in_use && p.contexts[gpu] > 0) {
        *activationStatus = NVML_ERROR_IN_USE;
        return NVML_ERROR_IN_USE;
      }
    }
    if (mode == 0) {
      for (const GpuInstanceRecord& gi : Gpu(gpu).gis) {
        if (gi.in_use) {
          *activationStatus = NVML_ERROR_IN_USE;
          return NVML_ERROR_IN_USE;
        }
      }
    }
    Gpu(gpu).mig_mode = mode;
    *activationStatus = NVML_SUCCESS;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t* info) {
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return GpuInstanceProfileInfo(device, profile, info);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t* info) {
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  return GpuInstanceProfileInfo(device, profile, info);
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t* placements,
                                                           unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return OnMigGpu(device, MigMode::kEnabled, [&](int gpu) {
    const MigProfile* p = FindMigProfileById(ModelOf(gpu), profileId);
    if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    const unsigned n = static_cast<unsigned>(p->placement_starts.size());
    if (placements == nullptr) {
      *count = n;
      return NVML_SUCCESS;
    }
    if (*count < n) {
      *count = n;
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; ++i) placements[i] = {p->placement_starts[i], p->memory_slices};
    *count = n;
    return NVML_SUCCESS;
  });
}
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
                                                        nvmlGpuInstancePlacement_t* placements,
                                                        unsigned int* count) {
  return nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, profileId, placements, count);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                       unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return OnMigGpu(device, MigMode::kEnabled, [&](int gpu) {
    const MigProfile* p = FindMigProfileById(ModelOf(gpu), profileId);
    if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    // Count by creating instances on a scratch copy of the GPU's instance table.
    GpuRecord& g = Gpu(gpu);
    GpuInstanceRecord saved[kMaxGpuInstances];
    std::memcpy(static_cast<void*>(saved), g.gis, sizeof(saved));
    unsigned n = 0;
    for (int start; (start = FindPlacement(gpu, *p, -1)) >= 0; ++n) {
      for (GpuInstanceRecord& gi : g.gis) {
        if (!gi.in_use) {
          gi.in_use = 1;
          gi.profile_id = p->id;
          gi.start = static_cast<uint32_t>(start);
          gi.size = p->memory_slices;
          break;
        }
      }
    }
    std::memcpy(static_cast<void*>(g.gis), saved, sizeof(saved));
    *count = n;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t* gi) {
  return CreateGpuInstance(device, profileId, -1, gi);
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t* placement,
                                                      nvmlGpuInstance_t* gi) {
  if (placement == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return CreateGpuInstance(device, profileId, static_cast<int>(placement->start), gi);
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
  return NvmlEntry(gpuInstance, [](GpuInstanceRecord& gi) {
    for (const ComputeInstanceRecord& ci : gi.cis) {
      if (ci.in_use) return NVML_ERROR_IN_USE;
    }
    gi.in_use = 0;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                       nvmlGpuInstance_t* gpuInstances, unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return OnMigGpu(device, MigMode::kEnabled, [&](int gpu) {
    if (FindMigProfileById(ModelOf(gpu), profileId) == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (int i = 0; i < kMaxGpuInstances; ++i) {
      const GpuInstanceRecord& gi = Gpu(gpu).gis[i];
      if (!gi.in_use || gi.profile_id != profileId) continue;
      if (gpuInstances != nullptr) gpuInstances[n] = &Library().gis[gpu][i];
      ++n;
    }
    *count = n;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t* out) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return OnMigGpu(device, MigMode::kEnabled, [&](int gpu) {
    for (int i = 0; i < kMaxGpuInstances; ++i) {
      if (Gpu(gpu).gis[i].in_use && Gpu(gpu).gis[i].id == id) {
        *out = &Library().gis[gpu][i];
        return NVML_SUCCESS;
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t* info) {
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(gpuInstance, [&](const GpuInstanceRecord& gi) {
    info->device = &Library().devices[gpuInstance->gpu];
    info->id = gi.id;
    info->profileId = gi.profile_id;
    info->placement = {gi.start, gi.size};
    return NVML_SUCCESS;
  });
}

// ----- MIG device handles -----
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* isMigDevice) {
  return DeviceValue(device, isMigDevice, [&](const nvmlDevice_st& d) { return d.gi >= 0; });
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    if (d.gi < 0) return NVML_ERROR_NOT_SUPPORTED;
    *id = Gpu(d.gpu).gis[d.gi].id;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    if (d.gi < 0) return NVML_ERROR_NOT_SUPPORTED;
    *id = Gpu(d.gpu).gis[d.gi].cis[d.ci].id;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  return DeviceValue(device, count, [&](const nvmlDevice_st& d) {
    return MigCapable(d.gpu) ? ModelOf(d.gpu).mig_compute_slices : 0;
  });
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t* migDevice) {
  if (migDevice == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return OnMigGpu(device, MigMode::kEnabled, [&](int gpu) {
    // MIG devices are the compute instances, in GPU-instance order.
    unsigned n = 0;
    for (int i = 0; i < kMaxGpuInstances; ++i) {
      const GpuInstanceRecord& gi = Gpu(gpu).gis[i];
      if (!gi.in_use) continue;
      for (int c = 0; c < kMaxComputeInstances; ++c) {
        if (!gi.cis[c].in_use) continue;
        if (n++ == index) {
          *migDevice = &Library().mig_devices[gpu][i][c];
          return NVML_SUCCESS;
        }
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t* device) {
  if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(migDevice, [&](const nvmlDevice_st& d) {
    if (d.gi < 0) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &Library().devices[d.gpu];
    return NVML_SUCCESS;
  });
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::nvml
