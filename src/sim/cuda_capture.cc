// Stream capture: between cuStreamBeginCapture and cuStreamEndCapture a
// stream's work (kernels, async copies and memsets, host functions, event
// records, stream-ordered allocations and frees) is recorded as a chain of
// graph nodes instead of running; its state and dependencies can be queried
// and updated.
#include <memory>
#include <utility>

#include "sim/cuda_graphs.h"

namespace tessera::sim::cuda {

CUresult CaptureNode(CUstream s, CUgraphNode_st node) {
  CUgraph g = s->capture_graph;
  if (!IsLive(g)) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  auto n = std::make_unique<CUgraphNode_st>(std::move(node));
  n->magic = CUgraphNode_st::kMagic;
  n->graph = g;
  n->deps = s->capture_deps;
  CUgraphNode raw = n.get();
  R().live.insert(raw);
  g->nodes.push_back(std::move(n));
  s->capture_deps = {raw};
  return CUDA_SUCCESS;
}

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode) {
  if (h == nullptr || h == CU_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return OnStream(h, [&](CUstream s) {
    if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
    CUgraph g;
    if (CUresult r = cuGraphCreate(&g, 0); r != CUDA_SUCCESS) return r;
    s->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    s->capture_graph = g;
    s->capture_deps.clear();
    s->capture_id = R().next_id++;
    return CUDA_SUCCESS;
  });
}
CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  return cuStreamBeginCapture_v2(PerThread(s), mode);
}
CUresult cuStreamBeginCapture(CUstream s) {
  return cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
CUresult cuStreamBeginCapture_ptsz(CUstream s) {
  return cuStreamBeginCapture_v2(PerThread(s), CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult cuStreamEndCapture(CUstream h, CUgraph* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnStream(h, [&](CUstream s) {
    if (s->capture == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
    *out = s->capture_graph;
    s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
    s->capture_graph = nullptr;
    s->capture_deps.clear();
    return CUDA_SUCCESS;
  });
}
CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) {
  return cuStreamEndCapture(PerThread(s), g);
}

// Every capture query, from cuStreamIsCapturing to cuStreamGetCaptureInfo_v3.
CUresult cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                   const CUgraphNode** deps, const CUgraphEdgeData** edgeData,
                                   size_t* ndeps) {
  if (edgeData != nullptr) *edgeData = nullptr;
  return OnStream(h, [&](CUstream s) {
    if (status != nullptr) *status = s->capture;
    const bool active = s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id != nullptr && active) *id = s->capture_id;
    if (graph != nullptr) *graph = active ? s->capture_graph : nullptr;
    if (deps != nullptr) *deps = active && !s->capture_deps.empty() ? s->capture_deps.data() : nullptr;
    if (ndeps != nullptr) *ndeps = active ? s->capture_deps.size() : 0;
    return CUDA_SUCCESS;
  });
}
CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                        CUgraph* graph, const CUgraphNode** deps,
                                        const CUgraphEdgeData** edgeData, size_t* ndeps) {
  return cuStreamGetCaptureInfo_v3(PerThread(s), status, id, graph, deps, edgeData, ndeps);
}
CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                   const CUgraphNode** deps, size_t* ndeps) {
  return cuStreamGetCaptureInfo_v3(s, status, id, graph, deps, nullptr, ndeps);
}
CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                        CUgraph* graph, const CUgraphNode** deps, size_t* ndeps) {
  return cuStreamGetCaptureInfo_v3(PerThread(s), status, id, graph, deps, nullptr, ndeps);
}
CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return cuStreamGetCaptureInfo_v3(s, status, id, nullptr, nullptr, nullptr, nullptr);
}
CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return cuStreamGetCaptureInfo_v3(PerThread(s), status, id, nullptr, nullptr, nullptr, nullptr);
}
CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return cuStreamGetCaptureInfo(s, status, nullptr);
}
CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* status) {
  return cuStreamIsCapturing(PerThread(s), status);
}

// Capture dependencies of a capturing stream: replace (SET) or extend (ADD).
CUresult cuStreamUpdateCaptureDependencies(CUstream h, CUgraphNode* deps, size_t n, unsigned int flags) {
  return OnStream(h, [&](CUstream s) {
    if (s->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_ILLEGAL_STATE;
    if (n > 0 && deps == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES) s->capture_deps.clear();
    for (size_t i = 0; i < n; ++i) {
      if (!IsLive(deps[i]) || deps[i]->graph != s->capture_graph) return CUDA_ERROR_INVALID_VALUE;
      s->capture_deps.push_back(deps[i]);
    }
    return CUDA_SUCCESS;
  });
}
CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream s, CUgraphNode* deps, size_t n, unsigned int flags) {
  return cuStreamUpdateCaptureDependencies(PerThread(s), deps, n, flags);
}
CUresult cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode* deps, const CUgraphEdgeData*, size_t n,
                                              unsigned int flags) {
  return cuStreamUpdateCaptureDependencies(s, deps, n, flags);
}
CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream s, CUgraphNode* deps, const CUgraphEdgeData*,
                                                   size_t n, unsigned int flags) {
  return cuStreamUpdateCaptureDependencies(PerThread(s), deps, n, flags);
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
