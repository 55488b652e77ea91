// Virtual memory management: physical allocations (cuMemCreate), charged to
// the device at once; address ranges reserved without backing
// (cuMemAddressReserve); and mappings of the one at the other, the device
// heap's memfd mapped at the reserved address, with access set per range.
// A released allocation's memory goes back when its last mapping goes.
#include <sys/mman.h>

#include <algorithm>

#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  (void)option;
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kVmmGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long) {
  if (handle == nullptr || prop == nullptr || size == 0 || size % kVmmGranularity != 0 ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return OnDevice(prop->location.id, [&](int gpu) {
    Runtime& rt = R();
    DeviceHeap& heap = rt.heaps[gpu];
    if (!heap.EnsureMapped(rt.state->file()->gpus[gpu].total_bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (CUresult r = ChargeDevice(gpu, size); r != CUDA_SUCCESS) return r;
    const uint64_t off = heap.Allocate(size, kVmmGranularity);
    if (off == UINT64_MAX) {
      UnchargeDevice(gpu, size);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    const unsigned long long id = rt.next_id++;
    VmmHandle h;
    h.gpu = gpu;
    h.size = size;
    h.heap_off = off;
    h.prop = *prop;
    rt.vmm_handles[id] = h;
    *handle = id;
    return CUDA_SUCCESS;
  });
}

static void FreeVmmHandle(unsigned long long id) {
  Runtime& rt = R();
  auto it = rt.vmm_handles.find(id);
  if (it == rt.vmm_handles.end()) return;
  rt.heaps[it->second.gpu].Free(it->second.heap_off, it->second.size);
  UnchargeDevice(it->second.gpu, it->second.size);
  rt.vmm_handles.erase(it);
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  return Entry([&]() -> CUresult {
    auto it = R().vmm_handles.find(handle);
    if (it == R().vmm_handles.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
    // Memory goes back once no mapping uses it any more, as with the real driver.
    it->second.released = true;
    if (it->second.mappings == 0) FreeVmmHandle(handle);
    return CUDA_SUCCESS;
  });
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long) {
  if (ptr == nullptr || size == 0 || size % kVmmGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    const size_t align = std::max<size_t>(alignment, kVmmGranularity);
    const size_t len = size + align;
    void* hint = addr != 0 ? reinterpret_cast<void*>(addr) : nullptr;
    void* p = mmap(hint, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t base = (reinterpret_cast<uint64_t>(p) + align - 1) / align * align;
    // Give back the slack around the aligned range.
    if (base > reinterpret_cast<uint64_t>(p)) munmap(p, base - reinterpret_cast<uint64_t>(p));
    const uint64_t end = reinterpret_cast<uint64_t>(p) + len;
    if (end > base + size) munmap(reinterpret_cast<void*>(base + size), end - (base + size));
    R().vmm_reservations[base] = VmmReservation{base, size};
    *ptr = base;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return Entry([&]() -> CUresult {
    auto it = R().vmm_reservations.find(ptr);
    if (it == R().vmm_reservations.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
    munmap(reinterpret_cast<void*>(ptr), size);
    R().vmm_reservations.erase(it);
    return CUDA_SUCCESS;
  });
}

static bool InReservation(uint64_t p, uint64_t n) {
  auto& res = R().vmm_reservations;
  auto it = res.upper_bound(p);
  if (it == res.begin()) return false;
  --it;
  return p >= it->second.base && p + n <= it->second.base + it->second.size;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long) {
  return Entry([&]() -> CUresult {
    Runtime& rt = R();
    auto it = rt.vmm_handles.find(handle);
    if (it == rt.vmm_handles.end() || it->second.released) return CUDA_ERROR_INVALID_HANDLE;
    VmmHandle& h = it->second;
    if (size == 0 || offset + size > h.size || ptr % kVmmGranularity != 0 || !InReservation(ptr, size)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (FindAllocation(ptr) != nullptr || rt.vmm_mappings.count(ptr)) return CUDA_ERROR_ALREADY_MAPPED;
    // Mapped without access until cuMemSetAccess, as on a real device.
    void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                   rt.heaps[h.gpu].fd(), static_cast<off_t>(h.heap_off + offset));
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    ++h.mappings;
    rt.vmm_mappings[ptr] = {handle, size};
    Allocation a;
    a.base = ptr;
    a.size = size;
    a.gpu = h.gpu;
    a.kind = AllocKind::kVmm;
    rt.allocs[ptr] = a;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return Entry([&]() -> CUresult {
    Runtime& rt = R();
    auto it = rt.vmm_mappings.find(ptr);
    if (it == rt.vmm_mappings.end() || it->second.second != size) return CUDA_ERROR_INVALID_VALUE;
    mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    const unsigned long long id = it->second.first;
    rt.vmm_mappings.erase(it);
    rt.allocs.erase(ptr);
    auto h = rt.vmm_handles.find(id);
    if (h != rt.vmm_handles.end() && --h->second.mappings == 0 && h->second.released) {
      FreeVmmHandle(id);
    }
    return CUDA_SUCCESS;
  });
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    if (!InReservation(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
    int prot = PROT_NONE;
    for (size_t i = 0; i < count; ++i) {
      if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        prot = PROT_READ | PROT_WRITE;
      else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
        prot = PROT_READ;
    }
    // Only mapped ranges can be given access.
    for (uint64_t p = ptr; p < ptr + size;) {
      auto it = R().vmm_mappings.find(p);
      if (it == R().vmm_mappings.end()) return CUDA_ERROR_INVALID_VALUE;
      p += it->second.second;
    }
    if (mprotect(reinterpret_cast<void*>(ptr), size, prot) != 0) return CUDA_ERROR_INVALID_VALUE;
    for (uint64_t p = ptr; p < ptr + size; p += R().vmm_mappings[p].second) {
      R().allocs[p].flags = static_cast<unsigned>(prot);
    }
    return CUDA_SUCCESS;
  });
}

CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation*, CUdeviceptr ptr) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    Allocation* a = FindAllocation(ptr);
    if (a == nullptr || a->kind != AllocKind::kVmm) return CUDA_ERROR_INVALID_VALUE;
    *flags = (a->flags & PROT_WRITE)  ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
             : (a->flags & PROT_READ) ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                      : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                CUmemGenericAllocationHandle handle) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    auto it = R().vmm_handles.find(handle);
    if (it == R().vmm_handles.end()) return CUDA_ERROR_INVALID_VALUE;
    *prop = it->second.prop;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    const uint64_t p = reinterpret_cast<uint64_t>(addr);
    for (auto& [va, m] : R().vmm_mappings) {
      if (p >= va && p < va + m.second) {
        *handle = m.first;
        return CUDA_SUCCESS;
      }
    }
    return CUDA_ERROR_INVALID_VALUE;
  });
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
