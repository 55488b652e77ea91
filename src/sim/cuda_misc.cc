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
// CUDA 10.0-10.2: the same arguments as cuGraphInstantiate_v2.
CUresult cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                            char* logBuffer, size_t bufferSize) {
  return cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
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

// Peer copies: all memory is host-addressable here, so a peer copy is a copy.
static CUDA_MEMCPY3D FromPeer(const CUDA_MEMCPY3D_PEER& p) {
  CUDA_MEMCPY3D c{};
  c.srcXInBytes = p.srcXInBytes;
  c.srcY = p.srcY;
  c.srcZ = p.srcZ;
  c.srcLOD = p.srcLOD;
  c.srcMemoryType = p.srcMemoryType;
  c.srcHost = p.srcHost;
  c.srcDevice = p.srcDevice;
  c.srcArray = p.srcArray;
  c.srcPitch = p.srcPitch;
  c.srcHeight = p.srcHeight;
  c.dstXInBytes = p.dstXInBytes;
  c.dstY = p.dstY;
  c.dstZ = p.dstZ;
  c.dstLOD = p.dstLOD;
  c.dstMemoryType = p.dstMemoryType;
  c.dstHost = p.dstHost;
  c.dstDevice = p.dstDevice;
  c.dstArray = p.dstArray;
  c.dstPitch = p.dstPitch;
  c.dstHeight = p.dstHeight;
  c.WidthInBytes = p.WidthInBytes;
  c.Height = p.Height;
  c.Depth = p.Depth;
  return c;
}
CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMCPY3D c = FromPeer(*p);
  return cuMemcpy3D_v2(&c);
}
CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMCPY3D c = FromPeer(*p);
  return cuMemcpy3D_v2_ptds(&c);
}
CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMCPY3D c = FromPeer(*p);
  return cuMemcpy3DAsync_v2(&c, s);
}
CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMCPY3D c = FromPeer(*p);
  return cuMemcpy3DAsync_v2_ptsz(&c, s);
}

// Stream memory writes happen in stream order (at once: kernels touch no memory).
// Waits are not simulated: CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR and
// CAN_USE_64_BIT_STREAM_MEM_OPS read 0, and a wait is CUDA_ERROR_NOT_SUPPORTED.
static CUresult WriteValue(CUstream h, bool ptds, CUdeviceptr addr, uint64_t value, size_t size) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  if (FindAllocation(addr, size) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (size == 4) {
    const uint32_t v = static_cast<uint32_t>(value);
    std::memcpy(reinterpret_cast<void*>(addr), &v, 4);
  } else {
    std::memcpy(reinterpret_cast<void*>(addr), &value, 8);
  }
  s->last_end_ns = std::max(StreamReadyNs(s), MonotonicNs());
  return CUDA_SUCCESS;
}
CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  (void)flags;
  return Guard([&]() -> CUresult { return WriteValue(s, false, addr, value, 4); });
}
CUresult cuStreamWriteValue32_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  (void)flags;
  return Guard([&]() -> CUresult { return WriteValue(s, true, addr, value, 4); });
}
CUresult cuStreamWriteValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  (void)flags;
  return Guard([&]() -> CUresult { return WriteValue(s, false, addr, value, 8); });
}
CUresult cuStreamWriteValue64_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  (void)flags;
  return Guard([&]() -> CUresult { return WriteValue(s, true, addr, value, 8); });
}
CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  (void)s, (void)addr, (void)value, (void)flags;
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuStreamWaitValue32_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  (void)s, (void)addr, (void)value, (void)flags;
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuStreamWaitValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  (void)s, (void)addr, (void)value, (void)flags;
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuStreamWaitValue64_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  (void)s, (void)addr, (void)value, (void)flags;
  return CUDA_ERROR_NOT_SUPPORTED;
}

// Capture dependencies of a capturing stream: replace (SET) or extend (ADD).
static CUresult UpdateCaptureDeps(CUstream h, bool ptds, CUgraphNode* deps, size_t n, unsigned flags) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  if (s->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_ILLEGAL_STATE;
  if (n > 0 && deps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES) s->capture_deps.clear();
  for (size_t i = 0; i < n; ++i) {
    if (!IsLive(deps[i]) || deps[i]->graph != s->capture_graph) return CUDA_ERROR_INVALID_VALUE;
    s->capture_deps.push_back(deps[i]);
  }
  return CUDA_SUCCESS;
}
CUresult cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode* deps, size_t n, unsigned int flags) {
  return Guard([&]() -> CUresult { return UpdateCaptureDeps(s, false, deps, n, flags); });
}
CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream s, CUgraphNode* deps, size_t n, unsigned int flags) {
  return Guard([&]() -> CUresult { return UpdateCaptureDeps(s, true, deps, n, flags); });
}
CUresult cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode* deps, const CUgraphEdgeData* edgeData,
                                              size_t n, unsigned int flags) {
  (void)edgeData;
  return Guard([&]() -> CUresult { return UpdateCaptureDeps(s, false, deps, n, flags); });
}
CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream s, CUgraphNode* deps,
                                                   const CUgraphEdgeData* edgeData, size_t n,
                                                   unsigned int flags) {
  (void)edgeData;
  return Guard([&]() -> CUresult { return UpdateCaptureDeps(s, true, deps, n, flags); });
}

}  // extern "C"
