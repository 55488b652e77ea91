// Events: an event records the completion time of the work queued before it
// on a stream (or of all of a context's work); it is queried, waited for,
// waited on by other streams, and timed against another event.
#include <algorithm>

#include "sim/cuda_internal.h"

using namespace tessera::sim;
using namespace tessera::sim::cuda;

extern "C" {

CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  return Guard([&]() -> CUresult {
    if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    CUcontext c;
    if (CUresult r = CurrentGpu(&gpu, &c); r != CUDA_SUCCESS) return r;
    auto* e = new CUevent_st();
    e->ctx = c;
    e->flags = Flags;
    R().live.insert(e);
    *phEvent = e;
    return CUDA_SUCCESS;
  });
}

static CUresult EventRecord(CUevent ev, CUstream h, bool ptds) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (!IsLive(ev) || ev->magic != kEventMagic) return CUDA_ERROR_INVALID_HANDLE;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    CUgraphNode_st node;
    node.kind = NodeKind::kEventRecord;
    node.event = ev;
    return CaptureNode(s, std::move(node));
  }
  ev->recorded = true;
  ev->time_ns = std::max(StreamReadyNs(s), MonotonicNs());
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent ev, CUstream s) {
  return Guard([&]() -> CUresult { return EventRecord(ev, s, false); });
}
CUresult cuEventRecord_ptsz(CUevent ev, CUstream s) {
  return Guard([&]() -> CUresult { return EventRecord(ev, s, true); });
}
CUresult cuEventRecordWithFlags(CUevent ev, CUstream s, unsigned int flags) {
  (void)flags;
  return Guard([&]() -> CUresult { return EventRecord(ev, s, false); });
}
CUresult cuEventRecordWithFlags_ptsz(CUevent ev, CUstream s, unsigned int flags) {
  (void)flags;
  return Guard([&]() -> CUresult { return EventRecord(ev, s, true); });
}

CUresult cuEventQuery(CUevent ev) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (!IsLive(ev) || ev->magic != kEventMagic) return CUDA_ERROR_INVALID_HANDLE;
    if (!ev->recorded) return CUDA_SUCCESS;
    return ev->time_ns <= MonotonicNs() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  });
}

CUresult cuEventSynchronize(CUevent ev) {
  return Guard([&]() -> CUresult {
    int64_t t;
    {
      LOCKED;
      if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
      if (!IsLive(ev) || ev->magic != kEventMagic) return CUDA_ERROR_INVALID_HANDLE;
      t = ev->recorded ? ev->time_ns : 0;
    }
    SleepUntilNs(t);
    return CUDA_SUCCESS;
  });
}

CUresult cuEventDestroy_v2(CUevent ev) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (!IsLive(ev) || ev->magic != kEventMagic) return CUDA_ERROR_INVALID_HANDLE;
    R().live.erase(ev);
    ev->magic = 0;
    delete ev;
    return CUDA_SUCCESS;
  });
}
CUresult cuEventDestroy(CUevent ev) {
  return cuEventDestroy_v2(ev);
}

CUresult cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  return Guard([&]() -> CUresult {
    if (pMilliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (!IsLive(hStart) || !IsLive(hEnd)) return CUDA_ERROR_INVALID_HANDLE;
    if ((hStart->flags & CU_EVENT_DISABLE_TIMING) || (hEnd->flags & CU_EVENT_DISABLE_TIMING)) {
      return CUDA_ERROR_INVALID_HANDLE;
    }
    if (!hStart->recorded || !hEnd->recorded) return CUDA_ERROR_INVALID_HANDLE;
    const int64_t now = MonotonicNs();
    if (hStart->time_ns > now || hEnd->time_ns > now) return CUDA_ERROR_NOT_READY;
    *pMilliseconds = static_cast<float>(static_cast<double>(hEnd->time_ns - hStart->time_ns) / 1e6);
    return CUDA_SUCCESS;
  });
}
CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
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

}  // extern "C"
