// Multi-Instance GPU in NVML, inside a GPU instance: compute instance profiles
// (1, 2, 3, 4, 6, 7 or 8 compute slices, as the GPU instance's size allows;
// SMs per catalog.cc's ComputeInstanceSmCount), their placements (compute
// slice ranges) and remaining capacity, and compute instances (create,
// at the first free placement or a given one; destroy, refused while a process
// uses the instance; list; look up; describe). Compute instances live in their
// GPU instance's record in the shared state.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "sim/nvml_internal.h"

namespace tessera::sim::nvml {
namespace {

// Compute slices of each CI profile enumerator (NVML_COMPUTE_INSTANCE_PROFILE_*,
// the index); 0 for those the simulated parts do not offer.
constexpr int kCiSlices[] = {1, 2, 3, 4, 7, 8, 6};

int CiSlices(unsigned profile) {
  return profile < std::size(kCiSlices) ? kCiSlices[profile] : 0;
}

bool CiProfileValid(unsigned profile, int gi_slices) {
  const int s = CiSlices(profile);
  if (s == 0 || s > gi_slices) return false;
  return s == gi_slices || s <= 2 || (gi_slices >= 6 && (s == 3 || s == 4));
}

// Where a compute instance of `s` slices may start in a GPU instance of
// `gi_slices`: any compute slice it fits from.
std::vector<uint32_t> CiStarts(int s, int gi_slices) {
  std::vector<uint32_t> starts;
  for (int start = 0; start + s <= gi_slices; ++start) starts.push_back(static_cast<uint32_t>(start));
  return starts;
}

bool RangeFree(const GpuInstanceRecord& gi, uint32_t start, uint32_t size) {
  for (const ComputeInstanceRecord& ci : gi.cis) {
    if (ci.in_use && ci.start < start + size && start < ci.start + ci.size) return false;
  }
  return true;
}

// The profile's slices and placements in a GPU instance; false if the instance
// does not offer it.
bool CiGeometry(nvmlGpuInstance_t handle, const GpuInstanceRecord& gi, unsigned profile, int* slices,
                std::vector<uint32_t>* starts) {
  const MigProfile* gp = GiProfile(handle->gpu, gi);
  const int gs = gp ? static_cast<int>(gp->compute_slices) : 0;
  if (!CiProfileValid(profile, gs)) return false;
  *slices = CiSlices(profile);
  *starts = CiStarts(*slices, gs);
  return true;
}

// The handle of compute instance slot `slot` of a GPU instance.
nvmlComputeInstance_t CiHandle(nvmlGpuInstance_t gpuInstance, int slot) {
  return &Library().cis[gpuInstance->gpu][gpuInstance->slot][slot];
}

// The figures of compute instance profile `profile` (an
// NVML_COMPUTE_INSTANCE_PROFILE_* enumerator) in a GPU instance, in
// nvmlComputeInstanceProfileInfo_t or, with its name, _v2_t or _v3_t.
template <typename Info>
nvmlReturn_t CiProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned profile, unsigned engProfile, Info* info) {
  return NvmlEntry(gpuInstance, [&](const GpuInstanceRecord& gi) {
    if (engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) return NVML_ERROR_NOT_SUPPORTED;
    const MigProfile* gp = GiProfile(gpuInstance->gpu, gi);
    int s = 0;
    std::vector<uint32_t> starts;
    if (gp == nullptr || !CiGeometry(gpuInstance, gi, profile, &s, &starts)) return NVML_ERROR_NOT_SUPPORTED;
    info->id = profile;
    info->sliceCount = static_cast<unsigned>(s);
    info->instanceCount = gp->compute_slices / static_cast<unsigned>(s);
    info->multiprocessorCount =
        ComputeInstanceSmCount(ModelOf(gpuInstance->gpu), *gp, static_cast<uint32_t>(s));
    info->sharedCopyEngineCount = gp->copy_engines;
    info->sharedDecoderCount = gp->decoders;
    info->sharedEncoderCount = 0;
    info->sharedJpegCount = gp->jpegs;
    info->sharedOfaCount = gp->ofas;
    if constexpr (!std::is_same_v<Info, nvmlComputeInstanceProfileInfo_t>) {
      const int gs = static_cast<int>(gp->compute_slices);
      const std::string name = s == gs ? "MIG " + gp->name : "MIG " + std::to_string(s) + "c." + gp->name;
      std::snprintf(info->name, sizeof(info->name), "%s", name.c_str());
    }
    if constexpr (std::is_same_v<Info, nvmlComputeInstanceProfileInfo_v3_t>) info->capabilities = 0;
    return NVML_SUCCESS;
  });
}

// Creates a compute instance of profile `profileId` at compute slice
// `wanted_start` (-1: the first free placement).
nvmlReturn_t CreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned profileId, int wanted_start,
                                   uint32_t wanted_size, nvmlComputeInstance_t* out) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(gpuInstance, [&](GpuInstanceRecord& gi) {
    int s = 0;
    std::vector<uint32_t> starts;
    if (!CiGeometry(gpuInstance, gi, profileId, &s, &starts)) return NVML_ERROR_INVALID_ARGUMENT;
    if (wanted_start >= 0 &&
        (wanted_size != static_cast<uint32_t>(s) ||
         std::find(starts.begin(), starts.end(), static_cast<uint32_t>(wanted_start)) == starts.end())) {
      return NVML_ERROR_INVALID_ARGUMENT;  // not one of the profile's placements
    }
    int start = -1;
    for (uint32_t candidate : starts) {
      if (wanted_start >= 0 && static_cast<int>(candidate) != wanted_start) continue;
      if (RangeFree(gi, candidate, static_cast<uint32_t>(s))) {
        start = static_cast<int>(candidate);
        break;
      }
    }
    if (start < 0) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (int i = 0; i < kMaxComputeInstances; ++i) {
      ComputeInstanceRecord& ci = gi.cis[i];
      if (ci.in_use) continue;
      ci = ComputeInstanceRecord{
          1, gi.next_ci_id++, profileId, static_cast<uint32_t>(start), static_cast<uint32_t>(s), 0};
      *out = CiHandle(gpuInstance, i);
      return NVML_SUCCESS;
    }
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
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

// info->version selects the layout: nvmlComputeInstanceProfileInfo_v2 or _v3.
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance,
                                                           unsigned int profile, unsigned int engProfile,
                                                           nvmlComputeInstanceProfileInfo_v2_t* info) {
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (info->version == nvmlComputeInstanceProfileInfo_v3) {
    return CiProfileInfo(gpuInstance, profile, engProfile,
                         reinterpret_cast<nvmlComputeInstanceProfileInfo_v3_t*>(info));
  }
  if (info->version != nvmlComputeInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  return CiProfileInfo(gpuInstance, profile, engProfile, info);
}

// The placements of a profile in the GPU instance, taken or not.
nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpuInstance,
                                                                 unsigned int profileId,
                                                                 nvmlComputeInstancePlacement_t* placements,
                                                                 unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(gpuInstance, [&](const GpuInstanceRecord& gi) {
    int s = 0;
    std::vector<uint32_t> starts;
    if (!CiGeometry(gpuInstance, gi, profileId, &s, &starts)) return NVML_ERROR_NOT_SUPPORTED;
    const unsigned n = static_cast<unsigned>(starts.size());
    if (placements != nullptr && *count < n) {
      *count = n;
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; placements != nullptr && i < n; ++i)
      placements[i] = {starts[i], static_cast<unsigned>(s)};
    *count = n;
    return NVML_SUCCESS;
  });
}

// How many more instances of the profile fit, created one after another.
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance,
                                                                unsigned int profileId, unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(gpuInstance, [&](const GpuInstanceRecord& gi) {
    int s = 0;
    std::vector<uint32_t> starts;
    if (!CiGeometry(gpuInstance, gi, profileId, &s, &starts)) return NVML_ERROR_NOT_SUPPORTED;
    std::vector<std::pair<uint32_t, uint32_t>> taken;  // [start, end) of instances, real and counted
    for (const ComputeInstanceRecord& ci : gi.cis) {
      if (ci.in_use) taken.emplace_back(ci.start, ci.start + ci.size);
    }
    unsigned n = 0;
    for (uint32_t start : starts) {
      const uint32_t end = start + static_cast<uint32_t>(s);
      if (std::any_of(taken.begin(), taken.end(),
                      [&](auto& t) { return t.first < end && start < t.second; })) {
        continue;
      }
      taken.emplace_back(start, end);
      ++n;
    }
    *count = n;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                  nvmlComputeInstance_t* computeInstance) {
  return CreateComputeInstance(gpuInstance, profileId, -1, 0, computeInstance);
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, const nvmlComputeInstancePlacement_t* placement,
    nvmlComputeInstance_t* computeInstance) {
  if (placement == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return CreateComputeInstance(gpuInstance, profileId, static_cast<int>(placement->start), placement->size,
                               computeInstance);
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
  return NvmlEntry(computeInstance, [&](ComputeInstanceRecord& ci) {
    const GpuInstanceRecord& gi = Gpu(computeInstance->gpu).gis[computeInstance->gi];
    if (InstanceInUse(computeInstance->gpu, gi.id, ci.id)) return NVML_ERROR_IN_USE;
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

// info->device is the MIG device the compute instance forms (its UUID is the
// MIG device's), info->gpuInstance its GPU instance.
nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                           nvmlComputeInstanceInfo_t* info) {
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(computeInstance, [&](const ComputeInstanceRecord& ci) {
    const int gpu = computeInstance->gpu, gi = computeInstance->gi;
    info->device = &Library().mig_devices[gpu][gi][computeInstance->slot];
    info->gpuInstance = &Library().gis[gpu][gi];
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
