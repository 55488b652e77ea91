// Stream-ordered allocation: memory pools (each device's default pool, and
// created ones), cuMemAllocAsync / cuMemFreeAsync from them, and the blocks a
// pool keeps cached for reuse after they are freed, trimmed above the pool's
// release threshold at synchronisation, on cuMemPoolTrimTo, and when an
// allocation would not fit otherwise.
#include <algorithm>
#include <vector>

#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {

namespace {

std::vector<CUmemoryPool>& Pools() {
  static auto* pools = new std::vector<CUmemoryPool>();
  return *pools;
}

CUresult TrimPool(CUmemoryPool pool, uint64_t keep) {
  while (pool->reserved_bytes > keep && !pool->cached.empty()) {
    auto it = pool->cached.begin();
    Allocation* a = FindAllocation(it->second);
    const uint64_t charged = a ? a->charged : 0;
    pool->cached.erase(it);
    if (a != nullptr) {
      a->kind = AllocKind::kDevice;  // hand back as a plain allocation
      FreeDevice(a->base);
    }
    pool->reserved_bytes -= std::min(pool->reserved_bytes, charged);
  }
  return CUDA_SUCCESS;
}

}  // namespace

void TrimPoolsOnSync() {
  for (CUmemoryPool p : Pools()) {
    if (IsLive(p) && p->reserved_bytes > p->release_threshold) TrimPool(p, p->release_threshold);
  }
}

}  // namespace tessera::sim::cuda

using namespace tessera::sim;
using namespace tessera::sim::cuda;

extern "C" {

static CUmemoryPool DefaultPool(int dev, int gpu) {
  Runtime& rt = R();
  if (rt.default_pool[gpu] == nullptr) {
    auto* p = new CUmemPoolHandle_st();
    p->device = dev;
    p->gpu = gpu;
    p->is_default = true;
    rt.live.insert(p);
    Pools().push_back(p);
    rt.default_pool[gpu] = p;
    rt.current_pool[gpu] = p;
  }
  return rt.current_pool[gpu] != nullptr ? rt.current_pool[gpu] : rt.default_pool[gpu];
}

static CUresult PoolAlloc(CUdeviceptr* dptr, size_t size, CUmemoryPool pool, CUstream h, bool ptds) {
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  if (pool == nullptr) {
    DefaultPool(s->ctx->device, s->ctx->gpu);
    pool = R().current_pool[s->ctx->gpu];
  }
  if (!IsLive(pool) || pool->magic != kPoolMagic) return CUDA_ERROR_INVALID_HANDLE;
  // Captured: an alloc node owned by the graph, with the pool's location.
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return CaptureMemAlloc(s, pool->device, size, dptr);
  const uint64_t want = (size + 4095) & ~uint64_t{4095};
  // Reuse a cached block that fits without wasting more than half of it.
  auto it = pool->cached.lower_bound(want);
  if (it != pool->cached.end() && it->first <= want * 2) {
    *dptr = it->second;
    pool->cached.erase(it);
    Allocation* a = FindAllocation(*dptr);
    a->size = size;
    pool->used_bytes += a->charged;
  } else {
    if (CUresult r = AllocDevice(pool->gpu, size, AllocKind::kPool, s->ctx, dptr, 512); r != CUDA_SUCCESS) {
      // Out of memory: give back what the pools cache, then try once more.
      for (CUmemoryPool p : Pools()) {
        if (IsLive(p)) TrimPool(p, 0);
      }
      if (AllocDevice(pool->gpu, size, AllocKind::kPool, s->ctx, dptr, 512) != CUDA_SUCCESS) return r;
    }
    Allocation* a = FindAllocation(*dptr);
    a->pool = pool;
    pool->reserved_bytes += a->charged;
    pool->used_bytes += a->charged;
  }
  pool->reserved_high = std::max(pool->reserved_high, pool->reserved_bytes);
  pool->used_high = std::max(pool->used_high, pool->used_bytes);
  s->last_end_ns = std::max(StreamReadyNs(s), MonotonicNs());
  return CUDA_SUCCESS;
}

static CUresult PoolFree(CUdeviceptr p, CUstream h, bool ptds) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return CaptureMemFree(s, p);
  auto it = R().allocs.find(p);
  if (it == R().allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  Allocation& a = it->second;
  if (a.kind == AllocKind::kPool && IsLive(a.pool)) {
    // Back to the pool (still reserved); released by trimming.
    for (auto& [sz, ptr] : a.pool->cached) {
      if (ptr == p) return CUDA_ERROR_INVALID_VALUE;  // double free
    }
    a.pool->used_bytes -= std::min(a.pool->used_bytes, a.charged);
    a.pool->cached.emplace(a.heap_len, p);
    return CUDA_SUCCESS;
  }
  return FreeDevice(p);
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream s) {
  return Guard([&]() -> CUresult { return PoolAlloc(dptr, bytesize, nullptr, s, false); });
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream s) {
  return Guard([&]() -> CUresult { return PoolAlloc(dptr, bytesize, nullptr, s, true); });
}
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream s) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return PoolAlloc(dptr, bytesize, pool, s, false); });
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream s) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return PoolAlloc(dptr, bytesize, pool, s, true); });
}
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) {
  return Guard([&]() -> CUresult { return PoolFree(dptr, s, false); });
}
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
  return Guard([&]() -> CUresult { return PoolFree(dptr, s, true); });
}

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  return Guard([&]() -> CUresult {
    if (pool == nullptr || props == nullptr || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    LOCKED;
    const int dev = props->location.id;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    auto* p = new CUmemPoolHandle_st();
    p->device = dev;
    p->gpu = gpu;
    R().live.insert(p);
    Pools().push_back(p);
    *pool = p;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (!IsLive(pool) || pool->magic != kPoolMagic || pool->is_default) return CUDA_ERROR_INVALID_VALUE;
    TrimPool(pool, 0);
    // Blocks still allocated from it stay valid and are freed as plain memory.
    for (auto& [base, a] : R().allocs) {
      if (a.pool == pool) {
        a.pool = nullptr;
        a.kind = AllocKind::kDevice;
      }
    }
    for (int g = 0; g < kMaxGpus; ++g) {
      if (R().current_pool[g] == pool) R().current_pool[g] = R().default_pool[g];
    }
    auto& v = Pools();
    v.erase(std::remove(v.begin(), v.end(), pool), v.end());
    R().live.erase(pool);
    pool->magic = 0;
    delete pool;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (!IsLive(pool) || pool->magic != kPoolMagic) return CUDA_ERROR_INVALID_VALUE;
    return TrimPool(pool, minBytesToKeep);
  });
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  return Guard([&]() -> CUresult {
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(pool) || pool->magic != kPoolMagic) return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
      case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        pool->release_threshold = *static_cast<cuuint64_t*>(value);
        break;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        pool->reserved_high = pool->reserved_bytes;
        break;
      case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        pool->used_high = pool->used_bytes;
        break;
      case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
  });
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  return Guard([&]() -> CUresult {
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(pool) || pool->magic != kPoolMagic) return CUDA_ERROR_INVALID_VALUE;
    auto* u64 = static_cast<cuuint64_t*>(value);
    switch (attr) {
      case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *u64 = pool->release_threshold;
        break;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        *u64 = pool->reserved_bytes;
        break;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        *u64 = pool->reserved_high;
        break;
      case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *u64 = pool->used_bytes;
        break;
      case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *u64 = pool->used_high;
        break;
      case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *static_cast<int*>(value) = 1;
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    DefaultPool(dev, gpu);
    *pool = R().default_pool[gpu];
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    *pool = DefaultPool(dev, gpu);
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  return Guard([&]() -> CUresult {
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    if (!IsLive(pool) || pool->magic != kPoolMagic || pool->gpu != gpu) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    DefaultPool(dev, pool->gpu);
    R().current_pool[pool->gpu] = pool;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) {
  return Guard([&]() -> CUresult {
    if (map == nullptr && count > 0) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    return IsLive(pool) && pool->magic == kPoolMagic ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  });
}
CUresult cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool pool, CUmemLocation* location) {
  (void)location;
  return Guard([&]() -> CUresult {
    if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(pool) || pool->magic != kPoolMagic) return CUDA_ERROR_INVALID_VALUE;
    *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
