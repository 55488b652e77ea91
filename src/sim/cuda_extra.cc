// Arrays, virtual memory management, stream-ordered allocation and pools, IPC,
// graphs and stream capture of the simulated driver.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <set>

#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {
namespace {

std::vector<CUmemoryPool>& Pools() {
  static auto* pools = new std::vector<CUmemoryPool>();
  return *pools;
}

CUresult TrimPool(CUmemoryPool pool, uint64_t keep) {
  while (pool->reserved_bytes > keep && !pool->cached.empty()) {
    auto it = pool->cached.begin();
    Allocation* a = FindAllocation(it->second);
    const uint64_t charged = a ? a->charged : 0;
    pool->cached.erase(it);
    if (a != nullptr) {
      a->kind = AllocKind::kDevice;  // hand back as a plain allocation
      FreeDevice(a->base);
    }
    pool->reserved_bytes -= std::min(pool->reserved_bytes, charged);
  }
  return CUDA_SUCCESS;
}

}  // namespace

void TrimPoolsOnSync() {
  for (CUmemoryPool p : Pools()) {
    if (IsLive(p) && p->reserved_bytes > p->release_threshold) TrimPool(p, p->release_threshold);
  }
}

CUresult CaptureNode(CUstream s, CUgraphNode_st node) {
  CUgraph g = s->capture_graph;
  if (!IsLive(g)) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  auto n = std::make_unique<CUgraphNode_st>(std::move(node));
  n->magic = kNodeMagic;
  n->graph = g;
  n->deps = s->capture_deps;
  CUgraphNode raw = n.get();
  R().live.insert(raw);
  g->nodes.push_back(std::move(n));
  s->capture_deps = {raw};
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Graph memory (see docs/sim.md): graph allocations have fixed virtual ranges;
// their physical memory comes from a per-GPU graph memory pool when an
// executable that allocates them is uploaded or launched, stays mapped for
// that executable across launches (also after the allocation is freed), and
// goes back to the pool's idle reserve when the executable is destroyed or the
// pool trimmed. Idle memory stays charged to the device until
// cuDeviceGraphMemTrim returns it.
// ---------------------------------------------------------------------------
namespace {

GraphAllocation* FindGraphAllocation(uint64_t p) {
  auto it = R().graph_allocs.find(p);
  return it == R().graph_allocs.end() ? nullptr : &it->second;
}

void NoteGraphPoolHighs(GraphMemPool& pool) {
  pool.used_high = std::max(pool.used_high, pool.mapped);
  pool.reserved_high = std::max(pool.reserved_high, pool.mapped + pool.idle);
}

// The allocation's physical memory goes back to its pool (still charged),
// its pages to the host: contents do not outlive a mapping.
void UnbackGraphAllocation(GraphAllocation& ga) {
  if (!ga.backed) return;
  GraphMemPool& pool = R().graph_pool[ga.gpu];
  pool.mapped -= std::min(pool.mapped, ga.charge);
  pool.idle += ga.charge;
  ga.backed = false;
  ga.exec = nullptr;
  R().heaps[ga.gpu].Discard(ga.heap_off, ga.charge);
}

// Drops the virtual range once no node names it and it is not live.
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

// The allocation's lifetime ends; an executable still holding its mapping
// keeps it for its next launch.
void EndGraphAllocationLifetime(uint64_t p) {
  GraphAllocation* ga = FindGraphAllocation(p);
  if (ga == nullptr) return;
  ga->live = false;
  if (ga->exec == nullptr) UnbackGraphAllocation(*ga);
  MaybeDropGraphAllocation(p);
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

CUresult LaunchGraphOn(CUgraphExec exec, CUstream s) {
  Runtime& rt = R();
  if (CUresult r = CheckGraphMemoryNodes(exec); r != CUDA_SUCCESS) return r;
  if (CUresult r = BackGraphAllocations(exec); r != CUDA_SUCCESS) return r;
  if (exec->has_mem_nodes && (exec->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)) {
    for (const CUgraphNode_st& n : exec->nodes) {
      GraphAllocation* ga = n.kind == NodeKind::kMemAlloc ? FindGraphAllocation(n.alloc.dptr) : nullptr;
      if (ga != nullptr && ga->live) EndGraphAllocationLifetime(n.alloc.dptr);
    }
  }
  for (CUgraphNode_st& n : exec->nodes) {
    switch (n.kind) {
      case NodeKind::kKernel: {
        StateLock lock(*rt.state);
        auto [start, end] =
            rt.state->BookKernelLocked(s->ctx->gpu, rt.pid, StreamReadyNs(s),
                                       static_cast<int64_t>(n.duration_ns), rt.gpu_gi[s->ctx->gpu]);
        (void)start;
        s->last_end_ns = end;
        break;
      }
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

}  // namespace tessera::sim::cuda

using namespace tessera::sim;
using namespace tessera::sim::cuda;

#define LOCKED std::lock_guard<std::recursive_mutex> lock_(R().mu)

namespace {

size_t FormatBytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 4;
  }
}

CUresult ValidArray(CUarray a) {
  return IsLive(a) && a->magic == kArrayMagic ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// Fills the geometry of an array (or mip level) from its descriptor.
CUresult Geometry(CUarray_st* a, const CUDA_ARRAY3D_DESCRIPTOR& d) {
  if (d.Width == 0 || (d.NumChannels != 1 && d.NumChannels != 2 && d.NumChannels != 4)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  a->desc = d;
  a->elem_bytes = FormatBytes(d.Format) * d.NumChannels;
  a->row_bytes = d.Width * a->elem_bytes;
  a->height = std::max<size_t>(d.Height, 1);
  return CUDA_SUCCESS;
}

size_t ArrayBytes(const CUarray_st& a) {
  return a.row_bytes * a.height * std::max<size_t>(a.desc.Depth, 1);
}

CUresult CreateArray(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR& d) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  LOCKED;
  int gpu;
  CUcontext ctx;
  if (CUresult r = CurrentGpu(&gpu, &ctx); r != CUDA_SUCCESS) return r;
  auto a = std::make_unique<CUarray_st>();
  if (CUresult r = Geometry(a.get(), d); r != CUDA_SUCCESS) return r;
  if (CUresult r = AllocDevice(gpu, ArrayBytes(*a), AllocKind::kArray, ctx, &a->storage, 512);
      r != CUDA_SUCCESS) {
    return r;
  }
  R().live.insert(a.get());
  *out = a.release();
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

// ----- arrays -----
CUresult cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* p) {
  return Guard([&]() -> CUresult {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d{};
    d.Width = p->Width;
    d.Height = p->Height;
    d.Depth = 0;
    d.Format = p->Format;
    d.NumChannels = p->NumChannels;
    return CreateArray(pHandle, d);
  });
}

CUresult cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* p) {
  return Guard([&]() -> CUresult {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return CreateArray(pHandle, *p);
  });
}

CUresult cuArrayDestroy(CUarray a) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (CUresult r = ValidArray(a); r != CUDA_SUCCESS) return r;
    if (!a->owned) return CUDA_ERROR_INVALID_HANDLE;  // a mipmap level
    FreeDevice(a->storage);
    R().live.erase(a);
    a->magic = 0;
    delete a;
    return CUDA_SUCCESS;
  });
}

CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* d, CUarray a) {
  return Guard([&]() -> CUresult {
    if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = ValidArray(a); r != CUDA_SUCCESS) return r;
    d->Width = a->desc.Width;
    d->Height = a->desc.Height;
    d->Format = a->desc.Format;
    d->NumChannels = a->desc.NumChannels;
    return CUDA_SUCCESS;
  });
}

CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* d, CUarray a) {
  return Guard([&]() -> CUresult {
    if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = ValidArray(a); r != CUDA_SUCCESS) return r;
    *d = a->desc;
    return CUDA_SUCCESS;
  });
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                unsigned int numMipmapLevels) {
  return Guard([&]() -> CUresult {
    if (pHandle == nullptr || desc == nullptr || numMipmapLevels == 0) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    CUcontext ctx;
    if (CUresult r = CurrentGpu(&gpu, &ctx); r != CUDA_SUCCESS) return r;
    auto m = std::make_unique<CUmipmappedArray_st>();
    m->desc = *desc;
    CUDA_ARRAY3D_DESCRIPTOR level = *desc;
    size_t total = 0;
    for (unsigned i = 0; i < numMipmapLevels; ++i) {
      auto a = std::make_unique<CUarray_st>();
      if (CUresult r = Geometry(a.get(), level); r != CUDA_SUCCESS) return r;
      a->owned = false;
      a->storage = total;  // offset for now
      total += (ArrayBytes(*a) + 511) / 512 * 512;
      m->levels.push_back(std::move(a));
      level.Width = std::max<size_t>(level.Width / 2, 1);
      if (level.Height > 0) level.Height = std::max<size_t>(level.Height / 2, 1);
      if (level.Depth > 0) level.Depth = std::max<size_t>(level.Depth / 2, 1);
    }
    if (CUresult r = AllocDevice(gpu, total, AllocKind::kArray, ctx, &m->storage, 512); r != CUDA_SUCCESS) {
      return r;
    }
    for (auto& a : m->levels) {
      a->storage += m->storage;
      R().live.insert(a.get());
    }
    R().live.insert(m.get());
    *pHandle = m.release();
    return CUDA_SUCCESS;
  });
}

CUresult cuMipmappedArrayGetLevel(CUarray* pLevelArray, CUmipmappedArray m, unsigned int level) {
  return Guard([&]() -> CUresult {
    if (pLevelArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(m) || m->magic != kMipmapMagic) return CUDA_ERROR_INVALID_HANDLE;
    if (level >= m->levels.size()) return CUDA_ERROR_INVALID_VALUE;
    *pLevelArray = m->levels[level].get();
    return CUDA_SUCCESS;
  });
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray m) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (!IsLive(m) || m->magic != kMipmapMagic) return CUDA_ERROR_INVALID_HANDLE;
    for (auto& a : m->levels) R().live.erase(a.get());
    FreeDevice(m->storage);
    R().live.erase(m);
    m->magic = 0;
    delete m;
    return CUDA_SUCCESS;
  });
}

// What an array costs on the device: what the simulator charged for it.
CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUarray a, CUdevice device) {
  (void)device;
  return Guard([&]() -> CUresult {
    if (req == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = ValidArray(a); r != CUDA_SUCCESS) return r;
    std::memset(req, 0, sizeof(*req));
    const Allocation* alloc = FindAllocation(a->storage);
    req->size = alloc != nullptr && a->owned ? alloc->charged : ArrayBytes(*a);
    req->alignment = 512;
    return CUDA_SUCCESS;
  });
}

CUresult cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUmipmappedArray m,
                                               CUdevice device) {
  (void)device;
  return Guard([&]() -> CUresult {
    if (req == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(m) || m->magic != kMipmapMagic) return CUDA_ERROR_INVALID_HANDLE;
    std::memset(req, 0, sizeof(*req));
    const Allocation* alloc = FindAllocation(m->storage);
    req->size = alloc != nullptr ? alloc->charged : 0;
    req->alignment = 512;
    return CUDA_SUCCESS;
  });
}

// ----- virtual memory management -----
CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  (void)option;
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kVmmGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  (void)flags;
  return Guard([&]() -> CUresult {
    if (handle == nullptr || prop == nullptr || size == 0 || size % kVmmGranularity != 0 ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    Runtime& rt = R();
    const int dev = prop->location.id;
    if (dev < 0 || dev >= static_cast<int>(rt.visible.size())) return CUDA_ERROR_INVALID_DEVICE;
    const int gpu = rt.visible[dev];
    DeviceHeap& heap = rt.heaps[gpu];
    if (!heap.EnsureMapped(rt.state->file()->gpus[gpu].total_bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (CUresult r = ChargeDevice(gpu, size); r != CUDA_SUCCESS) return r;
    const uint64_t off = heap.Allocate(size, kVmmGranularity);
    if (off == UINT64_MAX) {
      UnchargeDevice(gpu, size);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    const unsigned long long id = rt.next_id++;
    VmmHandle h;
    h.gpu = gpu;
    h.size = size;
    h.heap_off = off;
    h.prop = *prop;
    rt.vmm_handles[id] = h;
    *handle = id;
    return CUDA_SUCCESS;
  });
}

static void FreeVmmHandle(unsigned long long id) {
  Runtime& rt = R();
  auto it = rt.vmm_handles.find(id);
  if (it == rt.vmm_handles.end()) return;
  rt.heaps[it->second.gpu].Free(it->second.heap_off, it->second.size);
  UnchargeDevice(it->second.gpu, it->second.size);
  rt.vmm_handles.erase(it);
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  return Guard([&]() -> CUresult {
    LOCKED;
    auto it = R().vmm_handles.find(handle);
    if (it == R().vmm_handles.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
    // Memory goes back once no mapping uses it any more, as with the real driver.
    it->second.released = true;
    if (it->second.mappings == 0) FreeVmmHandle(handle);
    return CUDA_SUCCESS;
  });
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  (void)flags;
  return Guard([&]() -> CUresult {
    if (ptr == nullptr || size == 0 || size % kVmmGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    const size_t align = std::max<size_t>(alignment, kVmmGranularity);
    const size_t len = size + align;
    void* hint = addr != 0 ? reinterpret_cast<void*>(addr) : nullptr;
    void* p = mmap(hint, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t base = (reinterpret_cast<uint64_t>(p) + align - 1) / align * align;
    // Give back the slack around the aligned range.
    if (base > reinterpret_cast<uint64_t>(p)) munmap(p, base - reinterpret_cast<uint64_t>(p));
    const uint64_t end = reinterpret_cast<uint64_t>(p) + len;
    if (end > base + size) munmap(reinterpret_cast<void*>(base + size), end - (base + size));
    R().vmm_reservations[base] = VmmReservation{base, size};
    *ptr = base;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return Guard([&]() -> CUresult {
    LOCKED;
    auto it = R().vmm_reservations.find(ptr);
    if (it == R().vmm_reservations.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
    munmap(reinterpret_cast<void*>(ptr), size);
    R().vmm_reservations.erase(it);
    return CUDA_SUCCESS;
  });
}

static bool InReservation(uint64_t p, uint64_t n) {
  auto& res = R().vmm_reservations;
  auto it = res.upper_bound(p);
  if (it == res.begin()) return false;
  --it;
  return p >= it->second.base && p + n <= it->second.base + it->second.size;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  (void)flags;
  return Guard([&]() -> CUresult {
    LOCKED;
    Runtime& rt = R();
    auto it = rt.vmm_handles.find(handle);
    if (it == rt.vmm_handles.end() || it->second.released) return CUDA_ERROR_INVALID_HANDLE;
    VmmHandle& h = it->second;
    if (size == 0 || offset + size > h.size || ptr % kVmmGranularity != 0 || !InReservation(ptr, size)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (FindAllocation(ptr) != nullptr || rt.vmm_mappings.count(ptr)) return CUDA_ERROR_ALREADY_MAPPED;
    // Mapped without access until cuMemSetAccess, as on a real device.
    void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                   rt.heaps[h.gpu].fd(), static_cast<off_t>(h.heap_off + offset));
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    ++h.mappings;
    rt.vmm_mappings[ptr] = {handle, size};
    Allocation a;
    a.base = ptr;
    a.size = size;
    a.gpu = h.gpu;
    a.kind = AllocKind::kVmm;
    rt.allocs[ptr] = a;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return Guard([&]() -> CUresult {
    LOCKED;
    Runtime& rt = R();
    auto it = rt.vmm_mappings.find(ptr);
    if (it == rt.vmm_mappings.end() || it->second.second != size) return CUDA_ERROR_INVALID_VALUE;
    mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    const unsigned long long id = it->second.first;
    rt.vmm_mappings.erase(it);
    rt.allocs.erase(ptr);
    auto h = rt.vmm_handles.find(id);
    if (h != rt.vmm_handles.end() && --h->second.mappings == 0 && h->second.released) {
      FreeVmmHandle(id);
    }
    return CUDA_SUCCESS;
  });
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  return Guard([&]() -> CUresult {
    if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!InReservation(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
    int prot = PROT_NONE;
    for (size_t i = 0; i < count; ++i) {
      if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        prot = PROT_READ | PROT_WRITE;
      else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
        prot = PROT_READ;
    }
    // Only mapped ranges can be given access.
    for (uint64_t p = ptr; p < ptr + size;) {
      auto it = R().vmm_mappings.find(p);
      if (it == R().vmm_mappings.end()) return CUDA_ERROR_INVALID_VALUE;
      p += it->second.second;
    }
    if (mprotect(reinterpret_cast<void*>(ptr), size, prot) != 0) return CUDA_ERROR_INVALID_VALUE;
    for (uint64_t p = ptr; p < ptr + size; p += R().vmm_mappings[p].second) {
      R().allocs[p].flags = static_cast<unsigned>(prot);
    }
    return CUDA_SUCCESS;
  });
}

CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  (void)location;
  return Guard([&]() -> CUresult {
    if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    Allocation* a = FindAllocation(ptr);
    if (a == nullptr || a->kind != AllocKind::kVmm) return CUDA_ERROR_INVALID_VALUE;
    *flags = (a->flags & PROT_WRITE)  ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
             : (a->flags & PROT_READ) ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                      : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                CUmemGenericAllocationHandle handle) {
  return Guard([&]() -> CUresult {
    if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    auto it = R().vmm_handles.find(handle);
    if (it == R().vmm_handles.end()) return CUDA_ERROR_INVALID_VALUE;
    *prop = it->second.prop;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  return Guard([&]() -> CUresult {
    if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    const uint64_t p = reinterpret_cast<uint64_t>(addr);
    for (auto& [va, m] : R().vmm_mappings) {
      if (p >= va && p < va + m.second) {
        *handle = m.first;
        return CUDA_SUCCESS;
      }
    }
    return CUDA_ERROR_INVALID_VALUE;
  });
}

// ----- stream-ordered allocation, pools -----
static CUmemoryPool DefaultPool(int dev, int gpu) {
  Runtime& rt = R();
  if (rt.default_pool[gpu] == nullptr) {
    auto* p = new CUmemPoolHandle_st();
    p->device = dev;
    p->gpu = gpu;
    p->is_default = true;
    rt.live.insert(p);
    Pools().push_back(p);
    rt.default_pool[gpu] = p;
    rt.current_pool[gpu] = p;
  }
  return rt.current_pool[gpu] != nullptr ? rt.current_pool[gpu] : rt.default_pool[gpu];
}

static CUresult PoolAlloc(CUdeviceptr* dptr, size_t size, CUmemoryPool pool, CUstream h, bool ptds) {
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  if (pool == nullptr) {
    DefaultPool(s->ctx->device, s->ctx->gpu);
    pool = R().current_pool[s->ctx->gpu];
  }
  if (!IsLive(pool) || pool->magic != kPoolMagic) return CUDA_ERROR_INVALID_HANDLE;
  // Captured: an alloc node owned by the graph, with the pool's location.
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return CaptureMemAlloc(s, pool->device, size, dptr);
  const uint64_t want = (size + 4095) & ~uint64_t{4095};
  // Reuse a cached block that fits without wasting more than half of it.
  auto it = pool->cached.lower_bound(want);
  if (it != pool->cached.end() && it->first <= want * 2) {
    *dptr = it->second;
    pool->cached.erase(it);
    Allocation* a = FindAllocation(*dptr);
    a->size = size;
    pool->used_bytes += a->charged;
  } else {
    if (CUresult r = AllocDevice(pool->gpu, size, AllocKind::kPool, s->ctx, dptr, 512); r != CUDA_SUCCESS) {
      // Out of memory: give back what the pools cache, then try once more.
      for (CUmemoryPool p : Pools()) {
        if (IsLive(p)) TrimPool(p, 0);
      }
      if (AllocDevice(pool->gpu, size, AllocKind::kPool, s->ctx, dptr, 512) != CUDA_SUCCESS) return r;
    }
    Allocation* a = FindAllocation(*dptr);
    a->pool = pool;
    pool->reserved_bytes += a->charged;
    pool->used_bytes += a->charged;
  }
  pool->reserved_high = std::max(pool->reserved_high, pool->reserved_bytes);
  pool->used_high = std::max(pool->used_high, pool->used_bytes);
  s->last_end_ns = std::max(StreamReadyNs(s), MonotonicNs());
  return CUDA_SUCCESS;
}

static CUresult PoolFree(CUdeviceptr p, CUstream h, bool ptds) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return CaptureMemFree(s, p);
  auto it = R().allocs.find(p);
  if (it == R().allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  Allocation& a = it->second;
  if (a.kind == AllocKind::kPool && IsLive(a.pool)) {
    // Back to the pool (still reserved); released by trimming.
    for (auto& [sz, ptr] : a.pool->cached) {
      if (ptr == p) return CUDA_ERROR_INVALID_VALUE;  // double free
    }
    a.pool->used_bytes -= std::min(a.pool->used_bytes, a.charged);
    a.pool->cached.emplace(a.heap_len, p);
    return CUDA_SUCCESS;
  }
  return FreeDevice(p);
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream s) {
  return Guard([&]() -> CUresult { return PoolAlloc(dptr, bytesize, nullptr, s, false); });
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream s) {
  return Guard([&]() -> CUresult { return PoolAlloc(dptr, bytesize, nullptr, s, true); });
}
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream s) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return PoolAlloc(dptr, bytesize, pool, s, false); });
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream s) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return PoolAlloc(dptr, bytesize, pool, s, true); });
}
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) {
  return Guard([&]() -> CUresult { return PoolFree(dptr, s, false); });
}
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
  return Guard([&]() -> CUresult { return PoolFree(dptr, s, true); });
}

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  return Guard([&]() -> CUresult {
    if (pool == nullptr || props == nullptr || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    const int dev = props->location.id;
    if (dev < 0 || dev >= static_cast<int>(R().visible.size())) return CUDA_ERROR_INVALID_DEVICE;
    auto* p = new CUmemPoolHandle_st();
    p->device = dev;
    p->gpu = R().visible[dev];
    R().live.insert(p);
    Pools().push_back(p);
    *pool = p;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (!IsLive(pool) || pool->magic != kPoolMagic || pool->is_default) return CUDA_ERROR_INVALID_VALUE;
    TrimPool(pool, 0);
    // Blocks still allocated from it stay valid and are freed as plain memory.
    for (auto& [base, a] : R().allocs) {
      if (a.pool == pool) {
        a.pool = nullptr;
        a.kind = AllocKind::kDevice;
      }
    }
    for (int g = 0; g < kMaxGpus; ++g) {
      if (R().current_pool[g] == pool) R().current_pool[g] = R().default_pool[g];
    }
    auto& v = Pools();
    v.erase(std::remove(v.begin(), v.end(), pool), v.end());
    R().live.erase(pool);
    pool->magic = 0;
    delete pool;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (!IsLive(pool) || pool->magic != kPoolMagic) return CUDA_ERROR_INVALID_VALUE;
    return TrimPool(pool, minBytesToKeep);
  });
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  return Guard([&]() -> CUresult {
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(pool) || pool->magic != kPoolMagic) return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
      case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        pool->release_threshold = *static_cast<cuuint64_t*>(value);
        break;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        pool->reserved_high = pool->reserved_bytes;
        break;
      case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        pool->used_high = pool->used_bytes;
        break;
      case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
  });
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  return Guard([&]() -> CUresult {
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(pool) || pool->magic != kPoolMagic) return CUDA_ERROR_INVALID_VALUE;
    auto* u64 = static_cast<cuuint64_t*>(value);
    switch (attr) {
      case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *u64 = pool->release_threshold;
        break;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        *u64 = pool->reserved_bytes;
        break;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        *u64 = pool->reserved_high;
        break;
      case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *u64 = pool->used_bytes;
        break;
      case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *u64 = pool->used_high;
        break;
      case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *static_cast<int*>(value) = 1;
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (dev < 0 || dev >= static_cast<int>(R().visible.size())) return CUDA_ERROR_INVALID_DEVICE;
    const int gpu = R().visible[dev];
    DefaultPool(dev, gpu);
    *pool = R().default_pool[gpu];
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (dev < 0 || dev >= static_cast<int>(R().visible.size())) return CUDA_ERROR_INVALID_DEVICE;
    *pool = DefaultPool(dev, R().visible[dev]);
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (dev < 0 || dev >= static_cast<int>(R().visible.size())) return CUDA_ERROR_INVALID_DEVICE;
    if (!IsLive(pool) || pool->magic != kPoolMagic || pool->gpu != R().visible[dev]) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    DefaultPool(dev, pool->gpu);
    R().current_pool[pool->gpu] = pool;
    return CUDA_SUCCESS;
  });
}

// ----- IPC -----
namespace {

// The payload of a CUipcMemHandle (64 opaque bytes in the real ABI).
struct IpcPayload {
  uint32_t magic;
  int32_t pid;
  uint64_t start_time;
  uint32_t gpu;
  int32_t fd;  // the owner's heap memfd
  uint64_t heap_off;
  uint64_t heap_len;
  uint64_t size;
};
static_assert(sizeof(IpcPayload) <= sizeof(CUipcMemHandle));
constexpr uint32_t kIpcMagic = 0x49504331;  // "IPC1"

}  // namespace

CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  return Guard([&]() -> CUresult {
    if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    Allocation* a = FindAllocation(dptr);
    if (a == nullptr || a->kind != AllocKind::kDevice || a->heap_len == 0) return CUDA_ERROR_INVALID_VALUE;
    IpcPayload p{};
    p.magic = kIpcMagic;
    p.pid = R().pid;
    p.start_time = ProcessStartTime(R().pid);
    p.gpu = static_cast<uint32_t>(a->gpu);
    p.fd = R().heaps[a->gpu].fd();
    p.heap_off = a->heap_off;
    p.heap_len = a->heap_len;
    p.size = a->size;
    std::memset(handle, 0, sizeof(*handle));
    std::memcpy(handle->reserved, &p, sizeof(p));
    return CUDA_SUCCESS;
  });
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  (void)Flags;
  return Guard([&]() -> CUresult {
    if (pdptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    CUcontext ctx = CurrentContext();
    if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    IpcPayload p;
    std::memcpy(&p, handle.reserved, sizeof(p));
    if (p.magic != kIpcMagic) return CUDA_ERROR_INVALID_VALUE;
    if (p.pid == R().pid) return CUDA_ERROR_INVALID_CONTEXT;  // not in the exporting process
    if (!ProcessAlive(p.pid, p.start_time)) return CUDA_ERROR_INVALID_VALUE;
    char path[512];
    std::snprintf(path, sizeof(path), "%s/%d/fd/%d", ProcRoot(), p.pid, p.fd);
    const int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
    void* m = mmap(nullptr, p.heap_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd,
                   static_cast<off_t>(p.heap_off));
    close(fd);
    if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    Allocation a;
    a.base = reinterpret_cast<uint64_t>(m);
    a.size = p.size;
    a.gpu = static_cast<int>(p.gpu);
    a.kind = AllocKind::kIpc;
    a.ctx = ctx;
    a.ipc_map = m;
    a.ipc_map_len = p.heap_len;
    R().allocs[a.base] = a;
    *pdptr = a.base;
    return CUDA_SUCCESS;
  });
}
CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  return Guard([&]() -> CUresult {
    LOCKED;
    auto it = R().allocs.find(dptr);
    if (it == R().allocs.end() || it->second.kind != AllocKind::kIpc) return CUDA_ERROR_INVALID_VALUE;
    munmap(it->second.ipc_map, it->second.ipc_map_len);
    R().allocs.erase(it);
    return CUDA_SUCCESS;
  });
}

CUresult cuIpcGetEventHandle(CUipcEventHandle* pHandle, CUevent event) {
  (void)pHandle;
  (void)event;
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuIpcOpenEventHandle(CUevent* phEvent, CUipcEventHandle handle) {
  (void)phEvent;
  (void)handle;
  return CUDA_ERROR_NOT_SUPPORTED;
}

// ----- graphs -----
static CUresult ValidGraph(CUgraph g) {
  return IsLive(g) && g->magic == kGraphMagic ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult AddNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUgraphNode_st node) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = ValidGraph(g); r != CUDA_SUCCESS) return r;
  if (n > 0 && deps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto p = std::make_unique<CUgraphNode_st>(std::move(node));
  p->magic = kNodeMagic;
  p->graph = g;
  for (size_t i = 0; i < n; ++i) {
    if (!IsLive(deps[i]) || deps[i]->graph != g) return CUDA_ERROR_INVALID_VALUE;
    p->deps.push_back(deps[i]);
  }
  *out = p.get();
  R().live.insert(p.get());
  g->nodes.push_back(std::move(p));
  return CUDA_SUCCESS;
}

CUresult cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  return Guard([&]() -> CUresult {
    if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    auto* g = new CUgraph_st();
    g->id = R().next_id++;
    R().live.insert(g);
    *phGraph = g;
    return CUDA_SUCCESS;
  });
}

CUresult cuGraphDestroy(CUgraph g) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (CUresult r = ValidGraph(g); r != CUDA_SUCCESS) return r;
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
    R().live.erase(g);
    g->magic = 0;
    delete g;
    return CUDA_SUCCESS;
  });
}

static CUresult KernelNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUfunction f,
                           void** params, void** extra, const CUDA_KERNEL_NODE_PARAMS& p) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (!IsLive(f) || f->magic != kFuncMagic) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNode_st node;
  node.kind = NodeKind::kKernel;
  node.func = f;
  node.kernel = p;
  node.kernel.kernelParams = nullptr;  // values are captured now (the duration), not pointers
  node.kernel.extra = nullptr;
  node.duration_ns = KernelDurationNs(f, params, extra);
  return AddNode(out, g, deps, n, std::move(node));
}

CUresult cuGraphAddKernelNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                 const CUDA_KERNEL_NODE_PARAMS* p) {
  return Guard([&]() -> CUresult {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUfunction f = p->func != nullptr ? p->func : static_cast<CUfunction>(p->kern);
    return KernelNode(out, g, deps, n, f, p->kernelParams, p->extra, *p);
  });
}

CUresult cuGraphAddKernelNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                              const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  return Guard([&]() -> CUresult {
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
  });
}

CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) {
  return Guard([&]() -> CUresult {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(node) || node->kind != NodeKind::kKernel) return CUDA_ERROR_INVALID_VALUE;
    *p = node->kernel;
    return CUDA_SUCCESS;
  });
}

CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  return Guard([&]() -> CUresult {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(node) || node->kind != NodeKind::kKernel) return CUDA_ERROR_INVALID_VALUE;
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
                              const CUDA_MEMSET_NODE_PARAMS* p, CUcontext ctx) {
  (void)ctx;
  return Guard([&]() -> CUresult {
    if (p == nullptr || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    LOCKED;
    CUgraphNode_st node;
    node.kind = NodeKind::kMemset;
    node.memset = *p;
    return AddNode(out, g, deps, n, std::move(node));
  });
}

CUresult cuGraphAddMemcpyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                              const CUDA_MEMCPY3D* p, CUcontext ctx) {
  (void)ctx;
  return Guard([&]() -> CUresult {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    CUgraphNode_st node;
    node.kind = NodeKind::kMemcpy;
    node.memcpy = *p;
    return AddNode(out, g, deps, n, std::move(node));
  });
}

CUresult cuGraphAddHostNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                            const CUDA_HOST_NODE_PARAMS* p) {
  return Guard([&]() -> CUresult {
    if (p == nullptr || p->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    CUgraphNode_st node;
    node.kind = NodeKind::kHost;
    node.host = *p;
    return AddNode(out, g, deps, n, std::move(node));
  });
}

CUresult cuGraphAddEmptyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n) {
  return Guard([&]() -> CUresult {
    LOCKED;
    return AddNode(out, g, deps, n, CUgraphNode_st{});
  });
}

CUresult cuGraphAddEventRecordNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                   CUevent ev) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (!IsLive(ev)) return CUDA_ERROR_INVALID_VALUE;
    CUgraphNode_st node;
    node.kind = NodeKind::kEventRecord;
    node.event = ev;
    return AddNode(out, g, deps, n, std::move(node));
  });
}

CUresult cuGraphAddEventWaitNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUevent ev) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (!IsLive(ev)) return CUDA_ERROR_INVALID_VALUE;
    CUgraphNode_st node;
    node.kind = NodeKind::kEventWait;
    node.event = ev;
    return AddNode(out, g, deps, n, std::move(node));
  });
}

// ----- graph memory nodes -----
static CUresult MemAllocNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                             CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  if (out == nullptr || p == nullptr || p->bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (CUresult r = ValidGraph(g); r != CUDA_SUCCESS) return r;
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

static CUresult MemFreeNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                            CUdeviceptr dptr) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (CUresult r = ValidGraph(g); r != CUDA_SUCCESS) return r;
  if (CUresult r = CheckGraphFree(dptr); r != CUDA_SUCCESS) return r;
  CUgraphNode_st node;
  node.kind = NodeKind::kMemFree;
  node.alloc.dptr = dptr;
  if (CUresult r = AddNode(out, g, deps, n, std::move(node)); r != CUDA_SUCCESS) return r;
  FindGraphAllocation(dptr)->free_node_graph_id = g->id;
  g->has_mem_nodes = true;
  return CUDA_SUCCESS;
}

CUresult cuGraphAddMemAllocNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  return Guard([&]() -> CUresult { return MemAllocNode(out, g, deps, n, p); });
}

CUresult cuGraphAddMemFreeNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                               CUdeviceptr dptr) {
  return Guard([&]() -> CUresult { return MemFreeNode(out, g, deps, n, dptr); });
}

CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* out) {
  return Guard([&]() -> CUresult {
    if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(node) || node->magic != kNodeMagic || node->kind != NodeKind::kMemAlloc) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *out = node->alloc;
    out->accessDescs = node->access.empty() ? nullptr : node->access.data();
    out->accessDescCount = node->access.size();
    return CUDA_SUCCESS;
  });
}

CUresult cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* out) {
  return Guard([&]() -> CUresult {
    if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(node) || node->magic != kNodeMagic || node->kind != NodeKind::kMemFree) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *out = node->alloc.dptr;
    return CUDA_SUCCESS;
  });
}

static CUresult GraphMemDevice(CUdevice dev, int* gpu) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (dev < 0 || dev >= static_cast<int>(R().visible.size())) return CUDA_ERROR_INVALID_DEVICE;
  *gpu = R().visible[dev];
  return CUDA_SUCCESS;
}

// Returns to the device what the graph memory pool holds but no allocation
// uses: memory of executables that are not running and whose allocations are
// not live (they map it again when next launched), and idle memory.
CUresult cuDeviceGraphMemTrim(CUdevice dev) {
  return Guard([&]() -> CUresult {
    LOCKED;
    int gpu;
    if (CUresult r = GraphMemDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
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

CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  return Guard([&]() -> CUresult {
    LOCKED;
    int gpu;
    if (CUresult r = GraphMemDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const GraphMemPool& pool = R().graph_pool[gpu];
    auto* out = static_cast<cuuint64_t*>(value);
    switch (attr) {
      case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
        *out = pool.mapped;
        break;
      case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
        *out = pool.used_high;
        break;
      case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
        *out = pool.mapped + pool.idle;
        break;
      case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
        *out = pool.reserved_high;
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
  });
}

// Only the high watermarks can be set, and only to 0 (a reset: they restart
// from the current figure).
CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  return Guard([&]() -> CUresult {
    LOCKED;
    int gpu;
    if (CUresult r = GraphMemDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    if (value == nullptr || *static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
    GraphMemPool& pool = R().graph_pool[gpu];
    switch (attr) {
      case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
        pool.used_high = pool.mapped;
        break;
      case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
        pool.reserved_high = pool.mapped + pool.idle;
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
  });
}

static CUresult AddDeps(CUgraph g, const CUgraphNode* from, const CUgraphNode* to, size_t n) {
  LOCKED;
  if (CUresult r = ValidGraph(g); r != CUDA_SUCCESS) return r;
  for (size_t i = 0; i < n; ++i) {
    if (!IsLive(from[i]) || !IsLive(to[i]) || from[i]->graph != g || to[i]->graph != g) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    to[i]->deps.push_back(from[i]);
  }
  return CUDA_SUCCESS;
}
CUresult cuGraphAddDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to, size_t n) {
  return Guard([&]() -> CUresult { return AddDeps(g, from, to, n); });
}
CUresult cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                   const CUgraphEdgeData* edgeData, size_t n) {
  (void)edgeData;
  return Guard([&]() -> CUresult { return AddDeps(g, from, to, n); });
}

CUresult cuGraphGetNodes(CUgraph g, CUgraphNode* nodes, size_t* numNodes) {
  return Guard([&]() -> CUresult {
    if (numNodes == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = ValidGraph(g); r != CUDA_SUCCESS) return r;
    if (nodes != nullptr) {
      for (size_t i = 0; i < std::min(*numNodes, g->nodes.size()); ++i) nodes[i] = g->nodes[i].get();
    }
    *numNodes = g->nodes.size();
    return CUDA_SUCCESS;
  });
}

CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  return Guard([&]() -> CUresult {
    if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(node)) return CUDA_ERROR_INVALID_VALUE;
    switch (node->kind) {
      case NodeKind::kKernel:
        *type = CU_GRAPH_NODE_TYPE_KERNEL;
        break;
      case NodeKind::kMemset:
        *type = CU_GRAPH_NODE_TYPE_MEMSET;
        break;
      case NodeKind::kMemcpy:
        *type = CU_GRAPH_NODE_TYPE_MEMCPY;
        break;
      case NodeKind::kHost:
        *type = CU_GRAPH_NODE_TYPE_HOST;
        break;
      case NodeKind::kEventRecord:
        *type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
        break;
      case NodeKind::kEventWait:
        *type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
        break;
      case NodeKind::kEmpty:
        *type = CU_GRAPH_NODE_TYPE_EMPTY;
        break;
      case NodeKind::kMemAlloc:
        *type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
        break;
      case NodeKind::kMemFree:
        *type = CU_GRAPH_NODE_TYPE_MEM_FREE;
        break;
    }
    return CUDA_SUCCESS;
  });
}

// Topological order (Kahn); ties keep insertion order. Error on a cycle, and
// on a second executable of a graph with memory nodes.
static CUresult Instantiate(CUgraphExec* out, CUgraph g, unsigned long long flags = 0) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  LOCKED;
  if (CUresult r = ValidGraph(g); r != CUDA_SUCCESS) return r;
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
  if (IsLive(exec->graph) && exec->graph->magic == kGraphMagic && exec->graph->id == exec->graph_id)
    --exec->graph->execs;
  R().live.erase(exec);
  exec->magic = 0;
  delete exec;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph g, unsigned long long flags) {
  // The upload flag belongs to cuGraphInstantiateWithParams (it names the stream).
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return Instantiate(out, g, flags); });
}
CUresult cuGraphInstantiate_v2(CUgraphExec* out, CUgraph g, CUgraphNode* errNode, char* log, size_t logSize) {
  return Guard([&]() -> CUresult {
    if (errNode != nullptr) *errNode = nullptr;
    if (log != nullptr && logSize > 0) log[0] = '\0';
    return Instantiate(out, g);
  });
}
CUresult cuGraphInstantiateWithParams(CUgraphExec* out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return Guard([&]() -> CUresult {
    LOCKED;
    const unsigned long long flags = p != nullptr ? p->flags : 0;
    CUresult r = Instantiate(out, g, flags);
    if (r == CUDA_SUCCESS && (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)) {
      // Uploaded at once into the given stream: its allocations are backed now.
      CUstream s;
      r = ResolveStream(p->hUploadStream, false, &s);
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
  return Guard([&]() -> CUresult {
    LOCKED;
    if (!IsLive(exec) || exec->magic != kExecMagic) return CUDA_ERROR_INVALID_VALUE;
    DestroyExec(exec);
    return CUDA_SUCCESS;
  });
}

static CUresult GraphLaunch(CUgraphExec exec, CUstream h, bool ptds) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (!IsLive(exec) || exec->magic != kExecMagic) return CUDA_ERROR_INVALID_VALUE;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return LaunchGraphOn(exec, s);
}
CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) {
  return Guard([&]() -> CUresult { return GraphLaunch(exec, s, false); });
}
CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) {
  return Guard([&]() -> CUresult { return GraphLaunch(exec, s, true); });
}
// Uploading maps the physical memory of the executable's allocations now
// instead of at its first launch.
static CUresult GraphUpload(CUgraphExec exec, CUstream h, bool ptds) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (!IsLive(exec) || exec->magic != kExecMagic) return CUDA_ERROR_INVALID_VALUE;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return BackGraphAllocations(exec);
}
CUresult cuGraphUpload(CUgraphExec exec, CUstream s) {
  return Guard([&]() -> CUresult { return GraphUpload(exec, s, false); });
}
CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream s) {
  return Guard([&]() -> CUresult { return GraphUpload(exec, s, true); });
}

// ----- stream capture -----
static CUresult BeginCapture(CUstream h, bool ptds) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (h == nullptr || h == CU_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  CUgraph g;
  if (CUresult r = cuGraphCreate(&g, 0); r != CUDA_SUCCESS) return r;
  s->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  s->capture_graph = g;
  s->capture_deps.clear();
  s->capture_id = R().next_id++;
  return CUDA_SUCCESS;
}
CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  (void)mode;
  return Guard([&]() -> CUresult { return BeginCapture(s, false); });
}
CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  (void)mode;
  return Guard([&]() -> CUresult { return BeginCapture(s, true); });
}
CUresult cuStreamBeginCapture(CUstream s) {
  return Guard([&]() -> CUresult { return BeginCapture(s, false); });
}
CUresult cuStreamBeginCapture_ptsz(CUstream s) {
  return Guard([&]() -> CUresult { return BeginCapture(s, true); });
}

static CUresult EndCapture(CUstream h, CUgraph* out, bool ptds) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  *out = s->capture_graph;
  s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
  s->capture_graph = nullptr;
  s->capture_deps.clear();
  return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(CUstream s, CUgraph* g) {
  return Guard([&]() -> CUresult { return EndCapture(s, g, false); });
}
CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) {
  return Guard([&]() -> CUresult { return EndCapture(s, g, true); });
}

static CUresult CaptureInfo(CUstream h, bool ptds, CUstreamCaptureStatus* status, cuuint64_t* id,
                            CUgraph* graph, const CUgraphNode** deps, size_t* ndeps) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  if (status != nullptr) *status = s->capture;
  const bool active = s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (id != nullptr && active) *id = s->capture_id;
  if (graph != nullptr) *graph = active ? s->capture_graph : nullptr;
  if (deps != nullptr) *deps = active && !s->capture_deps.empty() ? s->capture_deps.data() : nullptr;
  if (ndeps != nullptr) *ndeps = active ? s->capture_deps.size() : 0;
  return CUDA_SUCCESS;
}
CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard(
      [&]() -> CUresult { return CaptureInfo(s, false, status, nullptr, nullptr, nullptr, nullptr); });
}
CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* status) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard(
      [&]() -> CUresult { return CaptureInfo(s, true, status, nullptr, nullptr, nullptr, nullptr); });
}
CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return Guard([&]() -> CUresult { return CaptureInfo(s, false, status, id, nullptr, nullptr, nullptr); });
}
CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return Guard([&]() -> CUresult { return CaptureInfo(s, true, status, id, nullptr, nullptr, nullptr); });
}
CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                   const CUgraphNode** deps, size_t* ndeps) {
  return Guard([&]() -> CUresult { return CaptureInfo(s, false, status, id, graph, deps, ndeps); });
}
CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                        CUgraph* graph, const CUgraphNode** deps, size_t* ndeps) {
  return Guard([&]() -> CUresult { return CaptureInfo(s, true, status, id, graph, deps, ndeps); });
}
CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                   const CUgraphNode** deps, const CUgraphEdgeData** edgeData,
                                   size_t* ndeps) {
  if (edgeData != nullptr) *edgeData = nullptr;
  return Guard([&]() -> CUresult { return CaptureInfo(s, false, status, id, graph, deps, ndeps); });
}
CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                        CUgraph* graph, const CUgraphNode** deps,
                                        const CUgraphEdgeData** edgeData, size_t* ndeps) {
  if (edgeData != nullptr) *edgeData = nullptr;
  return Guard([&]() -> CUresult { return CaptureInfo(s, true, status, id, graph, deps, ndeps); });
}

}  // extern "C"

// ----- more graph API -----
extern "C" {

CUresult cuGraphAddNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                           const CUgraphEdgeData* edgeData, size_t n, CUgraphNodeParams* p) {
  (void)edgeData;
  return Guard([&]() -> CUresult {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
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
        CUgraphNode_st node;
        node.kind = NodeKind::kMemset;
        node.memset.dst = p->memset.dst;
        node.memset.pitch = p->memset.pitch;
        node.memset.value = p->memset.value;
        node.memset.elementSize = p->memset.elementSize;
        node.memset.width = p->memset.width;
        node.memset.height = p->memset.height;
        return AddNode(out, g, deps, n, std::move(node));
      }
      case CU_GRAPH_NODE_TYPE_MEMCPY: {
        CUgraphNode_st node;
        node.kind = NodeKind::kMemcpy;
        node.memcpy = p->memcpy.copyParams;
        return AddNode(out, g, deps, n, std::move(node));
      }
      case CU_GRAPH_NODE_TYPE_HOST: {
        if (p->host.fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
        CUgraphNode_st node;
        node.kind = NodeKind::kHost;
        node.host.fn = p->host.fn;
        node.host.userData = p->host.userData;
        return AddNode(out, g, deps, n, std::move(node));
      }
      case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      case CU_GRAPH_NODE_TYPE_WAIT_EVENT: {
        CUevent ev = p->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD ? p->eventRecord.event : p->eventWait.event;
        if (!IsLive(ev)) return CUDA_ERROR_INVALID_VALUE;
        CUgraphNode_st node;
        node.kind =
            p->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD ? NodeKind::kEventRecord : NodeKind::kEventWait;
        node.event = ev;
        return AddNode(out, g, deps, n, std::move(node));
      }
      case CU_GRAPH_NODE_TYPE_EMPTY:
        return AddNode(out, g, deps, n, CUgraphNode_st{});
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
  });
}
CUresult cuGraphAddNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                        CUgraphNodeParams* p) {
  return cuGraphAddNode_v2(out, g, deps, nullptr, n, p);
}

CUresult cuGraphGetRootNodes(CUgraph g, CUgraphNode* roots, size_t* numRoots) {
  return Guard([&]() -> CUresult {
    if (numRoots == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = ValidGraph(g); r != CUDA_SUCCESS) return r;
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

static CUresult Edges(CUgraph g, CUgraphNode* from, CUgraphNode* to, size_t* numEdges) {
  if (numEdges == nullptr) return CUDA_ERROR_INVALID_VALUE;
  LOCKED;
  if (CUresult r = ValidGraph(g); r != CUDA_SUCCESS) return r;
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
  return CUDA_SUCCESS;
}
CUresult cuGraphGetEdges(CUgraph g, CUgraphNode* from, CUgraphNode* to, size_t* numEdges) {
  return Guard([&]() -> CUresult { return Edges(g, from, to, numEdges); });
}
CUresult cuGraphGetEdges_v2(CUgraph g, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edgeData,
                            size_t* numEdges) {
  return Guard([&]() -> CUresult {
    CUresult r = Edges(g, from, to, numEdges);
    if (r == CUDA_SUCCESS && edgeData != nullptr) std::memset(edgeData, 0, *numEdges * sizeof(*edgeData));
    return r;
  });
}

static CUresult NodeDeps(CUgraphNode node, CUgraphNode* out, size_t* num, bool dependents) {
  if (num == nullptr) return CUDA_ERROR_INVALID_VALUE;
  LOCKED;
  if (!IsLive(node) || node->magic != kNodeMagic) return CUDA_ERROR_INVALID_VALUE;
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
}
CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* deps, size_t* num) {
  return Guard([&]() -> CUresult { return NodeDeps(node, deps, num, false); });
}
CUresult cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData* edgeData,
                                       size_t* num) {
  (void)edgeData;
  return Guard([&]() -> CUresult { return NodeDeps(node, deps, num, false); });
}
CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode* deps, size_t* num) {
  return Guard([&]() -> CUresult { return NodeDeps(node, deps, num, true); });
}
CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData* edgeData,
                                         size_t* num) {
  (void)edgeData;
  return Guard([&]() -> CUresult { return NodeDeps(node, deps, num, true); });
}

CUresult cuGraphDestroyNode(CUgraphNode node) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (!IsLive(node) || node->magic != kNodeMagic) return CUDA_ERROR_INVALID_VALUE;
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
  return Guard([&]() -> CUresult {
    if (clone == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = ValidGraph(original); r != CUDA_SUCCESS) return r;
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

CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                           const CUDA_KERNEL_NODE_PARAMS* p) {
  return Guard([&]() -> CUresult {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(exec) || exec->magic != kExecMagic || !IsLive(node)) return CUDA_ERROR_INVALID_VALUE;
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
  return Guard([&]() -> CUresult {
    LOCKED;
    if (!IsLive(exec) || exec->magic != kExecMagic) return CUDA_ERROR_INVALID_VALUE;
    if (exec->has_mem_nodes || (IsLive(g) && g->magic == kGraphMagic && g->has_mem_nodes)) {
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
  return Guard([&]() -> CUresult {
    if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(exec) || exec->magic != kExecMagic) return CUDA_ERROR_INVALID_VALUE;
    *flags = exec->flags;
    return CUDA_SUCCESS;
  });
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

}  // extern "C"
