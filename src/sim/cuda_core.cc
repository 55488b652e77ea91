// The simulated CUDA driver: initialisation, devices, contexts, memory, copies,
// streams, events, modules and kernel launches. See docs/sim.md for the model.
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <unordered_map>

#include "sim/cuda_internal.h"

namespace tessera::sim::cuda {

// ---------------------------------------------------------------------------
// Device heap
// ---------------------------------------------------------------------------
DeviceHeap::~DeviceHeap() {
  // Left mapped: the process is exiting and other threads may still copy.
}

bool DeviceHeap::EnsureMapped(uint64_t device_bytes) {
  if (base_ != nullptr) return true;
  const uint64_t size = ((device_bytes * 2 + kVmmGranularity - 1) / kVmmGranularity) * kVmmGranularity;
  int fd = memfd_create("tessera-sim-device", MFD_CLOEXEC);
  if (fd < 0) return false;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return false;
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return false;
  }
  fd_ = fd;
  base_ = static_cast<uint8_t*>(p);
  size_ = size;
  // Keep the first granule unused so that no device pointer equals the heap base.
  free_[kVmmGranularity] = size - kVmmGranularity;
  return true;
}

uint64_t DeviceHeap::Allocate(uint64_t bytes, uint64_t align) {
  if (bytes == 0) bytes = 1;
  bytes = (bytes + 4095) & ~uint64_t{4095};
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = (it->first + align - 1) / align * align;
    const uint64_t end = it->first + it->second;
    if (start + bytes > end) continue;
    const uint64_t off = it->first;
    free_.erase(it);
    if (start > off) free_[off] = start - off;
    if (start + bytes < end) free_[start + bytes] = end - (start + bytes);
    return start;
  }
  return UINT64_MAX;
}

void DeviceHeap::Free(uint64_t offset, uint64_t bytes) {
  bytes = (bytes + 4095) & ~uint64_t{4095};
  // Give the pages back to the host.
  fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
            static_cast<off_t>(bytes));
  auto next = free_.lower_bound(offset);
  uint64_t start = offset, len = bytes;
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && start + len == next->first) {
    len += next->second;
    free_.erase(next);
  }
  free_[start] = len;
}

void DeviceHeap::Discard(uint64_t offset, uint64_t bytes) {
  bytes = (bytes + 4095) & ~uint64_t{4095};
  fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
            static_cast<off_t>(bytes));
}

// ---------------------------------------------------------------------------
// Runtime, initialisation
// ---------------------------------------------------------------------------
Runtime& R() {
  static Runtime* rt = new Runtime();  // never destroyed: other threads may outlive exit
  return *rt;
}

namespace {

thread_local std::vector<CUcontext> tls_ctx_stack;
thread_local std::unordered_map<CUcontext, CUstream> tls_per_thread_streams;

void ReleaseProcessAtExit() {
  Runtime& rt = R();
  if (!rt.state) return;
  // Do not wait forever on a lock held by a thread that will never run again.
  timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 1;
  const int rc = pthread_mutex_timedlock(&rt.state->file()->mutex, &deadline);
  if (rc == EOWNERDEAD) {
    pthread_mutex_consistent(&rt.state->file()->mutex);
  } else if (rc != 0) {
    return;  // others reclaim us once we are gone
  }
  const int slot = rt.state->ProcessSlotLocked(rt.pid, false);
  if (slot >= 0)
    std::memset(static_cast<void*>(&rt.state->file()->processes[slot]), 0, sizeof(ProcessRecord));
  pthread_mutex_unlock(&rt.state->file()->mutex);
}

void AfterForkInChild() {
  // CUDA is not usable in a forked child; make it start from scratch if it tries.
  // The parent's contexts, memory and handles are not the child's: forget them
  // (leaking the bookkeeping) so that nothing is charged or freed twice.
  Runtime& rt = R();
  new (&rt.mu) std::recursive_mutex();
  rt.initialized = false;
  rt.pid = SelfPid();
  rt.allocs.clear();
  rt.live.clear();
  rt.vmm_handles.clear();
  rt.vmm_mappings.clear();
  rt.vmm_reservations.clear();
  rt.graph_allocs.clear();
  for (int g = 0; g < kMaxGpus; ++g) {
    rt.graph_pool[g] = GraphMemPool{};
    rt.primary[g] = nullptr;
    rt.primary_refs[g] = 0;
    rt.contexts[g] = 0;
    rt.default_pool[g] = nullptr;
    rt.current_pool[g] = nullptr;
    rt.gpu_gi[g] = -1;
    rt.gpu_ci[g] = -1;
  }
  tls_ctx_stack.clear();
  tls_per_thread_streams.clear();
}

// CUDA_VISIBLE_DEVICES: indices or GPU UUIDs (prefixes accepted); the list ends
// at the first entry that names no device, as with the real driver.
std::vector<int> VisibleDevices(SimState& state) {
  std::vector<int> all;
  for (int i = 0; i < state.gpu_count(); ++i) all.push_back(i);
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr) return all;
  std::vector<int> out;
  std::stringstream ss(env);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    int found = -1;
    if (!item.empty() && std::all_of(item.begin(), item.end(), ::isdigit)) {
      int idx = std::atoi(item.c_str());
      if (idx < state.gpu_count()) found = idx;
    } else if (item.rfind("GPU-", 0) == 0) {
      for (int i = 0; i < state.gpu_count(); ++i) {
        if (std::string(state.file()->gpus[i].uuid).rfind(item, 0) == 0) found = i;
      }
    } else if (item.rfind("MIG-", 0) == 0) {
      // A MIG device: the GPU, used through one GPU/compute instance.
      StateLock lock(state);
      for (int i = 0; i < state.gpu_count() && found < 0; ++i) {
        const GpuRecord& g = state.file()->gpus[i];
        for (int gi = 0; gi < kMaxGpuInstances && found < 0; ++gi) {
          for (int ci = 0; ci < kMaxComputeInstances && found < 0; ++ci) {
            if (g.gis[gi].in_use && g.gis[gi].cis[ci].in_use &&
                MigDeviceUuid(g, g.gis[gi], g.gis[gi].cis[ci]).rfind(item, 0) == 0 && R().gpu_gi[i] < 0) {
              found = i;
              R().gpu_gi[i] = gi;
              R().gpu_ci[i] = ci;
            }
          }
        }
      }
    }
    if (found < 0 || std::find(out.begin(), out.end(), found) != out.end()) break;
    out.push_back(found);
  }
  return out;
}

CUresult DoInit() {
  Runtime& rt = R();
  if (rt.initialized) return rt.init_error;
  rt.initialized = true;
  rt.pid = SelfPid();
  bool is_explicit = false;
  auto config = ConfigFromEnvironment(&is_explicit);
  if (!config.ok()) {
    rt.init_message = config.error().message;
    std::fprintf(stderr, "tessera sim: %s\n", rt.init_message.c_str());
    return rt.init_error = CUDA_ERROR_INVALID_VALUE;
  }
  auto state = SimState::Open(SimState::DefaultDir(), *config, is_explicit);
  if (!state.ok()) {
    rt.init_message = state.error().message;
    std::fprintf(stderr, "tessera sim: %s\n", rt.init_message.c_str());
    return rt.init_error = CUDA_ERROR_NOT_INITIALIZED;
  }
  rt.state = std::move(*state);
  {
    StateLock lock(*rt.state);
    rt.state->ReclaimDeadLocked();
    if (rt.state->ProcessSlotLocked(rt.pid, true) < 0) {
      rt.init_message = "the simulator's process table is full";
      return rt.init_error = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  rt.visible = VisibleDevices(*rt.state);
  static bool hooks = false;
  if (!hooks) {
    hooks = true;
    std::atexit(ReleaseProcessAtExit);
    pthread_atfork(nullptr, nullptr, AfterForkInChild);
  }
  return rt.init_error = CUDA_SUCCESS;
}

CUresult ValidDevice(CUdevice dev, int* gpu) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Runtime& rt = R();
  if (dev < 0 || dev >= static_cast<int>(rt.visible.size())) return CUDA_ERROR_INVALID_DEVICE;
  *gpu = rt.visible[dev];
  return CUDA_SUCCESS;
}

const GpuRecord& Gpu(int gpu) {
  return R().state->file()->gpus[gpu];
}

}  // namespace

CUresult CheckInit() {
  Runtime& rt = R();
  if (!rt.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  return rt.init_error;
}

bool IsLive(const void* handle) {
  return handle != nullptr && R().live.count(handle) > 0;
}

CUcontext CurrentContext() {
  if (tls_ctx_stack.empty()) return nullptr;
  CUcontext c = tls_ctx_stack.back();
  return IsLive(c) ? c : nullptr;
}

CUresult CurrentGpu(int* gpu, CUcontext* ctx) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  CUcontext c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *gpu = c->gpu;
  if (ctx) *ctx = c;
  return CUDA_SUCCESS;
}

void SleepUntilNs(int64_t t) {
  timespec ts{static_cast<time_t>(t / 1000000000LL), static_cast<long>(t % 1000000000LL)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

namespace {

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

}  // namespace

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

// ---------------------------------------------------------------------------
// Device memory accounting
// ---------------------------------------------------------------------------
CUresult ChargeDevice(int gpu, uint64_t bytes, uint64_t* resident) {
  Runtime& rt = R();
  StateLock lock(*rt.state);
  const uint64_t total = rt.state->file()->gpus[gpu].total_bytes;
  const GpuInstanceRecord* gi = MigInstanceOf(gpu);
  const uint64_t gi_total = gi != nullptr ? DeviceTotalBytes(gpu) : 0;
  auto fits = [&] {
    if (rt.state->UsedBytesLocked(gpu) + bytes > total) return false;
    return gi == nullptr || rt.state->UsedBytesInInstanceLocked(gpu, gi->id) + bytes <= gi_total;
  };
  if (!fits()) {
    rt.state->ReclaimDeadLocked();  // a crashed process's memory comes back
    if (!fits() && resident == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (resident != nullptr) {
    // As much as is free, in whole 4 KiB pages.
    const uint64_t used = rt.state->UsedBytesLocked(gpu);
    uint64_t room = used < total ? total - used : 0;
    if (gi != nullptr) {
      const uint64_t gi_used = rt.state->UsedBytesInInstanceLocked(gpu, gi->id);
      room = std::min(room, gi_used < gi_total ? gi_total - gi_used : 0);
    }
    bytes = std::min(bytes, room / 4096 * 4096);
    *resident = bytes;
  }
  const int slot = rt.state->ProcessSlotLocked(rt.pid, true);
  if (slot < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  ProcessRecord& p = rt.state->file()->processes[slot];
  p.used_bytes[gpu] += bytes;
  if (gi != nullptr) {
    p.gpu_instance[gpu] = gi->id;
    p.compute_instance[gpu] = gi->cis[rt.gpu_ci[gpu]].id;
  }
  return CUDA_SUCCESS;
}

void UnchargeDevice(int gpu, uint64_t bytes) {
  Runtime& rt = R();
  StateLock lock(*rt.state);
  const int slot = rt.state->ProcessSlotLocked(rt.pid, false);
  if (slot < 0) return;
  uint64_t& used = rt.state->file()->processes[slot].used_bytes[gpu];
  used = used > bytes ? used - bytes : 0;
}

const GpuInstanceRecord* MigInstanceOf(int gpu) {
  Runtime& rt = R();
  const int slot = rt.gpu_gi[gpu];
  if (slot < 0) return nullptr;
  const GpuInstanceRecord& gi = rt.state->file()->gpus[gpu].gis[slot];
  return gi.in_use ? &gi : nullptr;
}

uint64_t DeviceTotalBytes(int gpu) {
  const GpuInstanceRecord* gi = MigInstanceOf(gpu);
  if (gi != nullptr) {
    const GpuModel* m = R().state->model(gpu);
    const MigProfile* p = m ? FindMigProfileById(*m, gi->profile_id) : nullptr;
    if (p != nullptr) return p->memory_mib << 20;
  }
  return R().state->file()->gpus[gpu].total_bytes;
}

namespace {

// Rounds a charge the way the real driver's allocator does for small sizes.
uint64_t ChargeFor(uint64_t bytes) {
  return (std::max<uint64_t>(bytes, 1) + 4095) & ~uint64_t{4095};
}

}  // namespace

CUresult AllocDevice(int gpu, uint64_t bytes, AllocKind kind, CUcontext ctx, CUdeviceptr* out, uint64_t align,
                     bool may_spill) {
  Runtime& rt = R();
  DeviceHeap& heap = rt.heaps[gpu];
  if (!heap.EnsureMapped(Gpu(gpu).total_bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t charge = ChargeFor(bytes);
  // A spilling allocation is bounded by the address space (the heap), not the device.
  if (charge > Gpu(gpu).total_bytes && !may_spill) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t charged = charge;
  if (CUresult r = ChargeDevice(gpu, charge, may_spill ? &charged : nullptr); r != CUDA_SUCCESS) return r;
  const uint64_t off = heap.Allocate(charge, std::max<uint64_t>(align, 4096));
  if (off == UINT64_MAX) {
    UnchargeDevice(gpu, charged);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Allocation a;
  a.base = reinterpret_cast<uint64_t>(heap.base() + off);
  a.size = bytes;
  a.charged = charged;  // the device-resident part
  a.heap_off = off;
  a.heap_len = charge;
  a.gpu = gpu;
  a.kind = kind;
  a.ctx = ctx;
  rt.allocs[a.base] = a;
  *out = a.base;
  return CUDA_SUCCESS;
}

CUresult FreeDevice(CUdeviceptr p) {
  Runtime& rt = R();
  auto it = rt.allocs.find(p);
  if (it == rt.allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  Allocation a = it->second;
  if (a.kind == AllocKind::kHost || a.kind == AllocKind::kHostRegistered || a.kind == AllocKind::kIpc ||
      a.kind == AllocKind::kVmm) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A graph allocation's range outlives its lifetime: only the lifetime ends.
  if (a.kind == AllocKind::kGraph) return FreeGraphAllocation(p);
  if (a.kind == AllocKind::kPool && IsLive(a.pool)) {
    // Freed synchronously: it leaves its pool (and must not be cached there).
    for (auto c = a.pool->cached.begin(); c != a.pool->cached.end(); ++c) {
      if (c->second == p) return CUDA_ERROR_INVALID_VALUE;
    }
    a.pool->used_bytes -= std::min(a.pool->used_bytes, a.charged);
    a.pool->reserved_bytes -= std::min(a.pool->reserved_bytes, a.charged);
  }
  rt.allocs.erase(it);
  if (a.heap_len > 0) rt.heaps[a.gpu].Free(a.heap_off, a.heap_len);
  if (a.charged > 0) UnchargeDevice(a.gpu, a.charged);
  return CUDA_SUCCESS;
}

Allocation* FindAllocation(uint64_t p, uint64_t n) {
  Runtime& rt = R();
  auto it = rt.allocs.upper_bound(p);
  if (it == rt.allocs.begin()) return nullptr;
  --it;
  Allocation& a = it->second;
  const uint64_t len = std::max<uint64_t>(a.size, 1);
  if (p >= a.base && p + n <= a.base + std::max(len, a.heap_len)) return &a;
  return nullptr;
}

uint64_t CopyTimeNs(uint64_t bytes) {
  const uint64_t bw = R().state->file()->copy_bandwidth_bytes_per_s;
  return bw == 0 ? 0 : static_cast<uint64_t>(static_cast<double>(bytes) * 1e9 / bw);
}

void AdvanceStreamForCopy(CUstream s, uint64_t bytes) {
  s->last_end_ns = std::max(StreamReadyNs(s), MonotonicNs()) + static_cast<int64_t>(CopyTimeNs(bytes));
}

namespace {

// Context creation/destruction: the first context of the process on a GPU
// costs device memory, as the real driver's context does.
CUresult ContextCreated(int gpu) {
  Runtime& rt = R();
  if (rt.contexts[gpu] == 0) {
    const uint64_t overhead = rt.state->file()->context_overhead_bytes;
    if (overhead > 0) {
      if (CUresult r = ChargeDevice(gpu, overhead); r != CUDA_SUCCESS) return r;
    }
  }
  ++rt.contexts[gpu];
  StateLock lock(*rt.state);
  const int slot = rt.state->ProcessSlotLocked(rt.pid, true);
  if (slot >= 0) rt.state->file()->processes[slot].contexts[gpu] = static_cast<uint32_t>(rt.contexts[gpu]);
  return CUDA_SUCCESS;
}

void ContextDestroyed(int gpu) {
  Runtime& rt = R();
  if (rt.contexts[gpu] <= 0) return;
  --rt.contexts[gpu];
  if (rt.contexts[gpu] == 0) UnchargeDevice(gpu, rt.state->file()->context_overhead_bytes);
  StateLock lock(*rt.state);
  const int slot = rt.state->ProcessSlotLocked(rt.pid, false);
  if (slot >= 0) rt.state->file()->processes[slot].contexts[gpu] = static_cast<uint32_t>(rt.contexts[gpu]);
}

CUresult NewContext(CUdevice dev, int gpu, unsigned flags, bool primary, CUcontext* out) {
  Runtime& rt = R();
  if (CUresult r = ContextCreated(gpu); r != CUDA_SUCCESS) return r;
  auto* c = new CUctx_st();
  c->device = dev;
  c->gpu = gpu;
  c->primary = primary;
  c->flags = flags;
  c->id = rt.next_id++;
  c->limits[CU_LIMIT_STACK_SIZE] = 1024;
  c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
  c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
  rt.live.insert(c);
  c->legacy = NewStream(c, 0, 0);
  c->legacy->legacy = true;
  *out = c;
  return CUDA_SUCCESS;
}

// Destroys a context and everything it owns (memory, streams, events, modules).
void DestroyContext(CUcontext c) {
  Runtime& rt = R();
  // Wait for its work, as cuCtxDestroy does.
  int64_t t = 0;
  for (CUstream s : c->streams) t = std::max(t, s->last_end_ns);
  SleepUntilNs(t);
  for (auto it = rt.allocs.begin(); it != rt.allocs.end();) {
    Allocation& a = it->second;
    if (a.ctx == c && (a.kind == AllocKind::kDevice || a.kind == AllocKind::kManaged ||
                       a.kind == AllocKind::kPool || a.kind == AllocKind::kGlobal)) {
      if (a.heap_len > 0) rt.heaps[a.gpu].Free(a.heap_off, a.heap_len);
      if (a.charged > 0) UnchargeDevice(a.gpu, a.charged);
      it = rt.allocs.erase(it);
    } else {
      ++it;
    }
  }
  for (CUstream s : c->streams) {
    rt.live.erase(s);
    delete s;
  }
  c->streams.clear();
  rt.live.erase(c);
  for (auto& v : tls_ctx_stack) {
    if (v == c) v = nullptr;
  }
  ContextDestroyed(c->gpu);
  c->magic = 0;
  delete c;
}

CUresult ValidContext(CUcontext c) {
  if (!IsLive(c) || c->magic != kCtxMagic) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}

void SetCurrent(CUcontext c) {
  if (tls_ctx_stack.empty()) {
    if (c != nullptr) tls_ctx_stack.push_back(c);
  } else if (c == nullptr) {
    tls_ctx_stack.pop_back();
  } else {
    tls_ctx_stack.back() = c;
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// Copies and memset
// ---------------------------------------------------------------------------
namespace {

// Resolves one side of a copy to a host-addressable pointer at (x, y, z).
CUresult CopyEndpoint(CUmemorytype type, const void* host, CUdeviceptr dev, CUarray array, size_t x, size_t y,
                      size_t z, size_t pitch, size_t height, size_t width, size_t rows, size_t depth,
                      uint8_t** base, size_t* row_pitch, size_t* slice_pitch) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      if (host == nullptr) return CUDA_ERROR_INVALID_VALUE;
      *row_pitch = pitch ? pitch : width;
      *slice_pitch = *row_pitch * (height ? height : rows);
      *base = static_cast<uint8_t*>(const_cast<void*>(host)) + z * *slice_pitch + y * *row_pitch + x;
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: {
      *row_pitch = pitch ? pitch : width;
      *slice_pitch = *row_pitch * (height ? height : rows);
      const uint64_t start = dev + z * *slice_pitch + y * *row_pitch + x;
      const uint64_t span = (depth - 1) * *slice_pitch + (rows - 1) * *row_pitch + width;
      if (type == CU_MEMORYTYPE_DEVICE && FindAllocation(start, span) == nullptr) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      *base = reinterpret_cast<uint8_t*>(start);
      return CUDA_SUCCESS;
    }
    case CU_MEMORYTYPE_ARRAY: {
      if (!IsLive(array) || array->magic != kArrayMagic) return CUDA_ERROR_INVALID_HANDLE;
      *row_pitch = array->row_bytes;
      *slice_pitch = array->row_bytes * array->height;
      const size_t depth_total = std::max<size_t>(array->desc.Depth, 1);
      if (x + width > array->row_bytes || y + rows > array->height || z + depth > depth_total) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      *base = reinterpret_cast<uint8_t*>(array->storage) + z * *slice_pitch + y * *row_pitch + x;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

CUresult Copy3D(const CUDA_MEMCPY3D& c) {
  const size_t width = c.WidthInBytes, rows = std::max<size_t>(c.Height, 1),
               depth = std::max<size_t>(c.Depth, 1);
  if (width == 0) return CUDA_SUCCESS;
  uint8_t *src, *dst;
  size_t sp, ss, dp, ds;
  if (CUresult r = CopyEndpoint(c.srcMemoryType, c.srcHost, c.srcDevice, c.srcArray, c.srcXInBytes, c.srcY,
                                c.srcZ, c.srcPitch, c.srcHeight, width, rows, depth, &src, &sp, &ss);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (CUresult r = CopyEndpoint(c.dstMemoryType, c.dstHost, c.dstDevice, c.dstArray, c.dstXInBytes, c.dstY,
                                c.dstZ, c.dstPitch, c.dstHeight, width, rows, depth, &dst, &dp, &ds);
      r != CUDA_SUCCESS) {
    return r;
  }
  for (size_t z = 0; z < depth; ++z) {
    for (size_t y = 0; y < rows; ++y) {
      std::memmove(dst + z * ds + y * dp, src + z * ss + y * sp, width);
    }
  }
  return CUDA_SUCCESS;
}

CUresult Memset(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  const size_t row_bytes = width * elem;
  if (pitch == 0) pitch = row_bytes;
  if (FindAllocation(dst, (height - 1) * pitch + row_bytes) == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t y = 0; y < height; ++y) {
    uint8_t* row = reinterpret_cast<uint8_t*>(dst + y * pitch);
    if (elem == 1) {
      std::memset(row, static_cast<int>(value & 0xFF), width);
    } else if (elem == 2) {
      const uint16_t v = static_cast<uint16_t>(value);
      for (size_t i = 0; i < width; ++i) std::memcpy(row + i * 2, &v, 2);
    } else {
      const uint32_t v = value;
      for (size_t i = 0; i < width; ++i) std::memcpy(row + i * 4, &v, 4);
    }
  }
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------
uint64_t KernelDurationNs(CUfunction f, void** params, void** extra) {
  const uint64_t dflt = R().state->file()->default_kernel_ns;
  if (!f->busy) return dflt;
  uint64_t v = 0;
  if (params != nullptr && params[0] != nullptr) {
    std::memcpy(&v, params[0], sizeof(v));
    return v;
  }
  if (extra != nullptr) {
    void* buffer = nullptr;
    size_t size = 0;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END && i < 64; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = extra[i + 1];
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1] != nullptr) {
        size = *static_cast<size_t*>(extra[i + 1]);
      }
    }
    if (buffer != nullptr && size >= sizeof(v)) {
      std::memcpy(&v, buffer, sizeof(v));
      return v;
    }
  }
  return dflt;
}

CUresult EnqueueKernel(CUstream s, CUfunction f, uint64_t duration_ns) {
  Runtime& rt = R();
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    CUgraphNode_st node;
    node.kind = NodeKind::kKernel;
    node.func = f;
    node.duration_ns = duration_ns;
    node.kernel.func = f;
    return CaptureNode(s, std::move(node));
  }
  StateLock lock(*rt.state);
  auto [start, end] = rt.state->BookKernelLocked(s->ctx->gpu, rt.pid, StreamReadyNs(s),
                                                 static_cast<int64_t>(duration_ns), rt.gpu_gi[s->ctx->gpu]);
  (void)start;
  s->last_end_ns = end;
  return CUDA_SUCCESS;
}

}  // namespace tessera::sim::cuda

// ===========================================================================
// Exported driver API
// ===========================================================================
using namespace tessera::sim;
using namespace tessera::sim::cuda;

#define LOCKED std::lock_guard<std::recursive_mutex> lock_(R().mu)

extern "C" {

CUresult cuInit(unsigned int Flags) {
  return Guard([&]() -> CUresult {
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    return DoInit();
  });
}

CUresult cuDriverGetVersion(int* driverVersion) {
  return Guard([&]() -> CUresult {
    if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = CUDA_VERSION;
    LOCKED;
    if (CheckInit() == CUDA_SUCCESS) *driverVersion = static_cast<int>(R().state->file()->driver_version);
    return CUDA_SUCCESS;
  });
}

// ----- devices -----
CUresult cuDeviceGetCount(int* count) {
  return Guard([&]() -> CUresult {
    if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    *count = static_cast<int>(R().visible.size());
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  return Guard([&]() -> CUresult {
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(ordinal, &gpu); r != CUDA_SUCCESS) return r;
    *device = ordinal;
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    std::string n = Gpu(gpu).name;
    if (const GpuInstanceRecord* gi = MigInstanceOf(gpu)) {
      const GpuModel* m = R().state->model(gpu);
      const MigProfile* p = m ? FindMigProfileById(*m, gi->profile_id) : nullptr;
      if (p != nullptr) n += " MIG " + p->name;
    }
    std::snprintf(name, static_cast<size_t>(len), "%s", n.c_str());
    return CUDA_SUCCESS;
  });
}

static bool ParseUuid(const char* text, unsigned char out[16]) {
  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  const char* p = std::strchr(text, '-');
  if (p == nullptr) return false;
  ++p;
  int n = 0;
  while (*p != '\0' && n < 32) {
    if (*p == '-') {
      ++p;
      continue;
    }
    char hex[3] = {p[0], p[1], 0};
    if (p[1] == '\0') return false;
    out[n / 2] = static_cast<unsigned char>(std::strtoul(hex, nullptr, 16));
    n += 2;
    p += 2;
  }
  return n == 32;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    unsigned char bytes[16] = {};
    if (const GpuInstanceRecord* gi = MigInstanceOf(gpu)) {
      ParseUuid(MigDeviceUuid(Gpu(gpu), *gi, gi->cis[R().gpu_ci[gpu]]).c_str(), bytes);
    } else {
      ParseUuid(Gpu(gpu).uuid, bytes);
    }
    std::memcpy(uuid->bytes, bytes, 16);
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  return cuDeviceGetUuid_v2(uuid, dev);
}

CUresult cuDeviceGetLuid(char* luid, unsigned int* deviceNodeMask, CUdevice dev) {
  (void)luid;
  (void)deviceNodeMask;
  (void)dev;
  return CUDA_ERROR_NOT_SUPPORTED;  // Windows only
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    *bytes = DeviceTotalBytes(gpu);
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    const GpuRecord& g = Gpu(gpu);
    const GpuModel* m = R().state->model(gpu);
    if (m == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    int v = 0;
    switch (attrib) {
      case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        v = 1024;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
        v = 1024;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
        v = 1024;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
        v = 64;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
        v = 2147483647;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
        v = 65535;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
        v = 65535;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
        v = 49152;
        break;
      case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
        v = 65536;
        break;
      case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
        v = 32;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
        v = 2147483647;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
        v = 65536;
        break;
      case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
        v = static_cast<int>(m->sm_clock_mhz * 1000);
        break;
      case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
        v = 512;
        break;
      case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: {
        v = static_cast<int>(g.sm_count);
        if (const GpuInstanceRecord* gi = MigInstanceOf(gpu)) {
          // The compute instance's share of its GPU instance's SMs.
          const MigProfile* p = FindMigProfileById(*m, gi->profile_id);
          const ComputeInstanceRecord& ci = gi->cis[R().gpu_ci[gpu]];
          if (p != nullptr) v = static_cast<int>(ComputeInstanceSmCount(*m, *p, ci.size));
        }
        break;
      }
      case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
        v = CU_COMPUTEMODE_DEFAULT;
        break;
      case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH:
        v = 131072;
        break;
      case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH:
        v = 131072;
        break;
      case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT:
        v = 65536;
        break;
      case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH:
        v = 16384;
        break;
      case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT:
        v = 16384;
        break;
      case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH:
        v = 16384;
        break;
      case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT:
        v = 512;
        break;
      case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
        v = m->architecture >= 7 || m->key == "V100" ? 1 : 0;
        break;
      case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        v = static_cast<int>(g.pci_bus);
        break;
      case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
        v = 0;
        break;
      case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
        v = 0;
        break;
      case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
        v = static_cast<int>(m->mem_clock_mhz * 1000);
        break;
      case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
        v = static_cast<int>(m->memory_bus_width);
        break;
      case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
        v = static_cast<int>(m->l2_cache_bytes);
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
        v = static_cast<int>(m->max_threads_per_sm);
        break;
      case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
        v = static_cast<int>(m->async_engines);
        break;
      case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
        v = 32;
        break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        v = static_cast<int>(m->cc_major);
        break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        v = static_cast<int>(m->cc_minor);
        break;
      case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
        v = static_cast<int>(m->shared_mem_per_sm);
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
        v = static_cast<int>(m->regs_per_sm);
        break;
      case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:
        v = 0;
        break;
      case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID:
        v = static_cast<int>(gpu);
        break;
      case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
        v = 2;
        break;
      case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        v = static_cast<int>(m->shared_mem_per_block_optin);
        break;
      case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
        v = static_cast<int>(m->max_blocks_per_sm);
        break;
      case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE:
        v = static_cast<int>(m->l2_cache_bytes / 4 * 3);
        break;
      case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
        v = 1024;
        break;
      case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
        v = 1;
        break;
      case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
        v = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        break;
      case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
        v = m->cc_major >= 9 ? 1 : 0;
        break;
      case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED:
        v = 0;
        break;
      case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG:
        v = 0;
        break;
      case CU_DEVICE_ATTRIBUTE_NUMA_ID:
        v = -1;
        break;
      case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
        v = g.numa_node;
        break;
      case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID:
        v = static_cast<int>(m->pci_device_id);
        break;
      default:
        if (attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
        v = 0;
    }
    *pi = v;
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
        r != CUDA_SUCCESS)
      return r;
    return cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  });
}

CUresult cuDeviceGetProperties(CUdevprop* prop, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    const GpuModel* m = R().state->model(gpu);
    *prop = CUdevprop{};
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->sharedMemPerBlock = 49152;
    prop->totalConstantMemory = 65536;
    prop->SIMDWidth = 32;
    prop->memPitch = 2147483647;
    prop->regsPerBlock = 65536;
    prop->clockRate = static_cast<int>(m->sm_clock_mhz * 1000);
    prop->textureAlign = 512;
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    // The driver API's form: "0000:07:00.0" (4-digit domain).
    std::snprintf(pciBusId, static_cast<size_t>(len), "0000:%02x:00.0", Gpu(gpu).pci_bus);
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  return Guard([&]() -> CUresult {
    if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    unsigned domain = 0, bus = 0, device = 0, function = 0;
    if (std::sscanf(pciBusId, "%x:%x:%x.%x", &domain, &bus, &device, &function) < 3) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < R().visible.size(); ++i) {
      if (Gpu(R().visible[i]).pci_bus == bus && domain == 0 && device == 0) {
        *dev = static_cast<CUdevice>(i);
        return CUDA_SUCCESS;
      }
    }
    return CUDA_ERROR_INVALID_DEVICE;
  });
}

CUresult cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  return Guard([&]() -> CUresult {
    if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int a, b;
    if (CUresult r = ValidDevice(dev, &a); r != CUDA_SUCCESS) return r;
    if (CUresult r = ValidDevice(peerDev, &b); r != CUDA_SUCCESS) return r;
    // Peers on NVLink, or on the same NUMA node's PCIe tree.
    *canAccessPeer = a != b && (Gpu(a).nvlink_links[b] > 0 || Gpu(a).numa_node == Gpu(b).numa_node);
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                 CUdevice dstDevice) {
  return Guard([&]() -> CUresult {
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int can = 0;
    if (CUresult r = cuDeviceCanAccessPeer(&can, srcDevice, dstDevice); r != CUDA_SUCCESS) return r;
    LOCKED;
    const int a = R().visible[srcDevice], b = R().visible[dstDevice];
    switch (attrib) {
      case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
        *value = Gpu(a).nvlink_links[b] > 0 ? 0 : 1;
        break;
      case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
        *value = can;
        break;
      case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
        *value = Gpu(a).nvlink_links[b] > 0;
        break;
      default:
        *value = can;
        break;
    }
    return CUDA_SUCCESS;
  });
}

// ----- contexts -----
CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    Runtime& rt = R();
    if (rt.primary[gpu] == nullptr) {
      CUcontext c;
      if (CUresult r = NewContext(dev, gpu, rt.primary_flags[gpu], true, &c); r != CUDA_SUCCESS) return r;
      rt.primary[gpu] = c;
      rt.primary_refs[gpu] = 0;
    }
    ++rt.primary_refs[gpu];
    *pctx = rt.primary[gpu];
    return CUDA_SUCCESS;
  });
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return Guard([&]() -> CUresult {
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    Runtime& rt = R();
    if (rt.primary[gpu] == nullptr || rt.primary_refs[gpu] <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--rt.primary_refs[gpu] == 0) {
      DestroyContext(rt.primary[gpu]);
      rt.primary[gpu] = nullptr;
    }
    return CUDA_SUCCESS;
  });
}
CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return cuDevicePrimaryCtxRelease_v2(dev);
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  return Guard([&]() -> CUresult {
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    Runtime& rt = R();
    if (rt.primary[gpu] != nullptr) {
      DestroyContext(rt.primary[gpu]);
      rt.primary[gpu] = nullptr;
      rt.primary_refs[gpu] = 0;
    }
    return CUDA_SUCCESS;
  });
}
CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  return cuDevicePrimaryCtxReset_v2(dev);
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  return Guard([&]() -> CUresult {
    if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    *flags = R().primary_flags[gpu];
    *active = R().primary[gpu] != nullptr;
    return CUDA_SUCCESS;
  });
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  return Guard([&]() -> CUresult {
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    R().primary_flags[gpu] = flags;
    if (R().primary[gpu] != nullptr) R().primary[gpu]->flags = flags;
    return CUDA_SUCCESS;
  });
}
CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

static CUresult CtxCreateImpl(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return Guard([&]() -> CUresult {
    if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    if (CUresult r = ValidDevice(dev, &gpu); r != CUDA_SUCCESS) return r;
    CUcontext c;
    if (CUresult r = NewContext(dev, gpu, flags, false, &c); r != CUDA_SUCCESS) return r;
    tls_ctx_stack.push_back(c);  // the new context becomes current
    *pctx = c;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CtxCreateImpl(pctx, flags, dev);
}
CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams, unsigned int flags,
                        CUdevice dev) {
  (void)paramsArray;
  (void)numParams;
  return CtxCreateImpl(pctx, flags, dev);
}
CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags,
                        CUdevice dev) {
  (void)ctxCreateParams;
  return CtxCreateImpl(pctx, flags, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (CUresult r = ValidContext(ctx); r != CUDA_SUCCESS) return r;
    if (ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
    DestroyContext(ctx);
    if (!tls_ctx_stack.empty() && tls_ctx_stack.back() == nullptr) tls_ctx_stack.pop_back();
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (ctx != nullptr) {
      if (CUresult r = ValidContext(ctx); r != CUDA_SUCCESS) return r;
    }
    SetCurrent(ctx);
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  return Guard([&]() -> CUresult {
    if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    *pctx = CurrentContext();
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (CUresult r = ValidContext(ctx); r != CUDA_SUCCESS) return r;
    tls_ctx_stack.push_back(ctx);
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (tls_ctx_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx != nullptr) *pctx = tls_ctx_stack.back();
    tls_ctx_stack.pop_back();
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxGetDevice(CUdevice* device) {
  return Guard([&]() -> CUresult {
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    CUcontext c;
    if (CUresult r = CurrentGpu(&gpu, &c); r != CUDA_SUCCESS) return r;
    *device = c->device;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  return Guard([&]() -> CUresult {
    if (ctx == nullptr) return cuCtxGetDevice(device);
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = ValidContext(ctx); r != CUDA_SUCCESS) return r;
    *device = ctx->device;
    return CUDA_SUCCESS;
  });
}

static CUresult SyncContext(CUcontext ctx) {
  int64_t t = 0;
  {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (ctx == nullptr) ctx = CurrentContext();
    if (ctx == nullptr || ValidContext(ctx) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
    for (CUstream s : ctx->streams) t = std::max(t, s->last_end_ns);
  }
  SleepUntilNs(t);
  LOCKED;
  TrimPoolsOnSync();
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
  return Guard([&]() -> CUresult { return SyncContext(nullptr); });
}
CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  return Guard([&]() -> CUresult { return SyncContext(ctx); });
}

CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  return Guard([&]() -> CUresult {
    if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (ctx != nullptr && ValidContext(ctx) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
    *version = 3020;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxGetFlags(unsigned int* flags) {
  return Guard([&]() -> CUresult {
    if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    CUcontext c;
    if (CUresult r = CurrentGpu(&gpu, &c); r != CUDA_SUCCESS) return r;
    *flags = c->flags;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxSetFlags(unsigned int flags) {
  return Guard([&]() -> CUresult {
    LOCKED;
    int gpu;
    CUcontext c;
    if (CUresult r = CurrentGpu(&gpu, &c); r != CUDA_SUCCESS) return r;
    c->flags = flags;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  return Guard([&]() -> CUresult {
    if (ctxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (ctx == nullptr) ctx = CurrentContext();
    if (ValidContext(ctx) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
    *ctxId = ctx->id;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  return Guard([&]() -> CUresult {
    if (pvalue == nullptr || limit < 0 || limit >= 16) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    CUcontext c;
    if (CUresult r = CurrentGpu(&gpu, &c); r != CUDA_SUCCESS) return r;
    *pvalue = c->limits[limit];
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  return Guard([&]() -> CUresult {
    if (limit < 0 || limit >= 16) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    CUcontext c;
    if (CUresult r = CurrentGpu(&gpu, &c); r != CUDA_SUCCESS) return r;
    c->limits[limit] = value;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxGetCacheConfig(CUfunc_cache* pconfig) {
  if (pconfig == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pconfig = CU_FUNC_CACHE_PREFER_NONE;
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
  (void)config;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (leastPriority != nullptr) *leastPriority = 0;
  if (greatestPriority != nullptr) *greatestPriority = -5;
  return CUDA_SUCCESS;
}

CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  return Guard([&]() -> CUresult {
    (void)Flags;
    LOCKED;
    if (ValidContext(peerContext) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
  });
}
CUresult cuCtxDisablePeerAccess(CUcontext peerContext) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (ValidContext(peerContext) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
  });
}

// ----- memory -----
CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  return Guard([&]() -> CUresult {
    LOCKED;
    int gpu;
    if (CUresult r = CurrentGpu(&gpu, nullptr); r != CUDA_SUCCESS) return r;
    Runtime& rt = R();
    StateLock lock(*rt.state);
    rt.state->ReclaimDeadLocked();
    const GpuInstanceRecord* gi = MigInstanceOf(gpu);
    const uint64_t t = DeviceTotalBytes(gpu);
    const uint64_t used =
        gi != nullptr ? rt.state->UsedBytesInInstanceLocked(gpu, gi->id) : rt.state->UsedBytesLocked(gpu);
    if (free != nullptr) *free = used >= t ? 0 : t - used;
    if (total != nullptr) *total = t;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return Guard([&]() -> CUresult {
    if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    CUcontext c;
    if (CUresult r = CurrentGpu(&gpu, &c); r != CUDA_SUCCESS) return r;
    return AllocDevice(gpu, bytesize, AllocKind::kDevice, c, dptr, 512);
  });
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes) {
  return Guard([&]() -> CUresult {
    if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    const size_t pitch = (WidthInBytes + 511) / 512 * 512;
    LOCKED;
    int gpu;
    CUcontext c;
    if (CUresult r = CurrentGpu(&gpu, &c); r != CUDA_SUCCESS) return r;
    if (CUresult r = AllocDevice(gpu, pitch * Height, AllocKind::kDevice, c, dptr, 512); r != CUDA_SUCCESS)
      return r;
    *pPitch = pitch;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  return Guard([&]() -> CUresult {
    int64_t t = 0;
    {
      LOCKED;
      if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
      if (dptr == 0) return CUDA_SUCCESS;
      if (R().allocs.find(dptr) == R().allocs.end()) return CUDA_ERROR_INVALID_VALUE;
      // cuMemFree synchronises with the device: wait (unlocked) for work in flight.
      if (CUcontext c = CurrentContext(); c != nullptr) {
        for (CUstream s : c->streams) t = std::max(t, s->last_end_ns);
      }
    }
    if (t > MonotonicNs()) SleepUntilNs(t);
    LOCKED;
    return FreeDevice(dptr);
  });
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  return Guard([&]() -> CUresult {
    if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    int gpu;
    CUcontext c;
    if (CUresult r = CurrentGpu(&gpu, &c); r != CUDA_SUCCESS) return r;
    // With managed_oversubscription, what does not fit the device stays in host memory.
    const bool may_spill = (R().state->file()->flags & kStateFlagManagedOversubscription) != 0;
    if (CUresult r = AllocDevice(gpu, bytesize, AllocKind::kManaged, c, dptr, 4096, may_spill);
        r != CUDA_SUCCESS)
      return r;
    R().allocs[*dptr].flags = flags;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    Allocation* a = FindAllocation(dptr);
    if (a == nullptr || a->gpu < 0) return CUDA_ERROR_NOT_FOUND;
    if (pbase != nullptr) *pbase = a->base;
    if (psize != nullptr) *psize = a->size;
    return CUDA_SUCCESS;
  });
}

// Pinned host memory: ordinary host memory here (it costs no device memory).
static CUresult HostAlloc(void** pp, size_t bytesize, unsigned int flags) {
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (CurrentContext() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const size_t len = std::max<size_t>(bytesize, 1);
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation a;
  a.base = reinterpret_cast<uint64_t>(p);
  a.size = len;
  a.kind = AllocKind::kHost;
  a.flags = flags;
  a.ctx = CurrentContext();
  R().allocs[a.base] = a;
  *pp = p;
  return CUDA_SUCCESS;
}

CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return Guard([&]() -> CUresult { return HostAlloc(pp, bytesize, 0); });
}
CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  return Guard([&]() -> CUresult { return HostAlloc(pp, bytesize, Flags); });
}

CUresult cuMemFreeHost(void* p) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    auto it = R().allocs.find(reinterpret_cast<uint64_t>(p));
    if (it == R().allocs.end() || it->second.kind != AllocKind::kHost) return CUDA_ERROR_INVALID_VALUE;
    munmap(p, it->second.size);
    R().allocs.erase(it);
    return CUDA_SUCCESS;
  });
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  return Guard([&]() -> CUresult {
    if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    Allocation* a = FindAllocation(reinterpret_cast<uint64_t>(p));
    if (a == nullptr || (a->kind != AllocKind::kHost && a->kind != AllocKind::kHostRegistered)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *pdptr = reinterpret_cast<CUdeviceptr>(p);
    return CUDA_SUCCESS;
  });
}

CUresult cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  return Guard([&]() -> CUresult {
    if (pFlags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    Allocation* a = FindAllocation(reinterpret_cast<uint64_t>(p));
    if (a == nullptr || a->kind != AllocKind::kHost) return CUDA_ERROR_INVALID_VALUE;
    *pFlags = a->flags;
    return CUDA_SUCCESS;
  });
}

CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  return Guard([&]() -> CUresult {
    if (p == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (CurrentContext() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    const uint64_t base = reinterpret_cast<uint64_t>(p);
    if (FindAllocation(base) != nullptr) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    Allocation a;
    a.base = base;
    a.size = bytesize;
    a.kind = AllocKind::kHostRegistered;
    a.flags = Flags;
    R().allocs[base] = a;
    return CUDA_SUCCESS;
  });
}
CUresult cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  return cuMemHostRegister_v2(p, bytesize, Flags);
}

CUresult cuMemHostUnregister(void* p) {
  return Guard([&]() -> CUresult {
    LOCKED;
    auto it = R().allocs.find(reinterpret_cast<uint64_t>(p));
    if (it == R().allocs.end() || it->second.kind != AllocKind::kHostRegistered) {
      return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    }
    R().allocs.erase(it);
    return CUDA_SUCCESS;
  });
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  return Guard([&]() -> CUresult {
    if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    Allocation* a = FindAllocation(ptr);
    if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const bool host = a->gpu < 0;
    int ordinal = 0;
    if (!host) {
      auto& v = R().visible;
      ordinal = static_cast<int>(std::find(v.begin(), v.end(), a->gpu) - v.begin());
    }
    switch (attribute) {
      case CU_POINTER_ATTRIBUTE_CONTEXT:
        *static_cast<CUcontext*>(data) = a->ctx;
        break;
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *static_cast<unsigned*>(data) = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *static_cast<CUdeviceptr*>(data) = ptr;
        break;
      case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!host && a->kind != AllocKind::kManaged) return CUDA_ERROR_INVALID_VALUE;
        *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
        break;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *static_cast<unsigned*>(data) = a->kind == AllocKind::kManaged;
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *static_cast<int*>(data) = ordinal;
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *static_cast<CUdeviceptr*>(data) = a->base;
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *static_cast<size_t*>(data) = a->size;
        break;
      case CU_POINTER_ATTRIBUTE_MAPPED:
        *static_cast<unsigned*>(data) = 1;
        break;
      case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *static_cast<unsigned long long*>(data) = a->base;
        break;
      case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *static_cast<unsigned*>(data) = 1;
        break;
      case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *static_cast<unsigned*>(data) = a->kind == AllocKind::kDevice;
        break;
      case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *static_cast<CUmemoryPool*>(data) = a->pool;
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
  });
}

CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes, void** data,
                                CUdeviceptr ptr) {
  return Guard([&]() -> CUresult {
    if (attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < numAttributes; ++i) {
      if (data[i] == nullptr) continue;
      CUresult r = cuPointerGetAttribute(data[i], attributes[i], ptr);
      if (r != CUDA_SUCCESS && attributes[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE) {
        *static_cast<unsigned*>(data[i]) = 0;  // unregistered host memory
      } else if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_VALUE) {
        return r;
      }
    }
    return CUDA_SUCCESS;
  });
}

CUresult cuPointerSetAttribute(const void* value, CUpointer_attribute attribute, CUdeviceptr ptr) {
  (void)value;
  (void)attribute;
  (void)ptr;
  return CUDA_SUCCESS;
}

CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location) {
  (void)devPtr;
  (void)count;
  (void)advice;
  (void)location;
  return CUDA_SUCCESS;
}
CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device) {
  (void)devPtr;
  (void)count;
  (void)advice;
  (void)device;
  return CUDA_SUCCESS;
}

// ----- copies -----
namespace {

enum class Sync { kBlocking, kAsync };

// Performs a copy described by `c` with the ordering of `stream` (sync: after
// the context's legacy-stream work, blocking the caller for the copy time;
// async: queued after the stream's work, the caller does not wait).
CUresult DoCopy(const CUDA_MEMCPY3D& c, uint64_t bytes, CUstream h, bool ptds, Sync sync) {
  CUstream s = nullptr;
  int64_t wait_until = 0;
  {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
    if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
      if (sync == Sync::kBlocking) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      CUgraphNode_st node;
      node.kind = NodeKind::kMemcpy;
      node.memcpy = c;
      return CaptureNode(s, std::move(node));
    }
    if (sync == Sync::kAsync) {
      if (CUresult r = Copy3D(c); r != CUDA_SUCCESS) return r;
      AdvanceStreamForCopy(s, bytes);
      return CUDA_SUCCESS;
    }
    wait_until = StreamReadyNs(s);
  }
  SleepUntilNs(wait_until);  // device work that precedes the copy
  {
    LOCKED;
    if (CUresult r = Copy3D(c); r != CUDA_SUCCESS) return r;
  }
  const uint64_t t = CopyTimeNs(bytes);
  if (t > 0) SleepUntilNs(MonotonicNs() + static_cast<int64_t>(t));
  return CUDA_SUCCESS;
}

CUDA_MEMCPY3D Linear(CUmemorytype dt, void* dh, CUdeviceptr dd, CUmemorytype st, const void* sh,
                     CUdeviceptr sd, size_t n) {
  CUDA_MEMCPY3D c{};
  c.dstMemoryType = dt;
  c.dstHost = dh;
  c.dstDevice = dd;
  c.srcMemoryType = st;
  c.srcHost = sh;
  c.srcDevice = sd;
  c.WidthInBytes = n;
  c.Height = 1;
  c.Depth = 1;
  return c;
}

CUDA_MEMCPY3D From2D(const CUDA_MEMCPY2D& p) {
  CUDA_MEMCPY3D c{};
  c.srcXInBytes = p.srcXInBytes;
  c.srcY = p.srcY;
  c.srcMemoryType = p.srcMemoryType;
  c.srcHost = p.srcHost;
  c.srcDevice = p.srcDevice;
  c.srcArray = p.srcArray;
  c.srcPitch = p.srcPitch;
  c.dstXInBytes = p.dstXInBytes;
  c.dstY = p.dstY;
  c.dstMemoryType = p.dstMemoryType;
  c.dstHost = p.dstHost;
  c.dstDevice = p.dstDevice;
  c.dstArray = p.dstArray;
  c.dstPitch = p.dstPitch;
  c.WidthInBytes = p.WidthInBytes;
  c.Height = p.Height;
  c.Depth = 1;
  return c;
}

CUDA_MEMCPY3D ArrayCopy(CUmemorytype dt, void* dh, CUdeviceptr dd, CUarray da, size_t doff, CUmemorytype st,
                        const void* sh, CUdeviceptr sd, CUarray sa, size_t soff, size_t n) {
  CUDA_MEMCPY3D c = Linear(dt, dh, dd, st, sh, sd, n);
  c.dstArray = da;
  c.dstXInBytes = da ? doff : 0;
  c.srcArray = sa;
  c.srcXInBytes = sa ? soff : 0;
  return c;
}

}  // namespace

#define COPY_SYNC(c, n) \
  return Guard([&]() -> CUresult { return DoCopy(c, n, nullptr, false, Sync::kBlocking); })
#define COPY_SYNC_PTDS(c, n) \
  return Guard([&]() -> CUresult { return DoCopy(c, n, nullptr, true, Sync::kBlocking); })
#define COPY_ASYNC(c, n, s) return Guard([&]() -> CUresult { return DoCopy(c, n, s, false, Sync::kAsync); })
#define COPY_ASYNC_PTSZ(c, n, s) \
  return Guard([&]() -> CUresult { return DoCopy(c, n, s, true, Sync::kAsync); })

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  COPY_SYNC(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_HOST, src, 0, n), n);
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  COPY_SYNC_PTDS(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_HOST, src, 0, n), n);
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  COPY_SYNC(Linear(CU_MEMORYTYPE_HOST, dst, 0, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n);
}
CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  COPY_SYNC_PTDS(Linear(CU_MEMORYTYPE_HOST, dst, 0, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  COPY_SYNC(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), 0);
}
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  COPY_SYNC_PTDS(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), 0);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  COPY_ASYNC(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_HOST, src, 0, n), n, s);
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  COPY_ASYNC_PTSZ(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_HOST, src, 0, n), n, s);
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  COPY_ASYNC(Linear(CU_MEMORYTYPE_HOST, dst, 0, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n, s);
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  COPY_ASYNC_PTSZ(Linear(CU_MEMORYTYPE_HOST, dst, 0, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n, s);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  COPY_ASYNC(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), 0, s);
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  COPY_ASYNC_PTSZ(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), 0, s);
}
// Unified addressing: every pointer is host-addressable in the simulator.
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  COPY_SYNC(Linear(CU_MEMORYTYPE_UNIFIED, nullptr, dst, CU_MEMORYTYPE_UNIFIED, nullptr, src, n), n);
}
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  COPY_SYNC_PTDS(Linear(CU_MEMORYTYPE_UNIFIED, nullptr, dst, CU_MEMORYTYPE_UNIFIED, nullptr, src, n), n);
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  COPY_ASYNC(Linear(CU_MEMORYTYPE_UNIFIED, nullptr, dst, CU_MEMORYTYPE_UNIFIED, nullptr, src, n), n, s);
}
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  COPY_ASYNC_PTSZ(Linear(CU_MEMORYTYPE_UNIFIED, nullptr, dst, CU_MEMORYTYPE_UNIFIED, nullptr, src, n), n, s);
}
CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n) {
  (void)dc;
  (void)sc;
  COPY_SYNC(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n);
}
CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n) {
  (void)dc;
  (void)sc;
  COPY_SYNC_PTDS(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n);
}
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n,
                           CUstream s) {
  (void)dc;
  (void)sc;
  COPY_ASYNC(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n, s);
}
CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n,
                                CUstream s) {
  (void)dc;
  (void)sc;
  COPY_ASYNC_PTSZ(Linear(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, n), n, s);
}
CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_SYNC(From2D(*p), p->WidthInBytes * p->Height);
}
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_SYNC_PTDS(From2D(*p), p->WidthInBytes * p->Height);
}
CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* p) {
  return cuMemcpy2D_v2(p);
}
CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* p) {
  return cuMemcpy2D_v2_ptds(p);
}
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_ASYNC(From2D(*p), p->WidthInBytes * p->Height, s);
}
CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_ASYNC_PTSZ(From2D(*p), p->WidthInBytes * p->Height, s);
}
CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_SYNC(*p, p->WidthInBytes * p->Height * std::max<size_t>(p->Depth, 1));
}
CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_SYNC_PTDS(*p, p->WidthInBytes * p->Height * std::max<size_t>(p->Depth, 1));
}
CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_ASYNC(*p, p->WidthInBytes * p->Height * std::max<size_t>(p->Depth, 1), s);
}
CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  COPY_ASYNC_PTSZ(*p, p->WidthInBytes * p->Height * std::max<size_t>(p->Depth, 1), s);
}
CUresult cuMemcpyHtoA_v2(CUarray dst, size_t off, const void* src, size_t n) {
  COPY_SYNC(ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, off, CU_MEMORYTYPE_HOST, src, 0, nullptr, 0, n),
            n);
}
CUresult cuMemcpyHtoA_v2_ptds(CUarray dst, size_t off, const void* src, size_t n) {
  COPY_SYNC_PTDS(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, off, CU_MEMORYTYPE_HOST, src, 0, nullptr, 0, n), n);
}
CUresult cuMemcpyAtoH_v2(void* dst, CUarray src, size_t off, size_t n) {
  COPY_SYNC(ArrayCopy(CU_MEMORYTYPE_HOST, dst, 0, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, off, n),
            n);
}
CUresult cuMemcpyAtoH_v2_ptds(void* dst, CUarray src, size_t off, size_t n) {
  COPY_SYNC_PTDS(
      ArrayCopy(CU_MEMORYTYPE_HOST, dst, 0, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, off, n), n);
}
CUresult cuMemcpyDtoA_v2(CUarray dst, size_t off, CUdeviceptr src, size_t n) {
  COPY_SYNC(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, off, CU_MEMORYTYPE_DEVICE, nullptr, src, nullptr, 0, n),
      0);
}
CUresult cuMemcpyDtoA_v2_ptds(CUarray dst, size_t off, CUdeviceptr src, size_t n) {
  COPY_SYNC_PTDS(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, off, CU_MEMORYTYPE_DEVICE, nullptr, src, nullptr, 0, n),
      0);
}
CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t off, size_t n) {
  COPY_SYNC(
      ArrayCopy(CU_MEMORYTYPE_DEVICE, nullptr, dst, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, off, n),
      0);
}
CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray src, size_t off, size_t n) {
  COPY_SYNC_PTDS(
      ArrayCopy(CU_MEMORYTYPE_DEVICE, nullptr, dst, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, off, n),
      0);
}
CUresult cuMemcpyAtoA_v2(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n) {
  COPY_SYNC(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, doff, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, soff, n),
      0);
}
CUresult cuMemcpyAtoA_v2_ptds(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n) {
  COPY_SYNC_PTDS(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, doff, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, soff, n),
      0);
}
CUresult cuMemcpyHtoAAsync_v2(CUarray dst, size_t off, const void* src, size_t n, CUstream s) {
  COPY_ASYNC(ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, off, CU_MEMORYTYPE_HOST, src, 0, nullptr, 0, n),
             n, s);
}
CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray dst, size_t off, const void* src, size_t n, CUstream s) {
  COPY_ASYNC_PTSZ(
      ArrayCopy(CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, off, CU_MEMORYTYPE_HOST, src, 0, nullptr, 0, n), n, s);
}
CUresult cuMemcpyAtoHAsync_v2(void* dst, CUarray src, size_t off, size_t n, CUstream s) {
  COPY_ASYNC(ArrayCopy(CU_MEMORYTYPE_HOST, dst, 0, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, off, n),
             n, s);
}
CUresult cuMemcpyAtoHAsync_v2_ptsz(void* dst, CUarray src, size_t off, size_t n, CUstream s) {
  COPY_ASYNC_PTSZ(
      ArrayCopy(CU_MEMORYTYPE_HOST, dst, 0, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, src, off, n), n, s);
}

// ----- memset -----
namespace {

CUresult DoMemset(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height,
                  CUstream h, bool ptds, Sync sync) {
  CUstream s = nullptr;
  int64_t wait_until = 0;
  {
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
    if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
      if (sync == Sync::kBlocking) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      CUgraphNode_st node;
      node.kind = NodeKind::kMemset;
      node.memset.dst = dst;
      node.memset.pitch = pitch;
      node.memset.value = value;
      node.memset.elementSize = elem;
      node.memset.width = width;
      node.memset.height = height;
      return CaptureNode(s, std::move(node));
    }
    if (sync == Sync::kAsync) {
      if (CUresult r = Memset(dst, pitch, value, elem, width, height); r != CUDA_SUCCESS) return r;
      s->last_end_ns = std::max(StreamReadyNs(s), MonotonicNs());
      return CUDA_SUCCESS;
    }
    wait_until = StreamReadyNs(s);
  }
  SleepUntilNs(wait_until);
  LOCKED;
  return Memset(dst, pitch, value, elem, width, height);
}

}  // namespace

#define MEMSET(dst, pitch, v, e, w, h, s, ptds, sync) \
  return Guard([&]() -> CUresult { return DoMemset(dst, pitch, v, e, w, h, s, ptds, sync); })

CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
  MEMSET(d, 0, v, 1, n, 1, nullptr, false, Sync::kBlocking);
}
CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) {
  MEMSET(d, 0, v, 1, n, 1, nullptr, true, Sync::kBlocking);
}
CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) {
  MEMSET(d, 0, v, 2, n, 1, nullptr, false, Sync::kBlocking);
}
CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) {
  MEMSET(d, 0, v, 2, n, 1, nullptr, true, Sync::kBlocking);
}
CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) {
  MEMSET(d, 0, v, 4, n, 1, nullptr, false, Sync::kBlocking);
}
CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) {
  MEMSET(d, 0, v, 4, n, 1, nullptr, true, Sync::kBlocking);
}
CUresult cuMemsetD2D8_v2(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h) {
  MEMSET(d, p, v, 1, w, h, nullptr, false, Sync::kBlocking);
}
CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h) {
  MEMSET(d, p, v, 1, w, h, nullptr, true, Sync::kBlocking);
}
CUresult cuMemsetD2D16_v2(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h) {
  MEMSET(d, p, v, 2, w, h, nullptr, false, Sync::kBlocking);
}
CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h) {
  MEMSET(d, p, v, 2, w, h, nullptr, true, Sync::kBlocking);
}
CUresult cuMemsetD2D32_v2(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h) {
  MEMSET(d, p, v, 4, w, h, nullptr, false, Sync::kBlocking);
}
CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h) {
  MEMSET(d, p, v, 4, w, h, nullptr, true, Sync::kBlocking);
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  MEMSET(d, 0, v, 1, n, 1, s, false, Sync::kAsync);
}
CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  MEMSET(d, 0, v, 1, n, 1, s, true, Sync::kAsync);
}
CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) {
  MEMSET(d, 0, v, 2, n, 1, s, false, Sync::kAsync);
}
CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s) {
  MEMSET(d, 0, v, 2, n, 1, s, true, Sync::kAsync);
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) {
  MEMSET(d, 0, v, 4, n, 1, s, false, Sync::kAsync);
}
CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s) {
  MEMSET(d, 0, v, 4, n, 1, s, true, Sync::kAsync);
}
CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s) {
  MEMSET(d, p, v, 1, w, h, s, false, Sync::kAsync);
}
CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s) {
  MEMSET(d, p, v, 1, w, h, s, true, Sync::kAsync);
}
CUresult cuMemsetD2D16Async(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream s) {
  MEMSET(d, p, v, 2, w, h, s, false, Sync::kAsync);
}
CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream s) {
  MEMSET(d, p, v, 2, w, h, s, true, Sync::kAsync);
}
CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream s) {
  MEMSET(d, p, v, 4, w, h, s, false, Sync::kAsync);
}
CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream s) {
  MEMSET(d, p, v, 4, w, h, s, true, Sync::kAsync);
}

CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                               CUstream hStream) {
  (void)devPtr;
  (void)count;
  (void)location;
  (void)flags;
  (void)hStream;
  return CUDA_SUCCESS;
}
CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                    unsigned int flags, CUstream hStream) {
  return cuMemPrefetchAsync_v2(devPtr, count, location, flags, hStream);
}

// ----- streams -----
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

// ----- events -----
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

// ----- modules, functions -----
static CUresult NewModule(CUmodule* module) {
  if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  LOCKED;
  int gpu;
  CUcontext c;
  if (CUresult r = CurrentGpu(&gpu, &c); r != CUDA_SUCCESS) return r;
  auto* m = new CUmod_st();
  m->ctx = c;
  R().live.insert(m);
  *module = m;
  return CUDA_SUCCESS;
}

CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  return Guard([&]() -> CUresult {
    if (fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (access(fname, R_OK) != 0) return CUDA_ERROR_FILE_NOT_FOUND;
    return NewModule(module);
  });
}
CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  return Guard([&]() -> CUresult {
    if (image == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return NewModule(module);
  });
}
CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                            CUjit_option* options, void** optionValues) {
  (void)numOptions;
  (void)options;
  (void)optionValues;
  return cuModuleLoadData(module, image);
}
CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return cuModuleLoadData(module, fatCubin);
}

CUresult cuModuleUnload(CUmodule hmod) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (!IsLive(hmod) || hmod->magic != kModuleMagic) return CUDA_ERROR_INVALID_HANDLE;
    for (auto& [name, f] : hmod->functions) R().live.erase(f.get());
    for (auto& [name, p] : hmod->globals) FreeDevice(p);
    R().live.erase(hmod);
    hmod->magic = 0;
    delete hmod;
    return CUDA_SUCCESS;
  });
}

static void InitFunction(CUfunc_st* f, const char* name) {
  f->name = name;
  f->busy = std::strncmp(name, "sim_busy", 8) == 0;
  f->attrs[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024;
  f->attrs[CU_FUNC_ATTRIBUTE_NUM_REGS] = 32;
  f->attrs[CU_FUNC_ATTRIBUTE_PTX_VERSION] = 80;
  f->attrs[CU_FUNC_ATTRIBUTE_BINARY_VERSION] = 80;
  f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] = 49152;
  R().live.insert(f);
}

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  return Guard([&]() -> CUresult {
    if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(hmod) || hmod->magic != kModuleMagic) return CUDA_ERROR_INVALID_HANDLE;
    auto& slot = hmod->functions[name];
    if (!slot) {
      slot = std::make_unique<CUfunc_st>();
      slot->module = hmod;
      InitFunction(slot.get(), name);
    }
    *hfunc = slot.get();
    return CUDA_SUCCESS;
  });
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  return Guard([&]() -> CUresult {
    if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(hmod) || hmod->magic != kModuleMagic) return CUDA_ERROR_INVALID_HANDLE;
    // Any name is a 256-byte global, allocated on first use.
    auto it = hmod->globals.find(name);
    if (it == hmod->globals.end()) {
      CUdeviceptr p;
      if (CUresult r = AllocDevice(hmod->ctx->gpu, 256, AllocKind::kGlobal, hmod->ctx, &p, 256);
          r != CUDA_SUCCESS)
        return r;
      it = hmod->globals.emplace(name, p).first;
    }
    if (dptr != nullptr) *dptr = it->second;
    if (bytes != nullptr) *bytes = 256;
    return CUDA_SUCCESS;
  });
}

CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                           void** jitOptionsValues, unsigned int numJitOptions,
                           CUlibraryOption* libraryOptions, void** libraryOptionValues,
                           unsigned int numLibraryOptions) {
  (void)jitOptions;
  (void)jitOptionsValues;
  (void)numJitOptions;
  (void)libraryOptions;
  (void)libraryOptionValues;
  (void)numLibraryOptions;
  return Guard([&]() -> CUresult {
    if (library == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    auto* l = new CUlib_st();
    R().live.insert(l);
    *library = l;
    return CUDA_SUCCESS;
  });
}

CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option* jitOptions,
                               void** jitOptionsValues, unsigned int numJitOptions,
                               CUlibraryOption* libraryOptions, void** libraryOptionValues,
                               unsigned int numLibraryOptions) {
  if (fileName == nullptr || access(fileName, R_OK) != 0) return CUDA_ERROR_FILE_NOT_FOUND;
  return cuLibraryLoadData(library, fileName, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                           libraryOptionValues, numLibraryOptions);
}

CUresult cuLibraryUnload(CUlibrary library) {
  return Guard([&]() -> CUresult {
    LOCKED;
    if (!IsLive(library) || library->magic != kLibMagic) return CUDA_ERROR_INVALID_HANDLE;
    for (auto& [name, k] : library->kernels) R().live.erase(k.get());
    R().live.erase(library);
    library->magic = 0;
    delete library;
    return CUDA_SUCCESS;
  });
}

CUresult cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  return Guard([&]() -> CUresult {
    if (pKernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(library) || library->magic != kLibMagic) return CUDA_ERROR_INVALID_HANDLE;
    auto& slot = library->kernels[name];
    if (!slot) {
      slot = std::make_unique<CUkern_st>();
      InitFunction(slot.get(), name);
    }
    *pKernel = slot.get();
    return CUDA_SUCCESS;
  });
}

CUresult cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  return Guard([&]() -> CUresult {
    if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(kernel) || kernel->magic != kFuncMagic) return CUDA_ERROR_INVALID_HANDLE;
    *pFunc = kernel;
    return CUDA_SUCCESS;
  });
}

CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  return Guard([&]() -> CUresult {
    if (pi == nullptr || attrib < 0 || attrib >= 16) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(hfunc) || hfunc->magic != kFuncMagic) return CUDA_ERROR_INVALID_HANDLE;
    *pi = hfunc->attrs[attrib];
    return CUDA_SUCCESS;
  });
}

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  return Guard([&]() -> CUresult {
    if (attrib < 0 || attrib >= 16) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(hfunc) || hfunc->magic != kFuncMagic) return CUDA_ERROR_INVALID_HANDLE;
    hfunc->attrs[attrib] = value;
    return CUDA_SUCCESS;
  });
}

CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  (void)hfunc;
  (void)config;
  return CUDA_SUCCESS;
}

CUresult cuFuncGetName(const char** name, CUfunction hfunc) {
  return Guard([&]() -> CUresult {
    if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (!IsLive(hfunc) || hfunc->magic != kFuncMagic) return CUDA_ERROR_INVALID_HANDLE;
    *name = hfunc->name.c_str();
    return CUDA_SUCCESS;
  });
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func, int blockSize,
                                                     size_t dynamicSMemSize) {
  (void)func;
  (void)dynamicSMemSize;
  if (numBlocks == nullptr || blockSize <= 0) return CUDA_ERROR_INVALID_VALUE;
  *numBlocks = std::max(1, std::min(32, 2048 / blockSize));
  return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxPotentialBlockSize(int* minGridSize, int* blockSize, CUfunction func,
                                          CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                          size_t dynamicSMemSize, int blockSizeLimit) {
  (void)func;
  (void)blockSizeToDynamicSMemSize;
  (void)dynamicSMemSize;
  if (minGridSize == nullptr || blockSize == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *blockSize = blockSizeLimit > 0 ? std::min(blockSizeLimit, 1024) : 1024;
  *minGridSize = 2 * 108;
  return CUDA_SUCCESS;
}

// ----- launches -----
static CUresult Launch(CUfunction f, CUstream h, bool ptds, void** params, void** extra) {
  LOCKED;
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (!IsLive(f) || f->magic != kFuncMagic) return CUDA_ERROR_INVALID_HANDLE;
  CUstream s;
  if (CUresult r = ResolveStream(h, ptds, &s); r != CUDA_SUCCESS) return r;
  return EnqueueKernel(s, f, KernelDurationNs(f, params, extra));
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void** params,
                        void** extra) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem;
  return Guard([&]() -> CUresult { return Launch(f, s, false, params, extra); });
}
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                             unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void** params,
                             void** extra) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem;
  return Guard([&]() -> CUresult { return Launch(f, s, true, params, extra); });
}
CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return Launch(f, config->hStream, false, params, extra); });
}
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult { return Launch(f, config->hStream, true, params, extra); });
}
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                                   CUstream s, void** params) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem;
  return Guard([&]() -> CUresult { return Launch(f, s, false, params, nullptr); });
}
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                                        CUstream s, void** params) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem;
  return Guard([&]() -> CUresult { return Launch(f, s, true, params, nullptr); });
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
