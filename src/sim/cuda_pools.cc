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

// The pool attributes: what each reads, and what setting it does.
using PoolFigure = uint64_t CUmemPoolHandle_st::*;
struct PoolAttribute {
  enum Kind {
    kThreshold,      // a uint64 the caller sets
    kCurrent,        // a uint64 figure, read only
    kHighWatermark,  // a uint64 figure; setting it restarts it from `current`
    kReusePolicy,    // an int that reads 1 (every policy is on); setting it changes nothing
  };
  CUmemPool_attribute attribute;
  Kind kind;
  PoolFigure figure;
  PoolFigure current;
};
constexpr PoolAttribute kPoolAttributes[] = {
    {CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, PoolAttribute::kThreshold, &CUmemPoolHandle_st::release_threshold,
     nullptr},
    {CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, PoolAttribute::kCurrent, &CUmemPoolHandle_st::reserved_bytes,
     nullptr},
    {CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, PoolAttribute::kHighWatermark, &CUmemPoolHandle_st::reserved_high,
     &CUmemPoolHandle_st::reserved_bytes},
    {CU_MEMPOOL_ATTR_USED_MEM_CURRENT, PoolAttribute::kCurrent, &CUmemPoolHandle_st::used_bytes, nullptr},
    {CU_MEMPOOL_ATTR_USED_MEM_HIGH, PoolAttribute::kHighWatermark, &CUmemPoolHandle_st::used_high,
     &CUmemPoolHandle_st::used_bytes},
    {CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, PoolAttribute::kReusePolicy, nullptr, nullptr},
    {CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, PoolAttribute::kReusePolicy, nullptr, nullptr},
    {CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, PoolAttribute::kReusePolicy, nullptr, nullptr},
};

const PoolAttribute* FindPoolAttribute(CUmemPool_attribute attribute) {
  for (const PoolAttribute& a : kPoolAttributes) {
    if (a.attribute == attribute) return &a;
  }
  return nullptr;
}

}  // namespace

void TrimPoolsOnSync() {
  for (CUmemoryPool p : Pools()) {
    if (IsLive(p) && p->reserved_bytes > p->release_threshold) TrimPool(p, p->release_threshold);
  }
}

#pragma GCC visibility push(default)  // the exported entry points
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

static CUresult PoolAlloc(CUdeviceptr* dptr, size_t size, CUmemoryPool pool, CUstream s) {
  if (pool == nullptr) {
    DefaultPool(s->ctx->device, s->ctx->gpu);
    pool = R().current_pool[s->ctx->gpu];
  }
  if (!Valid(pool)) return CUDA_ERROR_INVALID_HANDLE;
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

static CUresult PoolFree(CUdeviceptr p, CUstream s) {
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

// From `pool`, or (NULL) the stream's device's current pool.
static CUresult AllocAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream h) {
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  return OnStream(h, [&](CUstream s) { return PoolAlloc(dptr, bytesize, pool, s); });
}
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream s) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AllocAsync(dptr, bytesize, pool, s);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream s) {
  return cuMemAllocFromPoolAsync(dptr, bytesize, pool, PerThread(s));
}
CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream s) {
  return AllocAsync(dptr, bytesize, nullptr, s);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream s) {
  return AllocAsync(dptr, bytesize, nullptr, PerThread(s));
}
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream h) {
  return OnStream(h, [&](CUstream s) { return PoolFree(dptr, s); });
}
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
  return cuMemFreeAsync(dptr, PerThread(s));
}

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (pool == nullptr || props == nullptr || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int dev = props->location.id;
  return OnDevice(dev, [&](int gpu) {
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
  return Entry([&]() -> CUresult {
    if (!Valid(pool) || pool->is_default) return CUDA_ERROR_INVALID_VALUE;
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
    DestroyHandle(pool);
    return CUDA_SUCCESS;
  });
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  return OnHandle(pool, [&] { return TrimPool(pool, minBytesToKeep); });
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(pool, [&] {
    const PoolAttribute* a = FindPoolAttribute(attr);
    if (a == nullptr || a->kind == PoolAttribute::kCurrent) return CUDA_ERROR_INVALID_VALUE;
    if (a->kind == PoolAttribute::kThreshold) pool->*a->figure = *static_cast<cuuint64_t*>(value);
    if (a->kind == PoolAttribute::kHighWatermark) pool->*a->figure = pool->*a->current;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(pool, [&] {
    const PoolAttribute* a = FindPoolAttribute(attr);
    if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (a->kind == PoolAttribute::kReusePolicy) {
      *static_cast<int*>(value) = 1;
    } else {
      *static_cast<cuuint64_t*>(value) = pool->*a->figure;
    }
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnDevice(dev, [&](int gpu) -> CUresult {
    DefaultPool(dev, gpu);
    *pool = R().default_pool[gpu];
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnDevice(dev, [&](int gpu) -> CUresult {
    *pool = DefaultPool(dev, gpu);
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  return OnDevice(dev, [&](int gpu) -> CUresult {
    if (!Valid(pool) || pool->gpu != gpu) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    DefaultPool(dev, pool->gpu);
    R().current_pool[pool->gpu] = pool;
    return CUDA_SUCCESS;
  });
}

// Every device can use every pool (all memory is host memory here).
CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) {
  if (map == nullptr && count > 0) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(pool, [] { return CUDA_SUCCESS; });
}
CUresult cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool pool, CUmemLocation*) {
  return GetFrom(pool, flags, [&] { return CU_MEM_ACCESS_FLAGS_PROT_READWRITE; });
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
