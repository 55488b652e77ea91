// Graphs as they are built: creation and destruction, nodes of every kind
// (kernel, memset, memcpy, host, empty, event record and wait; memory alloc
// and free nodes come from cuda_graph_memory.cc), dependencies, queries, node
// removal and cloning. Instantiating and running them is cuda_graph_exec.cc.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "sim/cuda_graphs.h"

namespace tessera::sim::cuda {

CUresult AddNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUgraphNode_st node) {
  if (out == nullptr || (n > 0 && deps == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(g, [&] {
    auto p = std::make_unique<CUgraphNode_st>(std::move(node));
    p->magic = CUgraphNode_st::kMagic;
    p->graph = g;
    for (size_t i = 0; i < n; ++i) {
      if (!IsLive(deps[i]) || deps[i]->graph != g) return CUDA_ERROR_INVALID_VALUE;
      p->deps.push_back(deps[i]);
    }
    *out = p.get();
    R().live.insert(p.get());
    g->nodes.push_back(std::move(p));
    return CUDA_SUCCESS;
  });
}

// A node of kind `kind` whose other fields `fill` sets.
template <typename Fill>
CUgraphNode_st NodeOf(NodeKind kind, Fill&& fill) {
  CUgraphNode_st node;
  node.kind = kind;
  fill(node);
  return node;
}

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

CUresult cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    auto* g = new CUgraph_st();
    g->id = R().next_id++;
    R().live.insert(g);
    *phGraph = g;
    return CUDA_SUCCESS;
  });
}

CUresult cuGraphDestroy(CUgraph g) {
  return OnHandle(g, [&] {
    // Live allocations of its alloc nodes stay allocated (freed elsewhere later).
    for (auto& n : g->nodes) {
      GraphAllocation* ga = n->kind == NodeKind::kMemAlloc || n->kind == NodeKind::kMemFree
                                ? FindGraphAllocation(n->alloc.dptr)
                                : nullptr;
      if (ga != nullptr && n->kind == NodeKind::kMemFree && ga->free_node_graph_id == g->id)
        ga->free_node_graph_id = 0;
      if (ga != nullptr && n->kind == NodeKind::kMemAlloc) {
        --ga->refs;
        MaybeDropGraphAllocation(n->alloc.dptr);
      }
    }
    for (auto& n : g->nodes) R().live.erase(n.get());
    DestroyHandle(g);
    return CUDA_SUCCESS;
  });
}

// Parameter values are captured now (the duration), not the pointers to them.
static CUresult KernelNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUfunction f,
                           void** params, void** extra, const CUDA_KERNEL_NODE_PARAMS& p) {
  return Entry([&]() -> CUresult {
    if (!Valid(f)) return CUDA_ERROR_INVALID_VALUE;
    return AddNode(out, g, deps, n, NodeOf(NodeKind::kKernel, [&](CUgraphNode_st& node) {
                     node.func = f;
                     node.kernel = p;
                     node.kernel.kernelParams = nullptr;
                     node.kernel.extra = nullptr;
                     node.duration_ns = KernelDurationNs(f, params, extra);
                   }));
  });
}

CUresult cuGraphAddKernelNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                 const CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUfunction f = p->func != nullptr ? p->func : static_cast<CUfunction>(p->kern);
  return KernelNode(out, g, deps, n, f, p->kernelParams, p->extra, *p);
}

CUresult cuGraphAddKernelNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                              const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS v2{};
  v2.func = p->func;
  v2.gridDimX = p->gridDimX;
  v2.gridDimY = p->gridDimY;
  v2.gridDimZ = p->gridDimZ;
  v2.blockDimX = p->blockDimX;
  v2.blockDimY = p->blockDimY;
  v2.blockDimZ = p->blockDimZ;
  v2.sharedMemBytes = p->sharedMemBytes;
  return KernelNode(out, g, deps, n, p->func, p->kernelParams, p->extra, v2);
}

CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnNodeOf(NodeKind::kKernel, node, [&] {
    *p = node->kernel;
    return CUDA_SUCCESS;
  });
}

CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnNodeOf(NodeKind::kKernel, node, [&] {
    CUfunction f = p->func != nullptr ? p->func : static_cast<CUfunction>(p->kern);
    if (!IsLive(f)) return CUDA_ERROR_INVALID_VALUE;
    node->func = f;
    node->kernel = *p;
    node->kernel.kernelParams = nullptr;
    node->kernel.extra = nullptr;
    node->duration_ns = KernelDurationNs(f, p->kernelParams, p->extra);
    return CUDA_SUCCESS;
  });
}

CUresult cuGraphAddMemsetNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                              const CUDA_MEMSET_NODE_PARAMS* p, CUcontext) {
  if (p == nullptr || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return AddNode(out, g, deps, n, NodeOf(NodeKind::kMemset, [&](CUgraphNode_st& node) { node.memset = *p; }));
}

CUresult cuGraphAddMemcpyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                              const CUDA_MEMCPY3D* p, CUcontext) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AddNode(out, g, deps, n, NodeOf(NodeKind::kMemcpy, [&](CUgraphNode_st& node) { node.memcpy = *p; }));
}

CUresult cuGraphAddHostNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                            const CUDA_HOST_NODE_PARAMS* p) {
  if (p == nullptr || p->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AddNode(out, g, deps, n, NodeOf(NodeKind::kHost, [&](CUgraphNode_st& node) { node.host = *p; }));
}

CUresult cuGraphAddEmptyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n) {
  return AddNode(out, g, deps, n, CUgraphNode_st{});
}

// An event record or wait node; the event must exist when the node is added.
static CUresult EventNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, NodeKind kind,
                          CUevent ev) {
  return Entry([&]() -> CUresult {
    if (!IsLive(ev)) return CUDA_ERROR_INVALID_VALUE;
    return AddNode(out, g, deps, n, NodeOf(kind, [&](CUgraphNode_st& node) { node.event = ev; }));
  });
}
CUresult cuGraphAddEventRecordNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                   CUevent ev) {
  return EventNode(out, g, deps, n, NodeKind::kEventRecord, ev);
}
CUresult cuGraphAddEventWaitNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUevent ev) {
  return EventNode(out, g, deps, n, NodeKind::kEventWait, ev);
}

CUresult cuGraphAddDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to, size_t n) {
  return OnHandle(g, [&] {
    for (size_t i = 0; i < n; ++i) {
      if (!IsLive(from[i]) || !IsLive(to[i]) || from[i]->graph != g || to[i]->graph != g) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      to[i]->deps.push_back(from[i]);
    }
    return CUDA_SUCCESS;
  });
}
CUresult cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                   const CUgraphEdgeData*, size_t n) {
  return cuGraphAddDependencies(g, from, to, n);
}

CUresult cuGraphGetNodes(CUgraph g, CUgraphNode* nodes, size_t* numNodes) {
  if (numNodes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(g, [&] {
    if (nodes != nullptr) {
      for (size_t i = 0; i < std::min(*numNodes, g->nodes.size()); ++i) nodes[i] = g->nodes[i].get();
    }
    *numNodes = g->nodes.size();
    return CUDA_SUCCESS;
  });
}

CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Entry([&]() -> CUresult {
    if (!IsLive(node)) return CUDA_ERROR_INVALID_VALUE;
    *type = static_cast<CUgraphNodeType>(node->kind);
    return CUDA_SUCCESS;
  });
}

// The generic form of the cuGraphAdd*Node calls.
CUresult cuGraphAddNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData*,
                           size_t n, CUgraphNodeParams* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      CUfunction f = p->kernel.func != nullptr ? p->kernel.func : static_cast<CUfunction>(p->kernel.kern);
      CUDA_KERNEL_NODE_PARAMS k{};
      k.func = f;
      k.gridDimX = p->kernel.gridDimX;
      k.gridDimY = p->kernel.gridDimY;
      k.gridDimZ = p->kernel.gridDimZ;
      k.blockDimX = p->kernel.blockDimX;
      k.blockDimY = p->kernel.blockDimY;
      k.blockDimZ = p->kernel.blockDimZ;
      k.sharedMemBytes = p->kernel.sharedMemBytes;
      return KernelNode(out, g, deps, n, f, p->kernel.kernelParams, p->kernel.extra, k);
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS m{p->memset.dst,         p->memset.pitch, p->memset.value,
                                      p->memset.elementSize, p->memset.width, p->memset.height};
      return cuGraphAddMemsetNode(out, g, deps, n, &m, nullptr);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return cuGraphAddMemcpyNode(out, g, deps, n, &p->memcpy.copyParams, nullptr);
    case CU_GRAPH_NODE_TYPE_HOST: {
      const CUDA_HOST_NODE_PARAMS h{p->host.fn, p->host.userData};
      return cuGraphAddHostNode(out, g, deps, n, &h);
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return EventNode(out, g, deps, n, NodeKind::kEventRecord, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return EventNode(out, g, deps, n, NodeKind::kEventWait, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return cuGraphAddEmptyNode(out, g, deps, n);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS_v2) == sizeof(CUDA_MEM_ALLOC_NODE_PARAMS_v1));
      CUDA_MEM_ALLOC_NODE_PARAMS v1{};
      std::memcpy(&v1, &p->alloc, sizeof(v1));
      CUresult r = MemAllocNode(out, g, deps, n, &v1);
      if (r == CUDA_SUCCESS) p->alloc.dptr = v1.dptr;
      return r;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return MemFreeNode(out, g, deps, n, p->free.dptr);
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}
CUresult cuGraphAddNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                        CUgraphNodeParams* p) {
  return cuGraphAddNode_v2(out, g, deps, nullptr, n, p);
}

CUresult cuGraphGetRootNodes(CUgraph g, CUgraphNode* roots, size_t* numRoots) {
  if (numRoots == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(g, [&] {
    size_t n = 0;
    for (auto& node : g->nodes) {
      if (!node->deps.empty()) continue;
      if (roots != nullptr && n < *numRoots) roots[n] = node.get();
      ++n;
    }
    *numRoots = n;
    return CUDA_SUCCESS;
  });
}

CUresult cuGraphGetEdges_v2(CUgraph g, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edgeData,
                            size_t* numEdges) {
  if (numEdges == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(g, [&] {
    size_t n = 0;
    for (auto& node : g->nodes) {
      for (CUgraphNode d : node->deps) {
        if (from != nullptr && to != nullptr && n < *numEdges) {
          from[n] = d;
          to[n] = node.get();
        }
        ++n;
      }
    }
    *numEdges = n;
    if (edgeData != nullptr) std::memset(edgeData, 0, n * sizeof(*edgeData));
    return CUDA_SUCCESS;
  });
}
CUresult cuGraphGetEdges(CUgraph g, CUgraphNode* from, CUgraphNode* to, size_t* numEdges) {
  return cuGraphGetEdges_v2(g, from, to, nullptr, numEdges);
}

// A node's dependencies, or (`dependents`) the nodes that depend on it.
static CUresult NodeDeps(CUgraphNode node, CUgraphNode* out, size_t* num, bool dependents) {
  if (num == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(node, [&] {
    std::vector<CUgraphNode> list;
    if (dependents) {
      for (auto& other : node->graph->nodes) {
        for (CUgraphNode d : other->deps) {
          if (d == node) list.push_back(other.get());
        }
      }
    } else {
      list = node->deps;
    }
    if (out != nullptr) {
      for (size_t i = 0; i < std::min(*num, list.size()); ++i) out[i] = list[i];
    }
    *num = list.size();
    return CUDA_SUCCESS;
  });
}
CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* deps, size_t* num) {
  return NodeDeps(node, deps, num, false);
}
CUresult cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData*, size_t* num) {
  return NodeDeps(node, deps, num, false);
}
CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode* deps, size_t* num) {
  return NodeDeps(node, deps, num, true);
}
CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData*, size_t* num) {
  return NodeDeps(node, deps, num, true);
}

CUresult cuGraphDestroyNode(CUgraphNode node) {
  return OnHandle(node, [&] {
    CUgraph g = node->graph;
    if (g->has_mem_nodes) return CUDA_ERROR_NOT_SUPPORTED;  // nodes of such graphs cannot be removed
    for (auto& other : g->nodes) {
      auto& d = other->deps;
      d.erase(std::remove(d.begin(), d.end(), node), d.end());
    }
    R().live.erase(node);
    auto& v = g->nodes;
    v.erase(std::remove_if(v.begin(), v.end(), [&](const auto& p) { return p.get() == node; }), v.end());
    return CUDA_SUCCESS;
  });
}

CUresult cuGraphClone(CUgraph* clone, CUgraph original) {
  if (clone == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(original, [&] {
    if (original->has_mem_nodes) return CUDA_ERROR_NOT_SUPPORTED;  // not clonable
    auto g = std::make_unique<CUgraph_st>();
    g->id = R().next_id++;
    std::map<CUgraphNode, CUgraphNode> map;
    for (auto& n : original->nodes) {
      auto copy = std::make_unique<CUgraphNode_st>(*n);
      copy->graph = g.get();
      map[n.get()] = copy.get();
      g->nodes.push_back(std::move(copy));
    }
    for (auto& n : g->nodes) {
      for (CUgraphNode& d : n->deps) d = map[d];
      R().live.insert(n.get());
    }
    R().live.insert(g.get());
    *clone = g.release();
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
