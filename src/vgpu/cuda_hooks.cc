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
  AllocationRecord rec;
  bool known = dptr != 0 && rt.device_pointers.take(dptr, &rec);
  CUresult rc = call(ctx, dptr);  // unknown pointers are still the driver's to free
  if (!known) return rc;
  if (rc != CUDA_SUCCESS) {
    rt.device_pointers.insert(dptr, rec);
    return rc;
  }
  if (rec.spilled) rt.region.note_spilled_bytes(rec.device, -static_cast<int64_t>(rec.bytes));
  if (rec.pool != 0) {
    rt.pool_freed(rec.pool, rec.bytes);  // the pool may keep holding it
  } else {
    rt.release(rec.device, rec.bytes);
  }
  return rc;
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
  AllocationRecord rec;
  bool known = ctx != nullptr && rt.contexts.take(reinterpret_cast<uint64_t>(ctx), &rec);
  CUresult rc = real(ctx);
  if (!known) return rc;
  if (rc == CUDA_SUCCESS)
    rt.uncharge_context(rec.device);
  else
    rt.contexts.insert(reinterpret_cast<uint64_t>(ctx), rec);
  return rc;
}

CUresult release_primary(Runtime& rt, CUdevice dev, CUresult (*real)(CUdevice)) {
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = real(dev);
  int region_dev = rt.region_index_for_cuda_device(dev);
  if (rc == CUDA_SUCCESS && region_dev >= 0 && region_dev < kMaxDevices) {
    int refs = rt.primary_refs[region_dev].load(std::memory_order_relaxed);
    while (refs > 0 && !rt.primary_refs[region_dev].compare_exchange_weak(refs, refs - 1)) {
    }
    if (refs > 0) rt.uncharge_context(region_dev);
  }
  return rc;
}

CUresult reset_primary(Runtime& rt, CUdevice dev, CUresult (*real)(CUdevice)) {
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = real(dev);
  int region_dev = rt.region_index_for_cuda_device(dev);
  if (rc == CUDA_SUCCESS && region_dev >= 0 && region_dev < kMaxDevices) {
    // Reset destroys the primary context whatever its reference count; its
    // allocations go with it.
    int refs = rt.primary_refs[region_dev].exchange(0);
    for (int i = 0; i < refs; ++i) rt.uncharge_context(region_dev);
  }
  return rc;
}

}  // namespace

TESSERA_EXPORT CUresult cuCtxDestroy(CUcontext ctx) {
  Runtime& rt = runtime();
  return destroy_context(rt, ctx, rt.cuda.cuCtxDestroy);
}

TESSERA_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  Runtime& rt = runtime();
  return destroy_context(rt, ctx, rt.cuda.cuCtxDestroy_v2);
}

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

TESSERA_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  Runtime& rt = runtime();
  return release_primary(rt, dev, rt.cuda.cuDevicePrimaryCtxRelease);
}

TESSERA_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  Runtime& rt = runtime();
  return release_primary(rt, dev, rt.cuda.cuDevicePrimaryCtxRelease_v2);
}

TESSERA_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  Runtime& rt = runtime();
  return reset_primary(rt, dev, rt.cuda.cuDevicePrimaryCtxReset);
}

TESSERA_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  Runtime& rt = runtime();
  return reset_primary(rt, dev, rt.cuda.cuDevicePrimaryCtxReset_v2);
}

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
  AllocationRecord rec;
  bool known = rt.vmm_handles.take(handle, &rec);
  CUresult rc = rt.cuda.cuMemRelease(handle);
  if (!known) return rc;
  if (rc == CUDA_SUCCESS)
    rt.release(rec.device, rec.bytes);
  else
    rt.vmm_handles.insert(handle, rec);
  return rc;
}

// ---------------------------------------------------------------- arrays

namespace {

template <typename Create, typename Measure, typename Destroy>
CUresult create_array(Runtime& rt, uint64_t estimate, const char* what, tessera::vgpu::AllocationMap& map,
                      Create create, Measure measure, Destroy destroy) {
  CUdevice handle = 0;
  int dev = rt.accounting ? rt.current_device(&handle) : -1;
  if (dev == Runtime::kHiddenDevice) return CUDA_ERROR_INVALID_DEVICE;
  if (dev < 0) return create(static_cast<uint64_t*>(nullptr));
  if (!rt.reserve(dev, estimate, what)) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t key = 0;
  CUresult rc = create(&key);
  if (rc != CUDA_SUCCESS) {
    rt.release(dev, estimate);
    return rc;
  }
  uint64_t actual = measure(handle);
  if (actual == 0) actual = estimate;
  if (!settle(rt, dev, estimate, actual, what)) {
    destroy();
    rt.release(dev, estimate);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  map.insert(key, AllocationRecord{dev, actual, false});
  return rc;
}

}  // namespace

TESSERA_EXPORT CUresult cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  Runtime& rt = runtime();
  if (rt.cuda.cuArrayCreate_v2 == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (pHandle == nullptr || desc == nullptr) return rt.cuda.cuArrayCreate_v2(pHandle, desc);
  uint64_t estimate = array_bytes(desc->Width, desc->Height, 1, desc->NumChannels, desc->Format);
  return create_array(
      rt, estimate, "cuArrayCreate", rt.arrays,
      [&](uint64_t* key) {
        CUresult rc = rt.cuda.cuArrayCreate_v2(pHandle, desc);
        if (key != nullptr && rc == CUDA_SUCCESS) *key = reinterpret_cast<uint64_t>(*pHandle);
        return rc;
      },
      [&](CUdevice d) -> uint64_t {
        CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
        if (rt.cuda.cuArrayGetMemoryRequirements == nullptr ||
            rt.cuda.cuArrayGetMemoryRequirements(&req, *pHandle, d) != CUDA_SUCCESS)
          return 0;
        return req.size;
      },
      [&] { rt.cuda.cuArrayDestroy(*pHandle); });
}

TESSERA_EXPORT CUresult cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  Runtime& rt = runtime();
  if (rt.cuda.cuArray3DCreate_v2 == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (pHandle == nullptr || desc == nullptr) return rt.cuda.cuArray3DCreate_v2(pHandle, desc);
  uint64_t estimate = array_bytes(desc->Width, desc->Height, desc->Depth, desc->NumChannels, desc->Format);
  return create_array(
      rt, estimate, "cuArray3DCreate", rt.arrays,
      [&](uint64_t* key) {
        CUresult rc = rt.cuda.cuArray3DCreate_v2(pHandle, desc);
        if (key != nullptr && rc == CUDA_SUCCESS) *key = reinterpret_cast<uint64_t>(*pHandle);
        return rc;
      },
      [&](CUdevice d) -> uint64_t {
        CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
        if (rt.cuda.cuArrayGetMemoryRequirements == nullptr ||
            rt.cuda.cuArrayGetMemoryRequirements(&req, *pHandle, d) != CUDA_SUCCESS)
          return 0;
        return req.size;
      },
      [&] { rt.cuda.cuArrayDestroy(*pHandle); });
}

TESSERA_EXPORT CUresult cuArrayDestroy(CUarray hArray) {
  Runtime& rt = runtime();
  if (rt.cuda.cuArrayDestroy == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  AllocationRecord rec;
  uint64_t key = reinterpret_cast<uint64_t>(hArray);
  bool known = hArray != nullptr && rt.arrays.take(key, &rec);
  CUresult rc = rt.cuda.cuArrayDestroy(hArray);
  if (!known) return rc;
  if (rc == CUDA_SUCCESS)
    rt.release(rec.device, rec.bytes);
  else
    rt.arrays.insert(key, rec);
  return rc;
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
      rt, estimate, "cuMipmappedArrayCreate", rt.mipmapped_arrays,
      [&](uint64_t* key) {
        CUresult rc = rt.cuda.cuMipmappedArrayCreate(pHandle, desc, numLevels);
        if (key != nullptr && rc == CUDA_SUCCESS) *key = reinterpret_cast<uint64_t>(*pHandle);
        return rc;
      },
      [&](CUdevice dev) -> uint64_t {
        CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
        if (rt.cuda.cuMipmappedArrayGetMemoryRequirements == nullptr ||
            rt.cuda.cuMipmappedArrayGetMemoryRequirements(&req, *pHandle, dev) != CUDA_SUCCESS)
          return 0;
        return req.size;
      },
      [&] { rt.cuda.cuMipmappedArrayDestroy(*pHandle); });
}

TESSERA_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  Runtime& rt = runtime();
  if (rt.cuda.cuMipmappedArrayDestroy == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  AllocationRecord rec;
  uint64_t key = reinterpret_cast<uint64_t>(hMipmappedArray);
  bool known = hMipmappedArray != nullptr && rt.mipmapped_arrays.take(key, &rec);
  CUresult rc = rt.cuda.cuMipmappedArrayDestroy(hMipmappedArray);
  if (!known) return rc;
  if (rc == CUDA_SUCCESS)
    rt.release(rec.device, rec.bytes);
  else
    rt.mipmapped_arrays.insert(key, rec);
  return rc;
}

// ---------------------------------------------------------------- graph memory
// Graph memory nodes (graph_memory.h): instantiation learns what a graph's
// alloc nodes need; upload and launch reserve it before the driver maps it;
// destruction and trim settle the charge to what the graph memory pool holds.

namespace {

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

CUresult upload_graph(Runtime& rt, CUgraphExec exec, CUstream s, bool per_thread,
                      decltype(&::cuGraphUpload) real) {
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  tessera::vgpu::GraphMemoryTicket memory;
  if (!rt.graph_memory.before_commit(rt, reinterpret_cast<uint64_t>(exec), nullptr,
                                     tessera::vgpu::GraphMemory::stream_key(s, per_thread), "cuGraphUpload",
                                     &memory))
    return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = real(exec, s);
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

TESSERA_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                     CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  Runtime& rt = runtime();
  return instantiate_with_params(rt, phGraphExec, hGraph, params, false,
                                 rt.cuda.cuGraphInstantiateWithParams);
}

TESSERA_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                          CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  Runtime& rt = runtime();
  return instantiate_with_params(rt, phGraphExec, hGraph, params, true,
                                 rt.cuda.cuGraphInstantiateWithParams_ptsz);
}

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

TESSERA_EXPORT CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  Runtime& rt = runtime();
  return upload_graph(rt, hGraphExec, hStream, false, rt.cuda.cuGraphUpload);
}

TESSERA_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  Runtime& rt = runtime();
  return upload_graph(rt, hGraphExec, hStream, true, rt.cuda.cuGraphUpload_ptsz);
}

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

TESSERA_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                       unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                       CUstream s, void** params, void** extra) {
  Runtime& rt = runtime();
  if (rt.cuda.cuLaunchKernel == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  tessera::vgpu::compute::LaunchGate gate = tessera::vgpu::compute::before_launch(rt, f, s, false);
  CUresult rc = rt.cuda.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
  tessera::vgpu::compute::after_launch(gate, rc);
  return rc;
}

TESSERA_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                            unsigned int bx, unsigned int by, unsigned int bz,
                                            unsigned int shmem, CUstream s, void** params, void** extra) {
  Runtime& rt = runtime();
  if (rt.cuda.cuLaunchKernel_ptsz == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  tessera::vgpu::compute::LaunchGate gate = tessera::vgpu::compute::before_launch(rt, f, s, true);
  CUresult rc = rt.cuda.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
  tessera::vgpu::compute::after_launch(gate, rc);
  return rc;
}

TESSERA_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                         void** extra) {
  Runtime& rt = runtime();
  if (rt.cuda.cuLaunchKernelEx == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  tessera::vgpu::compute::LaunchGate gate =
      tessera::vgpu::compute::before_launch(rt, f, config != nullptr ? config->hStream : nullptr, false);
  CUresult rc = rt.cuda.cuLaunchKernelEx(config, f, params, extra);
  tessera::vgpu::compute::after_launch(gate, rc);
  return rc;
}

TESSERA_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                              void** extra) {
  Runtime& rt = runtime();
  if (rt.cuda.cuLaunchKernelEx_ptsz == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  tessera::vgpu::compute::LaunchGate gate =
      tessera::vgpu::compute::before_launch(rt, f, config != nullptr ? config->hStream : nullptr, true);
  CUresult rc = rt.cuda.cuLaunchKernelEx_ptsz(config, f, params, extra);
  tessera::vgpu::compute::after_launch(gate, rc);
  return rc;
}

TESSERA_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                                  unsigned int gz, unsigned int bx, unsigned int by,
                                                  unsigned int bz, unsigned int shmem, CUstream s,
                                                  void** params) {
  Runtime& rt = runtime();
  if (rt.cuda.cuLaunchCooperativeKernel == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  tessera::vgpu::compute::LaunchGate gate = tessera::vgpu::compute::before_launch(rt, f, s, false);
  CUresult rc = rt.cuda.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params);
  tessera::vgpu::compute::after_launch(gate, rc);
  return rc;
}

TESSERA_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                       unsigned int gz, unsigned int bx, unsigned int by,
                                                       unsigned int bz, unsigned int shmem, CUstream s,
                                                       void** params) {
  Runtime& rt = runtime();
  if (rt.cuda.cuLaunchCooperativeKernel_ptsz == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  tessera::vgpu::compute::LaunchGate gate = tessera::vgpu::compute::before_launch(rt, f, s, true);
  CUresult rc = rt.cuda.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params);
  tessera::vgpu::compute::after_launch(gate, rc);
  return rc;
}

// A graph launch may also map memory for the graph's alloc nodes: reserved
// first (graph_memory.h), settled after.
TESSERA_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) {
  Runtime& rt = runtime();
  if (rt.cuda.cuGraphLaunch == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  tessera::vgpu::GraphMemoryTicket memory;
  if (!rt.graph_memory.before_commit(rt, reinterpret_cast<uint64_t>(exec), nullptr,
                                     tessera::vgpu::GraphMemory::stream_key(s, false), "cuGraphLaunch",
                                     &memory))
    return CUDA_ERROR_OUT_OF_MEMORY;
  tessera::vgpu::compute::LaunchGate gate = tessera::vgpu::compute::before_launch(rt, exec, s, false);
  CUresult rc = rt.cuda.cuGraphLaunch(exec, s);
  tessera::vgpu::compute::after_launch(gate, rc);
  rt.graph_memory.after_commit(rt, memory, rc, reinterpret_cast<uint64_t>(exec));
  return rc;
}

TESSERA_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) {
  Runtime& rt = runtime();
  if (rt.cuda.cuGraphLaunch_ptsz == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  tessera::vgpu::GraphMemoryTicket memory;
  if (!rt.graph_memory.before_commit(rt, reinterpret_cast<uint64_t>(exec), nullptr,
                                     tessera::vgpu::GraphMemory::stream_key(s, true), "cuGraphLaunch",
                                     &memory))
    return CUDA_ERROR_OUT_OF_MEMORY;
  tessera::vgpu::compute::LaunchGate gate = tessera::vgpu::compute::before_launch(rt, exec, s, true);
  CUresult rc = rt.cuda.cuGraphLaunch_ptsz(exec, s);
  tessera::vgpu::compute::after_launch(gate, rc);
  rt.graph_memory.after_commit(rt, memory, rc, reinterpret_cast<uint64_t>(exec));
  return rc;
}
