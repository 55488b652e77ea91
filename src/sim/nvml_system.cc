// The NVML library itself: initialisation (reference counted; the first
// nvmlInit attaches the shared state, creating it from the environment if
// need be) and shutdown, error strings, system queries (driver, NVML and CUDA
// versions), and the accessors and handle checks the other NVML files use.
#include <cstdio>
#include <cstring>
#include <string>

#include "sim/config.h"
#include "sim/nvml_internal.h"

namespace tessera::sim::nvml {

Nvml& Library() {
  static Nvml* library = new Nvml();  // never destroyed: handles point into it
  return *library;
}

nvmlReturn_t CheckInit() {
  return Library().refs > 0 && Library().state ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

nvmlReturn_t ResolveDevice(nvmlDevice_t handle, const nvmlDevice_st** out) {
  if (handle == nullptr || handle->magic != kDeviceMagic) return NVML_ERROR_INVALID_ARGUMENT;
  if (handle->gpu < 0 || handle->gpu >= Library().state->gpu_count()) return NVML_ERROR_INVALID_ARGUMENT;
  if (handle->gi >= 0) {  // a MIG device handle dies with its compute instance
    const GpuInstanceRecord& gi = Gpu(handle->gpu).gis[handle->gi];
    if (!gi.in_use || !gi.cis[handle->ci].in_use) return NVML_ERROR_INVALID_ARGUMENT;
  }
  *out = handle;
  return NVML_SUCCESS;
}

nvmlReturn_t ResolveGpuInstance(nvmlGpuInstance_t handle, GpuInstanceRecord** out) {
  if (handle == nullptr || handle->magic != kGiMagic) return NVML_ERROR_INVALID_ARGUMENT;
  GpuInstanceRecord& gi = Gpu(handle->gpu).gis[handle->slot];
  if (!gi.in_use) return NVML_ERROR_INVALID_ARGUMENT;
  *out = &gi;
  return NVML_SUCCESS;
}

nvmlReturn_t ResolveComputeInstance(nvmlComputeInstance_t handle, ComputeInstanceRecord** out) {
  if (handle == nullptr || handle->magic != kCiMagic) return NVML_ERROR_INVALID_ARGUMENT;
  GpuInstanceRecord& gi = Gpu(handle->gpu).gis[handle->gi];
  if (!gi.in_use || !gi.cis[handle->slot].in_use) return NVML_ERROR_INVALID_ARGUMENT;
  *out = &gi.cis[handle->slot];
  return NVML_SUCCESS;
}

StateFile* File() {
  return Library().state->file();
}

GpuRecord& Gpu(int gpu) {
  return File()->gpus[gpu];
}

const GpuModel& ModelOf(int gpu) {
  const GpuModel* m = FindModel(Gpu(gpu).model_key);
  static const GpuModel kEmpty{};
  return m ? *m : kEmpty;
}

const MigProfile* GiProfile(int gpu, const GpuInstanceRecord& gi) {
  const GpuModel* m = FindModel(Gpu(gpu).model_key);
  return m ? FindMigProfileById(*m, gi.profile_id) : nullptr;
}

nvmlReturn_t CopyOut(char* dst, unsigned int length, const std::string& s) {
  if (dst == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < s.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(dst, s.c_str(), s.size() + 1);
  return NVML_SUCCESS;
}

namespace {

// Attaches the shared state and sets up every handle; false (with a message
// on stderr) when the configuration or the state cannot be used.
bool AttachState(Nvml& n) {
  bool is_explicit = false;
  auto config = ConfigFromEnvironment(&is_explicit);
  if (!config.ok()) {
    std::fprintf(stderr, "tessera sim: %s\n", config.error().message.c_str());
    return false;
  }
  auto state = SimState::Open(SimState::DefaultDir(), *config, is_explicit);
  if (!state.ok()) {
    std::fprintf(stderr, "tessera sim: %s\n", state.error().message.c_str());
    return false;
  }
  n.state = std::move(*state);
  for (int g = 0; g < kMaxGpus; ++g) {
    n.devices[g] = {kDeviceMagic, g, -1, -1};
    for (int i = 0; i < kMaxGpuInstances; ++i) {
      n.gis[g][i] = {kGiMagic, g, i};
      for (int c = 0; c < kMaxComputeInstances; ++c) {
        n.mig_devices[g][i][c] = {kDeviceMagic, g, i, c};
        n.cis[g][i][c] = {kCiMagic, g, i, c};
      }
    }
  }
  ApplyContainerView();
  return true;
}

}  // namespace

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  (void)flags;
  return Guard([&]() -> nvmlReturn_t {
    Nvml& n = Library();
    std::lock_guard<std::mutex> lock(n.mu);
    if (n.refs > 0) {
      ++n.refs;
      return NVML_SUCCESS;
    }
    if (!n.state && !AttachState(n)) return NVML_ERROR_DRIVER_NOT_LOADED;
    n.refs = 1;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlInit_v2(void) {
  return nvmlInitWithFlags(0);
}
nvmlReturn_t nvmlInit(void) {
  return nvmlInitWithFlags(0);
}

nvmlReturn_t nvmlShutdown(void) {
  return NvmlEntry([] {
    --Library().refs;  // the mapping stays: handles given out remain valid pointers
    return NVML_SUCCESS;
  });
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_IRQ_ISSUE:
      return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
      return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "GPU access blocked by the operating system";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "Driver/library version mismatch";
    case NVML_ERROR_IN_USE:
      return "In use by another client";
    case NVML_ERROR_MEMORY:
      return "Insufficient Memory";
    case NVML_ERROR_NO_DATA:
      return "No data";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "Insufficient resources";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Argument version mismatch";
    case NVML_ERROR_NOT_READY:
      return "Not ready";
    case NVML_ERROR_INVALID_STATE:
      return "Invalid state";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return NvmlEntry([&] { return CopyOut(version, length, File()->driver_version_string); });
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  return NvmlEntry(
      [&] { return CopyOut(version, length, std::string("13.") + File()->driver_version_string); });
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* v) {
  if (v == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry([&] {
    *v = static_cast<int>(File()->driver_version);
    return NVML_SUCCESS;
  });
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) {
  return nvmlSystemGetCudaDriverVersion(v);
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::nvml
