// Smaller parts of the driver API: pre-versioned entry points with unchanged
// signatures, stream and function attributes, occupancy, and the calls a
// program makes that have no effect on a simulated device.
#include <algorithm>
#include <cstring>

#include "sim/cuda_internal.h"

using namespace tessera::sim;
using namespace tessera::sim::cuda;

#define LOCKED std::lock_guard<std::recursive_mutex> lock_(R().mu)

extern "C" {

// Entry points of old ABIs whose signatures did not change.
CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v2(pctx, flags, dev);
}
CUresult cuCtxDestroy(CUcontext ctx) {
  return cuCtxDestroy_v2(ctx);
}
CUresult cuCtxPopCurrent(CUcontext* pctx) {
  return cuCtxPopCurrent_v2(pctx);
}
CUresult cuCtxPushCurrent(CUcontext ctx) {
  return cuCtxPushCurrent_v2(ctx);
}

CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

CUresult cuStreamGetCtx_v2(CUstream h, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  if (pGreenCtx != nullptr) *pGreenCtx = nullptr;
  return cuStreamGetCtx(h, pCtx);
}
CUresult cuStreamGetCtx_v2_ptsz(CUstream h, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  if (pGreenCtx != nullptr) *pGreenCtx = nullptr;
  return cuStreamGetCtx_ptsz(h, pCtx);
}

static CUresult CheckStream(CUstream h, bool ptds) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  CUstream s;
  return ResolveStream(h, ptds, &s);
}

// Stream attributes (access policy windows, synchronisation policy, priority)
// have no effect on the simulated device; reads return defaults.
CUresult cuStreamGetAttribute(CUstream h, CUstreamAttrID attr, CUstreamAttrValue* value) {
  (void)attr;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::memset(value, 0, sizeof(*value));
  return Guard([&]() -> CUresult { return CheckStream(h, false); });
}
CUresult cuStreamGetAttribute_ptsz(CUstream h, CUstreamAttrID attr, CUstreamAttrValue* value) {
  (void)attr;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::memset(value, 0, sizeof(*value));
  return Guard([&]() -> CUresult { return CheckStream(h, true); });
}
CUresult cuStreamSetAttribute(CUstream h, CUstreamAttrID attr, const CUstreamAttrValue* value) {
  (void)attr;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return CheckStream(h, false); });
}
CUresult cuStreamSetAttribute_ptsz(CUstream h, CUstreamAttrID attr, const CUstreamAttrValue* value) {
  (void)attr;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return CheckStream(h, true); });
}
CUresult cuStreamCopyAttributes(CUstream dst, CUstream src) {
  return Guard([&]() -> CUresult {
    if (CUresult r = CheckStream(dst, false); r != CUDA_SUCCESS) return r;
    return CheckStream(src, false);
  });
}
CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src) {
  return Guard([&]() -> CUresult {
    if (CUresult r = CheckStream(dst, true); r != CUDA_SUCCESS) return r;
    return CheckStream(src, true);
  });
}
CUresult cuStreamAttachMemAsync(CUstream h, CUdeviceptr dptr, size_t length, unsigned int flags) {
  (void)dptr;
  (void)length;
  (void)flags;
  return Guard([&]() -> CUresult { return CheckStream(h, false); });
}
CUresult cuStreamAttachMemAsync_ptsz(CUstream h, CUdeviceptr dptr, size_t length, unsigned int flags) {
  (void)dptr;
  (void)length;
  (void)flags;
  return Guard([&]() -> CUresult { return CheckStream(h, true); });
}

// Context-wide event record/wait: the event follows all of the context's work.
CUresult cuCtxRecordEvent(CUcontext ctx, CUevent ev) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (!IsLive(ctx) || !IsLive(ev) || ev->magic != kEventMagic) return CUDA_ERROR_INVALID_HANDLE;
    int64_t t = MonotonicNs();
    for (CUstream s : ctx->streams) t = std::max(t, s->last_end_ns);
    ev->recorded = true;
    ev->time_ns = t;
    return CUDA_SUCCESS;
  });
}
CUresult cuCtxWaitEvent(CUcontext ctx, CUevent ev) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (!IsLive(ctx) || !IsLive(ev) || ev->magic != kEventMagic) return CUDA_ERROR_INVALID_HANDLE;
    if (ev->recorded) {
      for (CUstream s : ctx->streams) s->last_end_ns = std::max(s->last_end_ns, ev->time_ns);
    }
    return CUDA_SUCCESS;
  });
}

// Functions and kernels.
CUresult cuFuncGetModule(CUmodule* hmod, CUfunction f) {
  return Guard([&]() -> CUresult {
    if (hmod == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(f) || f->magic != kFuncMagic) return CUDA_ERROR_INVALID_HANDLE;
    *hmod = f->module;
    return CUDA_SUCCESS;
  });
}
CUresult cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction f) {
  return Guard([&]() -> CUresult {
    if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(f) || f->magic != kFuncMagic) return CUDA_ERROR_INVALID_HANDLE;
    *state = CU_FUNCTION_LOADING_STATE_LOADED;
    return CUDA_SUCCESS;
  });
}
CUresult cuFuncLoad(CUfunction f) {
  return Guard([&]() -> CUresult {
    LOCKED;
    return IsLive(f) && f->magic == kFuncMagic ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  });
}
CUresult cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev) {
  (void)dev;
  return cuFuncGetAttribute(pi, attrib, kernel);
}
CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev) {
  (void)dev;
  return cuFuncSetAttribute(kernel, attrib, val);
}
CUresult cuKernelGetName(const char** name, CUkernel kernel) {
  return cuFuncGetName(name, kernel);
}
CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  (void)config;
  (void)dev;
  return cuFuncLoad(kernel);
}

// Occupancy: every block size up to 1024 fits, limited by threads per SM.
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, CUfunction func, int blockSize,
                                                              size_t dynamicSMemSize, unsigned int flags) {
  (void)flags;
  return cuOccupancyMaxActiveBlocksPerMultiprocessor(numBlocks, func, blockSize, dynamicSMemSize);
}
CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int* minGridSize, int* blockSize, CUfunction func,
                                                   CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                   size_t dynamicSMemSize, int blockSizeLimit,
                                                   unsigned int flags) {
  (void)flags;
  return cuOccupancyMaxPotentialBlockSize(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                                          dynamicSMemSize, blockSizeLimit);
}
CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, CUfunction func, int numBlocks,
                                                 int blockSize) {
  (void)func;
  (void)blockSize;
  if (dynamicSmemSize == nullptr || numBlocks <= 0) return CUDA_ERROR_INVALID_VALUE;
  *dynamicSmemSize = 166912 / static_cast<size_t>(numBlocks);
  return CUDA_SUCCESS;
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

// Managed-memory ranges: no migration is simulated; data lives in one place.
CUresult cuMemRangeGetAttribute(void* data, size_t dataSize, CUmem_range_attribute attribute,
                                CUdeviceptr devPtr, size_t count) {
  (void)attribute;
  return Guard([&]() -> CUresult {
    if (data == nullptr || dataSize == 0) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (FindAllocation(devPtr, count) == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::memset(data, 0, dataSize);
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
