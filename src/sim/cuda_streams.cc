// Streams: the legacy and per-thread default streams and created ones, the
// order of their work (the legacy stream's implicit synchronisation with
// blocking streams), synchronisation and queries, attributes, stream memory
// writes, and host functions and callbacks, which run on the calling thread
// once the stream's earlier work is done.
#include <errno.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {

namespace {

thread_local std::unordered_map<CUcontext, CUstream> tls_per_thread_streams;

}  // namespace

void ForgetPerThreadStreamsAfterFork() {
  tls_per_thread_streams.clear();
}

void SleepUntilNs(int64_t t) {
  timespec ts{static_cast<time_t>(t / 1000000000LL), static_cast<long>(t % 1000000000LL)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

CUstream NewStream(CUcontext ctx, unsigned flags, int priority) {
  auto* s = new CUstream_st();
  s->ctx = ctx;
  s->flags = flags;
  s->priority = priority;
  s->id = R().next_id++;
  R().live.insert(s);
  ctx->streams.push_back(s);
  return s;
}

CUresult ResolveStream(CUstream h, bool ptds, CUstream* out) {
  if (h == nullptr) h = ptds ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  if (h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    CUcontext ctx = CurrentContext();
    if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    if (h == CU_STREAM_LEGACY) {
      *out = ctx->legacy;
      return CUDA_SUCCESS;
    }
    CUstream& s = tls_per_thread_streams[ctx];
    if (s == nullptr || !IsLive(s) || s->ctx != ctx) {
      s = NewStream(ctx, 0, 0);
      s->per_thread = true;
    }
    *out = s;
    return CUDA_SUCCESS;
  }
  if (!IsLive(h) || h->magic != kStreamMagic) return CUDA_ERROR_INVALID_HANDLE;
  *out = h;
  return CUDA_SUCCESS;
}

int64_t StreamReadyNs(CUstream s) {
  int64_t t = s->last_end_ns;
  if (s->legacy) {
    for (CUstream o : s->ctx->streams) {
      if (!(o->flags & CU_STREAM_NON_BLOCKING)) t = std::max(t, o->last_end_ns);
    }
  } else if (!(s->flags & CU_STREAM_NON_BLOCKING) && s->ctx->legacy != nullptr) {
    t = std::max(t, s->ctx->legacy->last_end_ns);
  }
  return t;
}

}  // namespace tessera::sim::cuda

using namespace tessera::sim;
using namespace tessera::sim::cuda;

extern "C" {

CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  return Guard([&]() -> CUresult {
    if (phStream == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    CUcontext c;
    if (CUresult r = CurrentGpu(&gpu, &c); r != CUDA_SUCCESS) return r;
    *phStream = NewStream(c, Flags, 0);
    return CUDA_SUCCESS;
  });
}

CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  return Guard([&]() -> CUresult {
    if (CUresult r = cuStreamCreate(phStream, flags); r != CUDA_SUCCESS) return r;
    (*phStream)->priority = std::clamp(priority, -5, 0);
    return CUDA_SUCCESS;
  });
}

CUresult cuStreamDestroy_v2(CUstream hStream) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (!IsLive(hStream) || hStream->magic != kStreamMagic || hStream->legacy) {
      return CUDA_ERROR_INVALID_HANDLE;
    }
    // Work already queued completes; the handle goes away now.
    auto& v = hStream->ctx->streams;
    v.erase(std::remove(v.begin(), v.end(), hStream), v.end());
    R().live.erase(hStream);
    hStream->magic = 0;
    delete hStream;
    return CUDA_SUCCESS;
  });
}
CUresult cuStreamDestroy(CUstream hStream) {
  return cuStreamDestroy_v2(hStream);
}

static CUresult StreamSync(CUstream h, bool ptds) {
  int64_t t;
  {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    CUstream s;
    if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
    if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    t = StreamReadyNs(s);
  }
  SleepUntilNs(t);
  LOCKED;
  TrimPoolsOnSync();
  return CUDA_SUCCESS;
}

static CUresult StreamQuery(CUstream h, bool ptds) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  return StreamReadyNs(s) <= MonotonicNs() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuStreamSynchronize(CUstream h) {
  return Guard([&]() -> CUresult { return StreamSync(h, false); });
}
CUresult cuStreamSynchronize_ptsz(CUstream h) {
  return Guard([&]() -> CUresult { return StreamSync(h, true); });
}
CUresult cuStreamQuery(CUstream h) {
  return Guard([&]() -> CUresult { return StreamQuery(h, false); });
}
CUresult cuStreamQuery_ptsz(CUstream h) {
  return Guard([&]() -> CUresult { return StreamQuery(h, true); });
}

static CUresult StreamWaitEvent(CUstream h, CUevent ev, bool ptds) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  if (!IsLive(ev) || ev->magic != kEventMagic) return CUDA_ERROR_INVALID_HANDLE;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_SUCCESS;
  if (ev->recorded) s->last_end_ns = std::max(s->last_end_ns, ev->time_ns);
  return CUDA_SUCCESS;
}
CUresult cuStreamWaitEvent(CUstream h, CUevent ev, unsigned int Flags) {
  (void)Flags;
  return Guard([&]() -> CUresult { return StreamWaitEvent(h, ev, false); });
}
CUresult cuStreamWaitEvent_ptsz(CUstream h, CUevent ev, unsigned int Flags) {
  (void)Flags;
  return Guard([&]() -> CUresult { return StreamWaitEvent(h, ev, true); });
}

static CUresult StreamInfo(CUstream h, bool ptds, unsigned* flags, int* priority, CUcontext* ctx,
                           unsigned long long* id, CUdevice* dev) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  if (flags) *flags = s->flags;
  if (priority) *priority = s->priority;
  if (ctx) *ctx = s->ctx;
  if (id) *id = s->id;
  if (dev) *dev = s->ctx->device;
  return CUDA_SUCCESS;
}
CUresult cuStreamGetFlags(CUstream h, unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return StreamInfo(h, false, flags, nullptr, nullptr, nullptr, nullptr); });
}
CUresult cuStreamGetFlags_ptsz(CUstream h, unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return StreamInfo(h, true, flags, nullptr, nullptr, nullptr, nullptr); });
}
CUresult cuStreamGetPriority(CUstream h, int* priority) {
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard(
      [&]() -> CUresult { return StreamInfo(h, false, nullptr, priority, nullptr, nullptr, nullptr); });
}
CUresult cuStreamGetPriority_ptsz(CUstream h, int* priority) {
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard(
      [&]() -> CUresult { return StreamInfo(h, true, nullptr, priority, nullptr, nullptr, nullptr); });
}
CUresult cuStreamGetCtx(CUstream h, CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return StreamInfo(h, false, nullptr, nullptr, pctx, nullptr, nullptr); });
}
CUresult cuStreamGetCtx_ptsz(CUstream h, CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return StreamInfo(h, true, nullptr, nullptr, pctx, nullptr, nullptr); });
}
CUresult cuStreamGetId(CUstream h, unsigned long long* id) {
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return StreamInfo(h, false, nullptr, nullptr, nullptr, id, nullptr); });
}
CUresult cuStreamGetId_ptsz(CUstream h, unsigned long long* id) {
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return StreamInfo(h, true, nullptr, nullptr, nullptr, id, nullptr); });
}
CUresult cuStreamGetDevice(CUstream h, CUdevice* dev) {
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return StreamInfo(h, false, nullptr, nullptr, nullptr, nullptr, dev); });
}
CUresult cuStreamGetDevice_ptsz(CUstream h, CUdevice* dev) {
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return StreamInfo(h, true, nullptr, nullptr, nullptr, nullptr, dev); });
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

// Host functions run in stream order: the call waits until the stream's prior
// work is done and runs the function on the calling thread (see docs/sim.md).
static CUresult LaunchHost(CUstream h, bool ptds, CUhostFn fn, void* data) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int64_t t;
  {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    CUstream s;
    if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
    if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
      CUgraphNode_st node;
      node.kind = NodeKind::kHost;
      node.host.fn = fn;
      node.host.userData = data;
      return CaptureNode(s, std::move(node));
    }
    t = StreamReadyNs(s);
  }
  SleepUntilNs(t);
  fn(data);
  return CUDA_SUCCESS;
}
CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void* data) {
  return Guard([&]() -> CUresult { return LaunchHost(s, false, fn, data); });
}
CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void* data) {
  return Guard([&]() -> CUresult { return LaunchHost(s, true, fn, data); });
}

struct CallbackThunk {
  CUstreamCallback cb;
  CUstream stream;
  void* data;
};
static void RunCallback(void* p) {
  auto* t = static_cast<CallbackThunk*>(p);
  t->cb(t->stream, CUDA_SUCCESS, t->data);
}
CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void* data, unsigned int flags) {
  if (cb == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  CallbackThunk t{cb, s, data};
  return Guard([&]() -> CUresult { return LaunchHost(s, false, RunCallback, &t); });
}
CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void* data, unsigned int flags) {
  if (cb == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  CallbackThunk t{cb, s, data};
  return Guard([&]() -> CUresult { return LaunchHost(s, true, RunCallback, &t); });
}

}  // extern "C"
