#include "vgpu/runtime.h"

#include "contract/container_contract.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <strings.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <new>

#include "contract/container_contract.h"
#include "vgpu/log.h"

namespace tessera::vgpu {
namespace {

using DlsymFn = void* (*)(void*, const char*);

DlsymFn resolve_real_dlsym() {
  // dlvsym is not overridden, so this cannot recurse into our dlsym. glibc
  // 2.34 moved dlsym into libc under a new version; older ones have 2.2.5
  // (x86_64) or 2.17 (aarch64).
  static const char* const kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
  for (const char* v : kVersions) {
    if (void* p = dlvsym(RTLD_NEXT, "dlsym", v)) return reinterpret_cast<DlsymFn>(p);
  }
  return nullptr;
}

alignas(Runtime) unsigned char g_runtime_storage[sizeof(Runtime)];
Runtime* g_runtime = nullptr;
pthread_once_t g_once = PTHREAD_ONCE_INIT;

void atfork_prepare() {
  Runtime& rt = *g_runtime;
  for (AllocationMap* map : rt.allocation_maps) map->lock_all();
  rt.graph_memory.lock_for_fork();
}

void atfork_parent() {
  Runtime& rt = *g_runtime;
  rt.graph_memory.unlock_after_fork();
  for (size_t i = std::size(rt.allocation_maps); i-- > 0;) rt.allocation_maps[i]->unlock_all();
}

void atfork_child() {
  atfork_parent();
  Runtime& rt = *g_runtime;
  // The child inherits no device memory and no contexts (CUDA does not survive
  // fork); it accounts afresh under its own slot.
  for (AllocationMap* map : rt.allocation_maps) map->clear();
  rt.graph_memory.reset_in_child();
  new (&rt.contexts_mu) std::mutex();
  for (int i = 0; i < kMaxDevices; ++i) {
    rt.contexts_on_device[i] = 0;
    rt.context_charge[i] = 0;
    rt.primary_refs[i].store(0);
    rt.reserved_before_[i].store(false);
  }
  rt.region.after_fork_child();
}

template <typename T>
void resolve(void* lib, const char* name, T* slot) {
  *slot = reinterpret_cast<T>(real_dlsym(lib, name));
}

void initialise() {
  Runtime* rt = new (g_runtime_storage) Runtime();
  g_runtime = rt;
  rt->config = load_config_from_process_env();
  set_log_level(rt->config.log_level);
  for (const auto& problem : rt->config.problems) log_event(LogLevel::kError, "%s", problem.c_str());
  if (rt->config.control_disabled) log_event(LogLevel::kInfo, "CUDA_DISABLE_CONTROL set: passing through");
  if (const char* v = getenv(contract::kContextOverheadEnv)) {
    uint64_t b = 0;
    if (parse_memory_size(v, &b))
      rt->context_overhead_env = static_cast<int64_t>(b);
    else
      log_event(LogLevel::kError, "TESSERA_CONTEXT_OVERHEAD=%s is not a size; ignored", v);
  }

  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    log_event(LogLevel::kInfo, "libcuda.so.1 not loadable (%s); CUDA hooks inactive", dlerror());
  } else {
    rt->cuda_loaded = true;
#define TESSERA_RESOLVE_HOOKED(sym, decl, base, since, ptsz) resolve(lib, #sym, &rt->cuda.sym);
    TESSERA_CUDA_HOOKS(TESSERA_RESOLVE_HOOKED)
#undef TESSERA_RESOLVE_HOOKED
#define TESSERA_RESOLVE_USED(sym) resolve(lib, #sym, &rt->cuda.sym);
    TESSERA_CUDA_USED(TESSERA_RESOLVE_USED)
#undef TESSERA_RESOLVE_USED
  }
  pthread_atfork(&atfork_prepare, &atfork_parent, &atfork_child);
}

}  // namespace

void* real_dlsym(void* handle, const char* name) {
  static DlsymFn fn = resolve_real_dlsym();
  return fn == nullptr ? nullptr : fn(handle, name);
}

Runtime& runtime() {
  pthread_once(&g_once, &initialise);
  return *g_runtime;
}

void format_uuid(const unsigned char b[16], char* out, size_t out_len) {
  snprintf(out, out_len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
           b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

bool Runtime::load_nvml() {
  if (nvml_loaded_.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> guard(init_mu_);
  if (nvml_loaded_.load(std::memory_order_relaxed)) return true;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    log_event(LogLevel::kInfo, "libnvidia-ml.so.1 not loadable (%s)", dlerror());
    return false;
  }
#define TESSERA_RESOLVE_NVML(sym) resolve(lib, #sym, &nvml.sym);
  TESSERA_NVML_HOOKS(TESSERA_RESOLVE_NVML)
  TESSERA_NVML_USED(TESSERA_RESOLVE_NVML)
#undef TESSERA_RESOLVE_NVML
  bool ok = nvml.nvmlInit_v2 != nullptr && nvml.nvmlDeviceGetCount_v2 != nullptr &&
            nvml.nvmlDeviceGetHandleByIndex_v2 != nullptr;
  nvml_loaded_.store(ok, std::memory_order_release);
  return ok;
}

void Runtime::ensure_region_locked() {
  if (region_attempted_) return;
  region_attempted_ = true;
  if (config.control_disabled) return;
  char error[512] = {};
  if (region.open_file(config.region_path.c_str(), error, sizeof(error))) {
    log_event(LogLevel::kDebug, "region %s open", config.region_path.c_str());
  } else {
    log_event(LogLevel::kError, "%s; enforcing limits for this process alone", error);
    char error2[256] = {};
    if (!region.open_private(error2, sizeof(error2))) {
      log_event(LogLevel::kError, "%s; memory is not accounted", error2);
      return;
    }
  }
  if (!region.claim_slot()) {
    log_event(LogLevel::kError, "no free process slot in region %s; allocations will be refused",
              config.region_path.c_str());
  }
  accounting = true;
}

void Runtime::setup_region_device(DeviceView* view, int ordinal) {
  if (!accounting || !view->visible) return;
  uint64_t limit = config.memory_limit_for(view->uuid, ordinal);
  uint64_t existing = limit;
  view->region_index = region.find_or_add_device(view->uuid, limit, &existing);
  if (view->region_index < 0) {
    log_event(LogLevel::kError, "region device table full; %s is not accounted", view->uuid);
    return;
  }
  // The limit this process holds the device to, whatever the region says
  // later (a process of the container can write the region): the limits
  // file's, else the stricter of this process's own configuration and what
  // the container's first process recorded (0 = none).
  uint64_t enforced = limit;
  if (!config.limits_from_file && existing != limit) {
    enforced = limit == 0 ? existing : existing == 0 ? limit : (existing < limit ? existing : limit);
    log_event(LogLevel::kWarn,
              "%s: region holds limit %llu bytes, this process was configured with %llu; holding it to %llu",
              view->uuid, static_cast<unsigned long long>(existing), static_cast<unsigned long long>(limit),
              static_cast<unsigned long long>(enforced));
  }
  region.set_authoritative_limit(view->region_index, enforced);
  used_devices_.fetch_or(1u << view->region_index, std::memory_order_relaxed);
  region.verify(view->region_index);
  existing = enforced;
  // The compute quota likewise: the limits file's (0 = none, whatever the
  // region says), else this process's configuration, else the stricter of it
  // and the region's (a region lowered from outside only holds the tenant
  // back). The limiter binds to this figure and puts it back into the region.
  int cores = config.cores_for(view->uuid, ordinal);
  if (cores < 0 || cores >= 100) cores = 0;
  std::atomic<uint32_t>& region_quota = region.raw()->devices[view->region_index].core_quota_percent;
  uint32_t quota = static_cast<uint32_t>(cores);
  if (!config.limits_from_file) {
    uint32_t recorded = region_quota.load(std::memory_order_relaxed);
    if (recorded >= 100) recorded = 0;
    if (recorded != 0 && (quota == 0 || recorded < quota)) quota = recorded;
  }
  authoritative_cores[view->region_index].store(quota, std::memory_order_relaxed);
  if (region_quota.load(std::memory_order_relaxed) != quota) {
    if (quota != 0 || config.limits_from_file) region_quota.store(quota, std::memory_order_relaxed);
  }
  log_event(LogLevel::kInfo, "device %d %s: limit %llu bytes", ordinal, view->uuid,
            static_cast<unsigned long long>(existing));
}

void Runtime::on_cuda_initialised() {
  if (cuda_devices_ready.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> guard(init_mu_);
  if (cuda_devices_ready.load(std::memory_order_relaxed)) return;
  ensure_region_locked();
  int count = 0;
  if (cuda.cuDeviceGetCount == nullptr || cuda.cuDeviceGetCount(&count) != CUDA_SUCCESS) count = 0;
  if (count > kMaxDevices) count = kMaxDevices;
  int visible = 0;
  for (int i = 0; i < count; ++i) {
    CUdevice handle = 0;
    DeviceView& view = cuda_devices[i];
    cuda_handles[i] = -1;
    if (cuda.cuDeviceGet(&handle, i) != CUDA_SUCCESS) {
      view.visible = false;
      continue;
    }
    cuda_handles[i] = handle;
    CUuuid uuid{};
    if (cuda.cuDeviceGetUuid_v2 != nullptr && cuda.cuDeviceGetUuid_v2(&uuid, handle) == CUDA_SUCCESS) {
      format_uuid(reinterpret_cast<const unsigned char*>(uuid.bytes), view.uuid, sizeof(view.uuid));
    }
    view.visible = config.device_visible(view.uuid);
    if (!view.visible) continue;
    setup_region_device(&view, visible);
    cuda_visible[visible++] = i;
  }
  cuda_device_count = count;
  cuda_visible_count = visible;
  if (config.source == ConfigSource::kAllocation) {
    for (const auto& g : config.grants) {
      bool found = false;
      for (int i = 0; i < count; ++i) found = found || strcasecmp(cuda_devices[i].uuid, g.uuid.c_str()) == 0;
      if (!found) log_event(LogLevel::kWarn, "granted device %s is not present", g.uuid.c_str());
    }
  }
  cuda_devices_ready.store(true, std::memory_order_release);
}

void Runtime::on_nvml_initialised() {
  if (nvml_ready.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> guard(init_mu_);
  if (nvml_ready.load(std::memory_order_relaxed)) return;
  ensure_region_locked();
  unsigned int count = 0;
  if (nvml.nvmlDeviceGetCount_v2 == nullptr || nvml.nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS) count = 0;
  if (count > static_cast<unsigned>(kMaxDevices)) count = kMaxDevices;
  int visible = 0;
  for (unsigned i = 0; i < count; ++i) {
    DeviceView& view = nvml_devices[i];
    nvmlDevice_t h = nullptr;
    if (nvml.nvmlDeviceGetHandleByIndex_v2(i, &h) != NVML_SUCCESS) {
      view.visible = false;
      continue;
    }
    nvml_handles[i] = h;
    if (nvml.nvmlDeviceGetUUID != nullptr) nvml.nvmlDeviceGetUUID(h, view.uuid, sizeof(view.uuid));
    view.visible = config.device_visible(view.uuid);
    if (!view.visible) continue;
    setup_region_device(&view, visible);
    nvml_visible[visible++] = static_cast<int>(i);
  }
  nvml_device_count = static_cast<int>(count);
  nvml_visible_count = visible;
  nvml_ready.store(true, std::memory_order_release);
}

int Runtime::cuda_entry(CUdevice dev) const {
  for (int i = 0; i < cuda_device_count; ++i)
    if (cuda_handles[i] == dev) return i;
  return -1;
}

int Runtime::region_index_for_cuda_device(CUdevice dev) const {
  int i = cuda_entry(dev);
  return i < 0 ? -1 : cuda_devices[i].region_index;
}

bool Runtime::cuda_device_visible(CUdevice dev) const {
  if (!cuda_devices_ready.load(std::memory_order_acquire)) return true;
  int i = cuda_entry(dev);
  return i < 0 ? !config.filters_devices() : cuda_devices[i].visible;
}

int Runtime::current_device(CUdevice* handle) {
  CUdevice dev = 0;
  if (cuda.cuCtxGetDevice == nullptr || cuda.cuCtxGetDevice(&dev) != CUDA_SUCCESS) return -1;
  if (handle != nullptr) *handle = dev;
  int i = cuda_entry(dev);
  if (i < 0) return -1;
  return cuda_devices[i].visible ? cuda_devices[i].region_index : kHiddenDevice;
}

int Runtime::nvml_entry(nvmlDevice_t handle) {
  for (int i = 0; i < nvml_device_count; ++i)
    if (nvml_handles[i] == handle) return i;
  return -1;
}

bool Runtime::reserve(int device, uint64_t bytes, const char* what) {
  if (!accounting || device < 0) return true;
  refresh_limits();
  const bool first = device < kMaxDevices && !reserved_before_[device].exchange(true);
  ReserveOutcome out = region.reserve(device, bytes);
  if (!out.ok && reconcile_pools())
    out = region.reserve(device, bytes);  // a trimmed pool may have given memory back
  // On doubt, the driver's figures decide: when the region was found changed
  // from outside libvgpu, and at a process's first reservation on a device
  // while other processes of the container are alive (they may have emptied
  // their records before it started).
  if (out.ok && out.limit != 0 && (out.repaired != 0 || (first && region.others_active()))) {
    const uint64_t hidden = hidden_usage(device);
    if (hidden > 0 && (out.used + bytes > out.limit || hidden > out.limit - out.used - bytes)) {
      region.release(device, bytes);
      region.raw()->devices[device].oom_refusals.fetch_add(1, std::memory_order_relaxed);
      log_event(LogLevel::kWarn,
                "%s refused: out of memory on %s: the driver shows this container's processes holding %llu "
                "bytes more than the region records (changed from outside libvgpu?): limit %llu bytes, "
                "recorded %llu, requested %llu",
                what, region.raw()->devices[device].uuid, static_cast<unsigned long long>(hidden),
                static_cast<unsigned long long>(out.limit), static_cast<unsigned long long>(out.used),
                static_cast<unsigned long long>(bytes));
      return false;
    }
  }
  if (out.ok) return true;
  log_event(LogLevel::kWarn, "%s refused: out of memory on %s: limit %llu bytes, used %llu, requested %llu",
            what, region.raw()->devices[device].uuid, static_cast<unsigned long long>(out.limit),
            static_cast<unsigned long long>(out.used), static_cast<unsigned long long>(bytes));
  return false;
}

bool Runtime::charge_context(int device) {
  if (!accounting || device < 0 || device >= kMaxDevices) return true;
  std::lock_guard<std::mutex> guard(contexts_mu);
  if (contexts_on_device[device]++ > 0) return true;
  uint64_t estimate =
      context_overhead_env >= 0
          ? static_cast<uint64_t>(context_overhead_env)
          : region.raw()->devices[device].context_overhead_bytes.load(std::memory_order_relaxed);
  if (estimate == 0) return true;
  if (!reserve(device, estimate, "context creation")) {
    contexts_on_device[device]--;
    return false;
  }
  context_charge[device] = estimate;
  region.note_context_bytes(device, static_cast<int64_t>(estimate));
  return true;
}

Runtime::ContextMeasurement Runtime::measure_context_bytes(int device) {
  // NVML's per-process figure for us, minus what we have accounted ourselves:
  // the rest is the driver's context. Needs NVML and our pid as NVML reports
  // it (the slot's host_pid, else getpid()).
  ContextMeasurement out;
  out.state = kContextOverheadUnmeasurable;
  if (!load_nvml() || nvml.nvmlDeviceGetHandleByUUID == nullptr ||
      nvml.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr || nvml.nvmlInit_v2() != NVML_SUCCESS)
    return out;
  nvmlDevice_t handle = nullptr;
  if (nvml.nvmlDeviceGetHandleByUUID(region.raw()->devices[device].uuid, &handle) == NVML_SUCCESS) {
    nvmlProcessInfo_t infos[256];
    unsigned int count = 256;
    nvmlReturn_t rc = nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, &count, infos);
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
      out.state = kContextOverheadUnknown;  // a crowded device: the next process may try again
    } else if (rc == NVML_SUCCESS) {
      unsigned int me = region.own_driver_pid();
      bool listed = false;
      for (unsigned int i = 0; i < count && i < 256; ++i) {
        if (infos[i].pid != me) continue;
        listed = true;
        if (infos[i].usedGpuMemory == static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)) break;
        uint64_t mine = region.process_memory_used(device);
        out.state = kContextOverheadMeasured;
        out.bytes = infos[i].usedGpuMemory > mine ? infos[i].usedGpuMemory - mine : 0;
      }
      // Not listed: NVML names us by a host pid we do not know (a pid
      // namespace), unless we do know it.
      int slot = region.slot_index();
      if (!listed && slot >= 0 && region.raw()->processes[slot].host_pid.load(std::memory_order_relaxed) == 0)
        out.state = kContextOverheadHostPidUnknown;
    }
  }
  if (nvml.nvmlShutdown != nullptr) nvml.nvmlShutdown();
  return out;
}

bool Runtime::settle_context_charge(int device) {
  if (!accounting || device < 0 || device >= kMaxDevices || context_overhead_env >= 0) return true;
  std::lock_guard<std::mutex> guard(contexts_mu);
  if (contexts_on_device[device] != 1 || context_charge[device] != 0) return true;
  DeviceEntry& entry = region.raw()->devices[device];
  uint64_t state = entry.context_overhead_state.load(std::memory_order_acquire);
  int slot = region.slot_index();
  bool host_pid_known =
      slot >= 0 && region.raw()->processes[slot].host_pid.load(std::memory_order_relaxed) != 0;
  if (state == kContextOverheadMeasured) {
    // Measured: no NVML query. Nothing is charged yet only when another
    // process stored the figure after charge_context() looked for it (then
    // 0): charge it now, or every process starting at once with the first
    // one would go uncharged.
    uint64_t bytes = entry.context_overhead_bytes.load(std::memory_order_relaxed);
    if (bytes == 0) return true;
    if (!reserve(device, bytes, "context creation")) return false;
    context_charge[device] = bytes;
    region.note_context_bytes(device, static_cast<int64_t>(bytes));
    return true;
  }
  // Not measurable here: no NVML queries.
  if (state == kContextOverheadUnmeasurable || (state == kContextOverheadHostPidUnknown && !host_pid_known))
    return true;
  ContextMeasurement m = measure_context_bytes(device);
  if (m.state == kContextOverheadMeasured) {
    entry.context_overhead_bytes.store(m.bytes, std::memory_order_relaxed);
    log_event(LogLevel::kInfo, "context overhead on %s measured: %llu bytes", entry.uuid,
              static_cast<unsigned long long>(m.bytes));
  } else {
    log_event(LogLevel::kInfo,
              "context overhead on %s not measurable here (%s); contexts are not charged (set "
              "TESSERA_CONTEXT_OVERHEAD)",
              entry.uuid,
              m.state == kContextOverheadHostPidUnknown
                  ? "NVML does not list this process's pid: host pid unknown"
                  : "no NVML per-process figure");
  }
  if (m.state != kContextOverheadUnknown)
    entry.context_overhead_state.store(m.state, std::memory_order_release);
  if (m.state != kContextOverheadMeasured || m.bytes == 0) return true;
  if (!reserve(device, m.bytes, "context creation")) return false;
  context_charge[device] = m.bytes;
  region.note_context_bytes(device, static_cast<int64_t>(m.bytes));
  return true;
}

void Runtime::uncharge_context(int device) {
  if (!accounting || device < 0 || device >= kMaxDevices) return;
  std::lock_guard<std::mutex> guard(contexts_mu);
  if (contexts_on_device[device] == 0) return;
  contexts_on_device[device] -= 1;
  if (contexts_on_device[device] > 0 || context_charge[device] == 0) return;
  region.release(device, context_charge[device]);
  region.note_context_bytes(device, -static_cast<int64_t>(context_charge[device]));
  context_charge[device] = 0;
}

uint64_t Runtime::hidden_usage(int device) {
  // Per process of the container NVML lists: what the driver says it holds
  // beyond its slot's record (plus a slack for the driver's rounding). A
  // process whose slot was emptied from outside has all of it hidden.
  constexpr uint64_t kSlackBytes = 64ull << 20;
  if (!load_nvml() || nvml.nvmlDeviceGetHandleByUUID == nullptr ||
      nvml.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr || nvml.nvmlInit_v2() != NVML_SUCCESS)
    return 0;
  uint64_t hidden = 0;
  const Region* r = region.raw();
  nvmlDevice_t handle = nullptr;
  if (nvml.nvmlDeviceGetHandleByUUID(r->devices[device].uuid, &handle) == NVML_SUCCESS) {
    nvmlProcessInfo_t infos[256];
    unsigned int count = 256;
    if (nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, &count, infos) == NVML_SUCCESS) {
      for (unsigned int i = 0; i < count && i < 256; ++i) {
        if (infos[i].usedGpuMemory == static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)) continue;
        const int slot = region.slot_for_driver_pid(infos[i].pid);
        // A dead process's slot (not reclaimed yet) may name a pid reused by another.
        if (slot < 0 || !region.slot_owner_alive(static_cast<uint32_t>(slot))) continue;
        const uint64_t recorded =
            slot == region.slot_index()
                ? region.process_memory_used(device)
                : r->processes[slot].memory_used[device].load(std::memory_order_relaxed);
        if (infos[i].usedGpuMemory > recorded + kSlackBytes) hidden += infos[i].usedGpuMemory - recorded;
      }
    }
  }
  if (nvml.nvmlShutdown != nullptr) nvml.nvmlShutdown();
  return hidden;
}

void Runtime::refresh_limits() {
  if (config.limits_path.empty() || config.limits_unusable) return;
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  const uint64_t now = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  uint64_t last = limits_checked_ns_.load(std::memory_order_relaxed);
  if (last != 0 && now - last < 100'000'000ull) return;
  if (!limits_checked_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> guard(limits_mu_);
  struct stat st {};
  if (stat(config.limits_path.c_str(), &st) != 0) return;  // not there (yet): what holds now stays
  if (st.st_ino == limits_ino_ && st.st_size == limits_size_ && st.st_mtim.tv_sec == limits_mtime_.tv_sec &&
      st.st_mtim.tv_nsec == limits_mtime_.tv_nsec)
    return;
  limits_ino_ = st.st_ino;
  limits_size_ = st.st_size;
  limits_mtime_ = st.st_mtim;
  std::string text, error;
  bool missing = false;
  std::vector<DeviceGrant> grants;
  if (!read_small_file(config.limits_path, &text, &error, &missing)) {
    if (!missing)
      log_event(LogLevel::kError, "limits file %s: %s; the limits held so far stay",
                config.limits_path.c_str(), error.c_str());
    return;
  }
  if (!parse_limits(text.c_str(), &grants, &error)) {
    log_event(LogLevel::kError, "limits file %s is invalid (%s); the limits held so far stay",
              config.limits_path.c_str(), error.c_str());
    return;
  }
  if (config.limits_pending) {
    log_event(LogLevel::kWarn, "limits file %s appeared; its limits apply from now on",
              config.limits_path.c_str());
    config.limits_pending = false;
  }
  // Per device this process accounts: the file's limit; a device the file no
  // longer grants is held to nothing more than it holds now.
  const Region* r = region.raw();
  const uint32_t count = r->header.device_count.load(std::memory_order_acquire);
  for (uint32_t d = 0; d < count && d < kRegionMaxDevices; ++d) {
    if ((used_devices_.load(std::memory_order_relaxed) & (1u << d)) == 0) continue;
    uint64_t limit = 1;  // not granted: nothing fits
    for (const auto& g : grants)
      if (strcasecmp(g.uuid.c_str(), r->devices[d].uuid) == 0) limit = g.memory_bytes;
    if (limit != region.memory_limit(static_cast<int>(d)))
      log_event(LogLevel::kInfo, "%s: limit %llu bytes from limits file %s", r->devices[d].uuid,
                static_cast<unsigned long long>(limit), config.limits_path.c_str());
    region.set_authoritative_limit(static_cast<int>(d), limit, /*apply=*/true);
  }
}

void Runtime::oom_check(int device) {
  if (!config.oom_killer || !accounting || device < 0 || device >= kMaxDevices) return;
  uint64_t limit = region.memory_limit(device);
  if (limit == 0 || !load_nvml() || nvml.nvmlDeviceGetHandleByUUID == nullptr ||
      nvml.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr || nvml.nvmlInit_v2() != NVML_SUCCESS)
    return;
  const Region* r = region.raw();
  uint64_t container_real = 0, mine_real = 0;
  bool measured = false;
  nvmlDevice_t handle = nullptr;
  if (nvml.nvmlDeviceGetHandleByUUID(r->devices[device].uuid, &handle) == NVML_SUCCESS) {
    nvmlProcessInfo_t infos[256];
    unsigned int count = 256;
    if (nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, &count, infos) == NVML_SUCCESS) {
      measured = true;
      // NVML names processes by their host pid: matched through the slots'
      // host_pid (their container pid while that is unknown).
      unsigned int me = region.own_driver_pid();
      for (unsigned int i = 0; i < count && i < 256; ++i) {
        if (infos[i].usedGpuMemory == static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)) continue;
        bool ours = infos[i].pid == me || region.slot_for_driver_pid(infos[i].pid) >= 0;
        if (!ours) continue;
        container_real += infos[i].usedGpuMemory;
        if (infos[i].pid == me) mine_real = infos[i].usedGpuMemory;
      }
    }
  }
  if (nvml.nvmlShutdown != nullptr) nvml.nvmlShutdown();
  uint64_t mine_accounted = region.process_memory_used(device);
  if (!measured || container_real <= limit || mine_real <= mine_accounted) return;
  log_event(LogLevel::kError,
            "ACTIVE_OOM_KILLER: the container uses %llu bytes on %s, over its limit of %llu; this process "
            "holds %llu "
            "bytes of which libvgpu accounted %llu (the rest through a path it cannot see); terminating it",
            static_cast<unsigned long long>(container_real), r->devices[device].uuid,
            static_cast<unsigned long long>(limit), static_cast<unsigned long long>(mine_real),
            static_cast<unsigned long long>(mine_accounted));
  kill(getpid(), SIGKILL);
  // Still running: this process is pid 1 of its pid namespace (a container's
  // init, often the application itself in a pod), and the kernel drops
  // signals sent to it from inside its namespace that it has no handler for,
  // SIGKILL from itself included. Ending it is then the only way to terminate
  // it; as with SIGKILL, no atexit handler runs, and the parent sees 137.
  _exit(128 + SIGKILL);
}

Runtime::PoolCharge* Runtime::find_pool_locked(uint64_t pool, int device) {
  for (int i = 0; i < pool_count_; ++i)
    if (pools_[i].pool == pool) return &pools_[i];
  if (device < 0) return nullptr;
  for (int i = 0; i < pool_count_; ++i) {
    if (pools_[i].live == 0 && pools_[i].charged == 0) {  // reuse a slot whose pool holds nothing
      pools_[i] = PoolCharge{pool, device, 0, 0};
      return &pools_[i];
    }
  }
  if (pool_count_ == kMaxPools) return nullptr;
  pools_[pool_count_] = PoolCharge{pool, device, 0, 0};
  have_pools_.store(true, std::memory_order_relaxed);
  return &pools_[pool_count_++];
}

bool Runtime::reconcile_pool_locked(PoolCharge& pc) {
  cuuint64_t held = 0;
  if (cuda.cuMemPoolGetAttribute == nullptr ||
      cuda.cuMemPoolGetAttribute(reinterpret_cast<CUmemoryPool>(pc.pool),
                                 CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &held) != CUDA_SUCCESS)
    held = 0;  // destroyed pool: it holds nothing any more
  uint64_t target = pc.live > held ? pc.live : held;
  if (target > pc.charged) {
    // The driver already handed this memory to the pool: account it as it is.
    region.reserve(pc.device, target - pc.charged, /*force=*/true);
  } else if (target < pc.charged) {
    region.release(pc.device, pc.charged - target);
  }
  bool went_down = target < pc.charged;
  pc.charged = target;
  return went_down;
}

uint64_t Runtime::pool_need(uint64_t pool, int device, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(pools_mu_);
  PoolCharge* pc = find_pool_locked(pool, -1);
  if (pc == nullptr) return bytes;
  uint64_t covered = pc->charged > pc->live ? pc->charged - pc->live : 0;
  (void)device;
  return bytes > covered ? bytes - covered : 0;
}

void Runtime::pool_allocated(uint64_t pool, int device, uint64_t bytes, uint64_t reserved) {
  std::lock_guard<std::mutex> guard(pools_mu_);
  PoolCharge* pc = find_pool_locked(pool, device);
  if (pc == nullptr) return;  // too many pools: the allocation stays charged as reserved
  pc->live += bytes;
  pc->charged += reserved;
  reconcile_pool_locked(*pc);
}

void Runtime::pool_freed(uint64_t pool, uint64_t bytes) {
  std::lock_guard<std::mutex> guard(pools_mu_);
  PoolCharge* pc = find_pool_locked(pool, -1);
  if (pc == nullptr) return;
  pc->live = pc->live > bytes ? pc->live - bytes : 0;
  reconcile_pool_locked(*pc);
}

bool Runtime::reconcile_pools() {
  bool any = graph_memory.reconcile(*this);
  if (!have_pools_.load(std::memory_order_relaxed)) return any;
  std::lock_guard<std::mutex> guard(pools_mu_);
  for (int i = 0; i < pool_count_; ++i)
    if (pools_[i].charged > 0 || pools_[i].live > 0) any = reconcile_pool_locked(pools_[i]) || any;
  return any;
}

}  // namespace tessera::vgpu
