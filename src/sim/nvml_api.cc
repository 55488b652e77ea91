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

std::string MigUuid(int gpu, const GpuInstanceRecord& gi, const ComputeInstanceRecord& ci) {
  return MigDeviceUuid(G(gpu), gi, ci);
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
    char path[512];
    std::snprintf(path, sizeof(path), "%s/%u/comm", ProcRoot(), pid);
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
    *used = std::min(st.UsedBytesInInstanceLocked(gpu, gi.id), *total);
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
    SimState& st = *N().state;
    StateLock lock(st);
    st.ReclaimDeadLocked();
    // On a MIG device handle: the processes in its GPU instance.
    const uint32_t gi_id = dv->gi >= 0 ? G(gpu).gis[dv->gi].id : 0;
    std::vector<const ProcessRecord*> procs;
    for (const ProcessRecord& p : F()->processes) {
      if (!p.in_use || (p.contexts[gpu] == 0 && p.used_bytes[gpu] == 0)) continue;
      if (gi_id != 0 && p.gpu_instance[gpu] != gi_id) continue;
      procs.push_back(&p);
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
        const uint32_t gi = procs[i]->gpu_instance[gpu];
        infos[i].gpuInstanceId = gi != 0 ? gi : kNoInstance;
        infos[i].computeInstanceId = gi != 0 ? procs[i]->compute_instance[gpu] : kNoInstance;
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

// ===========================================================================
// Health, clocks, topology
// ===========================================================================
namespace {

// Device utilisation over the last second, 0..1 (drives temperature, power, clocks).
double RecentUtil(int gpu) {
  SimState& st = *N().state;
  StateLock lock(st);
  const int64_t now = MonotonicNs();
  int64_t busy = 0;
  for (auto& [pid, ns] : st.BusyByProcessLocked(gpu, now - 1000000000LL, now)) busy += ns;
  return std::min(1.0, static_cast<double>(busy) / 1e9);
}

const GpuModel& ModelOf(int gpu) {
  const GpuModel* m = FindModel(G(gpu).model_key);
  static const GpuModel kEmpty{};
  return m ? *m : kEmpty;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int* temp) {
  if (temp == nullptr || sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    *temp = 32 + static_cast<unsigned>(38 * RecentUtil(gpu));
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
                                               unsigned int* temp) {
  if (temp == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    switch (thresholdType) {
      case NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
        *temp = 92;
        break;
      case NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
        *temp = 89;
        break;
      case NVML_TEMPERATURE_THRESHOLD_MEM_MAX:
        *temp = 95;
        break;
      case NVML_TEMPERATURE_THRESHOLD_GPU_MAX:
        *temp = 87;
        break;
      default:
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int* speed) {
  if (speed == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, { return NVML_ERROR_NOT_SUPPORTED; });  // passively cooled parts
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
  if (power == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    const double limit = ModelOf(gpu).power_limit_w * 1000.0, idle = limit * 0.15;
    *power = static_cast<unsigned>(idle + (limit * 0.85 - idle) * RecentUtil(gpu));
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int* limit) {
  if (limit == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    *limit = ModelOf(gpu).power_limit_w * 1000;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* limit) {
  return nvmlDeviceGetPowerManagementLimit(device, limit);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* energy) {
  if (energy == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    // Idle power since boot (CLOCK_MONOTONIC), plus the busy time's extra.
    const double idle_w = ModelOf(gpu).power_limit_w * 0.15;
    *energy = static_cast<unsigned long long>(idle_w * static_cast<double>(MonotonicNs()) / 1e6);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t* pState) {
  if (pState == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    *pState = RecentUtil(gpu) > 0 ? NVML_PSTATE_0 : NVML_PSTATE_8;
    return NVML_SUCCESS;
  });
}

static unsigned MaxClock(int gpu, nvmlClockType_t type) {
  const GpuModel& m = ModelOf(gpu);
  switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
      return m.sm_clock_mhz;
    case NVML_CLOCK_MEM:
      return m.mem_clock_mhz;
    case NVML_CLOCK_VIDEO:
      return m.sm_clock_mhz * 9 / 10;
    default:
      return 0;
  }
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock) {
  if (clock == nullptr || type >= NVML_CLOCK_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    *clock = MaxClock(gpu, type);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock) {
  if (clock == nullptr || type >= NVML_CLOCK_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    // Boost clocks while busy, idle clocks otherwise; memory runs at its clock.
    const bool busy = RecentUtil(gpu) > 0;
    *clock = type == NVML_CLOCK_MEM || busy ? MaxClock(gpu, type) : 210;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t clockType, nvmlClockId_t clockId,
                                unsigned int* clockMHz) {
  if (clockId == NVML_CLOCK_ID_CURRENT) return nvmlDeviceGetClockInfo(device, clockType, clockMHz);
  return nvmlDeviceGetMaxClockInfo(device, clockType, clockMHz);
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node) {
  if (node == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    *node = static_cast<unsigned>(G(gpu).numa_node);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long* cpuSet) {
  if (cpuSet == nullptr || cpuSetSize == 0) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    // The CPUs of the GPU's NUMA node on this machine, or all CPUs when the
    // machine has no such node.
    std::memset(cpuSet, 0, cpuSetSize * sizeof(unsigned long));
    char path[96];
    std::snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", G(gpu).numa_node);
    FILE* f = std::fopen(path, "r");
    if (f == nullptr) f = std::fopen("/sys/devices/system/cpu/online", "r");
    char list[1024] = {};
    if (f != nullptr) {
      if (std::fgets(list, sizeof(list), f) == nullptr) list[0] = '\0';
      std::fclose(f);
    }
    const unsigned bits = static_cast<unsigned>(8 * sizeof(unsigned long));
    char* save = nullptr;
    for (char* tok = strtok_r(list, ",\n", &save); tok != nullptr; tok = strtok_r(nullptr, ",\n", &save)) {
      unsigned a = 0, b = 0;
      const int n = std::sscanf(tok, "%u-%u", &a, &b);
      if (n == 1) b = a;
      for (unsigned c = a; c <= b && c / bits < cpuSetSize; ++c) cpuSet[c / bits] |= 1ul << (c % bits);
    }
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t* pathInfo) {
  if (pathInfo == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device1, {
    const nvmlDevice_st* other = nullptr;
    if (nvmlReturn_t r = Dev(device2, &other); r != NVML_SUCCESS) return r;
    const int a = gpu, b = other->gpu;
    // GPUs pair up behind PCIe switches; pairs share a NUMA node's host bridge.
    if (a == b)
      *pathInfo = NVML_TOPOLOGY_INTERNAL;
    else if (a / 2 == b / 2 && G(a).numa_node == G(b).numa_node)
      *pathInfo = NVML_TOPOLOGY_SINGLE;
    else if (G(a).numa_node == G(b).numa_node)
      *pathInfo = NVML_TOPOLOGY_NODE;
    else
      *pathInfo = NVML_TOPOLOGY_SYSTEM;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                    nvmlGpuP2PCapsIndex_t p2pIndex, nvmlGpuP2PStatus_t* p2pStatus) {
  if (p2pStatus == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device1, {
    const nvmlDevice_st* other = nullptr;
    if (nvmlReturn_t r = Dev(device2, &other); r != NVML_SUCCESS) return r;
    const int a = gpu, b = other->gpu;
    const bool nvlink = a != b && G(a).nvlink_links[b] > 0;
    const bool pcie = a != b && G(a).numa_node == G(b).numa_node;
    switch (p2pIndex) {
      case NVML_P2P_CAPS_INDEX_NVLINK:
        *p2pStatus = nvlink ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        break;
      case NVML_P2P_CAPS_INDEX_READ:
      case NVML_P2P_CAPS_INDEX_WRITE:
      case NVML_P2P_CAPS_INDEX_ATOMICS:
      case NVML_P2P_CAPS_INDEX_PROP:
        *p2pStatus = nvlink || pcie ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED;
        break;
      default:
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
  });
}

// NVLink links are spread over the GPU's peers in order.
static int LinkPeer(int gpu, unsigned link) {
  std::vector<int> peers;
  for (unsigned p = 0; p < F()->gpu_count; ++p) {
    if (G(gpu).nvlink_links[p] > 0) peers.push_back(static_cast<int>(p));
  }
  if (peers.empty()) return -1;
  return peers[link % peers.size()];
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t* isActive) {
  if (isActive == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    const unsigned links = ModelOf(gpu).nvlink_count;
    if (links == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= links) return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = LinkPeer(gpu, link) >= 0 ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t* pci) {
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    const unsigned links = ModelOf(gpu).nvlink_count;
    if (links == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= links) return NVML_ERROR_INVALID_ARGUMENT;
    const int peer = LinkPeer(gpu, link);
    if (peer < 0) return NVML_ERROR_NOT_FOUND;
    FillPci(peer, pci);
    return NVML_SUCCESS;
  });
}
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t* pci) {
  return nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link, pci);
}

// ===========================================================================
// Events (XID)
// ===========================================================================
constexpr unsigned long long kSupportedEvents =
    nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError |
    nvmlEventTypePState | nvmlEventTypeClock;

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  return Guard([&]() -> nvmlReturn_t {
    if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    NVML_LOCKED;
    if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
    auto* s = new nvmlEventSet_st();
    s->magic = kSetMagic;
    *set = s;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* eventTypes) {
  if (eventTypes == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    *eventTypes = kSupportedEvents;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set) {
  if (set == nullptr || set->magic != kSetMagic) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    if ((eventTypes & ~kSupportedEvents) != 0) return NVML_ERROR_NOT_SUPPORTED;
    SimState& st = *N().state;
    StateLock lock(st);
    // Only events that happen from now on are delivered.
    set->regs.push_back({gpu, eventTypes, G(gpu).xid_count});
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms) {
  return Guard([&]() -> nvmlReturn_t {
    if (set == nullptr || set->magic != kSetMagic || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const int64_t deadline = MonotonicNs() + static_cast<int64_t>(timeoutms) * 1000000LL;
    for (;;) {
      {
        NVML_LOCKED;
        if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
        SimState& st = *N().state;
        StateLock lock(st);
        for (auto& reg : set->regs) {
          if (!(reg.types & nvmlEventTypeXidCriticalError)) continue;
          const GpuRecord& g = G(reg.gpu);
          if (g.xid_count <= reg.seen_xids) continue;
          // Events older than the ring holds are lost, as a slow reader loses them.
          if (g.xid_count - reg.seen_xids > static_cast<uint64_t>(kMaxXidEvents)) {
            reg.seen_xids = g.xid_count - kMaxXidEvents;
          }
          const XidRecord& x = g.xids[reg.seen_xids % kMaxXidEvents];
          ++reg.seen_xids;
          data->device = &N().devices[reg.gpu];
          data->eventType = nvmlEventTypeXidCriticalError;
          data->eventData = x.xid;
          data->gpuInstanceId = x.gpu_instance;
          data->computeInstanceId = x.compute_instance;
          return NVML_SUCCESS;
        }
      }
      const int64_t now = MonotonicNs();
      if (now >= deadline) return NVML_ERROR_TIMEOUT;
      const int64_t nap = std::min<int64_t>(deadline - now, 5000000);
      timespec ts{0, static_cast<long>(nap)};
      nanosleep(&ts, nullptr);
    }
  });
}
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms) {
  return nvmlEventSetWait_v2(set, data, timeoutms);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  return Guard([&]() -> nvmlReturn_t {
    if (set == nullptr || set->magic != kSetMagic) return NVML_ERROR_INVALID_ARGUMENT;
    set->magic = 0;
    delete set;
    return NVML_SUCCESS;
  });
}

// ===========================================================================
// Multi-Instance GPU
// ===========================================================================
}  // extern "C"

namespace {

bool MigCapable(int gpu) {
  return ModelOf(gpu).mig_memory_slices > 0;
}

// Compute slices of a CI profile enumerator (NVML_COMPUTE_INSTANCE_PROFILE_*).
int CiSlices(unsigned profile) {
  switch (profile) {
    case 0x0:
      return 1;
    case 0x1:
      return 2;
    case 0x2:
      return 3;
    case 0x3:
      return 4;
    case 0x4:
      return 7;
    case 0x5:
      return 8;
    case 0x6:
      return 6;
    default:
      return 0;
  }
}

bool CiProfileValid(unsigned profile, int gi_slices) {
  const int s = CiSlices(profile);
  if (s == 0 || s > gi_slices) return false;
  return s == gi_slices || s <= 2 || (gi_slices >= 6 && (s == 3 || s == 4));
}

uint32_t ComputeSlicesUsed(int gpu) {
  uint32_t used = 0;
  for (const GpuInstanceRecord& gi : G(gpu).gis) {
    if (!gi.in_use) continue;
    const MigProfile* p = GiProfile(gpu, gi);
    if (p) used += p->compute_slices;
  }
  return used;
}

bool PlacementFree(int gpu, uint32_t start, uint32_t size) {
  for (const GpuInstanceRecord& gi : G(gpu).gis) {
    if (gi.in_use && start < gi.start + gi.size && gi.start < start + size) return false;
  }
  return true;
}

uint32_t InstancesOf(int gpu, uint32_t profile_id) {
  uint32_t n = 0;
  for (const GpuInstanceRecord& gi : G(gpu).gis) n += gi.in_use && gi.profile_id == profile_id;
  return n;
}

// A start slice where `p` fits now, or -1 (memory slices, compute slices, instance limit).
int FindPlacement(int gpu, const MigProfile& p, int wanted_start) {
  if (InstancesOf(gpu, p.id) >= p.max_instances) return -1;
  if (ComputeSlicesUsed(gpu) + p.compute_slices > ModelOf(gpu).mig_compute_slices) return -1;
  int free_slot = -1;
  for (int i = 0; i < kMaxGpuInstances; ++i) {
    if (!G(gpu).gis[i].in_use) free_slot = i;
  }
  if (free_slot < 0) return -1;
  for (uint32_t s : p.placement_starts) {
    if (wanted_start >= 0 && static_cast<int>(s) != wanted_start) continue;
    if (PlacementFree(gpu, s, p.memory_slices)) return static_cast<int>(s);
  }
  return -1;
}

void FillGiProfile(const MigProfile& p, unsigned* id, unsigned* p2p, unsigned* slices, unsigned* count,
                   unsigned* sms, unsigned* ce, unsigned* dec, unsigned* enc, unsigned* jpeg, unsigned* ofa,
                   unsigned long long* mem) {
  *id = p.id;
  *p2p = 0;
  *slices = p.compute_slices;
  *count = p.max_instances;
  *sms = p.sm_count;
  *ce = p.copy_engines;
  *dec = p.decoders;
  *enc = 0;
  *jpeg = p.jpegs;
  *ofa = p.ofas;
  *mem = p.memory_mib;
}

nvmlReturn_t Gi(nvmlGpuInstance_t h, GpuInstanceRecord** out) {
  if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
  if (h == nullptr || h->magic != kGiMagic) return NVML_ERROR_INVALID_ARGUMENT;
  GpuInstanceRecord& gi = G(h->gpu).gis[h->slot];
  if (!gi.in_use) return NVML_ERROR_INVALID_ARGUMENT;
  *out = &gi;
  return NVML_SUCCESS;
}

nvmlReturn_t Ci(nvmlComputeInstance_t h, ComputeInstanceRecord** out) {
  if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
  if (h == nullptr || h->magic != kCiMagic) return NVML_ERROR_INVALID_ARGUMENT;
  GpuInstanceRecord& gi = G(h->gpu).gis[h->gi];
  if (!gi.in_use || !gi.cis[h->slot].in_use) return NVML_ERROR_INVALID_ARGUMENT;
  *out = &gi.cis[h->slot];
  return NVML_SUCCESS;
}

#define MIG_BODY(d, ...)                                   \
  DEVICE_BODY(d, {                                         \
    if (dv->gi >= 0) return NVML_ERROR_INVALID_ARGUMENT;   \
    if (!MigCapable(gpu)) return NVML_ERROR_NOT_SUPPORTED; \
    SimState& st = *N().state;                             \
    StateLock state_lock(st);                              \
    __VA_ARGS__                                            \
  })

#define MIG_ENABLED_BODY(d, ...)                               \
  MIG_BODY(d, {                                                \
    if (G(gpu).mig_mode == 0) return NVML_ERROR_NOT_SUPPORTED; \
    __VA_ARGS__                                                \
  })

}  // namespace

extern "C" {

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode, unsigned int* pendingMode) {
  if (currentMode == nullptr || pendingMode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  MIG_BODY(device, {
    *currentMode = G(gpu).mig_mode;
    *pendingMode = G(gpu).mig_mode;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t* activationStatus) {
  if (activationStatus == nullptr || mode > 1) return NVML_ERROR_INVALID_ARGUMENT;
  MIG_BODY(device, {
    // Takes effect at once when the GPU is idle (the simulator's "reset").
    st.ReclaimDeadLocked();
    for (const ProcessRecord& p : F()->processes) {
      if (p.in_use && p.contexts[gpu] > 0) {
        *activationStatus = NVML_ERROR_IN_USE;
        return NVML_ERROR_IN_USE;
      }
    }
    if (mode == 0) {
      for (const GpuInstanceRecord& gi : G(gpu).gis) {
        if (gi.in_use) {
          *activationStatus = NVML_ERROR_IN_USE;
          return NVML_ERROR_IN_USE;
        }
      }
    }
    G(gpu).mig_mode = mode;
    *activationStatus = NVML_SUCCESS;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t* info) {
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  MIG_ENABLED_BODY(device, {
    const MigProfile* p = FindMigProfileByEnum(ModelOf(gpu), profile);
    if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    FillGiProfile(*p, &info->id, &info->isP2pSupported, &info->sliceCount, &info->instanceCount,
                  &info->multiprocessorCount, &info->copyEngineCount, &info->decoderCount,
                  &info->encoderCount, &info->jpegCount, &info->ofaCount, &info->memorySizeMB);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t* info) {
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  MIG_ENABLED_BODY(device, {
    const MigProfile* p = FindMigProfileByEnum(ModelOf(gpu), profile);
    if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    FillGiProfile(*p, &info->id, &info->isP2pSupported, &info->sliceCount, &info->instanceCount,
                  &info->multiprocessorCount, &info->copyEngineCount, &info->decoderCount,
                  &info->encoderCount, &info->jpegCount, &info->ofaCount, &info->memorySizeMB);
    std::snprintf(info->name, sizeof(info->name), "MIG %s", p->name.c_str());
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t* placements,
                                                           unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  MIG_ENABLED_BODY(device, {
    const MigProfile* p = FindMigProfileById(ModelOf(gpu), profileId);
    if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    const unsigned n = static_cast<unsigned>(p->placement_starts.size());
    if (placements == nullptr) {
      *count = n;
      return NVML_SUCCESS;
    }
    if (*count < n) {
      *count = n;
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; ++i) placements[i] = {p->placement_starts[i], p->memory_slices};
    *count = n;
    return NVML_SUCCESS;
  });
}
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
                                                        nvmlGpuInstancePlacement_t* placements,
                                                        unsigned int* count) {
  return nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, profileId, placements, count);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                       unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  MIG_ENABLED_BODY(device, {
    const MigProfile* p = FindMigProfileById(ModelOf(gpu), profileId);
    if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    // Count by creating instances on a scratch copy of the GPU's instance table.
    GpuRecord& g = G(gpu);
    GpuInstanceRecord saved[kMaxGpuInstances];
    std::memcpy(static_cast<void*>(saved), g.gis, sizeof(saved));
    unsigned n = 0;
    for (int start; (start = FindPlacement(gpu, *p, -1)) >= 0; ++n) {
      for (GpuInstanceRecord& gi : g.gis) {
        if (!gi.in_use) {
          gi.in_use = 1;
          gi.profile_id = p->id;
          gi.start = static_cast<uint32_t>(start);
          gi.size = p->memory_slices;
          break;
        }
      }
    }
    std::memcpy(static_cast<void*>(g.gis), saved, sizeof(saved));
    *count = n;
    return NVML_SUCCESS;
  });
}

static nvmlReturn_t CreateGi(nvmlDevice_t device, unsigned int profileId, int wanted_start,
                             nvmlGpuInstance_t* out) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  MIG_ENABLED_BODY(device, {
    const MigProfile* p = FindMigProfileById(ModelOf(gpu), profileId);
    if (p == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const int start = FindPlacement(gpu, *p, wanted_start);
    if (start < 0) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    GpuRecord& g = G(gpu);
    for (int i = 0; i < kMaxGpuInstances; ++i) {
      GpuInstanceRecord& gi = g.gis[i];
      if (gi.in_use) continue;
      std::memset(static_cast<void*>(&gi), 0, sizeof(gi));
      gi.in_use = 1;
      gi.id = g.next_gi_id++;
      gi.profile_id = p->id;
      gi.start = static_cast<uint32_t>(start);
      gi.size = p->memory_slices;
      gi.next_ci_id = 0;
      *out = &N().gis[gpu][i];
      return NVML_SUCCESS;
    }
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
  });
}

nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t* gi) {
  return CreateGi(device, profileId, -1, gi);
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t* placement,
                                                      nvmlGpuInstance_t* gi) {
  if (placement == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return CreateGi(device, profileId, static_cast<int>(placement->start), gi);
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
  return Guard([&]() -> nvmlReturn_t {
    NVML_LOCKED;
    SimState* st = N().state.get();
    if (st == nullptr) return NVML_ERROR_UNINITIALIZED;
    StateLock lock(*st);
    GpuInstanceRecord* gi = nullptr;
    if (nvmlReturn_t r = Gi(gpuInstance, &gi); r != NVML_SUCCESS) return r;
    for (const ComputeInstanceRecord& ci : gi->cis) {
      if (ci.in_use) return NVML_ERROR_IN_USE;
    }
    gi->in_use = 0;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                       nvmlGpuInstance_t* gpuInstances, unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  MIG_ENABLED_BODY(device, {
    if (FindMigProfileById(ModelOf(gpu), profileId) == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (int i = 0; i < kMaxGpuInstances; ++i) {
      const GpuInstanceRecord& gi = G(gpu).gis[i];
      if (!gi.in_use || gi.profile_id != profileId) continue;
      if (gpuInstances != nullptr) gpuInstances[n] = &N().gis[gpu][i];
      ++n;
    }
    *count = n;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t* out) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  MIG_ENABLED_BODY(device, {
    for (int i = 0; i < kMaxGpuInstances; ++i) {
      if (G(gpu).gis[i].in_use && G(gpu).gis[i].id == id) {
        *out = &N().gis[gpu][i];
        return NVML_SUCCESS;
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t* info) {
  return Guard([&]() -> nvmlReturn_t {
    if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    NVML_LOCKED;
    if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
    StateLock lock(*N().state);
    GpuInstanceRecord* gi = nullptr;
    if (nvmlReturn_t r = Gi(gpuInstance, &gi); r != NVML_SUCCESS) return r;
    info->device = &N().devices[gpuInstance->gpu];
    info->id = gi->id;
    info->profileId = gi->profile_id;
    info->placement = {gi->start, gi->size};
    return NVML_SUCCESS;
  });
}

static nvmlReturn_t CiProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned profile, unsigned engProfile,
                                  unsigned* id, unsigned* slices, unsigned* count, unsigned* sms,
                                  unsigned* ce, unsigned* dec, unsigned* enc, unsigned* jpeg, unsigned* ofa,
                                  std::string* name) {
  NVML_LOCKED;
  if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
  StateLock lock(*N().state);
  GpuInstanceRecord* gi = nullptr;
  if (nvmlReturn_t r = Gi(gpuInstance, &gi); r != NVML_SUCCESS) return r;
  if (engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) return NVML_ERROR_NOT_SUPPORTED;
  const MigProfile* gp = GiProfile(gpuInstance->gpu, *gi);
  if (gp == nullptr) return NVML_ERROR_UNKNOWN;
  const int gs = static_cast<int>(gp->compute_slices);
  if (!CiProfileValid(profile, gs)) return NVML_ERROR_NOT_SUPPORTED;
  const int s = CiSlices(profile);
  *id = profile;
  *slices = static_cast<unsigned>(s);
  *count = static_cast<unsigned>(gs / s);
  *sms = ComputeInstanceSmCount(ModelOf(gpuInstance->gpu), *gp, static_cast<uint32_t>(s));
  *ce = gp->copy_engines;
  *dec = gp->decoders;
  *enc = 0;
  *jpeg = gp->jpegs;
  *ofa = gp->ofas;
  if (name != nullptr) {
    const std::string mem = gp->name.substr(gp->name.find('.') + 1);
    *name = s == gs ? "MIG " + gp->name : "MIG " + std::to_string(s) + "c." + gp->name;
    (void)mem;
  }
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t* info) {
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return Guard([&]() -> nvmlReturn_t {
    return CiProfileInfo(gpuInstance, profile, engProfile, &info->id, &info->sliceCount, &info->instanceCount,
                         &info->multiprocessorCount, &info->sharedCopyEngineCount, &info->sharedDecoderCount,
                         &info->sharedEncoderCount, &info->sharedJpegCount, &info->sharedOfaCount, nullptr);
  });
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance,
                                                           unsigned int profile, unsigned int engProfile,
                                                           nvmlComputeInstanceProfileInfo_v2_t* info) {
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (info->version != nvmlComputeInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  return Guard([&]() -> nvmlReturn_t {
    std::string name;
    nvmlReturn_t r =
        CiProfileInfo(gpuInstance, profile, engProfile, &info->id, &info->sliceCount, &info->instanceCount,
                      &info->multiprocessorCount, &info->sharedCopyEngineCount, &info->sharedDecoderCount,
                      &info->sharedEncoderCount, &info->sharedJpegCount, &info->sharedOfaCount, &name);
    if (r == NVML_SUCCESS) std::snprintf(info->name, sizeof(info->name), "%s", name.c_str());
    return r;
  });
}

// A free, aligned compute-slice range of `s` slices in the GI, or -1.
static int FindCiStart(const GpuInstanceRecord& gi, int s, int gi_slices) {
  for (int start = 0; start + s <= gi_slices; ++start) {
    bool free = true;
    for (const ComputeInstanceRecord& ci : gi.cis) {
      if (ci.in_use && static_cast<int>(ci.start) < start + s &&
          start < static_cast<int>(ci.start + ci.size)) {
        free = false;
      }
    }
    if (free) return start;
  }
  return -1;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance,
                                                                unsigned int profileId, unsigned int* count) {
  return Guard([&]() -> nvmlReturn_t {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    NVML_LOCKED;
    if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
    StateLock lock(*N().state);
    GpuInstanceRecord* gi = nullptr;
    if (nvmlReturn_t r = Gi(gpuInstance, &gi); r != NVML_SUCCESS) return r;
    const MigProfile* gp = GiProfile(gpuInstance->gpu, *gi);
    const int gs = gp ? static_cast<int>(gp->compute_slices) : 0;
    if (!CiProfileValid(profileId, gs)) return NVML_ERROR_NOT_SUPPORTED;
    const int s = CiSlices(profileId);
    // Greedy first fit over the slices the GI's compute instances leave free.
    uint32_t used = 0;
    for (const ComputeInstanceRecord& ci : gi->cis) {
      if (ci.in_use) used |= ((1u << ci.size) - 1) << ci.start;
    }
    unsigned n = 0;
    for (int start = 0; start + s <= gs; ++start) {
      const uint32_t range = ((1u << s) - 1) << start;
      if ((used & range) == 0) {
        used |= range;
        ++n;
      }
    }
    *count = n;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                  nvmlComputeInstance_t* computeInstance) {
  return Guard([&]() -> nvmlReturn_t {
    if (computeInstance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    NVML_LOCKED;
    if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
    StateLock lock(*N().state);
    GpuInstanceRecord* gi = nullptr;
    if (nvmlReturn_t r = Gi(gpuInstance, &gi); r != NVML_SUCCESS) return r;
    const MigProfile* gp = GiProfile(gpuInstance->gpu, *gi);
    const int gs = gp ? static_cast<int>(gp->compute_slices) : 0;
    if (!CiProfileValid(profileId, gs)) return NVML_ERROR_INVALID_ARGUMENT;
    const int s = CiSlices(profileId);
    const int start = FindCiStart(*gi, s, gs);
    if (start < 0) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (int i = 0; i < kMaxComputeInstances; ++i) {
      ComputeInstanceRecord& ci = gi->cis[i];
      if (ci.in_use) continue;
      ci = ComputeInstanceRecord{
          1, gi->next_ci_id++, profileId, static_cast<uint32_t>(start), static_cast<uint32_t>(s), 0};
      *computeInstance = &N().cis[gpuInstance->gpu][gpuInstance->slot][i];
      return NVML_SUCCESS;
    }
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
  });
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
  return Guard([&]() -> nvmlReturn_t {
    NVML_LOCKED;
    if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
    StateLock lock(*N().state);
    ComputeInstanceRecord* ci = nullptr;
    if (nvmlReturn_t r = Ci(computeInstance, &ci); r != NVML_SUCCESS) return r;
    ci->in_use = 0;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                nvmlComputeInstance_t* computeInstances,
                                                unsigned int* count) {
  return Guard([&]() -> nvmlReturn_t {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    NVML_LOCKED;
    if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
    StateLock lock(*N().state);
    GpuInstanceRecord* gi = nullptr;
    if (nvmlReturn_t r = Gi(gpuInstance, &gi); r != NVML_SUCCESS) return r;
    unsigned n = 0;
    for (int i = 0; i < kMaxComputeInstances; ++i) {
      if (!gi->cis[i].in_use || gi->cis[i].profile != profileId) continue;
      if (computeInstances != nullptr) computeInstances[n] = &N().cis[gpuInstance->gpu][gpuInstance->slot][i];
      ++n;
    }
    *count = n;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t* computeInstance) {
  return Guard([&]() -> nvmlReturn_t {
    if (computeInstance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    NVML_LOCKED;
    if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
    StateLock lock(*N().state);
    GpuInstanceRecord* gi = nullptr;
    if (nvmlReturn_t r = Gi(gpuInstance, &gi); r != NVML_SUCCESS) return r;
    for (int i = 0; i < kMaxComputeInstances; ++i) {
      if (gi->cis[i].in_use && gi->cis[i].id == id) {
        *computeInstance = &N().cis[gpuInstance->gpu][gpuInstance->slot][i];
        return NVML_SUCCESS;
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                           nvmlComputeInstanceInfo_t* info) {
  return Guard([&]() -> nvmlReturn_t {
    if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    NVML_LOCKED;
    if (nvmlReturn_t r = Ready(); r != NVML_SUCCESS) return r;
    StateLock lock(*N().state);
    ComputeInstanceRecord* ci = nullptr;
    if (nvmlReturn_t r = Ci(computeInstance, &ci); r != NVML_SUCCESS) return r;
    info->device = &N().devices[computeInstance->gpu];
    info->gpuInstance = &N().gis[computeInstance->gpu][computeInstance->gi];
    info->id = ci->id;
    info->profileId = ci->profile;
    info->placement = {ci->start, ci->size};
    return NVML_SUCCESS;
  });
}
nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                        nvmlComputeInstanceInfo_t* info) {
  return nvmlComputeInstanceGetInfo_v2(computeInstance, info);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* isMigDevice) {
  if (isMigDevice == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    *isMigDevice = dv->gi >= 0;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    if (dv->gi < 0) return NVML_ERROR_NOT_SUPPORTED;
    *id = G(gpu).gis[dv->gi].id;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    if (dv->gi < 0) return NVML_ERROR_NOT_SUPPORTED;
    *id = G(gpu).gis[dv->gi].cis[dv->ci].id;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(device, {
    *count = MigCapable(gpu) ? ModelOf(gpu).mig_compute_slices : 0;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t* migDevice) {
  if (migDevice == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  MIG_ENABLED_BODY(device, {
    // MIG devices are the compute instances, in GPU-instance order.
    unsigned n = 0;
    for (int i = 0; i < kMaxGpuInstances; ++i) {
      const GpuInstanceRecord& gi = G(gpu).gis[i];
      if (!gi.in_use) continue;
      for (int c = 0; c < kMaxComputeInstances; ++c) {
        if (!gi.cis[c].in_use) continue;
        if (n++ == index) {
          *migDevice = &N().mig_devices[gpu][i][c];
          return NVML_SUCCESS;
        }
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t* device) {
  if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  DEVICE_BODY(migDevice, {
    if (dv->gi < 0) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &N().devices[gpu];
    return NVML_SUCCESS;
  });
}

}  // extern "C"
