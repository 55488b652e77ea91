// Executable graphs: instantiation (the graph's nodes copied in topological
// order; cycles refused), launch (the nodes run in that order on the stream,
// kernels booked on the GPU's timeline), upload, updates and destruction.
#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "sim/cuda_graphs.h"

namespace tessera::sim::cuda {

CUresult LaunchGraphOn(CUgraphExec exec, CUstream s) {
  Runtime& rt = R();
  if (CUresult r = PrepareGraphMemory(exec); r != CUDA_SUCCESS) return r;
  for (CUgraphNode_st& n : exec->nodes) {
    switch (n.kind) {
      case NodeKind::kKernel:
        BookKernel(s, n.duration_ns);
        break;
      case NodeKind::kMemset:
        if (CUresult r = Memset(n.memset.dst, n.memset.pitch, n.memset.value, n.memset.elementSize,
                                n.memset.width, n.memset.height);
            r != CUDA_SUCCESS) {
          return r;
        }
        s->last_end_ns = std::max(StreamReadyNs(s), MonotonicNs());
        break;
      case NodeKind::kMemcpy:
        if (CUresult r = Copy3D(n.memcpy); r != CUDA_SUCCESS) return r;
        AdvanceStreamForCopy(s, n.memcpy.WidthInBytes * std::max<size_t>(n.memcpy.Height, 1) *
                                    std::max<size_t>(n.memcpy.Depth, 1));
        break;
      case NodeKind::kHost: {
        const int64_t t = StreamReadyNs(s);
        rt.mu.unlock();
        SleepUntilNs(t);
        n.host.fn(n.host.userData);
        rt.mu.lock();
        break;
      }
      case NodeKind::kEventRecord:
        if (IsLive(n.event)) {
          n.event->recorded = true;
          n.event->time_ns = std::max(StreamReadyNs(s), MonotonicNs());
        }
        break;
      case NodeKind::kEventWait:
        if (IsLive(n.event) && n.event->recorded) {
          s->last_end_ns = std::max(s->last_end_ns, n.event->time_ns);
        }
        break;
      case NodeKind::kEmpty:
        break;
      case NodeKind::kMemAlloc:
        if (GraphAllocation* ga = FindGraphAllocation(n.alloc.dptr); ga != nullptr) ga->live = true;
        break;
      case NodeKind::kMemFree:
        EndGraphAllocationLifetime(n.alloc.dptr);
        break;
    }
  }
  exec->end_ns = std::max(StreamReadyNs(s), MonotonicNs());
  return CUDA_SUCCESS;
}

// An executable on a stream that is not capturing (launches are not captured).
template <typename Body>
CUresult OnExecAndStream(CUgraphExec exec, CUstream h, Body&& body) {
  return OnStream(h, [&](CUstream s) {
    if (!Valid(exec)) return CUDA_ERROR_INVALID_VALUE;
    if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return body(s);
  });
}

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

// Topological order (Kahn); ties keep insertion order. Error on a cycle, and
// on a second executable of a graph with memory nodes.
// The caller holds Runtime::mu.
static CUresult Instantiate(CUgraphExec* out, CUgraph g, unsigned long long flags = 0) {
  if (out == nullptr || !Valid(g)) return CUDA_ERROR_INVALID_VALUE;
  constexpr unsigned long long kKnown =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
      CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if ((flags & ~kKnown) != 0 || ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) &&
                                 (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (g->has_mem_nodes && g->execs > 0) return CUDA_ERROR_INVALID_VALUE;
  std::map<CUgraphNode, size_t> pending;
  std::map<CUgraphNode, std::vector<CUgraphNode>> users;
  for (auto& n : g->nodes) {
    pending[n.get()] = n->deps.size();
    for (CUgraphNode d : n->deps) users[d].push_back(n.get());
  }
  std::deque<CUgraphNode> ready;
  for (auto& n : g->nodes) {
    if (n->deps.empty()) ready.push_back(n.get());
  }
  auto exec = std::make_unique<CUgraphExec_st>();
  while (!ready.empty()) {
    CUgraphNode n = ready.front();
    ready.pop_front();
    exec->nodes.push_back(*n);
    exec->nodes.back().origin = n;
    for (CUgraphNode u : users[n]) {
      if (--pending[u] == 0) ready.push_back(u);
    }
  }
  if (exec->nodes.size() != g->nodes.size()) return CUDA_ERROR_INVALID_VALUE;  // cycle
  exec->flags = flags;
  exec->graph = g;
  exec->graph_id = g->id;
  exec->has_mem_nodes = g->has_mem_nodes;
  for (const CUgraphNode_st& n : exec->nodes) {
    if (n.kind != NodeKind::kMemAlloc) continue;
    if (GraphAllocation* ga = FindGraphAllocation(n.alloc.dptr); ga != nullptr) ++ga->refs;
  }
  ++g->execs;
  R().live.insert(exec.get());
  *out = exec.release();
  return CUDA_SUCCESS;
}

// Destroys an executable: allocations it backs and that are not live go back
// to the graph memory pool (which keeps the memory until trimmed).
static void DestroyExec(CUgraphExec exec) {
  for (const CUgraphNode_st& n : exec->nodes) {
    if (n.kind != NodeKind::kMemAlloc) continue;
    GraphAllocation* ga = FindGraphAllocation(n.alloc.dptr);
    if (ga == nullptr) continue;
    if (ga->exec == exec) {
      if (ga->live) {
        ga->exec = nullptr;  // stays mapped until freed
      } else {
        UnbackGraphAllocation(*ga);
      }
    }
    --ga->refs;
    MaybeDropGraphAllocation(n.alloc.dptr);
  }
  if (Valid(exec->graph) && exec->graph->id == exec->graph_id) --exec->graph->execs;
  DestroyHandle(exec);
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph g, unsigned long long flags) {
  // The upload flag belongs to cuGraphInstantiateWithParams (it names the stream).
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&] { return Instantiate(out, g, flags); });
}
CUresult cuGraphInstantiate_v2(CUgraphExec* out, CUgraph g, CUgraphNode* errNode, char* log, size_t logSize) {
  if (errNode != nullptr) *errNode = nullptr;
  if (log != nullptr && logSize > 0) log[0] = '\0';
  return Entry([&] { return Instantiate(out, g); });
}
CUresult cuGraphInstantiateWithParams(CUgraphExec* out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return Entry([&]() -> CUresult {
    const unsigned long long flags = p != nullptr ? p->flags : 0;
    CUresult r = Instantiate(out, g, flags);
    if (r == CUDA_SUCCESS && (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)) {
      // Uploaded at once into the given stream: its allocations are backed now.
      CUstream s;
      r = ResolveStream(p->hUploadStream, &s);
      if (r == CUDA_SUCCESS) r = BackGraphAllocations(*out);
      if (r != CUDA_SUCCESS) {
        DestroyExec(*out);
        *out = nullptr;
      }
    }
    if (p != nullptr) {
      p->hErrNode_out = nullptr;
      p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    }
    return r;
  });
}
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return cuGraphInstantiateWithParams(out, g, p);
}

CUresult cuGraphExecDestroy(CUgraphExec exec) {
  return OnHandle(exec, [&] {
    DestroyExec(exec);
    return CUDA_SUCCESS;
  });
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream h) {
  return OnExecAndStream(exec, h, [&](CUstream s) { return LaunchGraphOn(exec, s); });
}
CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) {
  return cuGraphLaunch(exec, PerThread(s));
}
// Uploading maps the physical memory of the executable's allocations now
// instead of at its first launch.
CUresult cuGraphUpload(CUgraphExec exec, CUstream h) {
  return OnExecAndStream(exec, h, [&](CUstream) { return BackGraphAllocations(exec); });
}
CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream s) {
  return cuGraphUpload(exec, PerThread(s));
}

CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                           const CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    if (!Valid(exec) || !IsLive(node)) return CUDA_ERROR_INVALID_VALUE;
    CUfunction f = p->func != nullptr ? p->func : static_cast<CUfunction>(p->kern);
    if (!IsLive(f)) return CUDA_ERROR_INVALID_VALUE;
    for (CUgraphNode_st& n : exec->nodes) {
      if (n.origin == node && n.kind == NodeKind::kKernel) {
        n.func = f;
        n.duration_ns = KernelDurationNs(f, p->kernelParams, p->extra);
        return CUDA_SUCCESS;
      }
    }
    return CUDA_ERROR_INVALID_VALUE;
  });
}

CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph g, CUgraphExecUpdateResultInfo* info) {
  return OnHandle(exec, [&] {
    if (exec->has_mem_nodes || (Valid(g) && g->has_mem_nodes)) {
      // Not modelled: the simulator updates by instantiating afresh.
      if (info != nullptr) info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
      return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    CUgraphExec fresh = nullptr;
    if (CUresult r = Instantiate(&fresh, g); r != CUDA_SUCCESS) {
      if (info != nullptr) info->result = CU_GRAPH_EXEC_UPDATE_ERROR;
      return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    exec->nodes = std::move(fresh->nodes);
    fresh->nodes.clear();
    DestroyExec(fresh);
    if (info != nullptr) {
      info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
      info->errorNode = nullptr;
      info->errorFromNode = nullptr;
    }
    return CUDA_SUCCESS;
  });
}

CUresult cuGraphExecGetFlags(CUgraphExec exec, cuuint64_t* flags) {
  return GetFrom(exec, flags, [&] { return exec->flags; });
}

// Graphs of CUDA 10.2-11.8 (cuGraphExecUpdate before its _v2).
CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph g, CUgraphNode* errorNode,
                           CUgraphExecUpdateResult* result) {
  CUgraphExecUpdateResultInfo info{};
  CUresult r = cuGraphExecUpdate_v2(exec, g, &info);
  if (errorNode != nullptr) *errorNode = info.errorNode;
  if (result != nullptr) *result = info.result;
  return r;
}

// CUDA 10.0-10.2: the same arguments as cuGraphInstantiate_v2.
CUresult cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                            char* logBuffer, size_t bufferSize) {
  return cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
