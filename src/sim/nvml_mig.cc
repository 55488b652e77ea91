// Multi-Instance GPU in NVML, at the level of the physical GPU: MIG mode (on
// Hopper and later it changes at once when no process has a context on the
// GPU; on Ampere the change is pending until a GPU reset, `tessera sim reset
// --gpu N`), GPU instance profiles with the geometry of catalog.cc, their
// placements and remaining capacity, and GPU instances (create, with or
// without a placement; destroy, refused while compute instances or processes
// are in them; list; look up; describe). Instances live in the shared state,
// so they persist across processes until destroyed. Compute instances are
// nvml_compute_instances.cc, MIG device handles nvml_mig_devices.cc.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <type_traits>

#include "sim/nvml_internal.h"

namespace tessera::sim::nvml {
namespace {

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

// The figures of a GPU instance profile in nvmlGpuInstanceProfileInfo_t, or
// with its name in _v2_t or _v3_t (where P2P is a capability bit).
template <typename Info>
void FillProfileInfo(const MigProfile& p, Info* info) {
  info->id = p.id;
  info->sliceCount = p.compute_slices;
  info->instanceCount = p.max_instances;
  info->multiprocessorCount = p.sm_count;
  info->copyEngineCount = p.copy_engines;
  info->decoderCount = p.decoders;
  info->encoderCount = 0;
  info->jpegCount = p.jpegs;
  info->ofaCount = p.ofas;
  info->memorySizeMB = p.memory_mib;
  if constexpr (std::is_same_v<Info, nvmlGpuInstanceProfileInfo_v3_t>) {
    info->capabilities = 0;  // no P2P between MIG devices, no graphics
  } else {
    info->isP2pSupported = 0;
  }
  if constexpr (!std::is_same_v<Info, nvmlGpuInstanceProfileInfo_t>) {
    std::snprintf(info->name, sizeof(info->name), "MIG %s", p.name.c_str());
  }
}

// The profile `find` picks among the GPU's, described in the layout the
// caller's version field names (nvmlGpuInstanceProfileInfo_v2 or _v3).
template <typename Find>
nvmlReturn_t VersionedProfileInfo(nvmlDevice_t device, nvmlGpuInstanceProfileInfo_v2_t* info, Find&& find) {
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const unsigned version = info->version;
  if (version != nvmlGpuInstanceProfileInfo_v2 && version != nvmlGpuInstanceProfileInfo_v3) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  return OnMigGpu(device, MigMode::kEnabled, [&](int gpu) {
    const MigProfile* p = find(ModelOf(gpu));
    if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    if (version == nvmlGpuInstanceProfileInfo_v3) {
      FillProfileInfo(*p, reinterpret_cast<nvmlGpuInstanceProfileInfo_v3_t*>(info));
    } else {
      FillProfileInfo(*p, info);
    }
    return NVML_SUCCESS;
  });
}

// At `wanted_start` (memory slices; -1: the first placement free) of
// `wanted_size` slices.
nvmlReturn_t CreateGpuInstance(nvmlDevice_t device, unsigned int profileId, int wanted_start,
                               uint32_t wanted_size, nvmlGpuInstance_t* out) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return OnMigGpu(device, MigMode::kEnabled, [&](int gpu) {
    const MigProfile* p = FindMigProfileById(ModelOf(gpu), profileId);
    if (p == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (wanted_start >= 0 && (wanted_size != p->memory_slices ||
                              std::find(p->placement_starts.begin(), p->placement_starts.end(),
                                        static_cast<uint32_t>(wanted_start)) == p->placement_starts.end())) {
      return NVML_ERROR_INVALID_ARGUMENT;  // not one of the profile's placements
    }
    // A placement that overlaps an instance: NVML_ERROR_INSUFFICIENT_RESOURCES, as NVML answers.
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

bool MigCapable(int gpu) {
  return ModelOf(gpu).mig_memory_slices > 0;
}

bool InstanceInUse(int gpu, uint32_t gi_id, uint32_t ci_id) {
  Library().state->ReclaimDeadLocked();
  for (const ProcessRecord& p : File()->processes) {
    if (!p.in_use || (p.contexts[gpu] == 0 && p.used_bytes[gpu] == 0)) continue;
    if (p.gpu_instance[gpu] == gi_id && (ci_id == kNoInstance || p.compute_instance[gpu] == ci_id))
      return true;
  }
  return false;
}

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode, unsigned int* pendingMode) {
  if (currentMode == nullptr || pendingMode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return OnMigGpu(device, MigMode::kAny, [&](int gpu) {
    *currentMode = Gpu(gpu).mig_mode;
    *pendingMode = Gpu(gpu).mig_mode_pending;
    return NVML_SUCCESS;
  });
}

// Hopper and later switch at once, on an idle GPU. Ampere parts (A100, A30)
// keep the new mode pending until the GPU is reset: the call succeeds and
// *activationStatus is NVML_ERROR_RESET_REQUIRED. Disabling MIG is refused
// while GPU instances exist.
nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t* activationStatus) {
  if (activationStatus == nullptr || mode > 1) return NVML_ERROR_INVALID_ARGUMENT;
  return OnMigGpu(device, MigMode::kAny, [&](int gpu) {
    Library().state->ReclaimDeadLocked();
    GpuRecord& g = Gpu(gpu);
    const bool at_once = ModelOf(gpu).architecture >= NVML_DEVICE_ARCH_HOPPER;
    bool busy =
        mode == 0 && std::any_of(std::begin(g.gis), std::end(g.gis), [](auto& gi) { return gi.in_use; });
    for (const ProcessRecord& p : File()->processes)
      busy = busy || (at_once && p.in_use && p.contexts[gpu] > 0);
    if (busy) {
      *activationStatus = NVML_ERROR_IN_USE;
      return NVML_ERROR_IN_USE;
    }
    g.mig_mode_pending = mode;
    if (at_once) g.mig_mode = mode;
    *activationStatus = g.mig_mode == mode ? NVML_SUCCESS : NVML_ERROR_RESET_REQUIRED;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t* info) {
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return OnMigGpu(device, MigMode::kEnabled, [&](int gpu) {
    const MigProfile* p = FindMigProfileByEnum(ModelOf(gpu), profile);
    if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    FillProfileInfo(*p, info);
    return NVML_SUCCESS;
  });
}

// By NVML_GPU_INSTANCE_PROFILE_* index.
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t* info) {
  return VersionedProfileInfo(device, info,
                              [&](const GpuModel& m) { return FindMigProfileByEnum(m, profile); });
}

// By profile id (nvidia-smi mig -lgip's "ID").
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId,
                                                      nvmlGpuInstanceProfileInfo_v2_t* info) {
  return VersionedProfileInfo(device, info,
                              [&](const GpuModel& m) { return FindMigProfileById(m, profileId); });
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
  return CreateGpuInstance(device, profileId, -1, 0, gi);
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t* placement,
                                                      nvmlGpuInstance_t* gi) {
  if (placement == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return CreateGpuInstance(device, profileId, static_cast<int>(placement->start), placement->size, gi);
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
  return NvmlEntry(gpuInstance, [&](GpuInstanceRecord& gi) {
    for (const ComputeInstanceRecord& ci : gi.cis) {
      if (ci.in_use) return NVML_ERROR_IN_USE;
    }
    if (InstanceInUse(gpuInstance->gpu, gi.id, kNoInstance)) return NVML_ERROR_IN_USE;
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

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::nvml
