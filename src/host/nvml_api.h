// NvmlApi: the NVML entry points tessera-node and `tessera run` use, as one
// table of function pointers. Production fills it from the driver's
// libnvidia-ml.so.1 with dlopen/dlsym (NvmlLibrary::Load); tests fill it with
// fakes; integration tests load the simulated GPU's library. No logic branches on which one it is.
//
// Entries marked optional may be null (an older driver, or a library that does
// not export them); the features that need them are then skipped.
#pragma once

#include <nvml.h>

#include <memory>
#include <string>

#include "base/result.h"

namespace tessera::host {

struct NvmlApi {
  // Required.
  decltype(&nvmlInit_v2) Init = nullptr;
  decltype(&nvmlShutdown) Shutdown = nullptr;
  decltype(&nvmlDeviceGetCount_v2) DeviceGetCount = nullptr;
  decltype(&nvmlDeviceGetHandleByIndex_v2) DeviceGetHandleByIndex = nullptr;
  decltype(&nvmlDeviceGetUUID) DeviceGetUUID = nullptr;
  decltype(&nvmlDeviceGetName) DeviceGetName = nullptr;
  decltype(&nvmlDeviceGetMemoryInfo) DeviceGetMemoryInfo = nullptr;
  // Optional.
  decltype(&nvmlErrorString) ErrorString = nullptr;
  decltype(&nvmlDeviceGetIndex) DeviceGetIndex = nullptr;
  decltype(&nvmlDeviceGetNumGpuCores) DeviceGetNumGpuCores = nullptr;
  decltype(&nvmlDeviceGetCudaComputeCapability) DeviceGetCudaComputeCapability = nullptr;
  decltype(&nvmlDeviceGetNumaNodeId) DeviceGetNumaNodeId = nullptr;
  decltype(&nvmlDeviceGetMigMode) DeviceGetMigMode = nullptr;
  decltype(&nvmlDeviceGetPciInfo_v3) DeviceGetPciInfo = nullptr;
  decltype(&nvmlDeviceGetNvLinkState) DeviceGetNvLinkState = nullptr;
  decltype(&nvmlDeviceGetNvLinkRemotePciInfo_v2) DeviceGetNvLinkRemotePciInfo = nullptr;
  decltype(&nvmlDeviceGetP2PStatus) DeviceGetP2PStatus = nullptr;
  decltype(&nvmlEventSetCreate) EventSetCreate = nullptr;
  decltype(&nvmlDeviceRegisterEvents) DeviceRegisterEvents = nullptr;
  decltype(&nvmlEventSetWait_v2) EventSetWait = nullptr;
  decltype(&nvmlEventSetFree) EventSetFree = nullptr;
  decltype(&nvmlDeviceGetUtilizationRates) DeviceGetUtilizationRates = nullptr;
  decltype(&nvmlDeviceGetComputeRunningProcesses_v3) DeviceGetComputeRunningProcesses = nullptr;
  decltype(&nvmlDeviceGetProcessUtilization) DeviceGetProcessUtilization = nullptr;  // optional
  // Optional, MIG (with DeviceGetMigMode above): NvmlMigDriver needs them all
  // (HasMigEntryPoints); drivers before R450 have none.
  decltype(&nvmlDeviceSetMigMode) DeviceSetMigMode = nullptr;
  decltype(&nvmlDeviceGetGpuInstanceProfileInfo) DeviceGetGpuInstanceProfileInfo = nullptr;
  decltype(&nvmlDeviceGetGpuInstances) DeviceGetGpuInstances = nullptr;
  decltype(&nvmlDeviceGetGpuInstanceById) DeviceGetGpuInstanceById = nullptr;
  decltype(&nvmlDeviceGetGpuInstancePossiblePlacements_v2) DeviceGetGpuInstancePossiblePlacements = nullptr;
  decltype(&nvmlDeviceCreateGpuInstanceWithPlacement) DeviceCreateGpuInstanceWithPlacement = nullptr;
  decltype(&nvmlGpuInstanceDestroy) GpuInstanceDestroy = nullptr;
  decltype(&nvmlGpuInstanceGetInfo) GpuInstanceGetInfo = nullptr;
  decltype(&nvmlGpuInstanceGetComputeInstanceProfileInfo) GpuInstanceGetComputeInstanceProfileInfo = nullptr;
  decltype(&nvmlGpuInstanceCreateComputeInstance) GpuInstanceCreateComputeInstance = nullptr;
  decltype(&nvmlGpuInstanceGetComputeInstances) GpuInstanceGetComputeInstances = nullptr;
  decltype(&nvmlComputeInstanceGetInfo_v2) ComputeInstanceGetInfo = nullptr;
  decltype(&nvmlComputeInstanceDestroy) ComputeInstanceDestroy = nullptr;
};

// Whether every MIG entry point is in the table.
bool HasMigEntryPoints(const NvmlApi& api);

// "NVML_ERROR_... (message)" for logs and errors; works with a partial table.
std::string NvmlErrorText(const NvmlApi& api, nvmlReturn_t code);

// A dlopen'ed NVML library and its table. The library stays loaded for the
// lifetime of this object; the table must not be used after it is destroyed.
class NvmlLibrary {
 public:
  // `name` is a file name searched like the dynamic linker does
  // (LD_LIBRARY_PATH, ld.so.cache) or a path. Fails with a clear message when
  // the library or a required entry point is missing.
  static Result<std::unique_ptr<NvmlLibrary>> Load(const std::string& name);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const NvmlApi& api() const { return api_; }

 private:
  NvmlLibrary() = default;
  void* handle_ = nullptr;
  NvmlApi api_;
};

}  // namespace tessera::host
