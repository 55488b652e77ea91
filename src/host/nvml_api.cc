#include "host/nvml_api.h"

#include <dlfcn.h>

namespace tessera::host {

std::string NvmlErrorText(const NvmlApi& api, nvmlReturn_t code) {
  std::string text = "NVML error " + std::to_string(static_cast<int>(code));
  if (api.ErrorString != nullptr) {
    if (const char* message = api.ErrorString(code)) text += " (" + std::string(message) + ")";
  }
  return text;
}

bool HasMigEntryPoints(const NvmlApi& api) {
  return api.DeviceGetMigMode && api.DeviceSetMigMode && api.DeviceGetGpuInstanceProfileInfo &&
         api.DeviceGetGpuInstances && api.DeviceGetGpuInstanceById &&
         api.DeviceGetGpuInstancePossiblePlacements && api.DeviceCreateGpuInstanceWithPlacement &&
         api.GpuInstanceDestroy && api.GpuInstanceGetInfo && api.GpuInstanceGetComputeInstanceProfileInfo &&
         api.GpuInstanceCreateComputeInstance && api.GpuInstanceGetComputeInstances &&
         api.ComputeInstanceGetInfo && api.ComputeInstanceDestroy;
}

Result<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Load(const std::string& name) {
  std::unique_ptr<NvmlLibrary> library(new NvmlLibrary());
  library->handle_ = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library->handle_ == nullptr) {
    const char* why = ::dlerror();
    return Error{"cannot load NVML '" + name + "': " + (why ? why : "unknown error") +
                 " (is the NVIDIA driver installed and its library directory visible?)"};
  }
  std::string missing;
  auto resolve = [&](auto& slot, const char* symbol, bool required) {
    void* address = ::dlsym(library->handle_, symbol);
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(address);
    if (address == nullptr && required) missing += (missing.empty() ? "" : ", ") + std::string(symbol);
  };
  NvmlApi& api = library->api_;
  resolve(api.Init, "nvmlInit_v2", true);
  resolve(api.Shutdown, "nvmlShutdown", true);
  resolve(api.DeviceGetCount, "nvmlDeviceGetCount_v2", true);
  resolve(api.DeviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2", true);
  resolve(api.DeviceGetUUID, "nvmlDeviceGetUUID", true);
  resolve(api.DeviceGetName, "nvmlDeviceGetName", true);
  resolve(api.DeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo", true);
  resolve(api.ErrorString, "nvmlErrorString", false);
  resolve(api.DeviceGetIndex, "nvmlDeviceGetIndex", false);
  resolve(api.DeviceGetNumGpuCores, "nvmlDeviceGetNumGpuCores", false);
  resolve(api.DeviceGetCudaComputeCapability, "nvmlDeviceGetCudaComputeCapability", false);
  resolve(api.DeviceGetNumaNodeId, "nvmlDeviceGetNumaNodeId", false);
  resolve(api.DeviceGetMigMode, "nvmlDeviceGetMigMode", false);
  resolve(api.DeviceGetPciInfo, "nvmlDeviceGetPciInfo_v3", false);
  resolve(api.DeviceGetNvLinkState, "nvmlDeviceGetNvLinkState", false);
  resolve(api.DeviceGetNvLinkRemotePciInfo, "nvmlDeviceGetNvLinkRemotePciInfo_v2", false);
  resolve(api.DeviceGetP2PStatus, "nvmlDeviceGetP2PStatus", false);
  resolve(api.EventSetCreate, "nvmlEventSetCreate", false);
  resolve(api.DeviceRegisterEvents, "nvmlDeviceRegisterEvents", false);
  resolve(api.EventSetWait, "nvmlEventSetWait_v2", false);
  resolve(api.EventSetFree, "nvmlEventSetFree", false);
  resolve(api.DeviceGetUtilizationRates, "nvmlDeviceGetUtilizationRates", false);
  resolve(api.DeviceGetComputeRunningProcesses, "nvmlDeviceGetComputeRunningProcesses_v3", false);
  resolve(api.DeviceGetProcessUtilization, "nvmlDeviceGetProcessUtilization", false);
  resolve(api.DeviceSetMigMode, "nvmlDeviceSetMigMode", false);
  resolve(api.DeviceGetGpuInstanceProfileInfo, "nvmlDeviceGetGpuInstanceProfileInfo", false);
  resolve(api.DeviceGetGpuInstances, "nvmlDeviceGetGpuInstances", false);
  resolve(api.DeviceGetGpuInstanceById, "nvmlDeviceGetGpuInstanceById", false);
  resolve(api.DeviceGetGpuInstancePossiblePlacements, "nvmlDeviceGetGpuInstancePossiblePlacements_v2", false);
  resolve(api.DeviceCreateGpuInstanceWithPlacement, "nvmlDeviceCreateGpuInstanceWithPlacement", false);
  resolve(api.GpuInstanceDestroy, "nvmlGpuInstanceDestroy", false);
  resolve(api.GpuInstanceGetInfo, "nvmlGpuInstanceGetInfo", false);
  resolve(api.GpuInstanceGetComputeInstanceProfileInfo, "nvmlGpuInstanceGetComputeInstanceProfileInfo",
          false);
  resolve(api.GpuInstanceCreateComputeInstance, "nvmlGpuInstanceCreateComputeInstance", false);
  resolve(api.GpuInstanceGetComputeInstances, "nvmlGpuInstanceGetComputeInstances", false);
  resolve(api.ComputeInstanceGetInfo, "nvmlComputeInstanceGetInfo_v2", false);
  resolve(api.ComputeInstanceDestroy, "nvmlComputeInstanceDestroy", false);
  if (!missing.empty()) return Error{"NVML library '" + name + "' lacks required entry points: " + missing};
  return library;
}

NvmlLibrary::~NvmlLibrary() {
  if (handle_ != nullptr) ::dlclose(handle_);
}

}  // namespace tessera::host
