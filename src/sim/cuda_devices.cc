// Devices as the driver API shows them: ordinals (CUDA_VISIBLE_DEVICES),
// identity (name, UUID, PCI bus id, total memory), attributes, and peer
// access between devices. Attributes come from a table: for each
// CUdevice_attribute, a constant or a function of the GPU's record and model.
// A process running in a MIG instance sees the instance as its device (its
// name, memory and share of the SMs).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>

#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {

CUresult ValidDevice(CUdevice dev, int* gpu) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Runtime& rt = R();
  if (dev < 0 || dev >= static_cast<int>(rt.visible.size())) return CUDA_ERROR_INVALID_DEVICE;
  *gpu = rt.visible[dev];
  return CUDA_SUCCESS;
}

const GpuRecord& Gpu(int gpu) {
  return R().state->file()->gpus[gpu];
}

const GpuInstanceRecord* MigInstanceOf(int gpu) {
  Runtime& rt = R();
  const int slot = rt.gpu_gi[gpu];
  if (slot < 0) return nullptr;
  const GpuInstanceRecord& gi = rt.state->file()->gpus[gpu].gis[slot];
  return gi.in_use ? &gi : nullptr;
}

void RecordInstanceOf(ProcessRecord& p, int gpu) {
  if (const GpuInstanceRecord* gi = MigInstanceOf(gpu)) {
    p.gpu_instance[gpu] = gi->id;
    p.compute_instance[gpu] = gi->cis[R().gpu_ci[gpu]].id;
  }
}

uint64_t DeviceTotalBytes(int gpu) {
  const GpuInstanceRecord* gi = MigInstanceOf(gpu);
  if (gi != nullptr) {
    const GpuModel* m = R().state->model(gpu);
    const MigProfile* p = m ? FindMigProfileById(*m, gi->profile_id) : nullptr;
    if (p != nullptr) return p->memory_mib << 20;
  }
  return R().state->file()->gpus[gpu].total_bytes;
}

namespace {

// What a device attribute is read from: the GPU's record in the shared state,
// its catalog model, and its index there.
struct AttributeSource {
  const GpuRecord& record;
  const GpuModel& model;
  int gpu;
};

// One row of the attribute table: how to read `attribute`.
struct DeviceAttribute {
  CUdevice_attribute attribute;
  int (*read)(const AttributeSource&);
};

template <int kValue>
int Fixed(const AttributeSource&) {
  return kValue;
}

template <uint32_t GpuModel::*kField>
int ModelFigure(const AttributeSource& s) {
  return static_cast<int>(s.model.*kField);
}

template <uint32_t GpuModel::*kMhz>
int ModelKiloHertz(const AttributeSource& s) {
  return static_cast<int>(s.model.*kMhz * 1000);
}

// A MIG device has its compute instance's share of its GPU instance's SMs.
int MultiprocessorCount(const AttributeSource& s) {
  int v = static_cast<int>(s.record.sm_count);
  if (const GpuInstanceRecord* gi = MigInstanceOf(s.gpu)) {
    const MigProfile* p = FindMigProfileById(s.model, gi->profile_id);
    const ComputeInstanceRecord& ci = gi->cis[R().gpu_ci[s.gpu]];
    if (p != nullptr) v = static_cast<int>(ComputeInstanceSmCount(s.model, *p, ci.size));
  }
  return v;
}

// Every attribute the simulator answers. An attribute that is not listed reads
// 0 (a feature it does not offer); some are listed as 0 to say so explicitly.
// Stream wait-value and 64-bit stream memory operations read 0: those waits
// are not simulated (CUDA_ERROR_NOT_SUPPORTED).
constexpr DeviceAttribute kDeviceAttributes[] = {
    // Launch and memory limits, the same on every model.
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, Fixed<1024>},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, Fixed<1024>},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, Fixed<1024>},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, Fixed<64>},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, Fixed<2147483647>},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, Fixed<65535>},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, Fixed<65535>},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, Fixed<49152>},
    {CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, Fixed<65536>},
    {CU_DEVICE_ATTRIBUTE_WARP_SIZE, Fixed<32>},
    {CU_DEVICE_ATTRIBUTE_MAX_PITCH, Fixed<2147483647>},
    {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, Fixed<65536>},
    {CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, Fixed<512>},
    {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH, Fixed<131072>},
    {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH, Fixed<131072>},
    {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT, Fixed<65536>},
    {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH, Fixed<16384>},
    {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT, Fixed<16384>},
    {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH, Fixed<16384>},
    {CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT, Fixed<512>},
    {CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, Fixed<32>},
    {CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, Fixed<1024>},
    {CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO, Fixed<2>},

    // The model's figures (catalog.cc).
    {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, ModelKiloHertz<&GpuModel::sm_clock_mhz>},
    {CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, ModelKiloHertz<&GpuModel::mem_clock_mhz>},
    {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, ModelFigure<&GpuModel::memory_bus_width>},
    {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, ModelFigure<&GpuModel::l2_cache_bytes>},
    {CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE,
     [](const AttributeSource& s) { return static_cast<int>(s.model.l2_cache_bytes / 4 * 3); }},
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, ModelFigure<&GpuModel::max_threads_per_sm>},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, ModelFigure<&GpuModel::max_blocks_per_sm>},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, ModelFigure<&GpuModel::shared_mem_per_sm>},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
     ModelFigure<&GpuModel::shared_mem_per_block_optin>},
    {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, ModelFigure<&GpuModel::regs_per_sm>},
    {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, ModelFigure<&GpuModel::async_engines>},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ModelFigure<&GpuModel::cc_major>},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ModelFigure<&GpuModel::cc_minor>},
    {CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID, ModelFigure<&GpuModel::pci_device_id>},
    {CU_DEVICE_ATTRIBUTE_ECC_ENABLED,
     [](const AttributeSource& s) { return s.model.architecture >= 7 || s.model.key == "V100" ? 1 : 0; }},
    {CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH,
     [](const AttributeSource& s) { return s.model.cc_major >= 9 ? 1 : 0; }},

    // This GPU (or MIG device): its record in the shared state.
    {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, MultiprocessorCount},
    {CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
     [](const AttributeSource& s) { return static_cast<int>(s.record.pci_bus); }},
    {CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, Fixed<0>},
    {CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, Fixed<0>},
    {CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD, Fixed<0>},
    {CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID, [](const AttributeSource& s) { return s.gpu; }},
    {CU_DEVICE_ATTRIBUTE_NUMA_CONFIG, Fixed<0>},
    {CU_DEVICE_ATTRIBUTE_NUMA_ID, Fixed<-1>},
    {CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, [](const AttributeSource& s) { return s.record.numa_node; }},

    // Features: what the simulator offers (1) and does not (0).
    {CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, Fixed<1>},
    {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, Fixed<1>},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, Fixed<CU_COMPUTEMODE_DEFAULT>},
    {CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, Fixed<1>},
    {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, Fixed<1>},
    {CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, Fixed<1>},
    {CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, Fixed<1>},
    {CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, Fixed<1>},
    {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, Fixed<1>},
    {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, Fixed<1>},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED, Fixed<1>},
    {CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, Fixed<1>},
    {CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, Fixed<1>},
    {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, Fixed<1>},
    {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, Fixed<1>},
    {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, Fixed<1>},
    {CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, Fixed<CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR>},
    {CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, Fixed<0>},
};

constexpr bool EachAttributeOnce() {
  for (size_t i = 0; i < std::size(kDeviceAttributes); ++i) {
    for (size_t j = i + 1; j < std::size(kDeviceAttributes); ++j) {
      if (kDeviceAttributes[i].attribute == kDeviceAttributes[j].attribute) return false;
    }
  }
  return true;
}
static_assert(EachAttributeOnce(), "an attribute is listed twice in kDeviceAttributes");

// The value of a listed attribute (kDeviceAttributes) on a device.
int ListedAttribute(const AttributeSource& source, CUdevice_attribute attribute) {
  for (const DeviceAttribute& a : kDeviceAttributes) {
    if (a.attribute == attribute) return a.read(source);
  }
  return 0;
}

// The value of `attribute` on `gpu`; CUDA_ERROR_INVALID_VALUE for a value
// outside the CUdevice_attribute enumeration.
CUresult ReadDeviceAttribute(int gpu, const GpuModel& model, CUdevice_attribute attribute, int* value) {
  const AttributeSource source{Gpu(gpu), model, gpu};
  for (const DeviceAttribute& a : kDeviceAttributes) {
    if (a.attribute == attribute) {
      *value = a.read(source);
      return CUDA_SUCCESS;
    }
  }
  if (attribute <= 0 || attribute >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  *value = 0;
  return CUDA_SUCCESS;
}

}  // namespace

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    *count = static_cast<int>(R().visible.size());
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnDevice(ordinal, [&](int) -> CUresult {
    *device = ordinal;
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  return OnDevice(dev, [&](int gpu) -> CUresult {
    std::string n = Gpu(gpu).name;
    if (const GpuInstanceRecord* gi = MigInstanceOf(gpu)) {
      const GpuModel* m = R().state->model(gpu);
      const MigProfile* p = m ? FindMigProfileById(*m, gi->profile_id) : nullptr;
      if (p != nullptr) n += " MIG " + p->name;
    }
    std::snprintf(name, static_cast<size_t>(len), "%s", n.c_str());
    return CUDA_SUCCESS;
  });
}

static bool ParseUuid(const char* text, unsigned char out[16]) {
  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  const char* p = std::strchr(text, '-');
  if (p == nullptr) return false;
  ++p;
  int n = 0;
  while (*p != '\0' && n < 32) {
    if (*p == '-') {
      ++p;
      continue;
    }
    char hex[3] = {p[0], p[1], 0};
    if (p[1] == '\0') return false;
    out[n / 2] = static_cast<unsigned char>(std::strtoul(hex, nullptr, 16));
    n += 2;
    p += 2;
  }
  return n == 32;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnDevice(dev, [&](int gpu) -> CUresult {
    unsigned char bytes[16] = {};
    if (const GpuInstanceRecord* gi = MigInstanceOf(gpu)) {
      ParseUuid(MigDeviceUuid(Gpu(gpu), *gi, gi->cis[R().gpu_ci[gpu]]).c_str(), bytes);
    } else {
      ParseUuid(Gpu(gpu).uuid, bytes);
    }
    std::memcpy(uuid->bytes, bytes, 16);
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  return cuDeviceGetUuid_v2(uuid, dev);
}

CUresult cuDeviceGetLuid(char* luid, unsigned int* deviceNodeMask, CUdevice dev) {
  (void)luid;
  (void)deviceNodeMask;
  (void)dev;
  return CUDA_ERROR_NOT_SUPPORTED;  // Windows only
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnDevice(dev, [&](int gpu) -> CUresult {
    *bytes = DeviceTotalBytes(gpu);
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnDevice(dev, [&](int gpu) -> CUresult {
    const GpuModel* m = R().state->model(gpu);
    if (m == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    return ReadDeviceAttribute(gpu, *m, attrib, pi);
  });
}

CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
      r != CUDA_SUCCESS)
    return r;
  return cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
}

CUresult cuDeviceGetProperties(CUdevprop* prop, CUdevice dev) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnDevice(dev, [&](int gpu) -> CUresult {
    // The attribute table's figures (the legacy properties are a subset).
    const AttributeSource source{Gpu(gpu), *R().state->model(gpu), gpu};
    auto attribute = [&](CUdevice_attribute a) { return ListedAttribute(source, a); };
    *prop = CUdevprop{};
    prop->maxThreadsPerBlock = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    prop->maxThreadsDim[0] = attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
    prop->maxThreadsDim[1] = attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
    prop->maxThreadsDim[2] = attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
    prop->maxGridSize[0] = attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
    prop->maxGridSize[1] = attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
    prop->maxGridSize[2] = attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
    prop->sharedMemPerBlock = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    prop->totalConstantMemory = attribute(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
    prop->SIMDWidth = attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    prop->memPitch = attribute(CU_DEVICE_ATTRIBUTE_MAX_PITCH);
    prop->regsPerBlock = attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    prop->clockRate = attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    prop->textureAlign = attribute(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  return OnDevice(dev, [&](int gpu) -> CUresult {
    // The driver API's form: "0000:07:00.0" (4-digit domain).
    std::snprintf(pciBusId, static_cast<size_t>(len), "0000:%02x:00.0", Gpu(gpu).pci_bus);
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    unsigned domain = 0, bus = 0, device = 0, function = 0;
    if (std::sscanf(pciBusId, "%x:%x:%x.%x", &domain, &bus, &device, &function) < 3) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < R().visible.size(); ++i) {
      if (Gpu(R().visible[i]).pci_bus == bus && domain == 0 && device == 0) {
        *dev = static_cast<CUdevice>(i);
        return CUDA_SUCCESS;
      }
    }
    return CUDA_ERROR_INVALID_DEVICE;
  });
}

CUresult cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    int a, b;
    if (CUresult r = ValidDevice(dev, &a); r != CUDA_SUCCESS) return r;
    if (CUresult r = ValidDevice(peerDev, &b); r != CUDA_SUCCESS) return r;
    // Peers on NVLink, or on the same NUMA node's PCIe tree.
    *canAccessPeer = a != b && (Gpu(a).nvlink_links[b] > 0 || Gpu(a).numa_node == Gpu(b).numa_node);
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                 CUdevice dstDevice) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int can = 0;
  if (CUresult r = cuDeviceCanAccessPeer(&can, srcDevice, dstDevice); r != CUDA_SUCCESS) return r;
  return Entry([&]() -> CUresult {
    const int a = R().visible[srcDevice], b = R().visible[dstDevice];
    switch (attrib) {
      case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
        *value = Gpu(a).nvlink_links[b] > 0 ? 0 : 1;
        break;
      case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
        *value = can;
        break;
      case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
        *value = Gpu(a).nvlink_links[b] > 0;
        break;
      default:
        *value = can;
        break;
    }
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t* maxWidthInElements, CUarray_format format,
                                            unsigned numChannels, CUdevice dev) {
  (void)format;
  (void)numChannels;
  (void)dev;
  if (maxWidthInElements == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *maxWidthInElements = 1u << 27;
  return CUDA_SUCCESS;
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
