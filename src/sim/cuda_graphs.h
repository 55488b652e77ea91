// What the graph files of the simulated driver share among themselves:
// cuda_graphs.cc (building graphs), cuda_graph_exec.cc (executables),
// cuda_graph_memory.cc (memory nodes and the graph memory pool) and
// cuda_capture.cc (stream capture). The rest of the driver uses the few graph
// functions declared in cuda_internal.h.
//
// Private to src/sim. Callers hold Runtime::mu.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {

// The prologue of an entry point on one kind of node: CUDA_ERROR_INVALID_VALUE
// unless `node` is a live node of `kind`.
template <typename Body>
CUresult OnNodeOf(NodeKind kind, CUgraphNode node, Body&& body) noexcept {
  return OnHandle(node, [&]() -> CUresult { return node->kind == kind ? body() : CUDA_ERROR_INVALID_VALUE; });
}

// ----- cuda_graphs.cc -----
// Adds `node` to `g` after the `n` nodes `deps` (all of `g`); *out names it.
CUresult AddNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUgraphNode_st node);

// ----- cuda_graph_exec.cc -----
// Runs the nodes of an executable graph on stream `s`: checks that its memory
// nodes can run (unfreed allocations of an earlier launch, frees of memory
// that is not live), backs its allocations from the graph memory pools
// (CUDA_ERROR_OUT_OF_MEMORY, nothing changed, if that does not fit), then runs.
CUresult LaunchGraphOn(CUgraphExec exec, CUstream s);

// ----- cuda_graph_memory.cc -----
// The graph allocation at address `p`, or nullptr.
GraphAllocation* FindGraphAllocation(uint64_t p);
// The allocation's physical memory goes back to its pool (still charged),
// its pages to the host: contents do not outlive a mapping.
void UnbackGraphAllocation(GraphAllocation& ga);
// Drops the virtual range once no node names it and it is not live.
void MaybeDropGraphAllocation(uint64_t p);
// The allocation's lifetime ends; an executable still holding its mapping
// keeps it for its next launch.
void EndGraphAllocationLifetime(uint64_t p);
// Before a launch of `exec`: checks that its memory nodes can run, backs its
// allocations (nothing changes if that fails) and, with auto-free on launch,
// ends the lifetime of its allocations still live from the last launch.
CUresult PrepareGraphMemory(CUgraphExec exec);
// Maps physical memory for every allocation of `exec` (cuGraphUpload).
CUresult BackGraphAllocations(CUgraphExec exec);
// Memory alloc and free nodes (cuGraphAddMemAllocNode, cuGraphAddMemFreeNode,
// cuGraphAddNode); an alloc node's parameters receive its address.
CUresult MemAllocNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                      CUDA_MEM_ALLOC_NODE_PARAMS* p);
CUresult MemFreeNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUdeviceptr dptr);

}  // namespace tessera::sim::cuda
