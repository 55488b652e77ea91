// Process-local state of the simulated NVML (libnvidia-ml.so.1) and what its
// source files share: the handle types, the library object, small accessors of
// the shared state, and NvmlEntry, the prologue every entry point runs through.
// Everything NVML reports is read from the shared state that the simulated
// CUDA driver writes (state.h); NVML does not register the calling process as a
// GPU user (monitoring is not a compute context).
//
// Private to src/sim. Entry points take Library().mu (through NvmlEntry) and,
// to read or change the shared state, the SimState mutex after it (StateLock).
// Handles given out point into the library object, which is never destroyed:
// they stay valid pointers after nvmlShutdown.
#pragma once

#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#pragma GCC visibility push(default)
#include <nvml.h>
#pragma GCC visibility pop

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "sim/c_boundary.h"
#include "sim/catalog.h"
#include "sim/device_list.h"
#include "sim/state.h"

// The handle types nvml.h leaves incomplete. Each has a magic to reject
// pointers that are not handles of its kind.
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

namespace tessera::sim::nvml {

inline constexpr uint32_t kDeviceMagic = 0x4E564D01, kGiMagic = 0x4E564D02, kCiMagic = 0x4E564D03,
                          kSetMagic = 0x4E564D04;

// NVML's utilisation sample period: 1 s.
inline constexpr int64_t kUtilWindowNs = 1000000000LL;

// The library: reference-counted initialisation, the shared state once
// attached, and every handle it gives out (one per GPU, MIG device, GPU
// instance and compute instance slot).
struct Nvml {
  std::mutex mu;  // guards everything below
  int refs = 0;
  std::unique_ptr<SimState> state;
  nvmlDevice_st devices[kMaxGpus];
  nvmlDevice_st mig_devices[kMaxGpus][kMaxGpuInstances][kMaxComputeInstances];
  nvmlGpuInstance_st gis[kMaxGpus][kMaxGpuInstances];
  nvmlComputeInstance_st cis[kMaxGpus][kMaxGpuInstances][kMaxComputeInstances];
  // What the program may see (NVIDIA_VISIBLE_DEVICES, see device_list.h): the
  // GPUs in NVML index order, and per GPU the MIG devices of it the container
  // was given (empty: all of them, or the GPU is not in MIG mode).
  std::vector<int> visible;
  std::vector<DeviceRef> visible_mig[kMaxGpus];
};

// ----- nvml_system.cc -----
Nvml& Library();
// NVML_ERROR_UNINITIALIZED unless nvmlInit has been called more often than nvmlShutdown.
nvmlReturn_t CheckInit();
// The device a handle names (after CheckInit); NVML_ERROR_INVALID_ARGUMENT if it is not a device handle.
nvmlReturn_t ResolveDevice(nvmlDevice_t handle, const nvmlDevice_st** out);
// The GPU or compute instance an instance handle names, under the state lock;
// NVML_ERROR_INVALID_ARGUMENT if it is not such a handle or the instance is gone.
nvmlReturn_t ResolveGpuInstance(nvmlGpuInstance_t handle, GpuInstanceRecord** out);
nvmlReturn_t ResolveComputeInstance(nvmlComputeInstance_t handle, ComputeInstanceRecord** out);
// The shared state's file and GPU records, and the GPU's catalog model (an
// empty model if the catalog no longer has it).
StateFile* File();
GpuRecord& Gpu(int gpu);
const GpuModel& ModelOf(int gpu);
// The MIG profile of a GPU instance, or nullptr.
const MigProfile* GiProfile(int gpu, const GpuInstanceRecord& gi);
// Copies `s` with its NUL into a caller's buffer of `length` bytes.
nvmlReturn_t CopyOut(char* dst, unsigned int length, const std::string& s);

// ----- nvml_mig.cc -----
bool MigCapable(int gpu);
// Whether a process uses GPU instance `gi_id` (and compute instance `ci_id`
// of it, unless kNoInstance) of `gpu`; reclaims dead processes first. The
// caller holds the state lock.
bool InstanceInUse(int gpu, uint32_t gi_id, uint32_t ci_id);

// ----- nvml_devices.cc -----
// PCI information of a GPU (also a NVLink peer's).
void FillPci(int gpu, nvmlPciInfo_t* pci);
// Sets up Library().visible and visible_mig from NVIDIA_VISIBLE_DEVICES (under the state lock).
void ApplyContainerView();
// Whether the program sees a GPU, and a MIG device of it (GPU and compute instance slots).
bool GpuVisible(int gpu);
bool MigVisible(int gpu, int gi_slot, int ci_slot);
// The GPU instance ids a container limited to some of a GPU's MIG devices
// sees, or an empty list when it sees the whole GPU (under the state lock).
std::vector<uint32_t> VisibleGpuInstanceIds(int gpu);

// Runs an entry point's body, turning exceptions into NVML errors (none may
// cross the C boundary).
template <typename F>
nvmlReturn_t Guard(F&& f) noexcept {
  return CatchAtCBoundary<NVML_ERROR_MEMORY, NVML_ERROR_UNKNOWN>(std::forward<F>(f));
}

// The prologue of every NVML entry point, in one place: exceptions become
// NVML_ERROR_MEMORY / NVML_ERROR_UNKNOWN (Guard), the library lock is taken,
// an uninitialised library answers NVML_ERROR_UNINITIALIZED, and a handle that
// is not one of its kind NVML_ERROR_INVALID_ARGUMENT. Then `body` runs with what
// the handle names and its result is returned:
//
//   NvmlEntry(body)                               body()
//   NvmlEntry(nvmlDevice_t, body)                 body(const nvmlDevice_st&)
//   NvmlEntry(nvmlGpuInstance_t, body)            body(GpuInstanceRecord&), under the state lock
//   NvmlEntry(nvmlComputeInstance_t, body)        body(ComputeInstanceRecord&), under the state lock
//
// Checks of the caller's arguments that need no library (null output pointers,
// struct versions) come before it.
template <typename Handle, typename Body>
nvmlReturn_t NvmlEntry(Handle handle, Body&& body) noexcept {
  return Guard([&]() -> nvmlReturn_t {
    std::lock_guard<std::mutex> lock(Library().mu);
    if (nvmlReturn_t r = CheckInit(); r != NVML_SUCCESS) return r;
    if constexpr (std::is_same_v<Handle, std::nullptr_t>) {
      return body();
    } else if constexpr (std::is_same_v<Handle, nvmlDevice_t>) {
      const nvmlDevice_st* device = nullptr;
      if (nvmlReturn_t r = ResolveDevice(handle, &device); r != NVML_SUCCESS) return r;
      return body(*device);
    } else if constexpr (std::is_same_v<Handle, nvmlGpuInstance_t>) {
      StateLock state_lock(*Library().state);
      GpuInstanceRecord* gi = nullptr;
      if (nvmlReturn_t r = ResolveGpuInstance(handle, &gi); r != NVML_SUCCESS) return r;
      return body(*gi);
    } else {
      static_assert(std::is_same_v<Handle, nvmlComputeInstance_t>, "not an NVML handle type");
      StateLock state_lock(*Library().state);
      ComputeInstanceRecord* ci = nullptr;
      if (nvmlReturn_t r = ResolveComputeInstance(handle, &ci); r != NVML_SUCCESS) return r;
      return body(*ci);
    }
  });
}

template <typename Body>
nvmlReturn_t NvmlEntry(Body&& body) noexcept {
  return NvmlEntry(nullptr, std::forward<Body>(body));
}

// What the MIG calls on a GPU handle have in common: a MIG device handle is
// NVML_ERROR_INVALID_ARGUMENT, a GPU that cannot do MIG (or, with kEnabled,
// whose MIG mode is off) NVML_ERROR_NOT_SUPPORTED; body(gpu) runs under the
// state lock.
enum class MigMode { kAny, kEnabled };

template <typename Body>
nvmlReturn_t OnMigGpu(nvmlDevice_t device, MigMode need, Body&& body) noexcept {
  return NvmlEntry(device, [&](const nvmlDevice_st& d) -> nvmlReturn_t {
    if (d.gi >= 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (!MigCapable(d.gpu)) return NVML_ERROR_NOT_SUPPORTED;
    StateLock state_lock(*Library().state);
    if (need == MigMode::kEnabled && Gpu(d.gpu).mig_mode == 0) return NVML_ERROR_NOT_SUPPORTED;
    return body(d.gpu);
  });
}

// A getter: `*out = read(device)`; NVML_ERROR_INVALID_ARGUMENT for a null `out`.
template <typename Out, typename Read>
nvmlReturn_t DeviceValue(nvmlDevice_t device, Out* out, Read&& read) noexcept {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    *out = read(d);
    return NVML_SUCCESS;
  });
}

}  // namespace tessera::sim::nvml
