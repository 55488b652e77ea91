// Devices as the driver API shows them: ordinals (CUDA_VISIBLE_DEVICES),
// identity (name, UUID, PCI bus id, total memory), attributes, and peer
// access between devices. A process running in a MIG instance sees the instance as its device (its
// name, memory and share of the SMs).
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

uint64_t DeviceTotalBytes(int gpu) {
  const GpuInstanceRecord* gi = MigInstanceOf(gpu);
  if (gi != nullptr) {
    const GpuModel* m = R().state->model(gpu);
    const MigProfile* p = m ? FindMigProfileById(*m, gi->profile_id) : nullptr;
    if (p != nullptr) return p->memory_mib << 20;
  }
  return R().state->file()->gpus[gpu].total_bytes;
}

}  // namespace tessera::sim::cuda

using namespace tessera::sim;
using namespace tessera::sim::cuda;

extern "C" {

CUresult cuDeviceGetCount(int* count) {
  return Guard([&]() -> CUresult {
    if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    *count = static_cast<int>(R().visible.size());
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  return Guard([&]() -> CUresult {
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(ordinal, &gpu); r != CUDA_SUCCESS) return r;
    *device = ordinal;
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
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
  return Guard([&]() -> CUresult {
    if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
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
  return Guard([&]() -> CUresult {
    if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    *bytes = DeviceTotalBytes(gpu);
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    const GpuRecord& g = Gpu(gpu);
    const GpuModel* m = R().state->model(gpu);
    if (m == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    int v = 0;
    switch (attrib) {
      case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        v = 1024;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
        v = 1024;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
        v = 1024;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
        v = 64;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
        v = 2147483647;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
        v = 65535;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
        v = 65535;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
        v = 49152;
        break;
      case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
        v = 65536;
        break;
      case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
        v = 32;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
        v = 2147483647;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
        v = 65536;
        break;
      case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
        v = static_cast<int>(m->sm_clock_mhz * 1000);
        break;
      case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
        v = 512;
        break;
      case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: {
        v = static_cast<int>(g.sm_count);
        if (const GpuInstanceRecord* gi = MigInstanceOf(gpu)) {
          // The compute instance's share of its GPU instance's SMs.
          const MigProfile* p = FindMigProfileById(*m, gi->profile_id);
          const ComputeInstanceRecord& ci = gi->cis[R().gpu_ci[gpu]];
          if (p != nullptr) v = static_cast<int>(ComputeInstanceSmCount(*m, *p, ci.size));
        }
        break;
      }
      case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
        v = CU_COMPUTEMODE_DEFAULT;
        break;
      case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH:
        v = 131072;
        break;
      case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH:
        v = 131072;
        break;
      case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT:
        v = 65536;
        break;
      case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH:
        v = 16384;
        break;
      case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT:
        v = 16384;
        break;
      case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH:
        v = 16384;
        break;
      case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT:
        v = 512;
        break;
      case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
        v = m->architecture >= 7 || m->key == "V100" ? 1 : 0;
        break;
      case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        v = static_cast<int>(g.pci_bus);
        break;
      case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
        v = 0;
        break;
      case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
        v = 0;
        break;
      case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
        v = static_cast<int>(m->mem_clock_mhz * 1000);
        break;
      case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
        v = static_cast<int>(m->memory_bus_width);
        break;
      case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
        v = static_cast<int>(m->l2_cache_bytes);
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
        v = static_cast<int>(m->max_threads_per_sm);
        break;
      case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
        v = static_cast<int>(m->async_engines);
        break;
      case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
        v = 32;
        break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        v = static_cast<int>(m->cc_major);
        break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        v = static_cast<int>(m->cc_minor);
        break;
      case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
        v = static_cast<int>(m->shared_mem_per_sm);
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
        v = static_cast<int>(m->regs_per_sm);
        break;
      case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:
        v = 0;
        break;
      case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID:
        v = static_cast<int>(gpu);
        break;
      case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
        v = 2;
        break;
      case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        v = static_cast<int>(m->shared_mem_per_block_optin);
        break;
      case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
        v = static_cast<int>(m->max_blocks_per_sm);
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE:
        v = static_cast<int>(m->l2_cache_bytes / 4 * 3);
        break;
      case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
        v = 1024;
        break;
      case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
        v = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        break;
      case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
        v = m->cc_major >= 9 ? 1 : 0;
        break;
      case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED:
        v = 0;
        break;
      case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG:
        v = 0;
        break;
      case CU_DEVICE_ATTRIBUTE_NUMA_ID:
        v = -1;
        break;
      case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
        v = g.numa_node;
        break;
      case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID:
        v = static_cast<int>(m->pci_device_id);
        break;
      default:
        if (attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
        v = 0;
    }
    *pi = v;
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
        r != CUDA_SUCCESS)
      return r;
    return cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  });
}

CUresult cuDeviceGetProperties(CUdevprop* prop, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    const GpuModel* m = R().state->model(gpu);
    *prop = CUdevprop{};
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->sharedMemPerBlock = 49152;
    prop->totalConstantMemory = 65536;
    prop->SIMDWidth = 32;
    prop->memPitch = 2147483647;
    prop->regsPerBlock = 65536;
    prop->clockRate = static_cast<int>(m->sm_clock_mhz * 1000);
    prop->textureAlign = 512;
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    // The driver API's form: "0000:07:00.0" (4-digit domain).
    std::snprintf(pciBusId, static_cast<size_t>(len), "0000:%02x:00.0", Gpu(gpu).pci_bus);
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  return Guard([&]() -> CUresult {
    if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
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
  return Guard([&]() -> CUresult {
    if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
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
  return Guard([&]() -> CUresult {
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int can = 0;
    if (CUresult r = cuDeviceCanAccessPeer(&can, srcDevice, dstDevice); r != CUDA_SUCCESS) return r;
    LOCKED;
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
