// Device memory: every allocation is charged against its GPU's capacity in the
// shared state (all processes' charges together; a dead process's come back),
// and recorded in this process's allocation table. Here are that accounting and
// the allocation calls: device, pitched, managed (partly host-resident under
// managed_oversubscription), pinned and registered host memory, pointer
// attributes, and the managed-memory hints that have no effect on the simulator.
#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {

CUresult ChargeDevice(int gpu, uint64_t bytes, uint64_t* resident) {
  Runtime& rt = R();
  if (CUresult r = CheckMpsServer(); r != CUDA_SUCCESS) return r;
  StateLock lock(*rt.state);
  const int slot = rt.state->ProcessSlotLocked(rt.pid, true);
  if (slot < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  ProcessRecord& p = rt.state->file()->processes[slot];
  // An MPS client's allocations stop at its pinned device memory limit.
  const uint64_t limit = rt.mps.pinned_limit_bytes[gpu];
  if (limit > 0 && p.used_bytes[gpu] + bytes > limit) {
    if (resident == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
    bytes = p.used_bytes[gpu] < limit ? limit - p.used_bytes[gpu] : 0;
  }
  const uint64_t total = rt.state->file()->gpus[gpu].total_bytes;
  const GpuInstanceRecord* gi = MigInstanceOf(gpu);
  const uint64_t gi_total = gi != nullptr ? DeviceTotalBytes(gpu) : 0;
  auto fits = [&] {
    if (rt.state->UsedBytesLocked(gpu) + bytes > total) return false;
    return gi == nullptr || rt.state->UsedBytesInInstanceLocked(gpu, gi->id) + bytes <= gi_total;
  };
  if (!fits()) {
    rt.state->ReclaimDeadLocked();  // a crashed process's memory comes back
    if (!fits() && resident == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (resident != nullptr) {
    // As much as is free, in whole 4 KiB pages.
    const uint64_t used = rt.state->UsedBytesLocked(gpu);
    uint64_t room = used < total ? total - used : 0;
    if (gi != nullptr) {
      const uint64_t gi_used = rt.state->UsedBytesInInstanceLocked(gpu, gi->id);
      room = std::min(room, gi_used < gi_total ? gi_total - gi_used : 0);
    }
    bytes = std::min(bytes, room / 4096 * 4096);
    *resident = bytes;
  }
  p.used_bytes[gpu] += bytes;
  RecordInstanceOf(p, gpu);
  return CUDA_SUCCESS;
}

void UnchargeDevice(int gpu, uint64_t bytes) {
  Runtime& rt = R();
  StateLock lock(*rt.state);
  const int slot = rt.state->ProcessSlotLocked(rt.pid, false);
  if (slot < 0) return;
  uint64_t& used = rt.state->file()->processes[slot].used_bytes[gpu];
  used = used > bytes ? used - bytes : 0;
}

namespace {

// Rounds a charge the way the real driver's allocator does for small sizes.
uint64_t ChargeFor(uint64_t bytes) {
  return (std::max<uint64_t>(bytes, 1) + 4095) & ~uint64_t{4095};
}

}  // namespace

CUresult AllocDevice(int gpu, uint64_t bytes, AllocKind kind, CUcontext ctx, CUdeviceptr* out, uint64_t align,
                     bool may_spill) {
  Runtime& rt = R();
  DeviceHeap& heap = rt.heaps[gpu];
  if (!heap.EnsureMapped(Gpu(gpu).total_bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t charge = ChargeFor(bytes);
  // A spilling allocation is bounded by the address space (the heap), not the device.
  if (charge > Gpu(gpu).total_bytes && !may_spill) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t charged = charge;
  if (CUresult r = ChargeDevice(gpu, charge, may_spill ? &charged : nullptr); r != CUDA_SUCCESS) return r;
  const uint64_t off = heap.Allocate(charge, std::max<uint64_t>(align, 4096));
  if (off == UINT64_MAX) {
    UnchargeDevice(gpu, charged);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Allocation a;
  a.base = reinterpret_cast<uint64_t>(heap.base() + off);
  a.size = bytes;
  a.charged = charged;  // the device-resident part
  a.heap_off = off;
  a.heap_len = charge;
  a.gpu = gpu;
  a.kind = kind;
  a.ctx = ctx;
  rt.allocs[a.base] = a;
  *out = a.base;
  return CUDA_SUCCESS;
}

CUresult FreeDevice(CUdeviceptr p) {
  Runtime& rt = R();
  auto it = rt.allocs.find(p);
  if (it == rt.allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  Allocation a = it->second;
  if (a.kind == AllocKind::kHost || a.kind == AllocKind::kHostRegistered || a.kind == AllocKind::kIpc ||
      a.kind == AllocKind::kVmm) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A graph allocation's range outlives its lifetime: only the lifetime ends.
  if (a.kind == AllocKind::kGraph) return FreeGraphAllocation(p);
  if (a.kind == AllocKind::kPool && IsLive(a.pool)) {
    // Freed synchronously: it leaves its pool (and must not be cached there).
    for (auto c = a.pool->cached.begin(); c != a.pool->cached.end(); ++c) {
      if (c->second == p) return CUDA_ERROR_INVALID_VALUE;
    }
    a.pool->used_bytes -= std::min(a.pool->used_bytes, a.charged);
    a.pool->reserved_bytes -= std::min(a.pool->reserved_bytes, a.charged);
  }
  rt.allocs.erase(it);
  if (a.heap_len > 0) rt.heaps[a.gpu].Free(a.heap_off, a.heap_len);
  if (a.charged > 0) UnchargeDevice(a.gpu, a.charged);
  return CUDA_SUCCESS;
}

Allocation* FindAllocation(uint64_t p, uint64_t n) {
  Runtime& rt = R();
  auto it = rt.allocs.upper_bound(p);
  if (it == rt.allocs.begin()) return nullptr;
  --it;
  Allocation& a = it->second;
  const uint64_t len = std::max<uint64_t>(a.size, 1);
  if (p >= a.base && p + n <= a.base + std::max(len, a.heap_len)) return &a;
  return nullptr;
}

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  return InCurrentContext([&](CUcontext c) {
    const int gpu = c->gpu;
    Runtime& rt = R();
    StateLock lock(*rt.state);
    rt.state->ReclaimDeadLocked();
    const GpuInstanceRecord* gi = MigInstanceOf(gpu);
    const uint64_t t = DeviceTotalBytes(gpu);
    const uint64_t used =
        gi != nullptr ? rt.state->UsedBytesInInstanceLocked(gpu, gi->id) : rt.state->UsedBytesLocked(gpu);
    if (free != nullptr) *free = used >= t ? 0 : t - used;
    if (total != nullptr) *total = t;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  return InCurrentContext(
      [&](CUcontext c) { return AllocDevice(c->gpu, bytesize, AllocKind::kDevice, c, dptr, 512); });
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes) {
  if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0 ||
      (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t pitch = (WidthInBytes + 511) / 512 * 512;
  return InCurrentContext([&](CUcontext c) {
    if (CUresult r = AllocDevice(c->gpu, pitch * Height, AllocKind::kDevice, c, dptr, 512); r != CUDA_SUCCESS)
      return r;
    *pPitch = pitch;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  // cuMemFree synchronises with the device: wait (unlocked) for work in flight.
  const CUresult r = WaitFor([&](int64_t* t) {
    if (dptr == 0) return CUDA_SUCCESS;
    if (R().allocs.find(dptr) == R().allocs.end()) return CUDA_ERROR_INVALID_VALUE;
    if (CUcontext c = CurrentContext(); c != nullptr) *t = ContextReadyNs(c);
    return CUDA_SUCCESS;
  });
  if (r != CUDA_SUCCESS || dptr == 0) return r;
  return Entry([&] { return FreeDevice(dptr); });
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  return InCurrentContext([&](CUcontext c) -> CUresult {
    // With managed_oversubscription, what does not fit the device stays in host memory.
    const bool may_spill = (R().state->file()->flags & kStateFlagManagedOversubscription) != 0;
    if (CUresult r = AllocDevice(c->gpu, bytesize, AllocKind::kManaged, c, dptr, 4096, may_spill);
        r != CUDA_SUCCESS)
      return r;
    R().allocs[*dptr].flags = flags;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  return Entry([&]() -> CUresult {
    Allocation* a = FindAllocation(dptr);
    if (a == nullptr || a->gpu < 0) return CUDA_ERROR_NOT_FOUND;
    if (pbase != nullptr) *pbase = a->base;
    if (psize != nullptr) *psize = a->size;
    return CUDA_SUCCESS;
  });
}

// Pinned host memory: ordinary host memory here (it costs no device memory).
CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return InCurrentContext([&](CUcontext c) {
    const size_t len = std::max<size_t>(bytesize, 1);
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    Allocation a;
    a.base = reinterpret_cast<uint64_t>(p);
    a.size = len;
    a.kind = AllocKind::kHost;
    a.flags = Flags;
    a.ctx = c;
    R().allocs[a.base] = a;
    *pp = p;
    return CUDA_SUCCESS;
  });
}
CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return cuMemHostAlloc(pp, bytesize, 0);
}

CUresult cuMemFreeHost(void* p) {
  return Entry([&]() -> CUresult {
    auto it = R().allocs.find(reinterpret_cast<uint64_t>(p));
    if (it == R().allocs.end() || it->second.kind != AllocKind::kHost) return CUDA_ERROR_INVALID_VALUE;
    munmap(p, it->second.size);
    R().allocs.erase(it);
    return CUDA_SUCCESS;
  });
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    Allocation* a = FindAllocation(reinterpret_cast<uint64_t>(p));
    if (a == nullptr || (a->kind != AllocKind::kHost && a->kind != AllocKind::kHostRegistered)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *pdptr = reinterpret_cast<CUdeviceptr>(p);
    return CUDA_SUCCESS;
  });
}

CUresult cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  if (pFlags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    Allocation* a = FindAllocation(reinterpret_cast<uint64_t>(p));
    if (a == nullptr || a->kind != AllocKind::kHost) return CUDA_ERROR_INVALID_VALUE;
    *pFlags = a->flags;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  if (p == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  return InCurrentContext([&](CUcontext) {
    const uint64_t base = reinterpret_cast<uint64_t>(p);
    if (FindAllocation(base) != nullptr) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    Allocation a;
    a.base = base;
    a.size = bytesize;
    a.kind = AllocKind::kHostRegistered;
    a.flags = Flags;
    R().allocs[base] = a;
    return CUDA_SUCCESS;
  });
}
CUresult cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  return cuMemHostRegister_v2(p, bytesize, Flags);
}

CUresult cuMemHostUnregister(void* p) {
  return Entry([&]() -> CUresult {
    auto it = R().allocs.find(reinterpret_cast<uint64_t>(p));
    if (it == R().allocs.end() || it->second.kind != AllocKind::kHostRegistered) {
      return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    }
    R().allocs.erase(it);
    return CUDA_SUCCESS;
  });
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    Allocation* a = FindAllocation(ptr);
    if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const bool host = a->gpu < 0;
    int ordinal = 0;
    if (!host) {
      auto& v = R().visible;
      ordinal = static_cast<int>(std::find(v.begin(), v.end(), a->gpu) - v.begin());
    }
    switch (attribute) {
      case CU_POINTER_ATTRIBUTE_CONTEXT:
        *static_cast<CUcontext*>(data) = a->ctx;
        break;
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *static_cast<unsigned*>(data) = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *static_cast<CUdeviceptr*>(data) = ptr;
        break;
      case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!host && a->kind != AllocKind::kManaged) return CUDA_ERROR_INVALID_VALUE;
        *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
        break;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *static_cast<unsigned*>(data) = a->kind == AllocKind::kManaged;
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *static_cast<int*>(data) = ordinal;
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *static_cast<CUdeviceptr*>(data) = a->base;
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *static_cast<size_t*>(data) = a->size;
        break;
      case CU_POINTER_ATTRIBUTE_MAPPED:
        *static_cast<unsigned*>(data) = 1;
        break;
      case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *static_cast<unsigned long long*>(data) = a->base;
        break;
      case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *static_cast<unsigned*>(data) = 1;
        break;
      case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *static_cast<unsigned*>(data) = a->kind == AllocKind::kDevice;
        break;
      case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *static_cast<CUmemoryPool*>(data) = a->pool;
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
  });
}

CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes, void** data,
                                CUdeviceptr ptr) {
  if (attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < numAttributes; ++i) {
    if (data[i] == nullptr) continue;
    CUresult r = cuPointerGetAttribute(data[i], attributes[i], ptr);
    if (r != CUDA_SUCCESS && attributes[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE) {
      *static_cast<unsigned*>(data[i]) = 0;  // unregistered host memory
    } else if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_VALUE) {
      return r;
    }
  }
  return CUDA_SUCCESS;
}

// Hints with no effect on the simulator (nothing migrates).
CUresult cuPointerSetAttribute(const void*, CUpointer_attribute, CUdeviceptr) {
  return CUDA_SUCCESS;
}
CUresult cuMemAdvise_v2(CUdeviceptr, size_t, CUmem_advise, CUmemLocation) {
  return CUDA_SUCCESS;
}
CUresult cuMemAdvise(CUdeviceptr, size_t, CUmem_advise, CUdevice) {
  return CUDA_SUCCESS;
}
CUresult cuMemPrefetchAsync_v2(CUdeviceptr, size_t, CUmemLocation, unsigned int, CUstream) {
  return CUDA_SUCCESS;
}
CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr, size_t, CUmemLocation, unsigned int, CUstream) {
  return CUDA_SUCCESS;
}

// Managed-memory ranges: no migration is simulated; data lives in one place.
CUresult cuMemRangeGetAttribute(void* data, size_t dataSize, CUmem_range_attribute, CUdeviceptr devPtr,
                                size_t count) {
  if (data == nullptr || dataSize == 0) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    if (FindAllocation(devPtr, count) == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::memset(data, 0, dataSize);
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
