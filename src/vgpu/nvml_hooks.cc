// The NVML entry points libvgpu intercepts, so that nvidia-smi and monitoring
// inside the container see the slice: only granted devices, and memory totals
// equal to the limit with the container's usage.
#include <cstring>

#include "vgpu/runtime.h"

#define TESSERA_EXPORT extern "C" __attribute__((visibility("default")))

using tessera::vgpu::Runtime;
using tessera::vgpu::runtime;

namespace {

Runtime* nvml_runtime() {
  Runtime& rt = runtime();
  return rt.load_nvml() ? &rt : nullptr;
}

// Applies the container's limit to a device's memory figures. Returns false
// when the device has no limit (figures left as the driver gave them).
bool slice_memory(Runtime& rt, nvmlDevice_t device, unsigned long long* total, unsigned long long* free,
                  unsigned long long* used) {
  if (!rt.accounting) return false;
  rt.on_nvml_initialised();
  int e = rt.nvml_entry(device);
  if (e < 0) return false;
  int dev = rt.nvml_devices[e].region_index;
  uint64_t limit = rt.region.memory_limit(dev);
  if (limit == 0) return false;
  rt.region.reclaim_dead_throttled(100'000'000);
  rt.reconcile_pools();
  uint64_t in_use = rt.region.memory_used(dev);
  uint64_t headroom = in_use < limit ? limit - in_use : 0;
  uint64_t f = (headroom < *free || rt.config.oversubscribe) ? headroom : *free;
  *total = limit;
  *free = f;
  *used = limit - f;
  return true;
}

nvmlReturn_t after_init(Runtime& rt, nvmlReturn_t rc) {
  if (rc == NVML_SUCCESS) rt.on_nvml_initialised();
  return rc;
}

nvmlReturn_t visible_count(Runtime& rt, nvmlReturn_t rc, unsigned int* count) {
  if (rc != NVML_SUCCESS || count == nullptr || !rt.config.source_is_allocation()) return rc;
  rt.on_nvml_initialised();
  *count = static_cast<unsigned int>(rt.nvml_visible_count);
  return rc;
}

nvmlReturn_t handle_by_index(Runtime& rt, unsigned int index, nvmlDevice_t* device,
                             nvmlReturn_t (*real)(unsigned int, nvmlDevice_t*)) {
  if (!rt.config.source_is_allocation()) return real(index, device);
  if (!rt.nvml_ready.load(std::memory_order_acquire)) {
    unsigned int n = 0;
    nvmlReturn_t rc = rt.nvml.nvmlDeviceGetCount_v2(&n);  // NVML_ERROR_UNINITIALIZED etc. as the library says
    if (rc != NVML_SUCCESS) return rc;
    rt.on_nvml_initialised();
  }
  if (index >= static_cast<unsigned int>(rt.nvml_visible_count)) return NVML_ERROR_INVALID_ARGUMENT;
  return real(static_cast<unsigned int>(rt.nvml_visible[index]), device);
}

nvmlReturn_t only_visible(Runtime& rt, nvmlReturn_t rc, nvmlDevice_t* device) {
  if (rc != NVML_SUCCESS || device == nullptr || !rt.config.source_is_allocation()) return rc;
  rt.on_nvml_initialised();
  int e = rt.nvml_entry(*device);
  if (e < 0 || !rt.nvml_devices[e].visible) {
    *device = nullptr;
    return NVML_ERROR_NOT_FOUND;
  }
  return rc;
}

}  // namespace

TESSERA_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  return after_init(*rt, rt->nvml.nvmlInit_v2());
}

TESSERA_EXPORT nvmlReturn_t nvmlInit(void) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  return after_init(*rt, rt->nvml.nvmlInit != nullptr ? rt->nvml.nvmlInit() : rt->nvml.nvmlInit_v2());
}

TESSERA_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr || rt->nvml.nvmlInitWithFlags == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  return after_init(*rt, rt->nvml.nvmlInitWithFlags(flags));
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  return visible_count(*rt, rt->nvml.nvmlDeviceGetCount_v2(deviceCount), deviceCount);
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* deviceCount) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  auto real =
      rt->nvml.nvmlDeviceGetCount != nullptr ? rt->nvml.nvmlDeviceGetCount : rt->nvml.nvmlDeviceGetCount_v2;
  return visible_count(*rt, real(deviceCount), deviceCount);
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  return handle_by_index(*rt, index, device, rt->nvml.nvmlDeviceGetHandleByIndex_v2);
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  auto real = rt->nvml.nvmlDeviceGetHandleByIndex != nullptr ? rt->nvml.nvmlDeviceGetHandleByIndex
                                                             : rt->nvml.nvmlDeviceGetHandleByIndex_v2;
  return handle_by_index(*rt, index, device, real);
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr || rt->nvml.nvmlDeviceGetHandleByUUID == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  return only_visible(*rt, rt->nvml.nvmlDeviceGetHandleByUUID(uuid, device), device);
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr || rt->nvml.nvmlDeviceGetHandleByPciBusId_v2 == nullptr)
    return NVML_ERROR_LIBRARY_NOT_FOUND;
  return only_visible(*rt, rt->nvml.nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device), device);
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr || rt->nvml.nvmlDeviceGetIndex == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  nvmlReturn_t rc = rt->nvml.nvmlDeviceGetIndex(device, index);
  if (rc != NVML_SUCCESS || index == nullptr || !rt->config.source_is_allocation()) return rc;
  rt->on_nvml_initialised();
  int e = rt->nvml_entry(device);
  for (int v = 0; v < rt->nvml_visible_count; ++v) {
    if (rt->nvml_visible[v] == e) {
      *index = static_cast<unsigned int>(v);
      return rc;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr || rt->nvml.nvmlDeviceGetMemoryInfo == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  nvmlReturn_t rc = rt->nvml.nvmlDeviceGetMemoryInfo(device, memory);
  if (rc == NVML_SUCCESS && memory != nullptr)
    slice_memory(*rt, device, &memory->total, &memory->free, &memory->used);
  return rc;
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr || rt->nvml.nvmlDeviceGetMemoryInfo_v2 == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  nvmlReturn_t rc = rt->nvml.nvmlDeviceGetMemoryInfo_v2(device, memory);
  if (rc == NVML_SUCCESS && memory != nullptr &&
      slice_memory(*rt, device, &memory->total, &memory->free, &memory->used))
    memory->reserved = 0;  // the slice's total is all the container can have: free + used == total
  return rc;
}
