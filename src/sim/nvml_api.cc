// The simulated NVML (libnvidia-ml.so.1): device identity, memory, utilisation,
// processes, topology, MIG and XID events, all read from the shared state that
// the simulated CUDA driver writes. NVML does not register the calling process
// as a GPU user (monitoring is not a compute context).
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#pragma GCC visibility push(default)
#include <nvml.h>
#pragma GCC visibility pop

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "sim/catalog.h"
#include "sim/config.h"
#include "sim/state.h"

using namespace tessera::sim;

struct nvmlDevice_st {
  uint32_t magic;
  int gpu;
  int gi;  // GPU-instance slot, -1 for the physical device
  int ci;  // compute-instance slot
};
struct nvmlGpuInstance_st {
  uint32_t magic;
  int gpu;
  int slot;
};
struct nvmlComputeInstance_st {
  uint32_t magic;
  int gpu;
  int gi;
  int slot;
};
struct nvmlEventSet_st {
  uint32_t magic;
  struct Registration {
    int gpu;
    unsigned long long types;
    uint64_t seen_xids;
  };
  std::vector<Registration> regs;
};

namespace {

constexpr uint32_t kDeviceMagic = 0x4E564D01, kGiMagic = 0x4E564D02, kCiMagic = 0x4E564D03,
                   kSetMagic = 0x4E564D04;

struct Nvml {
  std::mutex mu;  // guards everything below
  int refs = 0;
  std::unique_ptr<SimState> state;
  nvmlDevice_st devices[kMaxGpus];
  nvmlDevice_st mig_devices[kMaxGpus][kMaxGpuInstances][kMaxComputeInstances];
  nvmlGpuInstance_st gis[kMaxGpus][kMaxGpuInstances];
  nvmlComputeInstance_st cis[kMaxGpus][kMaxGpuInstances][kMaxComputeInstances];
};

Nvml& N() {
  static Nvml* n = new Nvml();
  return *n;
}

template <typename F>
nvmlReturn_t Guard(F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return NVML_ERROR_MEMORY;
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

#define NVML_LOCKED std::lock_guard<std::mutex> nvml_lock_(N().mu)

nvmlReturn_t Ready() {
  return N().refs > 0 && N().state ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

nvmlReturn_t Dev(nvmlDevice_t d, const nvmlDevice_st** out) {
  if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
  if (d == nullptr || d->magic != kDeviceMagic) return NVML_ERROR_INVALID_ARGUMENT;
  if (d->gpu < 0 || d->gpu >= N().state->gpu_count()) return NVML_ERROR_INVALID_ARGUMENT;
  *out = d;
  return NVML_SUCCESS;
}

StateFile* F() {
  return N().state->file();
}
GpuRecord& G(int gpu) {
  return F()->gpus[gpu];
}

nvmlReturn_t CopyOut(char* dst, unsigned int length, const std::string& s) {
  if (dst == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < s.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(dst, s.c_str(), s.size() + 1);
  return NVML_SUCCESS;
}

const MigProfile* GiProfile(int gpu, const GpuInstanceRecord& gi) {
  const GpuModel* m = FindModel(G(gpu).model_key);
  return m ? FindMigProfileById(*m, gi.profile_id) : nullptr;
}

// The MIG device UUID: derived from the parent's and the instance ids.
std::string MigUuid(int gpu, const GpuInstanceRecord& gi, const ComputeInstanceRecord& ci) {
  std::string parent = G(gpu).uuid;  // GPU-xxxxxxxx-....
  char buf[64];
  std::snprintf(buf, sizeof(buf), "MIG-%s", parent.c_str() + 4);
  std::string u = buf;
  char tail[16];
  std::snprintf(tail, sizeof(tail), "%02x%02x", gi.id & 0xFF, ci.id & 0xFF);
  u.replace(u.size() - 4, 4, tail);
  return u;
}

}  // namespace

extern "C" {

// ----- init -----
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  (void)flags;
  return Guard([&]() -> nvmlReturn_t {
    NVML_LOCKED;
    Nvml& n = N();
    if (n.refs > 0) {
      ++n.refs;
      return NVML_SUCCESS;
    }
    if (!n.state) {
      bool is_explicit = false;
      auto config = ConfigFromEnvironment(&is_explicit);
      if (!config.ok()) {
        std::fprintf(stderr, "tessera sim: %s\n", config.error().message.c_str());
        return NVML_ERROR_DRIVER_NOT_LOADED;
      }
      auto state = SimState::Open(SimState::DefaultDir(), *config, is_explicit);
      if (!state.ok()) {
        std::fprintf(stderr, "tessera sim: %s\n", state.error().message.c_str());
        return NVML_ERROR_DRIVER_NOT_LOADED;
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
    }
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
  return Guard([&]() -> nvmlReturn_t {
    NVML_LOCKED;
    if (N().refs == 0) return NVML_ERROR_UNINITIALIZED;
    --N().refs;  // the mapping stays: handles given out remain valid pointers
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
  return Guard([&]() -> nvmlReturn_t {
    NVML_LOCKED;
    if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
    return CopyOut(version, length, F()->driver_version_string);
  });
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  return Guard([&]() -> nvmlReturn_t {
    NVML_LOCKED;
    if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
    return CopyOut(version, length, std::string("13.") + F()->driver_version_string);
  });
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* v) {
  return Guard([&]() -> nvmlReturn_t {
    if (v == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    NVML_LOCKED;
    if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
    *v = static_cast<int>(F()->driver_version);
    return NVML_SUCCESS;
  });
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) {
  return nvmlSystemGetCudaDriverVersion(v);
}

nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char* name, unsigned int length) {
  return Guard([&]() -> nvmlReturn_t {
    if (name == nullptr || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/%u/comm", pid);
    FILE* f = std::fopen(path, "r");
    if (f == nullptr) return NVML_ERROR_NOT_FOUND;
    char buf[256] = {};
    if (std::fgets(buf, sizeof(buf), f) == nullptr) buf[0] = '\0';
    std::fclose(f);
    buf[std::strcspn(buf, "\n")] = '\0';
    std::snprintf(name, length, "%s", buf);
    return NVML_SUCCESS;
  });
}

// ----- enumeration and identity -----
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  return Guard([&]() -> nvmlReturn_t {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    NVML_LOCKED;
    if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
    *count = F()->gpu_count;
    return NVML_SUCCESS;
  });
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
  return nvmlDeviceGetCount_v2(count);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  return Guard([&]() -> nvmlReturn_t {
    if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    NVML_LOCKED;
    if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
    if (index >= F()->gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &N().devices[index];
    return NVML_SUCCESS;
  });
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  return Guard([&]() -> nvmlReturn_t {
    if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    NVML_LOCKED;
    if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
    for (unsigned g = 0; g < F()->gpu_count; ++g) {
      if (std::strcmp(G(static_cast<int>(g)).uuid, uuid) == 0) {
        *device = &N().devices[g];
        return NVML_SUCCESS;
      }
      for (int i = 0; i < kMaxGpuInstances; ++i) {
        const GpuInstanceRecord& gi = G(static_cast<int>(g)).gis[i];
        if (!gi.in_use) continue;
        for (int c = 0; c < kMaxComputeInstances; ++c) {
          if (gi.cis[c].in_use && MigUuid(static_cast<int>(g), gi, gi.cis[c]) == uuid) {
            *device = &N().mig_devices[g][i][c];
            return NVML_SUCCESS;
          }
        }
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

static nvmlReturn_t ByPciBusId(const char* busId, nvmlDevice_t* device) {
  if (busId == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  NVML_LOCKED;
  if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  if (std::sscanf(busId, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) < 3) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  for (unsigned g = 0; g < F()->gpu_count; ++g) {
    if (G(static_cast<int>(g)).pci_bus == bus && domain == 0 && dev == 0) {
      *device = &N().devices[g];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* busId, nvmlDevice_t* device) {
  return Guard([&]() -> nvmlReturn_t { return ByPciBusId(busId, device); });
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* busId, nvmlDevice_t* device) {
  return Guard([&]() -> nvmlReturn_t { return ByPciBusId(busId, device); });
}

nvmlReturn_t nvmlDeviceGetHandleBySerial(const char* serial, nvmlDevice_t* device) {
  return Guard([&]() -> nvmlReturn_t {
    if (serial == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    NVML_LOCKED;
    if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
    for (unsigned g = 0; g < F()->gpu_count; ++g) {
      if (std::strcmp(G(static_cast<int>(g)).serial, serial) == 0) {
        *device = &N().devices[g];
        return NVML_SUCCESS;
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

#define DEVICE_BODY(d, ...)                                           \
  return Guard([&]() -> nvmlReturn_t {                                \
    NVML_LOCKED;                                                      \
    const nvmlDevice_st* dv = nullptr;                                \
    if (nvmlReturn_t r_ = Dev(d, &dv); r_ != NVML_SUCCESS) return r_; \
    const int gpu = dv->gpu;                                          \
    (void)gpu;                                                        \
    __VA_ARGS__                                                       \
  })

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    if (dv->gi >= 0) return NVML_ERROR_INVALID_ARGUMENT;
    *index = static_cast<unsigned>(gpu);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  DEVICE_BODY(device, {
    std::string n = G(gpu).name;
    if (dv->gi >= 0) {
      const GpuInstanceRecord& gi = G(gpu).gis[dv->gi];
      const MigProfile* p = GiProfile(gpu, gi);
      n += " MIG " + (p ? p->name : std::string("?"));
    }
    return CopyOut(name, length, n);
  });
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  DEVICE_BODY(device, {
    if (dv->gi >= 0) {
      const GpuInstanceRecord& gi = G(gpu).gis[dv->gi];
      if (!gi.in_use || !gi.cis[dv->ci].in_use) return NVML_ERROR_NOT_FOUND;
      return CopyOut(uuid, length, MigUuid(gpu, gi, gi.cis[dv->ci]));
    }
    return CopyOut(uuid, length, G(gpu).uuid);
  });
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char* serial, unsigned int length) {
  DEVICE_BODY(device, { return CopyOut(serial, length, G(gpu).serial); });
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minorNumber) {
  if (minorNumber == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    *minorNumber = G(gpu).minor;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t* type) {
  if (type == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    *type = NVML_BRAND_NVIDIA;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t* arch) {
  if (arch == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    const GpuModel* m = FindModel(G(gpu).model_key);
    *arch = m ? m->architecture : NVML_DEVICE_ARCH_UNKNOWN;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    const GpuModel* m = FindModel(G(gpu).model_key);
    if (m == nullptr) return NVML_ERROR_UNKNOWN;
    *major = static_cast<int>(m->cc_major);
    *minor = static_cast<int>(m->cc_minor);
    return NVML_SUCCESS;
  });
}

static void FillPci(int gpu, nvmlPciInfo_t* pci) {
  const GpuModel* m = FindModel(G(gpu).model_key);
  std::memset(pci, 0, sizeof(*pci));
  pci->domain = 0;
  pci->bus = G(gpu).pci_bus;
  pci->device = 0;
  pci->pciDeviceId = m ? m->pci_device_id : 0;
  pci->pciSubSystemId = m ? ((m->pci_device_id & 0xFFFF0000u) | 0x10DE) : 0;
  std::snprintf(pci->busId, sizeof(pci->busId), "%s", G(gpu).pci_bus_id);
  std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0", G(gpu).pci_bus);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    FillPci(gpu, pci);
    return NVML_SUCCESS;
  });
}
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return nvmlDeviceGetPciInfo_v3(device, pci);
}
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return nvmlDeviceGetPciInfo_v3(device, pci);
}

nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int* numCores) {
  if (numCores == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    const GpuModel* m = FindModel(G(gpu).model_key);
    const unsigned per_sm =
        m && m->cc_major == 7 && m->cc_minor == 5
            ? 64
            : (m && m->cc_major == 8 && m->cc_minor == 9 ? 128 : (m && m->cc_major == 9 ? 128 : 64));
    *numCores = G(gpu).sm_count * per_sm;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t* mode) {
  if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    *mode = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode) {
  if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    *mode = NVML_COMPUTEMODE_DEFAULT;
    return NVML_SUCCESS;
  });
}

// ----- memory -----
static void MemoryOf(const nvmlDevice_st* dv, uint64_t* total, uint64_t* used) {
  SimState& st = *N().state;
  StateLock lock(st);
  st.ReclaimDeadLocked();
  const int gpu = dv->gpu;
  if (dv->gi >= 0) {
    const GpuInstanceRecord& gi = G(gpu).gis[dv->gi];
    const MigProfile* p = GiProfile(gpu, gi);
    *total = p ? p->memory_mib << 20 : 0;
    *used = 0;  // CUDA work is not placed in MIG instances by the simulator
    return;
  }
  *total = G(gpu).total_bytes;
  *used = std::min(st.UsedBytesLocked(gpu), *total);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    uint64_t total, used;
    MemoryOf(dv, &total, &used);
    memory->total = total;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  DEVICE_BODY(device, {
    uint64_t total, used;
    MemoryOf(dv, &total, &used);
    memory->total = total;
    memory->reserved = 0;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t* bar1) {
  if (bar1 == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    bar1->bar1Total = 256ull << 20;
    bar1->bar1Used = 2ull << 20;
    bar1->bar1Free = bar1->bar1Total - bar1->bar1Used;
    return NVML_SUCCESS;
  });
}

// ----- utilisation -----
static constexpr int64_t kUtilWindowNs = 1000000000LL;  // NVML's 1 s sample period

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    if (dv->gi >= 0) return NVML_ERROR_NOT_SUPPORTED;
    SimState& st = *N().state;
    StateLock lock(st);
    const int64_t now = MonotonicNs();
    int64_t busy = 0;
    for (auto& [pid, ns] : st.BusyByProcessLocked(gpu, now - kUtilWindowNs, now)) busy += ns;
    utilization->gpu =
        static_cast<unsigned>(std::min<int64_t>(100, (busy * 100 + kUtilWindowNs / 2) / kUtilWindowNs));
    utilization->memory = utilization->gpu / 2;  // a proxy: kernels touch memory (docs/sim.md)
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* processSamplesCount,
                                             unsigned long long lastSeenTimeStamp) {
  if (processSamplesCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    if (dv->gi >= 0) return NVML_ERROR_NOT_SUPPORTED;
    SimState& st = *N().state;
    StateLock lock(st);
    const int64_t now_ns = MonotonicNs();
    const int64_t now_us = RealtimeUs();
    // Window: since lastSeenTimeStamp (CPU time in µs), at most 10 s back, and
    // the last second when the caller has seen nothing yet.
    int64_t from_ns = now_ns - kUtilWindowNs;
    if (lastSeenTimeStamp > 0) {
      const int64_t back_us = now_us - static_cast<int64_t>(lastSeenTimeStamp);
      if (back_us <= 0) {
        *processSamplesCount = 0;
        return NVML_ERROR_NOT_FOUND;
      }
      from_ns = now_ns - std::min<int64_t>(back_us * 1000, 10 * kUtilWindowNs);
    }
    const auto busy = st.BusyByProcessLocked(gpu, from_ns, now_ns);
    if (busy.empty()) {
      *processSamplesCount = 0;
      return NVML_ERROR_NOT_FOUND;
    }
    if (utilization == nullptr || *processSamplesCount < busy.size()) {
      *processSamplesCount = static_cast<unsigned>(busy.size());
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    const int64_t window = now_ns - from_ns;
    unsigned i = 0;
    for (const auto& [pid, ns] : busy) {
      nvmlProcessUtilizationSample_t& s = utilization[i++];
      s.pid = static_cast<unsigned>(pid);
      s.timeStamp = static_cast<unsigned long long>(now_us);
      s.smUtil = static_cast<unsigned>(std::min<int64_t>(100, (ns * 100 + window / 2) / window));
      s.memUtil = s.smUtil / 2;
      s.encUtil = 0;
      s.decUtil = 0;
    }
    *processSamplesCount = i;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type,
                                  unsigned long long lastSeenTimeStamp, nvmlValueType_t* sampleValType,
                                  unsigned int* sampleCount, nvmlSample_t* samples) {
  if (sampleValType == nullptr || sampleCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (type != NVML_GPU_UTILIZATION_SAMPLES) return NVML_ERROR_NOT_SUPPORTED;
  DEVICE_BODY(device, {
    // One sample per 1/6 s over the last 2 s (NVML's GPU utilisation sampling rate).
    constexpr int kSamples = 12;
    constexpr int64_t kPeriod = kUtilWindowNs / 6;
    *sampleValType = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (samples == nullptr) {
      *sampleCount = kSamples;
      return NVML_SUCCESS;
    }
    SimState& st = *N().state;
    StateLock lock(st);
    const int64_t now_ns = MonotonicNs(), now_us = RealtimeUs();
    unsigned n = 0;
    for (int k = kSamples - 1; k >= 0 && n < *sampleCount; --k) {
      const int64_t end = now_ns - k * kPeriod, start = end - kPeriod;
      const unsigned long long ts = static_cast<unsigned long long>(now_us - k * kPeriod / 1000);
      if (ts <= lastSeenTimeStamp) continue;
      int64_t busy = 0;
      for (auto& [pid, ns] : st.BusyByProcessLocked(gpu, start, end)) busy += ns;
      samples[n].timeStamp = ts;
      samples[n].sampleValue.uiVal = static_cast<unsigned>(std::min<int64_t>(100, busy * 100 / kPeriod));
      ++n;
    }
    *sampleCount = n;
    return n == 0 ? NVML_ERROR_NOT_FOUND : NVML_SUCCESS;
  });
}

// ----- processes -----
}  // extern "C"

template <typename Info>
static nvmlReturn_t RunningProcesses(nvmlDevice_t device, unsigned int* infoCount, Info* infos,
                                     bool with_instances) {
  if (infoCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    if (dv->gi >= 0) {
      *infoCount = 0;
      return NVML_SUCCESS;
    }
    SimState& st = *N().state;
    StateLock lock(st);
    st.ReclaimDeadLocked();
    std::vector<const ProcessRecord*> procs;
    for (const ProcessRecord& p : F()->processes) {
      if (p.in_use && (p.contexts[gpu] > 0 || p.used_bytes[gpu] > 0)) procs.push_back(&p);
    }
    if (infos == nullptr || *infoCount < procs.size()) {
      const bool empty_ok = procs.empty();
      *infoCount = static_cast<unsigned>(procs.size());
      return empty_ok ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (size_t i = 0; i < procs.size(); ++i) {
      std::memset(&infos[i], 0, sizeof(Info));
      infos[i].pid = static_cast<unsigned>(procs[i]->pid);
      infos[i].usedGpuMemory = procs[i]->used_bytes[gpu];
      if constexpr (!std::is_same_v<Info, nvmlProcessInfo_v1_t>) {
        (void)with_instances;
        infos[i].gpuInstanceId = kNoInstance;
        infos[i].computeInstanceId = kNoInstance;
      }
    }
    *infoCount = static_cast<unsigned>(procs.size());
    return NVML_SUCCESS;
  });
}

extern "C" {

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos) {
  return RunningProcesses(device, infoCount, infos, true);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_v2_t* infos) {
  return RunningProcesses(device, infoCount, infos, true);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                  nvmlProcessInfo_v1_t* infos) {
  return RunningProcesses(device, infoCount, infos, false);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                      nvmlProcessInfo_t* infos) {
  (void)infos;
  if (infoCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    *infoCount = 0;  // no graphics contexts on a simulated GPU
    return NVML_SUCCESS;
  });
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                      nvmlProcessInfo_v2_t* infos) {
  return nvmlDeviceGetGraphicsRunningProcesses_v3(device, infoCount,
                                                  reinterpret_cast<nvmlProcessInfo_t*>(infos));
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                   nvmlProcessInfo_v1_t* infos) {
  return nvmlDeviceGetGraphicsRunningProcesses_v3(device, infoCount,
                                                  reinterpret_cast<nvmlProcessInfo_t*>(infos));
}

}  // extern "C"
