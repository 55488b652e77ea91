// Graph memory: memory alloc and free nodes (explicit, or cuMemAllocAsync and
// cuMemFreeAsync captured) and the memory behind them. Graph allocations have
// fixed virtual ranges; their physical memory comes from a per-GPU graph
// memory pool when an executable that allocates them is uploaded or launched,
// stays mapped for that executable across launches (also after the allocation
// is freed), and goes back to the pool's idle reserve when the executable is
// destroyed or the pool trimmed. Idle memory stays charged to the device until
// cuDeviceGraphMemTrim returns it (docs/sim.md).
#include <algorithm>
#include <map>
#include <utility>

#include "sim/cuda_graphs.h"

namespace tessera::sim::cuda {

GraphAllocation* FindGraphAllocation(uint64_t p) {
  auto it = R().graph_allocs.find(p);
  return it == R().graph_allocs.end() ? nullptr : &it->second;
}

void UnbackGraphAllocation(GraphAllocation& ga) {
  if (!ga.backed) return;
  GraphMemPool& pool = R().graph_pool[ga.gpu];
  pool.mapped -= std::min(pool.mapped, ga.charge);
  pool.idle += ga.charge;
  ga.backed = false;
  ga.exec = nullptr;
  R().heaps[ga.gpu].Discard(ga.heap_off, ga.charge);
}

void MaybeDropGraphAllocation(uint64_t p) {
  Runtime& rt = R();
  auto it = rt.graph_allocs.find(p);
  if (it == rt.graph_allocs.end()) return;
  GraphAllocation& ga = it->second;
  if (ga.refs > 0 || ga.live) return;
  UnbackGraphAllocation(ga);
  rt.allocs.erase(p);
  rt.heaps[ga.gpu].Free(ga.heap_off, ga.charge);
  rt.graph_allocs.erase(it);
}

void EndGraphAllocationLifetime(uint64_t p) {
  GraphAllocation* ga = FindGraphAllocation(p);
  if (ga == nullptr) return;
  ga->live = false;
  if (ga->exec == nullptr) UnbackGraphAllocation(*ga);
  MaybeDropGraphAllocation(p);
}

namespace {

void NoteGraphPoolHighs(GraphMemPool& pool) {
  pool.used_high = std::max(pool.used_high, pool.mapped);
  pool.reserved_high = std::max(pool.reserved_high, pool.mapped + pool.idle);
}

// A new graph allocation of `bytes` on CUdevice `dev`, named by one node of
// graph `owner`: its virtual range, no physical memory yet.
CUresult NewGraphAllocation(int dev, uint64_t bytes, unsigned long long owner, CUdeviceptr* out) {
  Runtime& rt = R();
  if (dev < 0 || dev >= static_cast<int>(rt.visible.size())) return CUDA_ERROR_INVALID_VALUE;
  const int gpu = rt.visible[dev];
  DeviceHeap& heap = rt.heaps[gpu];
  if (!heap.EnsureMapped(rt.state->file()->gpus[gpu].total_bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t charge = (std::max<uint64_t>(bytes, 1) + 4095) & ~uint64_t{4095};
  const uint64_t off = heap.Allocate(charge, 4096);
  if (off == UINT64_MAX) return CUDA_ERROR_OUT_OF_MEMORY;  // out of address space
  Allocation a;
  a.base = reinterpret_cast<uint64_t>(heap.base() + off);
  a.size = bytes;
  a.heap_off = off;
  a.heap_len = charge;
  a.gpu = gpu;
  a.kind = AllocKind::kGraph;
  rt.allocs[a.base] = a;
  GraphAllocation ga;
  ga.gpu = gpu;
  ga.size = bytes;
  ga.charge = charge;
  ga.heap_off = off;
  ga.refs = 1;
  ga.owner_graph_id = owner;
  rt.graph_allocs[a.base] = ga;
  *out = a.base;
  return CUDA_SUCCESS;
}

// May a free node for `p` be added? Only for a graph allocation, and only
// once: in its own graph or, instead, in one other graph.
CUresult CheckGraphFree(CUdeviceptr p) {
  GraphAllocation* ga = FindGraphAllocation(p);
  return ga == nullptr || ga->free_node_graph_id != 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

void ReleaseIdleGraphMemory(int gpu) {
  GraphMemPool& pool = R().graph_pool[gpu];
  if (pool.idle == 0) return;
  UnchargeDevice(gpu, pool.idle);
  pool.idle = 0;
}

// Whether `exec`'s memory nodes can run now: its allocations must not be live
// (unless it frees them on launch) and each free must find its allocation
// live, in execution order.
CUresult CheckGraphMemoryNodes(CUgraphExec exec) {
  if (!exec->has_mem_nodes) return CUDA_SUCCESS;
  const bool auto_free = (exec->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) != 0;
  std::map<uint64_t, bool> live;
  for (const CUgraphNode_st& n : exec->nodes) {
    if (n.kind != NodeKind::kMemAlloc) continue;
    GraphAllocation* ga = FindGraphAllocation(n.alloc.dptr);
    if (ga == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (ga->live && !auto_free) return CUDA_ERROR_INVALID_VALUE;
    live[n.alloc.dptr] = false;
  }
  for (const CUgraphNode_st& n : exec->nodes) {
    if (n.kind == NodeKind::kMemAlloc) {
      live[n.alloc.dptr] = true;
    } else if (n.kind == NodeKind::kMemFree) {
      auto it = live.find(n.alloc.dptr);
      bool is_live;
      if (it != live.end()) {
        is_live = it->second;
      } else {
        GraphAllocation* ga = FindGraphAllocation(n.alloc.dptr);
        is_live = ga != nullptr && ga->live;
      }
      if (!is_live) return CUDA_ERROR_INVALID_VALUE;
      live[n.alloc.dptr] = false;
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult BackGraphAllocations(CUgraphExec exec) {
  if (!exec->has_mem_nodes) return CUDA_SUCCESS;
  Runtime& rt = R();
  uint64_t need[kMaxGpus] = {};
  for (const CUgraphNode_st& n : exec->nodes) {
    if (n.kind != NodeKind::kMemAlloc) continue;
    GraphAllocation* ga = FindGraphAllocation(n.alloc.dptr);
    if (ga != nullptr && !ga->backed) need[ga->gpu] += ga->charge;
  }
  // Physical memory the pool holds idle first, new memory for the rest;
  // nothing changes if that does not fit.
  uint64_t fresh[kMaxGpus] = {};
  for (int g = 0; g < kMaxGpus; ++g) {
    if (need[g] == 0) continue;
    const uint64_t idle = rt.graph_pool[g].idle;
    fresh[g] = need[g] > idle ? need[g] - idle : 0;
    if (fresh[g] == 0) continue;
    if (CUresult r = ChargeDevice(g, fresh[g]); r != CUDA_SUCCESS) {
      for (int u = 0; u < g; ++u) {
        if (fresh[u] > 0) UnchargeDevice(u, fresh[u]);
      }
      return r;
    }
  }
  for (int g = 0; g < kMaxGpus; ++g) {
    if (need[g] == 0) continue;
    GraphMemPool& pool = rt.graph_pool[g];
    pool.idle -= need[g] - fresh[g];
    pool.mapped += need[g];
    NoteGraphPoolHighs(pool);
  }
  for (const CUgraphNode_st& n : exec->nodes) {
    if (n.kind != NodeKind::kMemAlloc) continue;
    if (GraphAllocation* ga = FindGraphAllocation(n.alloc.dptr); ga != nullptr) {
      ga->backed = true;  // an allocation left live by a destroyed executable is adopted as it is
      ga->exec = exec;
    }
  }
  return CUDA_SUCCESS;
}

CUresult PrepareGraphMemory(CUgraphExec exec) {
  if (CUresult r = CheckGraphMemoryNodes(exec); r != CUDA_SUCCESS) return r;
  if (CUresult r = BackGraphAllocations(exec); r != CUDA_SUCCESS) return r;
  if (exec->has_mem_nodes && (exec->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)) {
    for (const CUgraphNode_st& n : exec->nodes) {
      GraphAllocation* ga = n.kind == NodeKind::kMemAlloc ? FindGraphAllocation(n.alloc.dptr) : nullptr;
      if (ga != nullptr && ga->live) EndGraphAllocationLifetime(n.alloc.dptr);
    }
  }
  return CUDA_SUCCESS;
}

CUresult FreeGraphAllocation(uint64_t p) {
  GraphAllocation* ga = FindGraphAllocation(p);
  if (ga == nullptr || !ga->live) return CUDA_ERROR_INVALID_VALUE;
  // Freed in its own graph: it cannot be freed anywhere else.
  if (ga->free_node_graph_id != 0 && ga->free_node_graph_id == ga->owner_graph_id)
    return CUDA_ERROR_INVALID_VALUE;
  EndGraphAllocationLifetime(p);
  return CUDA_SUCCESS;
}

CUresult CaptureMemAlloc(CUstream s, int device, uint64_t bytes, CUdeviceptr* dptr) {
  CUgraph g = s->capture_graph;
  if (!IsLive(g)) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  CUdeviceptr p = 0;
  if (CUresult r = NewGraphAllocation(device, bytes, g->id, &p); r != CUDA_SUCCESS) return r;
  CUgraphNode_st node;
  node.kind = NodeKind::kMemAlloc;
  node.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  node.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  node.alloc.poolProps.location.id = device;
  node.alloc.bytesize = bytes;
  node.alloc.dptr = p;
  if (CUresult r = CaptureNode(s, std::move(node)); r != CUDA_SUCCESS) {
    R().graph_allocs[p].refs = 0;
    MaybeDropGraphAllocation(p);
    return r;
  }
  g->has_mem_nodes = true;
  *dptr = p;
  return CUDA_SUCCESS;
}

CUresult CaptureMemFree(CUstream s, CUdeviceptr p) {
  CUgraph g = s->capture_graph;
  if (!IsLive(g)) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  // A captured free becomes a free node: only graph allocations qualify.
  if (CUresult r = CheckGraphFree(p); r != CUDA_SUCCESS) return r;
  CUgraphNode_st node;
  node.kind = NodeKind::kMemFree;
  node.alloc.dptr = p;
  if (CUresult r = CaptureNode(s, std::move(node)); r != CUDA_SUCCESS) return r;
  FindGraphAllocation(p)->free_node_graph_id = g->id;
  g->has_mem_nodes = true;
  return CUDA_SUCCESS;
}

// MemAllocNode's work, under Runtime::mu.
static CUresult AddMemAllocNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  const CUmemPoolProps& props = p->poolProps;
  const int devices = static_cast<int>(R().visible.size());
  // Device memory only; no IPC handles (as the driver documents).
  if (props.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props.location.type != CU_MEM_LOCATION_TYPE_DEVICE || props.location.id < 0 ||
      props.location.id >= devices || props.handleTypes != CU_MEM_HANDLE_TYPE_NONE ||
      (p->accessDescCount > 0 && p->accessDescs == nullptr) ||
      p->accessDescCount > static_cast<size_t>(devices)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUdeviceptr dptr = 0;
  if (CUresult r = NewGraphAllocation(props.location.id, p->bytesize, g->id, &dptr); r != CUDA_SUCCESS)
    return r;
  CUgraphNode_st node;
  node.kind = NodeKind::kMemAlloc;
  node.alloc = *p;
  node.alloc.dptr = dptr;
  node.access.assign(p->accessDescs, p->accessDescs + p->accessDescCount);
  node.alloc.accessDescs = nullptr;  // GetParams points at the node's own copy
  if (CUresult r = AddNode(out, g, deps, n, std::move(node)); r != CUDA_SUCCESS) {
    R().graph_allocs[dptr].refs = 0;
    MaybeDropGraphAllocation(dptr);
    return r;
  }
  g->has_mem_nodes = true;
  p->dptr = dptr;
  return CUDA_SUCCESS;
}

CUresult MemAllocNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                      CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  if (out == nullptr || p == nullptr || p->bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(g, [&] { return AddMemAllocNode(out, g, deps, n, p); });
}

CUresult MemFreeNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUdeviceptr dptr) {
  return OnHandle(g, [&] {
    if (CUresult r = CheckGraphFree(dptr); r != CUDA_SUCCESS) return r;
    CUgraphNode_st node;
    node.kind = NodeKind::kMemFree;
    node.alloc.dptr = dptr;
    if (CUresult r = AddNode(out, g, deps, n, std::move(node)); r != CUDA_SUCCESS) return r;
    FindGraphAllocation(dptr)->free_node_graph_id = g->id;
    g->has_mem_nodes = true;
    return CUDA_SUCCESS;
  });
}

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

CUresult cuGraphAddMemAllocNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  return MemAllocNode(out, g, deps, n, p);
}

CUresult cuGraphAddMemFreeNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                               CUdeviceptr dptr) {
  return MemFreeNode(out, g, deps, n, dptr);
}

CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnNodeOf(NodeKind::kMemAlloc, node, [&] {
    *out = node->alloc;
    out->accessDescs = node->access.empty() ? nullptr : node->access.data();
    out->accessDescCount = node->access.size();
    return CUDA_SUCCESS;
  });
}

CUresult cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnNodeOf(NodeKind::kMemFree, node, [&] {
    *out = node->alloc.dptr;
    return CUDA_SUCCESS;
  });
}

// Returns to the device what the graph memory pool holds but no allocation
// uses: memory of executables that are not running and whose allocations are
// not live (they map it again when next launched), and idle memory.
CUresult cuDeviceGraphMemTrim(CUdevice dev) {
  return OnDevice(dev, [&](int gpu) -> CUresult {
    const int64_t now = MonotonicNs();
    for (auto& [p, ga] : R().graph_allocs) {
      if (ga.gpu != gpu || !ga.backed || ga.live) continue;
      if (ga.exec != nullptr && ga.exec->end_ns > now) continue;  // scheduled or running
      UnbackGraphAllocation(ga);
    }
    ReleaseIdleGraphMemory(gpu);
    return CUDA_SUCCESS;
  });
}

// The graph memory pool's figures: used (mapped for allocations), reserved
// (that and idle memory), and their high watermarks.
CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  return OnDevice(dev, [&](int gpu) -> CUresult {
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const GraphMemPool& pool = R().graph_pool[gpu];
    const std::pair<CUgraphMem_attribute, uint64_t> figures[] = {
        {CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, pool.mapped},
        {CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, pool.used_high},
        {CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, pool.mapped + pool.idle},
        {CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, pool.reserved_high},
    };
    for (const auto& [attribute, figure] : figures) {
      if (attribute != attr) continue;
      *static_cast<cuuint64_t*>(value) = figure;
      return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
  });
}

// Only the high watermarks can be set, and only to 0 (a reset: they restart
// from the current figure).
CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  return OnDevice(dev, [&](int gpu) -> CUresult {
    if (value == nullptr || *static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
    GraphMemPool& pool = R().graph_pool[gpu];
    if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) {
      pool.used_high = pool.mapped;
    } else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) {
      pool.reserved_high = pool.mapped + pool.idle;
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
