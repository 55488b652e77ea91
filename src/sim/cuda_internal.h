// Process-local state of the simulated CUDA driver (libcuda.so.1): contexts,
// streams, events, modules, graphs and this process's view of device memory.
// The state shared with other processes lives in SimState (state.h).
//
// Private to src/sim. Every exported function takes Runtime::mu for the
// process-local structures; it is never held while sleeping. Lock order:
// Runtime::mu, then the SimState mutex (StateLock).
//
// The driver's sources are split by concept (docs/sim.md lists them); the
// functions below are what one part offers the others, grouped by the file
// that defines them. Graph internals shared among the graph files are in
// cuda_graphs.h.
#pragma once

#define __CUDA_API_VERSION_INTERNAL 1
#define __CUDA_API_PUSH_VISIBILITY_DEFAULT 1
#include <cuda.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "sim/c_boundary.h"
#include "sim/cuda_device_heap.h"
#include "sim/state.h"

namespace tessera::sim::cuda {

// kGraph: the virtual range of a graph allocation (charged through the graph
// memory pool, not per allocation).
enum class AllocKind {
  kDevice,
  kManaged,
  kHost,
  kHostRegistered,
  kArray,
  kPool,
  kIpc,
  kGlobal,
  kVmm,
  kGraph
};

struct Allocation {
  uint64_t base = 0;
  uint64_t size = 0;     // what the caller asked for (or the mapped size)
  uint64_t charged = 0;  // device bytes charged in the shared state
  uint64_t heap_off = 0;
  uint64_t heap_len = 0;  // 0 = not in a heap
  int gpu = -1;           // -1 = host memory
  AllocKind kind = AllocKind::kDevice;
  CUcontext ctx = nullptr;
  unsigned flags = 0;
  CUmemoryPool pool = nullptr;
  void* ipc_map = nullptr;  // kIpc: the mapping to unmap
  uint64_t ipc_map_len = 0;
};

}  // namespace tessera::sim::cuda

// The handle types cuda.h leaves incomplete are defined here, so the handles a
// program holds are pointers to these. Each carries its kind's magic, so that a
// stale handle or one of another kind is refused (Valid).
// A bad handle of a kind is refused with the kind's kInvalid error.
template <uint32_t kValue, CUresult kInvalidError = CUDA_ERROR_INVALID_HANDLE>
struct HandleMagic {
  static constexpr uint32_t kMagic = kValue;
  static constexpr CUresult kInvalid = kInvalidError;
  uint32_t magic = kValue;
};

struct CUctx_st : HandleMagic<0xC7C7C701, CUDA_ERROR_INVALID_CONTEXT> {
  int device = 0;  // CUdevice ordinal
  int gpu = 0;     // shared-state GPU index
  bool primary = false;
  unsigned flags = 0;
  unsigned long long id = 0;
  CUstream legacy = nullptr;  // the legacy default stream
  std::vector<CUstream> streams;
  size_t limits[16] = {};
};

struct CUstream_st : HandleMagic<0xC7C7C702> {
  CUcontext ctx = nullptr;
  unsigned flags = 0;  // CU_STREAM_NON_BLOCKING
  int priority = 0;
  bool legacy = false;
  bool per_thread = false;
  unsigned long long id = 0;
  int64_t last_end_ns = 0;  // completion time of the last work queued
  // Stream capture.
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph capture_graph = nullptr;
  std::vector<CUgraphNode> capture_deps;
  unsigned long long capture_id = 0;
};

struct CUevent_st : HandleMagic<0xC7C7C703> {
  CUcontext ctx = nullptr;
  unsigned flags = 0;
  bool recorded = false;
  int64_t time_ns = 0;  // completion time of the work it follows
};

struct CUfunc_st : HandleMagic<0xC7C7C705> {
  CUmodule module = nullptr;
  std::string name;
  bool busy = false;  // sim_busy*: duration from kernelParams[0]
  int attrs[16] = {};
};

struct CUmod_st : HandleMagic<0xC7C7C704> {
  CUcontext ctx = nullptr;
  std::map<std::string, std::unique_ptr<CUfunc_st>> functions;
  std::map<std::string, CUdeviceptr> globals;
};

// A library kernel is usable wherever a CUfunction is (as with the real driver).
struct CUkern_st : CUfunc_st {};

struct CUlib_st : HandleMagic<0xC7C7C70C> {
  std::map<std::string, std::unique_ptr<CUkern_st>> kernels;
};

struct CUmemPoolHandle_st : HandleMagic<0xC7C7C709, CUDA_ERROR_INVALID_VALUE> {
  int device = 0;
  int gpu = 0;
  bool is_default = false;
  uint64_t release_threshold = 0;
  uint64_t reserved_bytes = 0;  // charged: in use + cached
  uint64_t used_bytes = 0;      // handed out
  uint64_t reserved_high = 0;
  uint64_t used_high = 0;
  std::multimap<uint64_t, CUdeviceptr> cached;  // freed blocks kept for reuse: size -> ptr
};

struct CUarray_st : HandleMagic<0xC7C7C70A> {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  size_t elem_bytes = 0;
  size_t row_bytes = 0;  // pitch of the linear storage
  size_t height = 1;     // rows per slice
  CUdeviceptr storage = 0;
  bool owned = true;  // false for mipmap levels (storage owned by the mipmap)
};

struct CUmipmappedArray_st : HandleMagic<0xC7C7C70B> {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  std::vector<std::unique_ptr<CUarray_st>> levels;
  CUdeviceptr storage = 0;
};

// A graph node's kind: its CUgraphNodeType.
enum class NodeKind {
  kKernel = CU_GRAPH_NODE_TYPE_KERNEL,
  kMemset = CU_GRAPH_NODE_TYPE_MEMSET,
  kMemcpy = CU_GRAPH_NODE_TYPE_MEMCPY,
  kHost = CU_GRAPH_NODE_TYPE_HOST,
  kEmpty = CU_GRAPH_NODE_TYPE_EMPTY,
  kEventRecord = CU_GRAPH_NODE_TYPE_EVENT_RECORD,
  kEventWait = CU_GRAPH_NODE_TYPE_WAIT_EVENT,
  kMemAlloc = CU_GRAPH_NODE_TYPE_MEM_ALLOC,
  kMemFree = CU_GRAPH_NODE_TYPE_MEM_FREE,
};

struct CUgraphNode_st : HandleMagic<0xC7C7C707, CUDA_ERROR_INVALID_VALUE> {
  CUgraph graph = nullptr;
  NodeKind kind = NodeKind::kEmpty;
  std::vector<CUgraphNode> deps;
  // Kernel.
  CUfunction func = nullptr;
  uint64_t duration_ns = 0;
  CUDA_KERNEL_NODE_PARAMS kernel{};
  // Memset.
  CUDA_MEMSET_NODE_PARAMS memset{};
  // Memcpy.
  CUDA_MEMCPY3D memcpy{};
  // Host.
  CUDA_HOST_NODE_PARAMS host{};
  CUevent event = nullptr;
  // Memory alloc node: its parameters (dptr set) and the access descriptors
  // they point to; memory free node: alloc.dptr is the address it frees.
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
  std::vector<CUmemAccessDesc> access;
  CUgraphNode origin = nullptr;  // in an executable graph: the node it was made from
};

struct CUgraph_st : HandleMagic<0xC7C7C706, CUDA_ERROR_INVALID_VALUE> {
  unsigned long long id = 0;  // never reused, unlike the address
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
  bool has_mem_nodes = false;  // alloc or free nodes: no clone, no node removal, one executable at a time
  int execs = 0;               // executables instantiated from it and not destroyed
};

struct CUgraphExec_st : HandleMagic<0xC7C7C708, CUDA_ERROR_INVALID_VALUE> {
  std::vector<CUgraphNode_st> nodes;  // copies, in topological order
  unsigned long long flags = 0;       // CUDA_GRAPH_INSTANTIATE_FLAG_*
  CUgraph graph = nullptr;            // the graph it was instantiated from (valid while graph_id matches)
  unsigned long long graph_id = 0;
  bool has_mem_nodes = false;
  int64_t end_ns = 0;  // completion time of its last launch (running until then)
};

namespace tessera::sim::cuda {

// A physical allocation made by cuMemCreate.
struct VmmHandle {
  int gpu = 0;
  uint64_t size = 0;
  uint64_t heap_off = 0;
  CUmemAllocationProp prop{};
  int mappings = 0;
  bool released = false;
};

// A graph allocation (cuGraphAddMemAllocNode, or cuMemAllocAsync captured):
// a virtual range fixed from node creation (an Allocation of kind kGraph in
// Runtime::allocs) whose physical memory comes from the device's graph memory
// pool while it is backed. Lifetime (`live`) runs from the alloc node's
// execution to its free (free node, cuMemFree, cuMemFreeAsync, auto-free).
struct GraphAllocation {
  int gpu = 0;
  uint64_t size = 0;    // as requested
  uint64_t charge = 0;  // physical bytes it needs (whole pages)
  uint64_t heap_off = 0;
  int refs = 0;                               // alloc nodes naming it: in graphs and executables
  unsigned long long owner_graph_id = 0;      // graph of its alloc node
  unsigned long long free_node_graph_id = 0;  // graph holding a free node for it (0: none)
  bool live = false;
  bool backed = false;         // physical memory mapped for it (in the pool's `mapped`)
  CUgraphExec exec = nullptr;  // the executable whose launches back it
};

// The graph memory pool of one GPU (per process): physical memory reserved
// for graph allocations, charged to the device. `mapped` backs allocations;
// `idle` is reserved but unused, kept for later launches until trimmed.
struct GraphMemPool {
  uint64_t mapped = 0;
  uint64_t idle = 0;
  uint64_t used_high = 0;
  uint64_t reserved_high = 0;
};

// A virtual range reserved by cuMemAddressReserve.
struct VmmReservation {
  uint64_t base = 0;
  uint64_t size = 0;
};

// This process as a client of a simulated MPS server (cuda_mps.cc): the
// server, and per GPU the share of the device its kernels may use (0: not an
// MPS device) and its pinned device memory limit (0: none).
struct MpsClient {
  int server_pid = 0;  // 0: not an MPS client
  uint64_t server_start_time = 0;
  uint32_t share_percent[kMaxGpus] = {};
  uint64_t pinned_limit_bytes[kMaxGpus] = {};
};

struct Runtime {
  std::recursive_mutex mu;  // guards everything below
  bool initialized = false;
  CUresult init_error = CUDA_SUCCESS;
  std::string init_message;
  std::unique_ptr<SimState> state;
  int pid = 0;
  std::vector<int> visible;  // CUdevice ordinal -> GPU index in the shared state
  // Per GPU: the MIG GPU/compute instance slots this process uses it through
  // (CUDA_VISIBLE_DEVICES=MIG-...), or -1 for the whole GPU.
  int gpu_gi[kMaxGpus] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
  int gpu_ci[kMaxGpus] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
  DeviceHeap heaps[kMaxGpus];
  CUcontext primary[kMaxGpus] = {};
  int primary_refs[kMaxGpus] = {};
  unsigned primary_flags[kMaxGpus] = {};
  int contexts[kMaxGpus] = {};            // live contexts per GPU (the first one costs memory)
  std::map<uint64_t, Allocation> allocs;  // by base address
  std::unordered_set<const void*> live;   // live handle objects
  CUmemoryPool default_pool[kMaxGpus] = {};
  CUmemoryPool current_pool[kMaxGpus] = {};
  std::map<unsigned long long, VmmHandle> vmm_handles;
  std::map<uint64_t, VmmReservation> vmm_reservations;
  std::map<uint64_t, std::pair<unsigned long long, uint64_t>> vmm_mappings;  // va -> (handle, size)
  std::map<uint64_t, GraphAllocation> graph_allocs;                          // by address
  GraphMemPool graph_pool[kMaxGpus];
  MpsClient mps;
  unsigned long long next_id = 1;
};

// ----- cuda_init.cc -----
Runtime& R();
// Returns CUDA_SUCCESS once the driver is initialised (cuInit called and the
// shared state attached).
CUresult CheckInit();
bool IsLive(const void* handle);

// ----- cuda_devices.cc -----
// The shared-state GPU index of CUdevice ordinal `dev` (after CheckInit);
// CUDA_ERROR_INVALID_DEVICE for an ordinal this process does not see.
CUresult ValidDevice(CUdevice dev, int* gpu);
const GpuRecord& Gpu(int gpu);
// The MIG GPU instance this process uses `gpu` through, or nullptr (whole GPU).
const GpuInstanceRecord* MigInstanceOf(int gpu);
// Memory of the device as this process sees it (the GPU, or its MIG instance).
uint64_t DeviceTotalBytes(int gpu);
// Records in the process's record which MIG instance (if any) it uses `gpu`
// through. The caller holds the state lock.
void RecordInstanceOf(ProcessRecord& p, int gpu);

// ----- cuda_contexts.cc -----
// The calling thread's current context (nullptr if none or destroyed).
CUcontext CurrentContext();
// When all work queued in the context so far completes.
int64_t ContextReadyNs(CUcontext c);
// In a forked child: forgets the calling thread's context stack.
void ForgetContextStackAfterFork();

// ----- cuda_streams.cc -----
// A new stream of `ctx`, registered as live and in the context's list.
CUstream NewStream(CUcontext ctx, unsigned flags, int priority);
// Resolves a stream handle (NULL or CU_STREAM_LEGACY: the legacy stream;
// CU_STREAM_PER_THREAD; or a created stream).
CUresult ResolveStream(CUstream h, CUstream* out);
// When the work queued so far on `s` completes (including implicit legacy-stream order).
int64_t StreamReadyNs(CUstream s);
void SleepUntilNs(int64_t t);
// In a forked child: forgets the calling thread's per-thread default streams.
void ForgetPerThreadStreamsAfterFork();

// ----- cuda_memory.cc -----
// Device bytes: charge against the GPU's capacity (all processes), or give back.
// With `resident`, charges as much of `bytes` as the device has free (possibly
// nothing) and reports it there instead of failing: managed memory
// oversubscription, the rest staying in host memory.
CUresult ChargeDevice(int gpu, uint64_t bytes, uint64_t* resident = nullptr);
void UnchargeDevice(int gpu, uint64_t bytes);
// Allocates `bytes` of device memory on `gpu` charged to this process. With
// `may_spill` (managed memory under managed_oversubscription) only the part
// that fits the device is charged; the address range is reserved whole.
CUresult AllocDevice(int gpu, uint64_t bytes, AllocKind kind, CUcontext ctx, CUdeviceptr* out,
                     uint64_t align = 4096, bool may_spill = false);
CUresult FreeDevice(CUdeviceptr p);
// The allocation containing [p, p+n), or nullptr.
Allocation* FindAllocation(uint64_t p, uint64_t n = 1);

// ----- cuda_copies.cc -----
uint64_t CopyTimeNs(uint64_t bytes);
// Generic 3D copy (all memory types), performed now.
CUresult Copy3D(const CUDA_MEMCPY3D& c);
// Memset of `height` rows of `width` elements of `elem` bytes.
CUresult Memset(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height);
// After an asynchronous copy/memset of `bytes` on `s`: advances the stream's end.
void AdvanceStreamForCopy(CUstream s, uint64_t bytes);

// ----- cuda_modules.cc -----
// Books a kernel on `s` (or records it into the stream's capture).
CUresult EnqueueKernel(CUstream s, CUfunction f, uint64_t duration_ns);
// Books `duration_ns` of kernel time on the timeline of `s`'s GPU (or its MIG
// instance), after the stream's earlier work.
void BookKernel(CUstream s, uint64_t duration_ns);
uint64_t KernelDurationNs(CUfunction f, void** params, void** extra);

// ----- cuda_mps.cc -----
// At cuInit: with CUDA_MPS_PIPE_DIRECTORY naming a control daemon's pipe
// directory, becomes that daemon's server's client: limits `visible` to the
// server's GPUs and takes its share and limits (the daemon's, lowered by
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE / CUDA_MPS_PINNED_DEVICE_MEM_LIMIT).
// CUDA_ERROR_MPS_CONNECTION_FAILED when the daemon is gone,
// CUDA_ERROR_MPS_SERVER_NOT_READY when it cannot start a server. Without a
// daemon the process is not an MPS client (as with the real driver).
CUresult ConnectToMps(std::vector<int>* visible, std::string* message);
// The MPS share of `gpu` (0: not an MPS device of this process).
uint32_t MpsShare(int gpu);
// CUDA_ERROR_MPS_CLIENT_TERMINATED once this process's MPS server is gone.
CUresult CheckMpsServer();

// ----- cuda_pools.cc -----
// Releases memory of pools cached above their release threshold (on synchronize).
void TrimPoolsOnSync();

// ----- cuda_capture.cc, cuda_graph_memory.cc -----
// Adds a node to the graph a capturing stream records into.
CUresult CaptureNode(CUstream s, CUgraphNode_st node);
// A stream capture's cuMemAllocAsync / cuMemFreeAsync: alloc and free nodes.
CUresult CaptureMemAlloc(CUstream s, int device, uint64_t bytes, CUdeviceptr* dptr);
CUresult CaptureMemFree(CUstream s, CUdeviceptr p);
// Ends the lifetime of a graph allocation freed outside its graph (cuMemFree,
// cuMemFreeAsync); CUDA_ERROR_INVALID_VALUE if it is not live or its own graph frees it.
CUresult FreeGraphAllocation(uint64_t p);

// The _ptds / _ptsz entry points are their plain twins with a NULL stream
// meaning the calling thread's per-thread default stream: the twin passes
// PerThread(stream) on, or, when the stream is implicit (blocking copies and
// memsets), runs the plain one under WithPerThreadDefaultStream.
inline CUstream PerThread(CUstream h) {
  return h == nullptr ? CU_STREAM_PER_THREAD : h;
}
// Whether a NULL stream means the per-thread default stream on this thread now.
bool& NullStreamIsPerThread();
template <typename Call>
CUresult WithPerThreadDefaultStream(Call&& call) {
  bool& per_thread = NullStreamIsPerThread();
  const bool saved = per_thread;
  per_thread = true;
  const CUresult r = call();
  per_thread = saved;
  return r;
}

// Ends a handle: no longer live, its magic cleared, the object deleted.
template <typename Handle>
void DestroyHandle(Handle* h) {
  R().live.erase(h);
  h->magic = 0;
  delete h;
}

// Whether `h` is a live handle of its kind.
template <typename Handle>
bool Valid(const Handle* h) {
  return IsLive(h) && h->magic == Handle::kMagic;
}

// Runs an entry point's body, turning exceptions into CUDA errors (none may
// cross the C boundary).
template <typename F>
CUresult Guard(F&& f) noexcept {
  return CatchAtCBoundary<CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_UNKNOWN>(std::forward<F>(f));
}

// The prologue of the driver's entry points, in one place: exceptions become
// CUDA errors (Guard), Runtime::mu is held while `body` runs, and a driver that
// cuInit has not initialised answers with cuInit's error. Then `body` runs with
// what the first argument names, or the error that argument deserves:
//
//   Entry(body)                   body()
//   OnDevice(CUdevice, body)      body(int gpu)       CUDA_ERROR_INVALID_DEVICE
//   InCurrentContext(body)        body(CUcontext)     CUDA_ERROR_INVALID_CONTEXT
//   OnStream(CUstream, body)      body(CUstream)      CUDA_ERROR_INVALID_HANDLE (or _CONTEXT for NULL)
//   OnHandle(handle, body)        body()              the handle kind's kInvalid
//
// Checks of the caller's arguments that need no driver state (null output
// pointers) come before it. Entry points that sleep (synchronisation) release
// the lock first and so open their own scopes.
template <typename Body>
CUresult Entry(Body&& body) noexcept {
  return Guard([&]() -> CUresult {
    std::lock_guard<std::recursive_mutex> lock(R().mu);
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    return body();
  });
}

// Entry(body) after `resolve(&x)` has found x, the object an entry point's
// argument names (or said what error the argument deserves).
template <typename Object, typename Resolve, typename Body>
CUresult EntryOn(Resolve&& resolve, Body&& body) noexcept {
  return Entry([&]() -> CUresult {
    Object x{};
    if (CUresult r = resolve(&x); r != CUDA_SUCCESS) return r;
    return body(x);
  });
}

template <typename Body>
CUresult OnDevice(CUdevice dev, Body&& body) noexcept {
  return EntryOn<int>([&](int* gpu) { return ValidDevice(dev, gpu); }, body);
}

template <typename Body>
CUresult InCurrentContext(Body&& body) noexcept {
  return EntryOn<CUcontext>(
      [](CUcontext* c) {
        return (*c = CurrentContext()) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
      },
      body);
}

template <typename Body>
CUresult OnStream(CUstream h, Body&& body) noexcept {
  return EntryOn<CUstream>([&](CUstream* s) { return ResolveStream(h, s); }, body);
}

template <typename Handle, typename Body>
CUresult OnHandle(Handle* h, Body&& body) noexcept {
  return Entry([&]() -> CUresult {
    if (!Valid(h)) return Handle::kInvalid;
    return body();
  });
}

// A getter on a handle: `*out = read()`; CUDA_ERROR_INVALID_VALUE for a null `out`.
template <typename Handle, typename Out, typename Read>
CUresult GetFrom(Handle* h, Out* out, Read&& read) noexcept {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnHandle(h, [&] {
    *out = read();
    return CUDA_SUCCESS;
  });
}

// Entry points that wait for the device: `until(&t)` runs as an Entry and sets
// t, the time to wait for (0: none); then the caller sleeps, unlocked, until t.
template <typename Until>
CUresult WaitFor(Until&& until) noexcept {
  int64_t t = 0;
  if (CUresult r = Entry([&] { return until(&t); }); r != CUDA_SUCCESS) return r;
  SleepUntilNs(t);
  return CUDA_SUCCESS;
}

// cuStreamSynchronize, cuCtxSynchronize: wait as WaitFor does, then release
// what memory pools cache above their release thresholds.
template <typename Until>
CUresult Synchronize(Until&& until) noexcept {
  if (CUresult r = WaitFor(std::forward<Until>(until)); r != CUDA_SUCCESS) return r;
  return Entry([] {
    TrimPoolsOnSync();
    return CUDA_SUCCESS;
  });
}

}  // namespace tessera::sim::cuda
