// MIG device handles: the NVML devices that stand for compute instances (one
// per compute instance of each GPU instance, for a GPU in MIG mode), found by
// index under their GPU or by their MIG-... UUID (nvml_devices.cc). They answer
// the device queries with their instance's figures (memory, processes) and
// tell their GPU and compute instance ids and their parent GPU.
#include "sim/nvml_internal.h"

namespace tessera::sim::nvml {

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* isMigDevice) {
  return DeviceValue(device, isMigDevice, [&](const nvmlDevice_st& d) { return d.gi >= 0; });
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    if (d.gi < 0) return NVML_ERROR_NOT_SUPPORTED;
    *id = Gpu(d.gpu).gis[d.gi].id;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    if (d.gi < 0) return NVML_ERROR_NOT_SUPPORTED;
    *id = Gpu(d.gpu).gis[d.gi].cis[d.ci].id;
    return NVML_SUCCESS;
  });
}

// 0 unless MIG mode is on (as NVML answers).
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  return DeviceValue(device, count, [&](const nvmlDevice_st& d) {
    return MigCapable(d.gpu) && Gpu(d.gpu).mig_mode != 0 ? ModelOf(d.gpu).mig_compute_slices : 0;
  });
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t* migDevice) {
  if (migDevice == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return OnMigGpu(device, MigMode::kEnabled, [&](int gpu) {
    // MIG devices are the compute instances (the program sees), in GPU-instance order.
    unsigned n = 0;
    for (int i = 0; i < kMaxGpuInstances; ++i) {
      const GpuInstanceRecord& gi = Gpu(gpu).gis[i];
      if (!gi.in_use) continue;
      for (int c = 0; c < kMaxComputeInstances; ++c) {
        if (!gi.cis[c].in_use || !MigVisible(gpu, i, c)) continue;
        if (n++ == index) {
          *migDevice = &Library().mig_devices[gpu][i][c];
          return NVML_SUCCESS;
        }
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t* device) {
  if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(migDevice, [&](const nvmlDevice_st& d) {
    if (d.gi < 0) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &Library().devices[d.gpu];
    return NVML_SUCCESS;
  });
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::nvml
