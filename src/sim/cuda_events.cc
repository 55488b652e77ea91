// Events: an event records the completion time of the work queued before it
// on a stream (or of all of a context's work); it is queried, waited for,
// waited on by other streams, and timed against another event.
#include <algorithm>

#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return InCurrentContext([&](CUcontext c) -> CUresult {
    auto* e = new CUevent_st();
    e->ctx = c;
    e->flags = Flags;
    R().live.insert(e);
    *phEvent = e;
    return CUDA_SUCCESS;
  });
}

CUresult cuEventRecord(CUevent ev, CUstream h) {
  return OnStream(h, [&](CUstream s) {
    if (!Valid(ev)) return CUDA_ERROR_INVALID_HANDLE;
    if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
      CUgraphNode_st node;
      node.kind = NodeKind::kEventRecord;
      node.event = ev;
      return CaptureNode(s, std::move(node));
    }
    ev->recorded = true;
    ev->time_ns = std::max(StreamReadyNs(s), MonotonicNs());
    return CUDA_SUCCESS;
  });
}
CUresult cuEventRecord_ptsz(CUevent ev, CUstream s) {
  return cuEventRecord(ev, PerThread(s));
}
CUresult cuEventRecordWithFlags(CUevent ev, CUstream s, unsigned int) {
  return cuEventRecord(ev, s);
}
CUresult cuEventRecordWithFlags_ptsz(CUevent ev, CUstream s, unsigned int) {
  return cuEventRecord(ev, PerThread(s));
}

CUresult cuEventQuery(CUevent ev) {
  return OnHandle(ev, [&] {
    if (!ev->recorded) return CUDA_SUCCESS;
    return ev->time_ns <= MonotonicNs() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  });
}

CUresult cuEventSynchronize(CUevent ev) {
  return WaitFor([&](int64_t* t) {
    if (!Valid(ev)) return CUDA_ERROR_INVALID_HANDLE;
    *t = ev->recorded ? ev->time_ns : 0;
    return CUDA_SUCCESS;
  });
}

CUresult cuEventDestroy_v2(CUevent ev) {
  return OnHandle(ev, [&] {
    DestroyHandle(ev);
    return CUDA_SUCCESS;
  });
}
CUresult cuEventDestroy(CUevent ev) {
  return cuEventDestroy_v2(ev);
}

CUresult cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  if (pMilliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
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
  return Entry([&]() -> CUresult {
    if (!IsLive(ctx) || !Valid(ev)) return CUDA_ERROR_INVALID_HANDLE;
    ev->recorded = true;
    ev->time_ns = std::max(MonotonicNs(), ContextReadyNs(ctx));
    return CUDA_SUCCESS;
  });
}
CUresult cuCtxWaitEvent(CUcontext ctx, CUevent ev) {
  return Entry([&]() -> CUresult {
    if (!IsLive(ctx) || !Valid(ev)) return CUDA_ERROR_INVALID_HANDLE;
    if (ev->recorded) {
      for (CUstream s : ctx->streams) s->last_end_ns = std::max(s->last_end_ns, ev->time_ns);
    }
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
