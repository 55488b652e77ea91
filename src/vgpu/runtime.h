// The process-wide state of libvgpu: configuration, the real driver and NVML
// entry points, the device tables, the shared region and this process's
// allocation records. Private to libvgpu.so.
//
// Lifetime: constructed on first use (pthread_once) in static storage and
// never destroyed, so hooks keep working from other libraries' atexit
// handlers (cudart frees memory at exit).
#pragma once

#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <nvml.h>

#include <sys/types.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "vgpu/allocation_map.h"
#include "vgpu/config.h"
#include "vgpu/cuda_decls.h"
#include "vgpu/graph_memory.h"
#include "vgpu/hook_table.h"
#include "vgpu/region.h"

namespace tessera::vgpu {

struct RealCuda {
#define TESSERA_REAL_HOOKED(sym, decl, base, since, ptsz) decltype(&::decl) sym = nullptr;
  TESSERA_CUDA_HOOKS(TESSERA_REAL_HOOKED)
#undef TESSERA_REAL_HOOKED
#define TESSERA_REAL_USED(sym) decltype(&::sym) sym = nullptr;
  TESSERA_CUDA_USED(TESSERA_REAL_USED)
#undef TESSERA_REAL_USED
};

struct RealNvml {
#define TESSERA_REAL_NVML(sym) decltype(&::sym) sym = nullptr;
  TESSERA_NVML_HOOKS(TESSERA_REAL_NVML)
  TESSERA_NVML_USED(TESSERA_REAL_NVML)
#undef TESSERA_REAL_NVML
};

inline constexpr int kMaxDevices = 16;

// One physical device as CUDA or NVML presents it to this process.
struct DeviceView {
  char uuid[kRegionUuidBytes] = {};
  int region_index = -1;  // entry in the region (-1: not accounted)
  bool visible = true;    // granted to this container
};

class Runtime {
 public:
  Config config;
  RealCuda cuda;
  RealNvml nvml;
  bool cuda_loaded = false;

  // CUDA devices, by real CUdevice handle (== driver ordinal). Filled once
  // after the first successful cuInit.
  std::atomic<bool> cuda_devices_ready{false};
  int cuda_device_count = 0;                // real
  DeviceView cuda_devices[kMaxDevices];     // by driver ordinal
  CUdevice cuda_handles[kMaxDevices] = {};  // driver ordinal -> CUdevice
  int cuda_visible[kMaxDevices] = {};       // container ordinal -> real handle
  int cuda_visible_count = 0;

  std::atomic<bool> nvml_ready{false};
  int nvml_device_count = 0;
  nvmlDevice_t nvml_handles[kMaxDevices] = {};
  DeviceView nvml_devices[kMaxDevices];
  int nvml_visible[kMaxDevices] = {};
  int nvml_visible_count = 0;

  SharedRegion region;
  bool accounting = false;  // region usable and control not disabled

  AllocationMap device_pointers;
  AllocationMap vmm_handles;
  AllocationMap arrays;
  AllocationMap mipmapped_arrays;
  AllocationMap contexts;  // CUcontext created by cuCtxCreate -> device

  // The maps above, in the order fork locks them (unlocked in reverse).
  AllocationMap* const allocation_maps[5] = {&device_pointers, &vmm_handles, &arrays, &mipmapped_arrays,
                                             &contexts};

  // Context overhead charged per device while this process holds contexts there.
  std::mutex contexts_mu;
  int contexts_on_device[kMaxDevices] = {};   // guarded by contexts_mu; by region index
  uint64_t context_charge[kMaxDevices] = {};  // guarded by contexts_mu
  int64_t context_overhead_env = -1;          // TESSERA_CONTEXT_OVERHEAD; -1 = measure

  // Called from the cuInit hook after the driver accepted it.
  void on_cuda_initialised();
  // Called from the NVML init hooks after NVML accepted it.
  void on_nvml_initialised();
  bool load_nvml();

  // Region device index of the calling thread's current context; -1 if none
  // or not accounted; kHiddenDevice if the context is on a device this
  // container was not granted (no hooked path creates one; the allocation
  // paths refuse to serve it all the same). Sets *handle to the real CUdevice
  // when not null.
  static constexpr int kHiddenDevice = -2;
  int current_device(CUdevice* handle = nullptr);
  int region_index_for_cuda_device(CUdevice dev) const;
  bool cuda_device_visible(CUdevice dev) const;
  int nvml_entry(nvmlDevice_t handle);  // index into nvml_devices, -1 if unknown

  // Reserve-then-call helpers shared by the allocation hooks.
  bool reserve(int device, uint64_t bytes, const char* what);
  void release(int device, uint64_t bytes) {
    if (accounting) region.release(device, bytes);
  }

  // Context overhead: reserved when the process's first context on a device
  // appears (before the driver creates it, when the size is known from
  // TESSERA_CONTEXT_OVERHEAD or an earlier measurement in the region), returned
  // when its last one goes. settle_context_charge() runs after the driver
  // created it and, if nobody has measured the size yet, measures it (NVML
  // per-process usage), records the outcome in the region (measured, or not
  // measurable here, so later processes skip the NVML queries) and reserves
  // it; false = it does not fit (the caller undoes the context and reports
  // out of memory).
  bool charge_context(int device);
  bool settle_context_charge(int device);
  void uncharge_context(int device);
  std::atomic<int> primary_refs[kMaxDevices] = {};  // by region index

  int cuda_entry(CUdevice dev) const;

  // The limits file (config.limits_path): at most every 100 ms, when it
  // changed (or appeared), re-read it and hold every accounted device to its
  // limits from then on. Called from reserve().
  void refresh_limits();
  // What NVML says the container's processes (the region's live slots) hold on
  // `device` beyond what their slots record; 0 when NVML cannot tell.
  uint64_t hidden_usage(int device);

  // ACTIVE_OOM_KILLER: when the container's real usage of `device` (NVML,
  // summed over the region's live processes) passes its limit and this
  // process holds memory the library did not account (a path it cannot see),
  // log why and terminate this process (SIGKILL; its memory is reclaimed).
  void oom_check(int device);

  // Stream-ordered pools: the container is charged what a pool holds, i.e.
  // max(live allocations from it, the driver's CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
  // since freed blocks stay in the pool until it is trimmed.
  // Bytes to reserve before allocating `bytes` from `pool` (0 when the pool's
  // cached memory already covers it).
  uint64_t pool_need(uint64_t pool, int device, uint64_t bytes);
  // After the driver served an allocation of `bytes` for which `reserved` was
  // reserved, or freed one (`bytes` negative direction via pool_freed).
  void pool_allocated(uint64_t pool, int device, uint64_t bytes, uint64_t reserved);
  void pool_freed(uint64_t pool, uint64_t bytes);
  // Re-reads every pool's holding, the graph memory pools' included, and moves
  // the charges (frees what trimmed pools gave back). Returns true if any
  // charge went down.
  bool reconcile_pools();

  // CUDA graph memory nodes: what the graph memory pools hold (graph_memory.h).
  GraphMemory graph_memory;

 private:
  std::mutex init_mu_;
  std::atomic<bool> nvml_loaded_{false};

  struct PoolCharge {
    uint64_t pool = 0;
    int device = -1;
    uint64_t live = 0;     // bytes of live allocations from the pool
    uint64_t charged = 0;  // bytes reserved in the region for the pool
  };
  static constexpr int kMaxPools = 64;
  std::mutex pools_mu_;
  PoolCharge pools_[kMaxPools];  // guarded by pools_mu_
  int pool_count_ = 0;           // guarded by pools_mu_
  std::atomic<bool> have_pools_{false};
  PoolCharge* find_pool_locked(uint64_t pool, int device);
  bool reconcile_pool_locked(PoolCharge& pc);
  bool region_attempted_ = false;          // guarded by init_mu_
  std::atomic<uint32_t> used_devices_{0};  // bit per region index set up by this process

 public:
  // By region index: the compute quota (percent, 0 = none) this process holds
  // the container to, whatever the region says later: the limits file's when
  // it applies, else this process's own configuration, else what the region
  // held when the device was set up. Written once per device at setup.
  std::atomic<uint32_t> authoritative_cores[kMaxDevices] = {};
  // By region index: whether this process reserved there yet (reset in a fork child).
  std::atomic<bool> reserved_before_[kMaxDevices] = {};

 private:
  std::atomic<uint64_t> limits_checked_ns_{0};
  std::mutex limits_mu_;
  ino_t limits_ino_ = 0;     // guarded by limits_mu_: the limits file as last read
  off_t limits_size_ = -1;   // guarded by limits_mu_
  timespec limits_mtime_{};  // guarded by limits_mu_
  void ensure_region_locked();
  // The context overhead on `device` by NVML's per-process figure for this
  // process: a kContextOverhead* state and, when measured, the bytes.
  struct ContextMeasurement {
    uint64_t state = kContextOverheadUnknown;
    uint64_t bytes = 0;
  };
  ContextMeasurement measure_context_bytes(int device);
  void setup_region_device(DeviceView* view, int index);
};

// The singleton; initialises libvgpu on first call (config, driver symbols).
Runtime& runtime();

// The real dlsym (glibc's), resolved without going through our override.
void* real_dlsym(void* handle, const char* name);

// Formats a CUuuid as "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
void format_uuid(const unsigned char bytes[16], char* out, size_t out_len);

}  // namespace tessera::vgpu
