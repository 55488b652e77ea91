// GraphMemory: the container's charge for CUDA graph memory nodes (alloc nodes
// written with cuGraphAddMemAllocNode, or cuMemAllocAsync captured into a
// graph). Private to libvgpu.so.
//
// What the driver does (CUDA Programming Guide, "Graph Memory Nodes"; cuda.h
// on cuGraphAddMemAllocNode, cuGraphUpload, cuGraphLaunch,
// cuDeviceGraphMemTrim): an alloc node's virtual address exists from node
// creation, but physical memory is mapped only when an executable graph is
// uploaded or launched (or instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD),
// from a per-device graph memory pool. The mapping stays with the executable
// across launches and after the graph's free nodes ran; destroying the graph
// leaves the memory in the pool; cuDeviceGraphMemTrim returns what no running
// graph or live allocation uses. The driver reports the pool's holding per
// process as CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT.
//
// So the container is charged what the graph memory pools hold, and reserves
// before the driver may map memory:
//  - instantiation scans the graph (cuGraphGetNodes, alloc node parameters)
//    for the bytes each device's alloc nodes need, and refuses alloc nodes on
//    devices the container was not granted;
//  - before an upload or launch it reserves those bytes (rounded up to the
//    driver's 2 MiB mapping granularity) unless the executable's memory is
//    known to be mapped still (below); over the limit the call is refused
//    with CUDA_ERROR_OUT_OF_MEMORY before the driver is asked;
//  - afterwards (and after cuGraphExecDestroy, cuDeviceGraphMemTrim, and when
//    a memory query or a refused reservation re-reads the pools) the charge is
//    settled to the driver's RESERVED_MEM_CURRENT, so memory the pool gives
//    back is released and memory it kept stays charged.
//
// "Known to be mapped still": the guide says mappings are kept between
// launches, graphs launched into one stream share physical memory, and the
// driver remaps when a graph changes streams, after a trim, and when another
// graph's unfreed allocation now uses the memory. So a relaunch (or upload)
// needs no reservation when the executable was mapped into the same stream
// and, on each of its devices, no trim, no mapping into another stream and no
// mapping of a graph that leaves allocations unfreed came since (a per-device
// epoch counts those events).
//
// Thread-safety: any thread. mu_ is never held across a driver call that can
// map memory or wait (only the pool-attribute queries run under it).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "vgpu/cuda_decls.h"
#include "vgpu/region_layout.h"

namespace tessera::vgpu {

class Runtime;

// Bytes of graph allocations per region device index.
struct GraphMemoryNeeds {
  uint64_t bytes[kRegionMaxDevices] = {};
  bool any = false;
  bool leaves_live = false;  // an allocation the graph does not free itself
};

// What one upload or launch reserved, handed back to after_commit().
struct GraphMemoryTicket {
  bool active = false;
  uint64_t exec = 0;
  uint64_t stream = 0;  // 0: a per-thread stream (never "the same stream")
  GraphMemoryNeeds devices;
  uint64_t reserved[kRegionMaxDevices] = {};
};

class GraphMemory {
 public:
  enum class ScanResult { kOk, kHiddenDevice };
  // The alloc nodes of `graph` (child graphs included). Unreadable graphs count
  // as having none: the driver then reports the error itself.
  ScanResult scan(Runtime& rt, CUgraph graph, GraphMemoryNeeds* out);

  // A stream as the "same stream" rule sees it (0 for per-thread streams).
  static uint64_t stream_key(CUstream stream, bool per_thread);

  // Reserves for an upload or launch of `exec` (or, with `exec` 0, of an
  // executable being instantiated with the upload flag, needing `needs`).
  // False when it does not fit (logged; nothing reserved).
  bool before_commit(Runtime& rt, uint64_t exec, const GraphMemoryNeeds* needs, uint64_t stream,
                     const char* what, GraphMemoryTicket* ticket);
  // After the driver call: settles the charge to the driver's figure and, on
  // success, records that `exec` is mapped into the ticket's stream.
  void after_commit(Runtime& rt, const GraphMemoryTicket& ticket, CUresult rc, uint64_t exec);

  // A successful instantiation (or update) of `exec` whose graph needs `needs`.
  void instantiated(uint64_t exec, const GraphMemoryNeeds& needs);
  void destroyed(Runtime& rt, uint64_t exec);
  void trimmed(Runtime& rt, int device);
  // Re-reads the pools the container is charged for; true if a charge went down.
  bool reconcile(Runtime& rt);

  // fork(): lock before, unlock after; the child holds no graph memory.
  void lock_for_fork() { mu_.lock(); }
  void unlock_after_fork() { mu_.unlock(); }
  void reset_in_child();

 private:
  struct ExecRecord {
    GraphMemoryNeeds needs;
    bool mapped = false;                     // uploaded or launched
    uint64_t stream = 0;                     // into which stream
    uint64_t epoch[kRegionMaxDevices] = {};  // the devices' epochs then
  };

  // The driver's RESERVED_MEM_CURRENT for region device `device`; false when it cannot tell.
  bool driver_reserved(Runtime& rt, int device, uint64_t* out);
  // Moves the region charge of `device` to `target`.
  void settle_locked(Runtime& rt, int device, uint64_t target);

  std::mutex mu_;
  std::unordered_map<uint64_t, ExecRecord> execs_;  // guarded by mu_; executables with alloc nodes
  uint64_t charged_[kRegionMaxDevices] = {};        // guarded by mu_; settled charge per device
  uint64_t epoch_[kRegionMaxDevices] = {};          // guarded by mu_; events that may remap graphs
  uint64_t last_stream_[kRegionMaxDevices] = {};    // guarded by mu_; stream of the last mapping
  std::atomic<bool> any_{false};                    // some executable has alloc nodes
};

}  // namespace tessera::vgpu
