// The CUDA driver entry points libvgpu intercepts (see hook_table.h). Each is
// exported under its exact ABI name; its type is the one cuda.h declares, which
// the compiler checks here (definition vs declaration) and hook_table_check.cc
// checks again for the table as a whole.
//
// Memory paths follow one pattern: work out the device and the size, reserve it
// in the region (refuse with CUDA_ERROR_OUT_OF_MEMORY if it does not fit), call
// the driver, give the reservation back if the driver fails, and remember the
// handle so the free returns exactly what was reserved.
#include <cstring>

#include "vgpu/compute/limiter.h"
#include "vgpu/log.h"
#include "vgpu/runtime.h"

#define TESSERA_EXPORT extern "C" __attribute__((visibility("default")))

using tessera::vgpu::AllocationRecord;
using tessera::vgpu::kMaxDevices;
using tessera::vgpu::LogLevel;
using tessera::vgpu::Runtime;
using tessera::vgpu::runtime;

namespace {

constexpr uint64_t kPitchAlignment = 512;  // upper bound of the driver's pitch alignment for the estimate

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

uint64_t format_bytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    default:
      return 4;
  }
}

// Bytes an array of these dimensions needs at least (the driver may add
// alignment; the reservation is corrected to the driver's figure afterwards).
uint64_t array_bytes(size_t width, size_t height, size_t depth, unsigned channels, CUarray_format format) {
  uint64_t n = 1, out = 0;
  uint64_t dims[] = {width ? width : 1, height ? height : 1, depth ? depth : 1, channels ? channels : 1,
                     format_bytes(format)};
  for (uint64_t d : dims) {
    if (mul_overflows(n, d, &out)) return ~0ull;
    n = out;
  }
  return n;
}

// After the driver reports the real size of something we reserved `reserved`
// for, moves the reservation to `actual`. Returns false if growing it does not
// fit (the caller then frees the object and reports out of memory).
bool settle(Runtime& rt, int dev, uint64_t reserved, uint64_t actual, const char* what) {
  if (actual > reserved) return rt.reserve(dev, actual - reserved, what);
  if (actual < reserved) rt.release(dev, reserved - actual);
  return true;
}

// Destroys or frees a handle this process may have reserved memory for:
// takes its record out of `map` first (so that a handle the driver hands out
// again at once is not confused with it), calls `destroy`, then on success
// gives the record to `on_destroyed` (which returns what it held), or on
// failure puts the record back. Handles never tracked go straight to the
// driver: unknown ones are still the driver's to destroy.
template <typename Destroy, typename OnDestroyed>
CUresult destroy_tracked(tessera::vgpu::AllocationMap& map, uint64_t key, bool may_be_tracked,
                         Destroy destroy, OnDestroyed on_destroyed) {
  AllocationRecord rec;
  bool known = may_be_tracked && map.take(key, &rec);
  CUresult rc = destroy();
  if (!known) return rc;
  if (rc == CUDA_SUCCESS)
    on_destroyed(rec);
  else
    map.insert(key, rec);
  return rc;
}

// The destroyed object's reservation goes back to the region.
auto release_record(Runtime& rt) {
  return [&rt](const AllocationRecord& rec) { rt.release(rec.device, rec.bytes); };
}

CUresult alloc_common(Runtime& rt, CUdeviceptr* dptr, size_t bytesize, const char* what,
                      CUresult (*call)(void*, CUdeviceptr*, size_t), void* ctx, bool managed_fallback) {
  if (!rt.accounting || dptr == nullptr || bytesize == 0) return call(ctx, dptr, bytesize);
  int dev = rt.current_device();
  if (dev == Runtime::kHiddenDevice) return CUDA_ERROR_INVALID_DEVICE;
  if (dev < 0) return call(ctx, dptr, bytesize);
  if (!rt.reserve(dev, bytesize, what)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = call(ctx, dptr, bytesize);
  bool spilled = false;
  if (rc == CUDA_ERROR_OUT_OF_MEMORY && managed_fallback && rt.config.oversubscribe &&
      rt.cuda.cuMemAllocManaged != nullptr) {
    rc = rt.cuda.cuMemAllocManaged(dptr, bytesize, CU_MEM_ATTACH_GLOBAL);
    spilled = rc == CUDA_SUCCESS;
    if (spilled)
      tessera::vgpu::log_event(LogLevel::kInfo, "%s of %zu bytes oversubscribed: served as managed memory",
                               what, bytesize);
  }
  if (rc != CUDA_SUCCESS) {
    rt.release(dev, bytesize);
    return rc;
  }
  if (spilled) rt.region.note_spilled_bytes(dev, static_cast<int64_t>(bytesize));
  rt.device_pointers.insert(*dptr, AllocationRecord{dev, bytesize, spilled});
  rt.oom_check(dev);
  return rc;
}

CUresult free_common(Runtime& rt, CUdeviceptr dptr, CUresult (*call)(void*, CUdeviceptr), void* ctx) {
  return destroy_tracked(
      rt.device_pointers, dptr, dptr != 0, [&] { return call(ctx, dptr); },
      [&rt](const AllocationRecord& rec) {
        if (rec.spilled) rt.region.note_spilled_bytes(rec.device, -static_cast<int64_t>(rec.bytes));
        if (rec.pool != 0) {
          rt.pool_freed(rec.pool, rec.bytes);  // the pool may keep holding it
        } else {
          rt.release(rec.device, rec.bytes);
        }
      });
}

}  // namespace

// ---------------------------------------------------------------- init, devices

TESSERA_EXPORT CUresult cuInit(unsigned int Flags) {
  Runtime& rt = runtime();
  if (rt.cuda.cuInit == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = rt.cuda.cuInit(Flags);
  if (rc == CUDA_SUCCESS) rt.on_cuda_initialised();
  return rc;
}

TESSERA_EXPORT CUresult cuDeviceGetCount(int* count) {
  Runtime& rt = runtime();
  if (rt.cuda.cuDeviceGetCount == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = rt.cuda.cuDeviceGetCount(count);
  if (rc != CUDA_SUCCESS || count == nullptr || !rt.config.filters_devices()) return rc;
  rt.on_cuda_initialised();
  *count = rt.cuda_visible_count;
  return rc;
}

TESSERA_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  Runtime& rt = runtime();
  if (rt.cuda.cuDeviceGet == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!rt.config.filters_devices()) return rt.cuda.cuDeviceGet(device, ordinal);
  if (!rt.cuda_devices_ready.load(std::memory_order_acquire)) {
    CUresult rc = rt.cuda.cuDeviceGet(device, 0);  // reports NOT_INITIALIZED etc. as the driver would
    if (rc != CUDA_SUCCESS) return rc;
    rt.on_cuda_initialised();
  }
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= rt.cuda_visible_count) return CUDA_ERROR_INVALID_DEVICE;
  return rt.cuda.cuDeviceGet(device, rt.cuda_visible[ordinal]);
}

TESSERA_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  Runtime& rt = runtime();
  if (rt.cuda.cuDeviceGetByPCIBusId == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = rt.cuda.cuDeviceGetByPCIBusId(dev, pciBusId);
  if (rc == CUDA_SUCCESS && !rt.cuda_device_visible(*dev)) return CUDA_ERROR_INVALID_DEVICE;
  return rc;
}

TESSERA_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  Runtime& rt = runtime();
  if (rt.cuda.cuDeviceTotalMem_v2 == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = rt.cuda.cuDeviceTotalMem_v2(bytes, dev);
  if (rc != CUDA_SUCCESS || bytes == nullptr || !rt.accounting) return rc;
  uint64_t limit = rt.region.memory_limit(rt.region_index_for_cuda_device(dev));
  if (limit != 0) *bytes = limit;
  return rc;
}

TESSERA_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  Runtime& rt = runtime();
  if (rt.cuda.cuMemGetInfo_v2 == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = rt.cuda.cuMemGetInfo_v2(free, total);
  if (rc != CUDA_SUCCESS || !rt.accounting) return rc;
  int dev = rt.current_device();
  if (dev == Runtime::kHiddenDevice) return CUDA_ERROR_INVALID_DEVICE;
  uint64_t limit = rt.region.memory_limit(dev);
  if (limit == 0) return rc;
  rt.region.reclaim_dead_throttled(100'000'000);  // a dead neighbour's memory shows up as free within 100 ms
  rt.reconcile_pools();                           // trimmed pools' memory shows up as free
  rt.refresh_limits();
  rt.region.verify(dev);  // a region changed from outside shows as it should be
  limit = rt.region.memory_limit(dev);
  rt.oom_check(dev);
  uint64_t used = rt.region.memory_used(dev);
  uint64_t headroom = used < limit ? limit - used : 0;
  if (free != nullptr && (headroom < *free || rt.config.oversubscribe)) *free = headroom;
  if (total != nullptr) *total = limit;
  return rc;
}

// ---------------------------------------------------------------- contexts

namespace {

CUresult after_context_created(Runtime& rt, CUresult rc, CUcontext* pctx, int dev) {
  if (rc != CUDA_SUCCESS) {
    rt.uncharge_context(dev);
    return rc;
  }
  if (!rt.settle_context_charge(dev)) {
    if (pctx != nullptr) rt.cuda.cuCtxDestroy_v2(*pctx);
    rt.uncharge_context(dev);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (pctx != nullptr) rt.contexts.insert(reinterpret_cast<uint64_t>(*pctx), AllocationRecord{dev, 0, false});
  return rc;
}

}  // namespace

#define TESSERA_CONTEXT_PROLOGUE(real)                                \
  Runtime& rt = runtime();                                            \
  if (rt.cuda.real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;     \
  if (!rt.cuda_device_visible(dev)) return CUDA_ERROR_INVALID_DEVICE; \
  int region_dev = rt.region_index_for_cuda_device(dev);              \
  if (!rt.charge_context(region_dev)) return CUDA_ERROR_OUT_OF_MEMORY;

TESSERA_EXPORT CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  TESSERA_CONTEXT_PROLOGUE(cuCtxCreate)
  return after_context_created(rt, rt.cuda.cuCtxCreate(pctx, flags, dev), pctx, region_dev);
}

TESSERA_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  TESSERA_CONTEXT_PROLOGUE(cuCtxCreate_v2)
  return after_context_created(rt, rt.cuda.cuCtxCreate_v2(pctx, flags, dev), pctx, region_dev);
}

TESSERA_EXPORT CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int numParams,
                                       unsigned int flags, CUdevice dev) {
  TESSERA_CONTEXT_PROLOGUE(cuCtxCreate_v3)
  return after_context_created(rt, rt.cuda.cuCtxCreate_v3(pctx, params, numParams, flags, dev), pctx,
                               region_dev);
}

TESSERA_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                       CUdevice dev) {
  TESSERA_CONTEXT_PROLOGUE(cuCtxCreate_v4)
  return after_context_created(rt, rt.cuda.cuCtxCreate_v4(pctx, params, flags, dev), pctx, region_dev);
}

namespace {

CUresult destroy_context(Runtime& rt, CUcontext ctx, CUresult (*real)(CUcontext)) {
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return destroy_tracked(
      rt.contexts, reinterpret_cast<uint64_t>(ctx), ctx != nullptr, [&] { return real(ctx); },
      [&rt](const AllocationRecord& rec) { rt.uncharge_context(rec.device); });
}

// Release (reset = false) drops one reference to the device's primary
// context; reset destroys it whatever its reference count, and its
// allocations go with it. Either way, each reference dropped returns one
// context charge.
CUresult drop_primary(Runtime& rt, CUdevice dev, CUresult (*real)(CUdevice), bool reset) {
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = real(dev);
  int region_dev = rt.region_index_for_cuda_device(dev);
  if (rc != CUDA_SUCCESS || region_dev < 0 || region_dev >= kMaxDevices) return rc;
  std::atomic<int>& refs = rt.primary_refs[region_dev];
  int dropped = 0;
  if (reset) {
    dropped = refs.exchange(0);
  } else {
    int n = refs.load(std::memory_order_relaxed);
    while (n > 0 && !refs.compare_exchange_weak(n, n - 1)) {
    }
    dropped = n > 0 ? 1 : 0;
  }
  for (int i = 0; i < dropped; ++i) rt.uncharge_context(region_dev);
  return rc;
}

}  // namespace

// Exports `name(Type arg)` as helper(rt, arg, the driver's `name`, extra...).
#define TESSERA_FORWARD(name, Type, arg, helper, ...)                \
  TESSERA_EXPORT CUresult name(Type arg) {                           \
    Runtime& rt = runtime();                                         \
    return helper(rt, arg, rt.cuda.name __VA_OPT__(, ) __VA_ARGS__); \
  }
TESSERA_FORWARD(cuCtxDestroy, CUcontext, ctx, destroy_context)
TESSERA_FORWARD(cuCtxDestroy_v2, CUcontext, ctx, destroy_context)

TESSERA_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  TESSERA_CONTEXT_PROLOGUE(cuDevicePrimaryCtxRetain)
  CUresult rc = rt.cuda.cuDevicePrimaryCtxRetain(pctx, dev);
  if (rc == CUDA_SUCCESS && !rt.settle_context_charge(region_dev)) {
    if (rt.cuda.cuDevicePrimaryCtxRelease_v2 != nullptr) rt.cuda.cuDevicePrimaryCtxRelease_v2(dev);
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (rc != CUDA_SUCCESS) {
    rt.uncharge_context(region_dev);
  } else if (region_dev >= 0 && region_dev < kMaxDevices) {
    rt.primary_refs[region_dev].fetch_add(1, std::memory_order_relaxed);
  }
  return rc;
}

TESSERA_FORWARD(cuDevicePrimaryCtxRelease, CUdevice, dev, drop_primary, /*reset=*/false)
TESSERA_FORWARD(cuDevicePrimaryCtxRelease_v2, CUdevice, dev, drop_primary, /*reset=*/false)
TESSERA_FORWARD(cuDevicePrimaryCtxReset, CUdevice, dev, drop_primary, /*reset=*/true)
TESSERA_FORWARD(cuDevicePrimaryCtxReset_v2, CUdevice, dev, drop_primary, /*reset=*/true)

// ---------------------------------------------------------------- before CUDA 3.2
// The pre-3.2 entry points with 32-bit sizes, dimensions and device pointers
// (still exported by drivers for binaries built against CUDA 3.1 and older).
// Their results cannot be expressed for a 64-bit process on today's devices
// (sizes above 4 GiB, device addresses above 4 GiB), and passing them through
// would let memory and views escape the slice, so they are refused with
// CUDA_ERROR_NOT_SUPPORTED (passed through only with CUDA_DISABLE_CONTROL).

namespace {

template <typename Fn, typename... Args>
CUresult legacy_32bit(const char* name, Fn real, Args... args) {
  Runtime& rt = runtime();
  if (rt.config.control_disabled && real != nullptr) return real(args...);
  tessera::vgpu::log_event(LogLevel::kWarn,
                           "%s (pre-CUDA-3.2, 32-bit sizes) refused: not supported under libvgpu", name);
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace

TESSERA_EXPORT CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  return legacy_32bit("cuDeviceTotalMem", runtime().cuda.cuDeviceTotalMem, bytes, dev);
}

TESSERA_EXPORT CUresult cuMemGetInfo(unsigned int* free, unsigned int* total) {
  return legacy_32bit("cuMemGetInfo", runtime().cuda.cuMemGetInfo, free, total);
}

TESSERA_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  return legacy_32bit("cuMemAlloc", runtime().cuda.cuMemAlloc, dptr, bytesize);
}

TESSERA_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch, unsigned int WidthInBytes,
                                        unsigned int Height, unsigned int ElementSizeBytes) {
  return legacy_32bit("cuMemAllocPitch", runtime().cuda.cuMemAllocPitch, dptr, pPitch, WidthInBytes, Height,
                      ElementSizeBytes);
}

TESSERA_EXPORT CUresult cuArrayCreate(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR_v1* desc) {
  return legacy_32bit("cuArrayCreate", runtime().cuda.cuArrayCreate, pHandle, desc);
}

TESSERA_EXPORT CUresult cuArray3DCreate(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1* desc) {
  return legacy_32bit("cuArray3DCreate", runtime().cuda.cuArray3DCreate, pHandle, desc);
}

// ---------------------------------------------------------------- linear memory

TESSERA_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  Runtime& rt = runtime();
  if (rt.cuda.cuMemAlloc_v2 == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return alloc_common(
      rt, dptr, bytesize, "cuMemAlloc",
      [](void* c, CUdeviceptr* p, size_t n) { return static_cast<Runtime*>(c)->cuda.cuMemAlloc_v2(p, n); },
      &rt, true);
}

TESSERA_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  Runtime& rt = runtime();
  if (rt.cuda.cuMemAllocManaged == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  struct Call {
    Runtime* rt;
    unsigned int flags;
  } call{&rt, flags};
  return alloc_common(
      rt, dptr, bytesize, "cuMemAllocManaged",
      [](void* c, CUdeviceptr* p, size_t n) {
        auto* k = static_cast<Call*>(c);
        return k->rt->cuda.cuMemAllocManaged(p, n, k->flags);
      },
      &call, false);
}

TESSERA_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  Runtime& rt = runtime();
  if (rt.cuda.cuMemFree_v2 == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return free_common(
      rt, dptr, [](void* c, CUdeviceptr p) { return static_cast<Runtime*>(c)->cuda.cuMemFree_v2(p); }, &rt);
}

TESSERA_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                           size_t Height, unsigned int ElementSizeBytes) {
  Runtime& rt = runtime();
  auto real = rt.cuda.cuMemAllocPitch_v2;
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  int dev = rt.accounting && dptr != nullptr && pPitch != nullptr ? rt.current_device() : -1;
  if (dev == Runtime::kHiddenDevice) return CUDA_ERROR_INVALID_DEVICE;
  if (dev < 0 || WidthInBytes == 0 || Height == 0)
    return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  uint64_t row =
      (static_cast<uint64_t>(WidthInBytes) + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  uint64_t estimate = 0;
  if (row < WidthInBytes || mul_overflows(row, Height, &estimate)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!rt.reserve(dev, estimate, "cuMemAllocPitch")) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  if (rc != CUDA_SUCCESS) {
    rt.release(dev, estimate);
    return rc;
  }
  uint64_t actual = static_cast<uint64_t>(*pPitch) * Height;  // what the driver really holds
  if (!settle(rt, dev, estimate, actual, "cuMemAllocPitch")) {
    rt.cuda.cuMemFree_v2(*dptr);
    rt.release(dev, estimate);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  rt.device_pointers.insert(*dptr, AllocationRecord{dev, actual, false});
  return rc;
}

// ---------------------------------------------------------------- stream-ordered

namespace {

// Whether `stream` is capturing into a graph (then a stream-ordered
// allocation becomes an alloc node: nothing is allocated until the graph runs).
bool capturing(Runtime& rt, CUstream stream, bool per_thread) {
  if (rt.cuda.cuStreamIsCapturing == nullptr) return false;
  if (stream == nullptr && per_thread) stream = CU_STREAM_PER_THREAD;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return rt.cuda.cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// Stream-ordered allocation from `pool` (0: the device's current pool).
CUresult async_alloc(Runtime& rt, CUdeviceptr* dptr, size_t bytesize, uint64_t pool, const char* what,
                     CUresult (*call)(void*, CUdeviceptr*, size_t), void* ctx, CUstream stream,
                     bool per_thread) {
  if (!rt.accounting || dptr == nullptr || bytesize == 0) return call(ctx, dptr, bytesize);
  // Captured: the graph's memory is charged when it is uploaded or launched.
  if (capturing(rt, stream, per_thread)) return call(ctx, dptr, bytesize);
  CUdevice handle = 0;
  int dev = rt.current_device(&handle);
  if (dev == Runtime::kHiddenDevice) return CUDA_ERROR_INVALID_DEVICE;
  if (dev < 0) return call(ctx, dptr, bytesize);
  if (pool == 0) {
    CUmemoryPool current = nullptr;
    if (rt.cuda.cuDeviceGetMemPool != nullptr && rt.cuda.cuDeviceGetMemPool(&current, handle) == CUDA_SUCCESS)
      pool = reinterpret_cast<uint64_t>(current);
  }
  uint64_t need = pool != 0 ? rt.pool_need(pool, dev, bytesize) : bytesize;
  if (need > 0 && !rt.reserve(dev, need, what)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = call(ctx, dptr, bytesize);
  if (rc != CUDA_SUCCESS) {
    rt.release(dev, need);
    return rc;
  }
  if (pool != 0) rt.pool_allocated(pool, dev, bytesize, need);
  rt.device_pointers.insert(*dptr, AllocationRecord{dev, bytesize, false, pool});
  return rc;
}

struct AsyncCall {
  Runtime* rt;
  CUstream stream;
  CUmemoryPool pool;
};

}  // namespace

#define TESSERA_ASYNC_ALLOC(name, per_thread)                                          \
  TESSERA_EXPORT CUresult name(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) { \
    Runtime& rt = runtime();                                                           \
    if (rt.cuda.name == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                    \
    AsyncCall call{&rt, hStream, nullptr};                                             \
    return async_alloc(                                                                \
        rt, dptr, bytesize, 0, #name,                                                  \
        [](void* c, CUdeviceptr* p, size_t n) {                                        \
          auto* k = static_cast<AsyncCall*>(c);                                        \
          return k->rt->cuda.name(p, n, k->stream);                                    \
        },                                                                             \
        &call, hStream, per_thread);                                                   \
  }
TESSERA_ASYNC_ALLOC(cuMemAllocAsync, false)
TESSERA_ASYNC_ALLOC(cuMemAllocAsync_ptsz, true)

#define TESSERA_POOL_ALLOC(name, per_thread)                                                              \
  TESSERA_EXPORT CUresult name(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) { \
    Runtime& rt = runtime();                                                                              \
    if (rt.cuda.name == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                                       \
    AsyncCall call{&rt, hStream, pool};                                                                   \
    return async_alloc(                                                                                   \
        rt, dptr, bytesize, reinterpret_cast<uint64_t>(pool), #name,                                      \
        [](void* c, CUdeviceptr* p, size_t n) {                                                           \
          auto* k = static_cast<AsyncCall*>(c);                                                           \
          return k->rt->cuda.name(p, n, k->pool, k->stream);                                              \
        },                                                                                                \
        &call, hStream, per_thread);                                                                      \
  }
TESSERA_POOL_ALLOC(cuMemAllocFromPoolAsync, false)
TESSERA_POOL_ALLOC(cuMemAllocFromPoolAsync_ptsz, true)

#define TESSERA_ASYNC_FREE(name)                                     \
  TESSERA_EXPORT CUresult name(CUdeviceptr dptr, CUstream hStream) { \
    Runtime& rt = runtime();                                         \
    if (rt.cuda.name == nullptr) return CUDA_ERROR_NOT_INITIALIZED;  \
    AsyncCall call{&rt, hStream, nullptr};                           \
    return free_common(                                              \
        rt, dptr,                                                    \
        [](void* c, CUdeviceptr p) {                                 \
          auto* k = static_cast<AsyncCall*>(c);                      \
          return k->rt->cuda.name(p, k->stream);                     \
        },                                                           \
        &call);                                                      \
  }
TESSERA_ASYNC_FREE(cuMemFreeAsync)
TESSERA_ASYNC_FREE(cuMemFreeAsync_ptsz)

// ---------------------------------------------------------------- virtual memory management

TESSERA_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                    const CUmemAllocationProp* prop, unsigned long long flags) {
  Runtime& rt = runtime();
  if (rt.cuda.cuMemCreate == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  int dev = -1;
  if (rt.accounting && handle != nullptr && prop != nullptr &&
      prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (!rt.cuda_device_visible(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
    dev = rt.region_index_for_cuda_device(prop->location.id);
  }
  if (dev < 0 || size == 0) return rt.cuda.cuMemCreate(handle, size, prop, flags);
  if (!rt.reserve(dev, size, "cuMemCreate")) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = rt.cuda.cuMemCreate(handle, size, prop, flags);
  if (rc != CUDA_SUCCESS) {
    rt.release(dev, size);
    return rc;
  }
  rt.vmm_handles.insert(*handle, AllocationRecord{dev, size, false});
  return rc;
}

TESSERA_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  Runtime& rt = runtime();
  if (rt.cuda.cuMemRelease == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return destroy_tracked(
      rt.vmm_handles, handle, true, [&] { return rt.cuda.cuMemRelease(handle); }, release_record(rt));
}

// ---------------------------------------------------------------- arrays

namespace {

// An array or mipmapped array (`Handle`) made by `create()`: reserves the
// estimate, then corrects it to what `requirements` (the driver's
// cu*GetMemoryRequirements, when it has one) says the array holds.
template <typename Handle, typename Create>
CUresult create_array(Runtime& rt, uint64_t estimate, const char* what, tessera::vgpu::AllocationMap& map,
                      Handle* handle, Create create,
                      CUresult (*requirements)(CUDA_ARRAY_MEMORY_REQUIREMENTS*, Handle, CUdevice),
                      CUresult (*destroy)(Handle)) {
  CUdevice device = 0;
  int dev = rt.accounting ? rt.current_device(&device) : -1;
  if (dev == Runtime::kHiddenDevice) return CUDA_ERROR_INVALID_DEVICE;
  if (dev < 0) return create();
  if (!rt.reserve(dev, estimate, what)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = create();
  if (rc != CUDA_SUCCESS) {
    rt.release(dev, estimate);
    return rc;
  }
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  uint64_t actual =
      requirements != nullptr && requirements(&req, *handle, device) == CUDA_SUCCESS ? req.size : 0;
  if (actual == 0) actual = estimate;
  if (!settle(rt, dev, estimate, actual, what)) {
    destroy(*handle);
    rt.release(dev, estimate);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  map.insert(reinterpret_cast<uint64_t>(*handle), AllocationRecord{dev, actual, false});
  return rc;
}

size_t depth_of(const CUDA_ARRAY_DESCRIPTOR&) {
  return 1;
}
size_t depth_of(const CUDA_ARRAY3D_DESCRIPTOR& desc) {
  return desc.Depth;
}

// cuArrayCreate_v2 and cuArray3DCreate_v2.
template <typename Descriptor>
CUresult create_plain_array(Runtime& rt, CUarray* pHandle, const Descriptor* desc, const char* what,
                            CUresult (*real)(CUarray*, const Descriptor*)) {
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (pHandle == nullptr || desc == nullptr) return real(pHandle, desc);
  uint64_t estimate =
      array_bytes(desc->Width, desc->Height, depth_of(*desc), desc->NumChannels, desc->Format);
  return create_array(
      rt, estimate, what, rt.arrays, pHandle, [&] { return real(pHandle, desc); },
      rt.cuda.cuArrayGetMemoryRequirements, rt.cuda.cuArrayDestroy);
}

template <typename Handle>
CUresult destroy_array(Runtime& rt, tessera::vgpu::AllocationMap& map, Handle handle,
                       CUresult (*real)(Handle)) {
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return destroy_tracked(
      map, reinterpret_cast<uint64_t>(handle), handle != nullptr, [&] { return real(handle); },
      release_record(rt));
}

}  // namespace

TESSERA_EXPORT CUresult cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  Runtime& rt = runtime();
  return create_plain_array(rt, pHandle, desc, "cuArrayCreate", rt.cuda.cuArrayCreate_v2);
}

TESSERA_EXPORT CUresult cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  Runtime& rt = runtime();
  return create_plain_array(rt, pHandle, desc, "cuArray3DCreate", rt.cuda.cuArray3DCreate_v2);
}

TESSERA_EXPORT CUresult cuArrayDestroy(CUarray hArray) {
  Runtime& rt = runtime();
  return destroy_array(rt, rt.arrays, hArray, rt.cuda.cuArrayDestroy);
}

TESSERA_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                               unsigned int numLevels) {
  Runtime& rt = runtime();
  if (rt.cuda.cuMipmappedArrayCreate == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (pHandle == nullptr || desc == nullptr) return rt.cuda.cuMipmappedArrayCreate(pHandle, desc, numLevels);
  uint64_t estimate = 0;
  size_t w = desc->Width, h = desc->Height, d = desc->Depth;
  for (unsigned level = 0; level < (numLevels ? numLevels : 1); ++level) {
    uint64_t b = array_bytes(w, h, d, desc->NumChannels, desc->Format);
    estimate = (estimate + b < estimate) ? ~0ull : estimate + b;
    w = w > 1 ? w / 2 : 1;
    h = h > 1 ? h / 2 : h;
    d = d > 1 ? d / 2 : d;
  }
  return create_array(
      rt, estimate, "cuMipmappedArrayCreate", rt.mipmapped_arrays, pHandle,
      [&] { return rt.cuda.cuMipmappedArrayCreate(pHandle, desc, numLevels); },
      rt.cuda.cuMipmappedArrayGetMemoryRequirements, rt.cuda.cuMipmappedArrayDestroy);
}

TESSERA_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  Runtime& rt = runtime();
  return destroy_array(rt, rt.mipmapped_arrays, hMipmappedArray, rt.cuda.cuMipmappedArrayDestroy);
}

// ---------------------------------------------------------------- graph memory
// Graph memory nodes (graph_memory.h): instantiation learns what a graph's
// alloc nodes need; upload and launch reserve it before the driver maps it;
// destruction and trim settle the charge to what the graph memory pool holds.

namespace {

// A launch handed to the driver between the compute limiter's
// before_launch and after_launch (limiter.h); `key` names what is launched
// (a CUfunction or a CUgraphExec).
template <typename Launch>
CUresult gated_launch(Runtime& rt, const void* key, CUstream s, bool per_thread, Launch launch) {
  tessera::vgpu::compute::LaunchGate gate = tessera::vgpu::compute::before_launch(rt, key, s, per_thread);
  CUresult rc = launch();
  tessera::vgpu::compute::after_launch(gate, rc);
  return rc;
}

// Instantiation through any entry point. `upload_stream` is set for
// CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, which maps the memory at once.
template <typename Call>
CUresult instantiate(Runtime& rt, CUgraphExec* out, CUgraph graph, bool upload, CUstream upload_stream,
                     bool per_thread, const char* what, Call call) {
  if (!rt.accounting || out == nullptr) return call();
  tessera::vgpu::GraphMemoryNeeds needs;
  if (rt.graph_memory.scan(rt, graph, &needs) == tessera::vgpu::GraphMemory::ScanResult::kHiddenDevice) {
    tessera::vgpu::log_event(
        LogLevel::kWarn, "%s refused: the graph allocates on a device this container was not granted", what);
    return CUDA_ERROR_INVALID_DEVICE;
  }
  tessera::vgpu::GraphMemoryTicket memory;
  if (upload &&
      !rt.graph_memory.before_commit(
          rt, 0, &needs, tessera::vgpu::GraphMemory::stream_key(upload_stream, per_thread), what, &memory))
    return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = call();
  if (rc == CUDA_SUCCESS) rt.graph_memory.instantiated(reinterpret_cast<uint64_t>(*out), needs);
  rt.graph_memory.after_commit(rt, memory, rc, rc == CUDA_SUCCESS ? reinterpret_cast<uint64_t>(*out) : 0);
  return rc;
}

CUresult instantiate_with_params(Runtime& rt, CUgraphExec* out, CUgraph graph,
                                 CUDA_GRAPH_INSTANTIATE_PARAMS* p, bool per_thread,
                                 decltype(&::cuGraphInstantiateWithParams) real) {
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  bool upload = p != nullptr && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0;
  return instantiate(rt, out, graph, upload, upload ? p->hUploadStream : nullptr, per_thread,
                     "cuGraphInstantiateWithParams", [&] { return real(out, graph, p); });
}

// An executable updated from `graph` now allocates what `graph` does.
CUresult after_update(Runtime& rt, CUresult rc, CUgraphExec exec, CUgraph graph) {
  if (rc != CUDA_SUCCESS || !rt.accounting) return rc;
  tessera::vgpu::GraphMemoryNeeds needs;
  if (rt.graph_memory.scan(rt, graph, &needs) == tessera::vgpu::GraphMemory::ScanResult::kOk)
    rt.graph_memory.instantiated(reinterpret_cast<uint64_t>(exec), needs);
  return rc;
}

// An upload (launch = false) or a launch of an executable graph: maps memory
// for the graph's alloc nodes, reserved first (graph_memory.h) and settled
// after; a launch also passes the compute limiter's gate.
CUresult commit_graph(Runtime& rt, CUgraphExec exec, CUstream s, bool per_thread,
                      CUresult (*real)(CUgraphExec, CUstream), bool launch) {
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  tessera::vgpu::GraphMemoryTicket memory;
  if (!rt.graph_memory.before_commit(rt, reinterpret_cast<uint64_t>(exec), nullptr,
                                     tessera::vgpu::GraphMemory::stream_key(s, per_thread),
                                     launch ? "cuGraphLaunch" : "cuGraphUpload", &memory))
    return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = launch ? gated_launch(rt, exec, s, per_thread, [&] { return real(exec, s); }) : real(exec, s);
  rt.graph_memory.after_commit(rt, memory, rc, reinterpret_cast<uint64_t>(exec));
  return rc;
}

}  // namespace

TESSERA_EXPORT CUresult cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                                           char* logBuffer, size_t bufferSize) {
  Runtime& rt = runtime();
  if (rt.cuda.cuGraphInstantiate == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return instantiate(rt, phGraphExec, hGraph, false, nullptr, false, "cuGraphInstantiate", [&] {
    return rt.cuda.cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
  });
}

TESSERA_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph,
                                              CUgraphNode* phErrorNode, char* logBuffer, size_t bufferSize) {
  Runtime& rt = runtime();
  if (rt.cuda.cuGraphInstantiate_v2 == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return instantiate(rt, phGraphExec, hGraph, false, nullptr, false, "cuGraphInstantiate", [&] {
    return rt.cuda.cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
  });
}

TESSERA_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                    unsigned long long flags) {
  Runtime& rt = runtime();
  if (rt.cuda.cuGraphInstantiateWithFlags == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return instantiate(rt, phGraphExec, hGraph, false, nullptr, false, "cuGraphInstantiateWithFlags",
                     [&] { return rt.cuda.cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags); });
}

#define TESSERA_INSTANTIATE_WITH_PARAMS(name, per_thread)                                      \
  TESSERA_EXPORT CUresult name(CUgraphExec* phGraphExec, CUgraph hGraph,                       \
                               CUDA_GRAPH_INSTANTIATE_PARAMS* params) {                        \
    Runtime& rt = runtime();                                                                   \
    return instantiate_with_params(rt, phGraphExec, hGraph, params, per_thread, rt.cuda.name); \
  }
TESSERA_INSTANTIATE_WITH_PARAMS(cuGraphInstantiateWithParams, false)
TESSERA_INSTANTIATE_WITH_PARAMS(cuGraphInstantiateWithParams_ptsz, true)

TESSERA_EXPORT CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode* hErrorNode_out,
                                          CUgraphExecUpdateResult* updateResult_out) {
  Runtime& rt = runtime();
  if (rt.cuda.cuGraphExecUpdate == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return after_update(rt, rt.cuda.cuGraphExecUpdate(hGraphExec, hGraph, hErrorNode_out, updateResult_out),
                      hGraphExec, hGraph);
}

TESSERA_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                             CUgraphExecUpdateResultInfo* resultInfo) {
  Runtime& rt = runtime();
  if (rt.cuda.cuGraphExecUpdate_v2 == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return after_update(rt, rt.cuda.cuGraphExecUpdate_v2(hGraphExec, hGraph, resultInfo), hGraphExec, hGraph);
}

// Exports `name(CUgraphExec, CUstream)`: an upload or launch (commit_graph).
#define TESSERA_EXEC_ON_STREAM(name, per_thread, launch)                            \
  TESSERA_EXPORT CUresult name(CUgraphExec hGraphExec, CUstream hStream) {          \
    Runtime& rt = runtime();                                                        \
    return commit_graph(rt, hGraphExec, hStream, per_thread, rt.cuda.name, launch); \
  }
TESSERA_EXEC_ON_STREAM(cuGraphUpload, false, /*launch=*/false)
TESSERA_EXEC_ON_STREAM(cuGraphUpload_ptsz, true, /*launch=*/false)

TESSERA_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  Runtime& rt = runtime();
  if (rt.cuda.cuGraphExecDestroy == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = rt.cuda.cuGraphExecDestroy(hGraphExec);
  if (rc == CUDA_SUCCESS) rt.graph_memory.destroyed(rt, reinterpret_cast<uint64_t>(hGraphExec));
  return rc;
}

TESSERA_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) {
  Runtime& rt = runtime();
  if (rt.cuda.cuDeviceGraphMemTrim == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = rt.cuda.cuDeviceGraphMemTrim(device);
  if (rc == CUDA_SUCCESS && rt.accounting)
    rt.graph_memory.trimmed(rt, rt.region_index_for_cuda_device(device));
  return rc;
}

// ---------------------------------------------------------------- launches
// The compute limiter (issue 5, src/vgpu/compute) admits and charges each launch.

#define TESSERA_LAUNCH_KERNEL(name, per_thread)                                                            \
  TESSERA_EXPORT CUresult name(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,            \
                               unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,      \
                               CUstream s, void** params, void** extra) {                                  \
    Runtime& rt = runtime();                                                                               \
    if (rt.cuda.name == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                                        \
    return gated_launch(rt, f, s, per_thread,                                                              \
                        [&] { return rt.cuda.name(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra); }); \
  }
TESSERA_LAUNCH_KERNEL(cuLaunchKernel, false)
TESSERA_LAUNCH_KERNEL(cuLaunchKernel_ptsz, true)

#define TESSERA_LAUNCH_KERNEL_EX(name, per_thread)                                                        \
  TESSERA_EXPORT CUresult name(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) { \
    Runtime& rt = runtime();                                                                              \
    if (rt.cuda.name == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                                       \
    return gated_launch(rt, f, config != nullptr ? config->hStream : nullptr, per_thread,                 \
                        [&] { return rt.cuda.name(config, f, params, extra); });                          \
  }
TESSERA_LAUNCH_KERNEL_EX(cuLaunchKernelEx, false)
TESSERA_LAUNCH_KERNEL_EX(cuLaunchKernelEx_ptsz, true)

#define TESSERA_LAUNCH_COOPERATIVE(name, per_thread)                                                  \
  TESSERA_EXPORT CUresult name(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,       \
                               unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem, \
                               CUstream s, void** params) {                                           \
    Runtime& rt = runtime();                                                                          \
    if (rt.cuda.name == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                                   \
    return gated_launch(rt, f, s, per_thread,                                                         \
                        [&] { return rt.cuda.name(f, gx, gy, gz, bx, by, bz, shmem, s, params); });   \
  }
TESSERA_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel, false)
TESSERA_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz, true)

// A graph launch may also map memory for the graph's alloc nodes (commit_graph).
TESSERA_EXEC_ON_STREAM(cuGraphLaunch, false, /*launch=*/true)
TESSERA_EXEC_ON_STREAM(cuGraphLaunch_ptsz, true, /*launch=*/true)
