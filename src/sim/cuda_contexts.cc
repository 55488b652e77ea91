// Contexts: primary contexts (retained and released per device, reset, their
// flags), created contexts, the calling thread's stack of current contexts,
// synchronisation, limits and flags. The first context a process has on a GPU
// costs device memory (context_overhead_mib) until its last one there goes;
// destroying a context waits for its work and frees what was allocated in it.
#include <algorithm>
#include <vector>

#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {

namespace {

thread_local std::vector<CUcontext> tls_ctx_stack;

}  // namespace

CUcontext CurrentContext() {
  if (tls_ctx_stack.empty()) return nullptr;
  CUcontext c = tls_ctx_stack.back();
  return IsLive(c) ? c : nullptr;
}

int64_t ContextReadyNs(CUcontext c) {
  int64_t t = 0;
  for (CUstream s : c->streams) t = std::max(t, s->last_end_ns);
  return t;
}

void ForgetContextStackAfterFork() {
  tls_ctx_stack.clear();
}

namespace {

// Context creation/destruction: the first context of the process on a GPU
// costs device memory, as the real driver's context does (an MPS client's
// context is its server's, which holds that memory).
CUresult ContextCreated(int gpu) {
  Runtime& rt = R();
  if (rt.contexts[gpu] == 0 && MpsShare(gpu) == 0) {
    const uint64_t overhead = rt.state->file()->context_overhead_bytes;
    if (overhead > 0) {
      if (CUresult r = ChargeDevice(gpu, overhead); r != CUDA_SUCCESS) return r;
    }
  }
  ++rt.contexts[gpu];
  StateLock lock(*rt.state);
  const int slot = rt.state->ProcessSlotLocked(rt.pid, true);
  if (slot >= 0) {
    ProcessRecord& p = rt.state->file()->processes[slot];
    p.contexts[gpu] = static_cast<uint32_t>(rt.contexts[gpu]);
    RecordInstanceOf(p, gpu);
  }
  return CUDA_SUCCESS;
}

void ContextDestroyed(int gpu) {
  Runtime& rt = R();
  if (rt.contexts[gpu] <= 0) return;
  --rt.contexts[gpu];
  if (rt.contexts[gpu] == 0 && MpsShare(gpu) == 0)
    UnchargeDevice(gpu, rt.state->file()->context_overhead_bytes);
  StateLock lock(*rt.state);
  const int slot = rt.state->ProcessSlotLocked(rt.pid, false);
  if (slot >= 0) rt.state->file()->processes[slot].contexts[gpu] = static_cast<uint32_t>(rt.contexts[gpu]);
}

CUresult NewContext(CUdevice dev, int gpu, unsigned flags, bool primary, CUcontext* out) {
  Runtime& rt = R();
  if (CUresult r = ContextCreated(gpu); r != CUDA_SUCCESS) return r;
  auto* c = new CUctx_st();
  c->device = dev;
  c->gpu = gpu;
  c->primary = primary;
  c->flags = flags;
  c->id = rt.next_id++;
  c->limits[CU_LIMIT_STACK_SIZE] = 1024;
  c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
  c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
  rt.live.insert(c);
  c->legacy = NewStream(c, 0, 0);
  c->legacy->legacy = true;
  *out = c;
  return CUDA_SUCCESS;
}

// Destroys a context and everything it owns (memory, streams, events, modules).
void DestroyContext(CUcontext c) {
  Runtime& rt = R();
  // Wait for its work, as cuCtxDestroy does.
  SleepUntilNs(ContextReadyNs(c));
  for (auto it = rt.allocs.begin(); it != rt.allocs.end();) {
    Allocation& a = it->second;
    if (a.ctx == c && (a.kind == AllocKind::kDevice || a.kind == AllocKind::kManaged ||
                       a.kind == AllocKind::kPool || a.kind == AllocKind::kGlobal)) {
      if (a.heap_len > 0) rt.heaps[a.gpu].Free(a.heap_off, a.heap_len);
      if (a.charged > 0) UnchargeDevice(a.gpu, a.charged);
      it = rt.allocs.erase(it);
    } else {
      ++it;
    }
  }
  for (CUstream s : c->streams) DestroyHandle(s);
  c->streams.clear();
  for (auto& v : tls_ctx_stack) {
    if (v == c) v = nullptr;
  }
  ContextDestroyed(c->gpu);
  DestroyHandle(c);
}

// The context an entry point names: `ctx`, or the current one when it is NULL.
template <typename Body>
CUresult OnContextOrCurrent(CUcontext ctx, Body&& body) {
  return Entry([&]() -> CUresult {
    if (ctx == nullptr) ctx = CurrentContext();
    if (!Valid(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    return body(ctx);
  });
}

void SetCurrent(CUcontext c) {
  if (tls_ctx_stack.empty()) {
    if (c != nullptr) tls_ctx_stack.push_back(c);
  } else if (c == nullptr) {
    tls_ctx_stack.pop_back();
  } else {
    tls_ctx_stack.back() = c;
  }
}

}  // namespace

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnDevice(dev, [&](int gpu) -> CUresult {
    Runtime& rt = R();
    if (rt.primary[gpu] == nullptr) {
      CUcontext c;
      if (CUresult r = NewContext(dev, gpu, rt.primary_flags[gpu], true, &c); r != CUDA_SUCCESS) return r;
      rt.primary[gpu] = c;
      rt.primary_refs[gpu] = 0;
    }
    ++rt.primary_refs[gpu];
    *pctx = rt.primary[gpu];
    return CUDA_SUCCESS;
  });
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return OnDevice(dev, [&](int gpu) -> CUresult {
    Runtime& rt = R();
    if (rt.primary[gpu] == nullptr || rt.primary_refs[gpu] <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--rt.primary_refs[gpu] == 0) {
      DestroyContext(rt.primary[gpu]);
      rt.primary[gpu] = nullptr;
    }
    return CUDA_SUCCESS;
  });
}
CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return cuDevicePrimaryCtxRelease_v2(dev);
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  return OnDevice(dev, [&](int gpu) -> CUresult {
    Runtime& rt = R();
    if (rt.primary[gpu] != nullptr) {
      DestroyContext(rt.primary[gpu]);
      rt.primary[gpu] = nullptr;
      rt.primary_refs[gpu] = 0;
    }
    return CUDA_SUCCESS;
  });
}
CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  return cuDevicePrimaryCtxReset_v2(dev);
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnDevice(dev, [&](int gpu) -> CUresult {
    *flags = R().primary_flags[gpu];
    *active = R().primary[gpu] != nullptr;
    return CUDA_SUCCESS;
  });
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  return OnDevice(dev, [&](int gpu) -> CUresult {
    R().primary_flags[gpu] = flags;
    if (R().primary[gpu] != nullptr) R().primary[gpu]->flags = flags;
    return CUDA_SUCCESS;
  });
}
CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnDevice(dev, [&](int gpu) -> CUresult {
    CUcontext c;
    if (CUresult r = NewContext(dev, gpu, flags, false, &c); r != CUDA_SUCCESS) return r;
    tls_ctx_stack.push_back(c);  // the new context becomes current
    *pctx = c;
    return CUDA_SUCCESS;
  });
}
CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam*, int, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v2(pctx, flags, dev);
}
CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams*, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v2(pctx, flags, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  return OnHandle(ctx, [&] {
    if (ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
    DestroyContext(ctx);
    if (!tls_ctx_stack.empty() && tls_ctx_stack.back() == nullptr) tls_ctx_stack.pop_back();
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  return Entry([&]() -> CUresult {
    if (ctx != nullptr && !Valid(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    SetCurrent(ctx);
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    *pctx = CurrentContext();
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  return OnHandle(ctx, [&] {
    tls_ctx_stack.push_back(ctx);
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  return Entry([&]() -> CUresult {
    if (tls_ctx_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx != nullptr) *pctx = tls_ctx_stack.back();
    tls_ctx_stack.pop_back();
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnContextOrCurrent(ctx, [&](CUcontext c) {
    *device = c->device;
    return CUDA_SUCCESS;
  });
}
CUresult cuCtxGetDevice(CUdevice* device) {
  return cuCtxGetDevice_v2(device, nullptr);
}

CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  return Synchronize([&](int64_t* t) {
    return OnContextOrCurrent(ctx, [&](CUcontext c) {
      *t = ContextReadyNs(c);
      return CUDA_SUCCESS;
    });
  });
}
CUresult cuCtxSynchronize(void) {
  return cuCtxSynchronize_v2(nullptr);
}

CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    if (ctx != nullptr && !Valid(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    *version = 3020;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxGetFlags(unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return InCurrentContext([&](CUcontext c) -> CUresult {
    *flags = c->flags;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxSetFlags(unsigned int flags) {
  return InCurrentContext([&](CUcontext c) -> CUresult {
    c->flags = flags;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  if (ctxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnContextOrCurrent(ctx, [&](CUcontext c) {
    *ctxId = c->id;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  if (pvalue == nullptr || limit < 0 || limit >= 16) return CUDA_ERROR_INVALID_VALUE;
  return InCurrentContext([&](CUcontext c) -> CUresult {
    *pvalue = c->limits[limit];
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  if (limit < 0 || limit >= 16) return CUDA_ERROR_INVALID_VALUE;
  return InCurrentContext([&](CUcontext c) -> CUresult {
    c->limits[limit] = value;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxGetCacheConfig(CUfunc_cache* pconfig) {
  if (pconfig == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pconfig = CU_FUNC_CACHE_PREFER_NONE;
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCacheConfig(CUfunc_cache) {
  return CUDA_SUCCESS;
}

CUresult cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (leastPriority != nullptr) *leastPriority = 0;
  if (greatestPriority != nullptr) *greatestPriority = -5;
  return CUDA_SUCCESS;
}

// Every context can reach every other (all memory is host memory here).
CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int) {
  return OnHandle(peerContext, [] { return CUDA_SUCCESS; });
}
CUresult cuCtxDisablePeerAccess(CUcontext peerContext) {
  return OnHandle(peerContext, [] { return CUDA_SUCCESS; });
}

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

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
