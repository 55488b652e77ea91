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
thread_local bool tls_null_stream_is_per_thread = false;

}  // namespace

bool& NullStreamIsPerThread() {
  return tls_null_stream_is_per_thread;
}

void ForgetPerThreadStreamsAfterFork() {
  tls_per_thread_streams.clear();
}

void SleepUntilNs(int64_t t) {
  // Most waits are for work already done (cuMemFree, synchronisations of idle
  // streams): a clock read through the vDSO answers those, where an
  // already-expired clock_nanosleep still enters the kernel and, on some
  // hosts, costs tens of microseconds.
  if (t <= MonotonicNs()) return;
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

CUresult ResolveStream(CUstream h, CUstream* out) {
  if (h == nullptr) h = NullStreamIsPerThread() ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
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
  if (!Valid(h)) return CUDA_ERROR_INVALID_HANDLE;
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

namespace {

// The stream getters: one property of a stream each.
template <typename Out, typename Read>
CUresult GetStreamProperty(CUstream h, Out* out, Read read) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnStream(h, [&](CUstream s) {
    *out = read(s);
    return CUDA_SUCCESS;
  });
}

// Entry points that only need a valid stream (attributes have no effect here).
CUresult CheckStream(CUstream h) {
  return OnStream(h, [](CUstream) { return CUDA_SUCCESS; });
}

// Host functions run in stream order: the call waits until the stream's prior
// work is done and runs the function on the calling thread (see docs/sim.md).
CUresult LaunchHost(CUstream h, CUhostFn fn, void* data) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int64_t t = 0;
  bool captured = false;
  const CUresult r = OnStream(h, [&](CUstream s) {
    if (s->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
      t = StreamReadyNs(s);
      return CUDA_SUCCESS;
    }
    captured = true;
    CUgraphNode_st node;
    node.kind = NodeKind::kHost;
    node.host.fn = fn;
    node.host.userData = data;
    return CaptureNode(s, std::move(node));
  });
  if (r != CUDA_SUCCESS || captured) return r;
  SleepUntilNs(t);
  return Guard([&] {
    fn(data);
    return CUDA_SUCCESS;
  });
}

// A stream callback: a host function told the stream as its caller named it.
CUresult AddCallback(CUstream h, CUstream named, CUstreamCallback cb, void* data, unsigned int flags) {
  if (cb == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  struct Thunk {
    CUstreamCallback cb;
    CUstream stream;
    void* data;
  } thunk{cb, named, data};
  return LaunchHost(
      h,
      [](void* p) {
        auto* t = static_cast<Thunk*>(p);
        t->cb(t->stream, CUDA_SUCCESS, t->data);
      },
      &thunk);
}

// Stream memory writes happen in stream order (at once: kernels touch no memory).
CUresult WriteValue(CUstream h, CUdeviceptr addr, uint64_t value, size_t size) {
  return OnStream(h, [&](CUstream s) {
    if (FindAllocation(addr, size) == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (size == 4) {
      const uint32_t v = static_cast<uint32_t>(value);
      std::memcpy(reinterpret_cast<void*>(addr), &v, 4);
    } else {
      std::memcpy(reinterpret_cast<void*>(addr), &value, 8);
    }
    s->last_end_ns = std::max(StreamReadyNs(s), MonotonicNs());
    return CUDA_SUCCESS;
  });
}

}  // namespace

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  if (phStream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return InCurrentContext([&](CUcontext c) -> CUresult {
    *phStream = NewStream(c, Flags, 0);
    return CUDA_SUCCESS;
  });
}

CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  if (CUresult r = cuStreamCreate(phStream, flags); r != CUDA_SUCCESS) return r;
  (*phStream)->priority = std::clamp(priority, -5, 0);
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream hStream) {
  return Entry([&]() -> CUresult {
    if (!Valid(hStream) || hStream->legacy) return CUDA_ERROR_INVALID_HANDLE;
    // Work already queued completes; the handle goes away now.
    auto& v = hStream->ctx->streams;
    v.erase(std::remove(v.begin(), v.end(), hStream), v.end());
    DestroyHandle(hStream);
    return CUDA_SUCCESS;
  });
}
CUresult cuStreamDestroy(CUstream hStream) {
  return cuStreamDestroy_v2(hStream);
}

CUresult cuStreamSynchronize(CUstream h) {
  return Synchronize([&](int64_t* t) {
    return OnStream(h, [&](CUstream s) {
      if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      *t = StreamReadyNs(s);
      return CUDA_SUCCESS;
    });
  });
}
CUresult cuStreamSynchronize_ptsz(CUstream h) {
  return cuStreamSynchronize(PerThread(h));
}

CUresult cuStreamQuery(CUstream h) {
  return OnStream(
      h, [](CUstream s) { return StreamReadyNs(s) <= MonotonicNs() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY; });
}
CUresult cuStreamQuery_ptsz(CUstream h) {
  return cuStreamQuery(PerThread(h));
}

CUresult cuStreamWaitEvent(CUstream h, CUevent ev, unsigned int) {
  return OnStream(h, [&](CUstream s) {
    if (!Valid(ev)) return CUDA_ERROR_INVALID_HANDLE;
    if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_SUCCESS;
    if (ev->recorded) s->last_end_ns = std::max(s->last_end_ns, ev->time_ns);
    return CUDA_SUCCESS;
  });
}
CUresult cuStreamWaitEvent_ptsz(CUstream h, CUevent ev, unsigned int flags) {
  return cuStreamWaitEvent(PerThread(h), ev, flags);
}

CUresult cuStreamGetFlags(CUstream h, unsigned int* flags) {
  return GetStreamProperty(h, flags, [](CUstream s) { return s->flags; });
}
CUresult cuStreamGetFlags_ptsz(CUstream h, unsigned int* flags) {
  return cuStreamGetFlags(PerThread(h), flags);
}
CUresult cuStreamGetPriority(CUstream h, int* priority) {
  return GetStreamProperty(h, priority, [](CUstream s) { return s->priority; });
}
CUresult cuStreamGetPriority_ptsz(CUstream h, int* priority) {
  return cuStreamGetPriority(PerThread(h), priority);
}
CUresult cuStreamGetCtx(CUstream h, CUcontext* pctx) {
  return GetStreamProperty(h, pctx, [](CUstream s) { return s->ctx; });
}
CUresult cuStreamGetCtx_ptsz(CUstream h, CUcontext* pctx) {
  return cuStreamGetCtx(PerThread(h), pctx);
}
CUresult cuStreamGetId(CUstream h, unsigned long long* id) {
  return GetStreamProperty(h, id, [](CUstream s) { return s->id; });
}
CUresult cuStreamGetId_ptsz(CUstream h, unsigned long long* id) {
  return cuStreamGetId(PerThread(h), id);
}
CUresult cuStreamGetDevice(CUstream h, CUdevice* dev) {
  return GetStreamProperty(h, dev, [](CUstream s) { return s->ctx->device; });
}
CUresult cuStreamGetDevice_ptsz(CUstream h, CUdevice* dev) {
  return cuStreamGetDevice(PerThread(h), dev);
}

CUresult cuStreamGetCtx_v2(CUstream h, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  if (pGreenCtx != nullptr) *pGreenCtx = nullptr;
  return cuStreamGetCtx(h, pCtx);
}
CUresult cuStreamGetCtx_v2_ptsz(CUstream h, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  return cuStreamGetCtx_v2(PerThread(h), pCtx, pGreenCtx);
}

// Stream attributes (access policy windows, synchronisation policy, priority)
// have no effect on the simulated device; reads return defaults.
CUresult cuStreamGetAttribute(CUstream h, CUstreamAttrID, CUstreamAttrValue* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::memset(value, 0, sizeof(*value));
  return CheckStream(h);
}
CUresult cuStreamGetAttribute_ptsz(CUstream h, CUstreamAttrID attr, CUstreamAttrValue* value) {
  return cuStreamGetAttribute(PerThread(h), attr, value);
}
CUresult cuStreamSetAttribute(CUstream h, CUstreamAttrID, const CUstreamAttrValue* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CheckStream(h);
}
CUresult cuStreamSetAttribute_ptsz(CUstream h, CUstreamAttrID attr, const CUstreamAttrValue* value) {
  return cuStreamSetAttribute(PerThread(h), attr, value);
}
CUresult cuStreamCopyAttributes(CUstream dst, CUstream src) {
  if (CUresult r = CheckStream(dst); r != CUDA_SUCCESS) return r;
  return CheckStream(src);
}
CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src) {
  return cuStreamCopyAttributes(PerThread(dst), PerThread(src));
}
CUresult cuStreamAttachMemAsync(CUstream h, CUdeviceptr, size_t, unsigned int) {
  return CheckStream(h);
}
CUresult cuStreamAttachMemAsync_ptsz(CUstream h, CUdeviceptr dptr, size_t length, unsigned int flags) {
  return cuStreamAttachMemAsync(PerThread(h), dptr, length, flags);
}

// Stream memory waits are not simulated: CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR
// and CAN_USE_64_BIT_STREAM_MEM_OPS read 0, and a wait is CUDA_ERROR_NOT_SUPPORTED.
CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int) {
  return WriteValue(s, addr, value, 4);
}
CUresult cuStreamWriteValue32_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return cuStreamWriteValue32_v2(PerThread(s), addr, value, flags);
}
CUresult cuStreamWriteValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int) {
  return WriteValue(s, addr, value, 8);
}
CUresult cuStreamWriteValue64_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return cuStreamWriteValue64_v2(PerThread(s), addr, value, flags);
}
CUresult cuStreamWaitValue32_v2(CUstream, CUdeviceptr, cuuint32_t, unsigned int) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuStreamWaitValue32_v2_ptsz(CUstream, CUdeviceptr, cuuint32_t, unsigned int) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuStreamWaitValue64_v2(CUstream, CUdeviceptr, cuuint64_t, unsigned int) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuStreamWaitValue64_v2_ptsz(CUstream, CUdeviceptr, cuuint64_t, unsigned int) {
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void* data) {
  return LaunchHost(s, fn, data);
}
CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void* data) {
  return LaunchHost(PerThread(s), fn, data);
}
CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void* data, unsigned int flags) {
  return AddCallback(s, s, cb, data, flags);
}
CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void* data, unsigned int flags) {
  return AddCallback(PerThread(s), s, cb, data, flags);
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
