// Multi-Instance GPU in NVML, inside a GPU instance: compute instance profiles
// (1, 2, 3, 4, 6, 7 or 8 compute slices, as the GPU instance's size allows;
// SMs per catalog.cc's ComputeInstanceSmCount), remaining capacity, and compute
// instances (create at the first free aligned slice range, destroy, list, look
// up, describe). Compute instances live in their GPU instance's record in the
// shared state.
#include <cstdio>
#include <string>
#include <type_traits>

#include "sim/nvml_internal.h"

namespace tessera::sim::nvml {
namespace {

// Compute slices of a CI profile enumerator (NVML_COMPUTE_INSTANCE_PROFILE_*).
int CiSlices(unsigned profile) {
  switch (profile) {
    case 0x0:
      return 1;
    case 0x1:
      return 2;
    case 0x2:
      return 3;
    case 0x3:
      return 4;
    case 0x4:
      return 7;
    case 0x5:
      return 8;
    case 0x6:
      return 6;
    default:
      return 0;
  }
}

bool CiProfileValid(unsigned profile, int gi_slices) {
  const int s = CiSlices(profile);
  if (s == 0 || s > gi_slices) return false;
  return s == gi_slices || s <= 2 || (gi_slices >= 6 && (s == 3 || s == 4));
}

// Compute slices of a GPU instance (0 if its profile is unknown).
int GiComputeSlices(nvmlGpuInstance_t handle, const GpuInstanceRecord& gi) {
  const MigProfile* gp = GiProfile(handle->gpu, gi);
  return gp ? static_cast<int>(gp->compute_slices) : 0;
}

// A free, aligned compute-slice range of `s` slices in the GI, or -1.
int FindCiStart(const GpuInstanceRecord& gi, int s, int gi_slices) {
  for (int start = 0; start + s <= gi_slices; ++start) {
    bool free = true;
    for (const ComputeInstanceRecord& ci : gi.cis) {
      if (ci.in_use && static_cast<int>(ci.start) < start + s &&
          start < static_cast<int>(ci.start + ci.size)) {
        free = false;
      }
    }
    if (free) return start;
  }
  return -1;
}

// The handle of compute instance slot `slot` of a GPU instance.
nvmlComputeInstance_t CiHandle(nvmlGpuInstance_t gpuInstance, int slot) {
  return &Library().cis[gpuInstance->gpu][gpuInstance->slot][slot];
}

// The figures of compute instance profile `profile` (an
// NVML_COMPUTE_INSTANCE_PROFILE_* enumerator) in a GPU instance, in
// nvmlComputeInstanceProfileInfo_t or, with its name, _v2_t.
template <typename Info>
nvmlReturn_t CiProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned profile, unsigned engProfile, Info* info) {
  return NvmlEntry(gpuInstance, [&](const GpuInstanceRecord& gi) {
    if (engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) return NVML_ERROR_NOT_SUPPORTED;
    const MigProfile* gp = GiProfile(gpuInstance->gpu, gi);
    if (gp == nullptr) return NVML_ERROR_UNKNOWN;
    const int gs = static_cast<int>(gp->compute_slices);
    if (!CiProfileValid(profile, gs)) return NVML_ERROR_NOT_SUPPORTED;
    const int s = CiSlices(profile);
    info->id = profile;
    info->sliceCount = static_cast<unsigned>(s);
    info->instanceCount = static_cast<unsigned>(gs / s);
    info->multiprocessorCount =
        ComputeInstanceSmCount(ModelOf(gpuInstance->gpu), *gp, static_cast<uint32_t>(s));
    info->sharedCopyEngineCount = gp->copy_engines;
    info->sharedDecoderCount = gp->decoders;
    info->sharedEncoderCount = 0;
    info->sharedJpegCount = gp->jpegs;
    info->sharedOfaCount = gp->ofas;
    if constexpr (std::is_same_v<Info, nvmlComputeInstanceProfileInfo_v2_t>) {
      const std::string name = s == gs ? "MIG " + gp->name : "MIG " + std::to_string(s) + "c." + gp->name;
      std::snprintf(info->name, sizeof(info->name), "%s", name.c_str());
    }
    return NVML_SUCCESS;
  });
}

}  // namespace

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t* info) {
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return CiProfileInfo(gpuInstance, profile, engProfile, info);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance,
                                                           unsigned int profile, unsigned int engProfile,
                                                           nvmlComputeInstanceProfileInfo_v2_t* info) {
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (info->version != nvmlComputeInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  return CiProfileInfo(gpuInstance, profile, engProfile, info);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance,
                                                                unsigned int profileId, unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(gpuInstance, [&](const GpuInstanceRecord& gi) {
    const int gs = GiComputeSlices(gpuInstance, gi);
    if (!CiProfileValid(profileId, gs)) return NVML_ERROR_NOT_SUPPORTED;
    const int s = CiSlices(profileId);
    // Greedy first fit over the slices the GI's compute instances leave free.
    uint32_t used = 0;
    for (const ComputeInstanceRecord& ci : gi.cis) {
      if (ci.in_use) used |= ((1u << ci.size) - 1) << ci.start;
    }
    unsigned n = 0;
    for (int start = 0; start + s <= gs; ++start) {
      const uint32_t range = ((1u << s) - 1) << start;
      if ((used & range) == 0) {
        used |= range;
        ++n;
      }
    }
    *count = n;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                  nvmlComputeInstance_t* computeInstance) {
  if (computeInstance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(gpuInstance, [&](GpuInstanceRecord& gi) {
    const int gs = GiComputeSlices(gpuInstance, gi);
    if (!CiProfileValid(profileId, gs)) return NVML_ERROR_INVALID_ARGUMENT;
    const int s = CiSlices(profileId);
    const int start = FindCiStart(gi, s, gs);
    if (start < 0) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (int i = 0; i < kMaxComputeInstances; ++i) {
      ComputeInstanceRecord& ci = gi.cis[i];
      if (ci.in_use) continue;
      ci = ComputeInstanceRecord{
          1, gi.next_ci_id++, profileId, static_cast<uint32_t>(start), static_cast<uint32_t>(s), 0};
      *computeInstance = CiHandle(gpuInstance, i);
      return NVML_SUCCESS;
    }
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
  });
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
  return NvmlEntry(computeInstance, [](ComputeInstanceRecord& ci) {
    ci.in_use = 0;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                nvmlComputeInstance_t* computeInstances,
                                                unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(gpuInstance, [&](const GpuInstanceRecord& gi) {
    unsigned n = 0;
    for (int i = 0; i < kMaxComputeInstances; ++i) {
      if (!gi.cis[i].in_use || gi.cis[i].profile != profileId) continue;
      if (computeInstances != nullptr) computeInstances[n] = CiHandle(gpuInstance, i);
      ++n;
    }
    *count = n;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t* computeInstance) {
  if (computeInstance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(gpuInstance, [&](const GpuInstanceRecord& gi) {
    for (int i = 0; i < kMaxComputeInstances; ++i) {
      if (gi.cis[i].in_use && gi.cis[i].id == id) {
        *computeInstance = CiHandle(gpuInstance, i);
        return NVML_SUCCESS;
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                           nvmlComputeInstanceInfo_t* info) {
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(computeInstance, [&](const ComputeInstanceRecord& ci) {
    info->device = &Library().devices[computeInstance->gpu];
    info->gpuInstance = &Library().gis[computeInstance->gpu][computeInstance->gi];
    info->id = ci.id;
    info->profileId = ci.profile;
    info->placement = {ci.start, ci.size};
    return NVML_SUCCESS;
  });
}
nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                        nvmlComputeInstanceInfo_t* info) {
  return nvmlComputeInstanceGetInfo_v2(computeInstance, info);
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::nvml
