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
  rt.refresh_limits();
  rt.region.verify(dev);
  limit = rt.region.memory_limit(dev);
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

// The driver's whole list of `Item`s for a device, as NVML's size protocol
// gives it: `fetch(buffer, &n)` fills up to n items and sets n. Starts in a
// buffer on the stack and grows on the heap while the driver answers
// NVML_ERROR_INSUFFICIENT_SIZE (entries may appear between calls), four
// times at most. Not thread-safe; one per call.
template <typename Item>
class DriverList {
 public:
  DriverList() = default;
  DriverList(const DriverList&) = delete;
  DriverList& operator=(const DriverList&) = delete;
  ~DriverList() { free(heap_); }

  // NVML_SUCCESS, the driver's error, NVML_ERROR_MEMORY, or
  // NVML_ERROR_UNKNOWN when the list kept growing.
  template <typename Fetch>
  nvmlReturn_t fetch(Fetch fetch) {
    size_ = kOnStack;
    nvmlReturn_t rc = fetch(items_, &size_);
    for (int attempt = 0; rc == NVML_ERROR_INSUFFICIENT_SIZE && attempt < 4; ++attempt) {
      unsigned int capacity = size_ + 32;
      free(heap_);
      heap_ = static_cast<Item*>(malloc(sizeof(Item) * capacity));
      if (heap_ == nullptr) return NVML_ERROR_MEMORY;
      items_ = heap_;
      size_ = capacity;
      rc = fetch(items_, &size_);
    }
    return rc == NVML_ERROR_INSUFFICIENT_SIZE ? NVML_ERROR_UNKNOWN : rc;
  }

  // Keeps, in order, the items of this container's own processes on a
  // granted device: those whose pid has a live slot in the region (a slot
  // whose owner died may still name a pid the kernel gave to someone else).
  // `adjust(item, slot)` may rewrite a kept item. Returns how many are kept.
  template <typename Adjust>
  unsigned int keep_own(Runtime& rt, nvmlDevice_t device, Adjust adjust) {
    int e = rt.nvml_entry(
        device);  // -1: a handle libvgpu does not list (e.g. a MIG device): filtered all the same
    bool granted = e < 0 || rt.nvml_devices[e].visible;
    unsigned int kept = 0;
    for (unsigned int i = 0; granted && i < size_; ++i) {
      int slot = rt.region.slot_for_driver_pid(items_[i].pid);
      if (slot < 0 || !rt.region.slot_owner_alive(static_cast<uint32_t>(slot))) continue;
      adjust(items_[i], slot);
      items_[kept++] = items_[i];
    }
    return kept;
  }

  // Copies the first `n` items to `out`.
  void copy_to(Item* out, unsigned int n) const { memcpy(static_cast<void*>(out), items_, sizeof(Item) * n); }

 private:
  static constexpr unsigned int kOnStack = 128;
  Item on_stack_[kOnStack];
  Item* items_ = on_stack_;
  Item* heap_ = nullptr;
  unsigned int size_ = 0;
};

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
  DriverList<Info> all;
  nvmlReturn_t rc = all.fetch([&](Info* buffer, unsigned int* n) { return real(device, n, buffer); });
  if (rc != NVML_SUCCESS) return rc;
  int e = rt.nvml_entry(device);
  int region_dev = e >= 0 ? rt.nvml_devices[e].region_index : -1;
  bool sliced = rt.region.memory_limit(region_dev) != 0;
  unsigned int kept = all.keep_own(rt, device, [&](Info& info, int slot) {
    if (sliced)
      info.usedGpuMemory =
          rt.region.raw()->processes[slot].memory_used[region_dev].load(std::memory_order_relaxed);
  });
  if (infos == nullptr || *infoCount < kept) {
    *infoCount = kept;
    return kept == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  all.copy_to(infos, kept);
  *infoCount = kept;
  return NVML_SUCCESS;
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
  DriverList<nvmlProcessUtilizationSample_t> all;
  nvmlReturn_t rc = all.fetch([&](nvmlProcessUtilizationSample_t* buffer, unsigned int* n) {
    return real(device, buffer, n, since);
  });
  if (rc != NVML_SUCCESS) {  // NVML_ERROR_NOT_FOUND (nothing ran) included: passed on
    if (rc == NVML_ERROR_NOT_FOUND) *count = 0;
    return rc;
  }
  unsigned int kept = all.keep_own(rt, device, [](nvmlProcessUtilizationSample_t&, int) {});
  if (kept == 0) {
    *count = 0;
    return NVML_ERROR_NOT_FOUND;
  }
  if (utilization == nullptr || *count < kept) {
    *count = kept;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  all.copy_to(utilization, kept);
  *count = kept;
  return NVML_SUCCESS;
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
