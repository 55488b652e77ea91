// NVML devices: the GPUs' handles (by index, UUID, PCI bus id, serial; MIG
// devices by their MIG-... UUID), identity (name, UUID, serial, index, minor
// number, brand, architecture, compute capability, PCI information, cores,
// persistence and compute mode) and memory (total and used, as all processes'
// charges in the shared state say, after reclaiming dead processes; a MIG
// device reports its GPU instance's).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "sim/nvml_internal.h"

namespace tessera::sim::nvml {

void FillPci(int gpu, nvmlPciInfo_t* pci) {
  const GpuModel* m = FindModel(Gpu(gpu).model_key);
  std::memset(pci, 0, sizeof(*pci));
  pci->domain = 0;
  pci->bus = Gpu(gpu).pci_bus;
  pci->device = 0;
  pci->pciDeviceId = m ? m->pci_device_id : 0;
  pci->pciSubSystemId = m ? ((m->pci_device_id & 0xFFFF0000u) | 0x10DE) : 0;
  std::snprintf(pci->busId, sizeof(pci->busId), "%s", Gpu(gpu).pci_bus_id);
  std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0", Gpu(gpu).pci_bus);
}

void ApplyContainerView() {
  Nvml& n = Library();
  StateLock lock(*n.state);
  n.visible.clear();
  for (auto& v : n.visible_mig) v.clear();
  bool whole[kMaxGpus] = {};
  for (const DeviceRef& d : ContainerDevices(*File(), std::getenv("NVIDIA_VISIBLE_DEVICES"))) {
    if (std::find(n.visible.begin(), n.visible.end(), d.gpu) == n.visible.end()) n.visible.push_back(d.gpu);
    if (d.mig()) {
      n.visible_mig[d.gpu].push_back(d);
    } else {
      whole[d.gpu] = true;
    }
  }
  for (int g = 0; g < kMaxGpus; ++g) {
    if (whole[g]) n.visible_mig[g].clear();  // the whole GPU: all its MIG devices
  }
}

bool GpuVisible(int gpu) {
  const std::vector<int>& v = Library().visible;
  return std::find(v.begin(), v.end(), gpu) != v.end();
}

bool MigVisible(int gpu, int gi_slot, int ci_slot) {
  const std::vector<DeviceRef>& v = Library().visible_mig[gpu];
  return GpuVisible(gpu) &&
         (v.empty() || std::find(v.begin(), v.end(), DeviceRef{gpu, gi_slot, ci_slot}) != v.end());
}

std::vector<uint32_t> VisibleGpuInstanceIds(int gpu) {
  std::vector<uint32_t> ids;
  for (const DeviceRef& d : Library().visible_mig[gpu]) {
    const GpuInstanceRecord& gi = Gpu(gpu).gis[d.gi_slot];
    if (gi.in_use && std::find(ids.begin(), ids.end(), gi.id) == ids.end()) ids.push_back(gi.id);
  }
  return ids;
}

namespace {

// The handle of the GPU or MIG device with this UUID the program sees, or nullptr.
nvmlDevice_t DeviceByUuid(const char* uuid) {
  for (int g : Library().visible) {
    const GpuRecord& gpu = Gpu(g);
    if (std::strcmp(gpu.uuid, uuid) == 0) return &Library().devices[g];
    for (int i = 0; i < kMaxGpuInstances; ++i) {
      const GpuInstanceRecord& gi = gpu.gis[i];
      if (!gi.in_use) continue;
      for (int c = 0; c < kMaxComputeInstances; ++c) {
        if (gi.cis[c].in_use && MigVisible(g, i, c) && MigDeviceUuid(gpu, gi, gi.cis[c]) == uuid)
          return &Library().mig_devices[g][i][c];
      }
    }
  }
  return nullptr;
}

nvmlReturn_t DeviceByPciBusId(const char* busId, nvmlDevice_t* device) {
  if (busId == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry([&] {
    unsigned domain = 0, bus = 0, dev = 0, fn = 0;
    if (std::sscanf(busId, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) < 3) return NVML_ERROR_INVALID_ARGUMENT;
    for (int g : Library().visible) {
      if (Gpu(g).pci_bus == bus && domain == 0 && dev == 0) {
        *device = &Library().devices[g];
        return NVML_SUCCESS;
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

// Memory of a device: the GPU's, or a MIG device's GPU instance's; a GPU a
// container sees through some of its MIG devices has their instances' memory.
void MemoryOf(const nvmlDevice_st& device, uint64_t* total, uint64_t* used) {
  SimState& st = *Library().state;
  StateLock lock(st);
  st.ReclaimDeadLocked();
  const int gpu = device.gpu;
  std::vector<uint32_t> instances = VisibleGpuInstanceIds(gpu);
  if (device.gi >= 0) instances = {Gpu(gpu).gis[device.gi].id};
  if (instances.empty()) {
    *total = Gpu(gpu).total_bytes;
    *used = std::min(st.UsedBytesLocked(gpu), *total);
    return;
  }
  *total = *used = 0;
  for (const GpuInstanceRecord& gi : Gpu(gpu).gis) {
    if (!gi.in_use || std::find(instances.begin(), instances.end(), gi.id) == instances.end()) continue;
    const MigProfile* p = GiProfile(gpu, gi);
    const uint64_t size = p ? p->memory_mib << 20 : 0;
    *total += size;
    *used += std::min(st.UsedBytesInInstanceLocked(gpu, gi.id), size);
  }
}

}  // namespace

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

// ----- enumeration -----
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry([&] {
    *count = static_cast<unsigned>(Library().visible.size());
    return NVML_SUCCESS;
  });
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
  return nvmlDeviceGetCount_v2(count);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry([&] {
    if (index >= Library().visible.size()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &Library().devices[Library().visible[index]];
    return NVML_SUCCESS;
  });
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry([&] {
    nvmlDevice_t found = DeviceByUuid(uuid);
    if (found == nullptr) return NVML_ERROR_NOT_FOUND;
    *device = found;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* busId, nvmlDevice_t* device) {
  return DeviceByPciBusId(busId, device);
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* busId, nvmlDevice_t* device) {
  return DeviceByPciBusId(busId, device);
}

nvmlReturn_t nvmlDeviceGetHandleBySerial(const char* serial, nvmlDevice_t* device) {
  if (serial == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry([&] {
    for (int g : Library().visible) {
      if (std::strcmp(Gpu(g).serial, serial) == 0) {
        *device = &Library().devices[g];
        return NVML_SUCCESS;
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

// ----- identity -----
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    const std::vector<int>& v = Library().visible;
    const auto it = std::find(v.begin(), v.end(), d.gpu);
    if (d.gi >= 0 || it == v.end()) return NVML_ERROR_INVALID_ARGUMENT;
    *index = static_cast<unsigned>(it - v.begin());  // the index the program sees
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    std::string n = Gpu(d.gpu).name;
    if (d.gi >= 0) {
      const MigProfile* p = GiProfile(d.gpu, Gpu(d.gpu).gis[d.gi]);
      n += " MIG " + (p ? p->name : std::string("?"));
    }
    return CopyOut(name, length, n);
  });
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    const GpuRecord& gpu = Gpu(d.gpu);
    if (d.gi < 0) return CopyOut(uuid, length, gpu.uuid);
    const GpuInstanceRecord& gi = gpu.gis[d.gi];
    if (!gi.in_use || !gi.cis[d.ci].in_use) return NVML_ERROR_NOT_FOUND;
    return CopyOut(uuid, length, MigDeviceUuid(gpu, gi, gi.cis[d.ci]));
  });
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char* serial, unsigned int length) {
  return NvmlEntry(device,
                   [&](const nvmlDevice_st& d) { return CopyOut(serial, length, Gpu(d.gpu).serial); });
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minorNumber) {
  return DeviceValue(device, minorNumber, [&](const nvmlDevice_st& d) { return Gpu(d.gpu).minor; });
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t* type) {
  return DeviceValue(device, type, [&](const nvmlDevice_st&) { return NVML_BRAND_NVIDIA; });
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t* arch) {
  if (arch == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    const GpuModel* m = FindModel(Gpu(d.gpu).model_key);
    *arch = m ? m->architecture : NVML_DEVICE_ARCH_UNKNOWN;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    const GpuModel* m = FindModel(Gpu(d.gpu).model_key);
    if (m == nullptr) return NVML_ERROR_UNKNOWN;
    *major = static_cast<int>(m->cc_major);
    *minor = static_cast<int>(m->cc_minor);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    FillPci(d.gpu, pci);
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
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    const GpuModel* m = FindModel(Gpu(d.gpu).model_key);
    const unsigned per_sm =
        m && m->cc_major == 7 && m->cc_minor == 5
            ? 64
            : (m && m->cc_major == 8 && m->cc_minor == 9 ? 128 : (m && m->cc_major == 9 ? 128 : 64));
    *numCores = Gpu(d.gpu).sm_count * per_sm;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t* mode) {
  return DeviceValue(device, mode, [&](const nvmlDevice_st&) { return NVML_FEATURE_ENABLED; });
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode) {
  return DeviceValue(device, mode, [&](const nvmlDevice_st&) { return NVML_COMPUTEMODE_DEFAULT; });
}

// ----- memory -----
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    uint64_t total, used;
    MemoryOf(d, &total, &used);
    memory->total = total;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    uint64_t total, used;
    MemoryOf(d, &total, &used);
    memory->total = total;
    memory->reserved = 0;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t* bar1) {
  if (bar1 == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st&) {
    bar1->bar1Total = 256ull << 20;
    bar1->bar1Used = 2ull << 20;
    bar1->bar1Free = bar1->bar1Total - bar1->bar1Used;
    return NVML_SUCCESS;
  });
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::nvml
