// The NVML entry points libvgpu intercepts, so that nvidia-smi and monitoring
// inside the container see the slice: only granted devices, memory totals
// equal to the limit with the container's usage, and only the container's own
// processes.
#include <cstdlib>
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
  if (rc != NVML_SUCCESS || count == nullptr || !rt.config.filters_devices()) return rc;
  rt.on_nvml_initialised();
  *count = static_cast<unsigned int>(rt.nvml_visible_count);
  return rc;
}

nvmlReturn_t handle_by_index(Runtime& rt, unsigned int index, nvmlDevice_t* device,
                             nvmlReturn_t (*real)(unsigned int, nvmlDevice_t*)) {
  if (!rt.config.filters_devices()) return real(index, device);
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
  if (rc != NVML_SUCCESS || device == nullptr || !rt.config.filters_devices()) return rc;
  rt.on_nvml_initialised();
  int e = rt.nvml_entry(*device);
  if (e < 0 || !rt.nvml_devices[e].visible) {
    *device = nullptr;
    return NVML_ERROR_NOT_FOUND;
  }
  return rc;
}

// The running-process lists (compute or graphics, any ABI version `Info`):
// the driver's list reduced to this container's own processes — those with a
// live slot in the region, matched by the pid NVML reports (the slot's
// host_pid, else its container pid) — on granted devices, each reported with
// the memory the region accounts to it when the device has a limit, so the
// list adds up to the `used` of the memory view. NVML's buffer protocol is
// kept: with `infos` NULL or `*infoCount` too small, *infoCount is set to the
// number of (own) entries and NVML_ERROR_INSUFFICIENT_SIZE is returned (or
// NVML_SUCCESS when there are none).
template <typename Info>
nvmlReturn_t own_processes(Runtime& rt, nvmlDevice_t device, unsigned int* infoCount, Info* infos,
                           nvmlReturn_t (*real)(nvmlDevice_t, unsigned int*, Info*)) {
  if (real == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  if (!rt.accounting || infoCount == nullptr) return real(device, infoCount, infos);
  rt.on_nvml_initialised();
  // The caller sized its buffer for its own processes: ask the driver for the
  // whole list into ours.
  constexpr unsigned int kOnStack = 128;
  Info on_stack[kOnStack];
  Info* all = on_stack;
  Info* heap = nullptr;
  unsigned int n = kOnStack;
  nvmlReturn_t rc = real(device, &n, all);
  for (int attempt = 0; rc == NVML_ERROR_INSUFFICIENT_SIZE && attempt < 4; ++attempt) {
    unsigned int capacity = n + 32;  // processes may start between the calls
    free(heap);
    heap = static_cast<Info*>(malloc(sizeof(Info) * capacity));
    if (heap == nullptr) return NVML_ERROR_MEMORY;
    all = heap;
    n = capacity;
    rc = real(device, &n, all);
  }
  if (rc != NVML_SUCCESS) {
    free(heap);
    return rc == NVML_ERROR_INSUFFICIENT_SIZE ? NVML_ERROR_UNKNOWN : rc;
  }
  int e =
      rt.nvml_entry(device);  // -1: a handle libvgpu does not list (e.g. a MIG device): filtered all the same
  bool granted = e < 0 || rt.nvml_devices[e].visible;
  int region_dev = e >= 0 ? rt.nvml_devices[e].region_index : -1;
  bool sliced = rt.region.memory_limit(region_dev) != 0;
  unsigned int kept = 0;
  for (unsigned int i = 0; granted && i < n; ++i) {
    int slot = rt.region.slot_for_driver_pid(all[i].pid);
    // A slot whose owner died may still name a pid the kernel gave to someone else.
    if (slot < 0 || !rt.region.slot_owner_alive(static_cast<uint32_t>(slot))) continue;
    if (sliced)
      all[i].usedGpuMemory =
          rt.region.raw()->processes[slot].memory_used[region_dev].load(std::memory_order_relaxed);
    all[kept++] = all[i];
  }
  if (infos == nullptr || *infoCount < kept) {
    *infoCount = kept;
    rc = kept == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  } else {
    memcpy(static_cast<void*>(infos), all, sizeof(Info) * kept);
    *infoCount = kept;
  }
  free(heap);
  return rc;
}

// Per-process utilisation, reduced the same way to this container's own
// processes (samples of other containers' pids and shares dropped). NVML's
// protocol is kept for the reduced list: NVML_ERROR_NOT_FOUND when none of
// ours ran, and with `utilization` NULL or `*count` too small, *count is set
// to the number of our samples with NVML_ERROR_INSUFFICIENT_SIZE.
nvmlReturn_t own_utilization(Runtime& rt, nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
                             unsigned int* count, unsigned long long since) {
  auto real = rt.nvml.nvmlDeviceGetProcessUtilization;
  if (real == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  if (!rt.accounting || count == nullptr) return real(device, utilization, count, since);
  rt.on_nvml_initialised();
  constexpr unsigned int kOnStack = 128;
  nvmlProcessUtilizationSample_t on_stack[kOnStack];
  nvmlProcessUtilizationSample_t* all = on_stack;
  nvmlProcessUtilizationSample_t* heap = nullptr;
  unsigned int n = kOnStack;
  nvmlReturn_t rc = real(device, all, &n, since);
  for (int attempt = 0; rc == NVML_ERROR_INSUFFICIENT_SIZE && attempt < 4; ++attempt) {
    unsigned int capacity = n + 32;
    free(heap);
    heap = static_cast<nvmlProcessUtilizationSample_t*>(malloc(sizeof(*heap) * capacity));
    if (heap == nullptr) return NVML_ERROR_MEMORY;
    all = heap;
    n = capacity;
    rc = real(device, all, &n, since);
  }
  if (rc != NVML_SUCCESS) {  // NVML_ERROR_NOT_FOUND (nothing ran) included: passed on
    free(heap);
    if (rc == NVML_ERROR_NOT_FOUND) *count = 0;
    return rc == NVML_ERROR_INSUFFICIENT_SIZE ? NVML_ERROR_UNKNOWN : rc;
  }
  int e = rt.nvml_entry(device);
  bool granted = e < 0 || rt.nvml_devices[e].visible;
  unsigned int kept = 0;
  for (unsigned int i = 0; granted && i < n; ++i) {
    int slot = rt.region.slot_for_driver_pid(all[i].pid);
    if (slot < 0 || !rt.region.slot_owner_alive(static_cast<uint32_t>(slot))) continue;
    all[kept++] = all[i];
  }
  if (kept == 0) {
    *count = 0;
    rc = NVML_ERROR_NOT_FOUND;
  } else if (utilization == nullptr || *count < kept) {
    *count = kept;
    rc = NVML_ERROR_INSUFFICIENT_SIZE;
  } else {
    memcpy(static_cast<void*>(utilization), all, sizeof(*all) * kept);
    *count = kept;
  }
  free(heap);
  return rc;
}

}  // namespace

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                            nvmlProcessUtilizationSample_t* utilization,
                                                            unsigned int* processSamplesCount,
                                                            unsigned long long lastSeenTimeStamp) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  return own_utilization(*rt, device, utilization, processSamplesCount, lastSeenTimeStamp);
}

#define TESSERA_PROCESS_LIST(name, Info)                                                        \
  TESSERA_EXPORT nvmlReturn_t name(nvmlDevice_t device, unsigned int* infoCount, Info* infos) { \
    Runtime* rt = nvml_runtime();                                                               \
    if (rt == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;                                     \
    return own_processes(*rt, device, infoCount, infos, rt->nvml.name);                         \
  }
TESSERA_PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t)
TESSERA_PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
TESSERA_PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t)
TESSERA_PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t)
TESSERA_PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t)
TESSERA_PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t)
#undef TESSERA_PROCESS_LIST

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

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* pciBusId, nvmlDevice_t* device) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  auto real = rt->nvml.nvmlDeviceGetHandleByPciBusId != nullptr ? rt->nvml.nvmlDeviceGetHandleByPciBusId
                                                                : rt->nvml.nvmlDeviceGetHandleByPciBusId_v2;
  if (real == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  return only_visible(*rt, real(pciBusId, device), device);
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetHandleBySerial(const char* serial, nvmlDevice_t* device) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  if (rt->nvml.nvmlDeviceGetHandleBySerial == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  return only_visible(*rt, rt->nvml.nvmlDeviceGetHandleBySerial(serial, device), device);
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  Runtime* rt = nvml_runtime();
  if (rt == nullptr || rt->nvml.nvmlDeviceGetIndex == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  nvmlReturn_t rc = rt->nvml.nvmlDeviceGetIndex(device, index);
  if (rc != NVML_SUCCESS || index == nullptr || !rt->config.filters_devices()) return rc;
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
