// The layout of a container's shared region: the file through which every
// process of one container (each with libvgpu.so loaded) accounts device memory
// and GPU time, and from which the node agent reads usage for its metrics.
//
// This header is the wire contract. It holds plain structs only (no code, no
// dependencies beyond <cstdint>/<atomic>/<pthread.h>), so any C++ program can map
// the file and read it. Rules for readers outside libvgpu:
//   - check magic, version, total_bytes, and the size fields before trusting
//     anything else (tessera::vgpu::validate_region_header does that);
//   - read counters with relaxed atomic loads; take `lock` only to get a
//     consistent snapshot across fields (and never hold it long: allocations in
//     the container wait on it);
//   - never write, except through libvgpu's own code, and except
//     ProcessSlot::host_pid, which the node agent fills in (see there).
//
// Versioning: any change to an existing field's meaning, offset or size bumps
// kRegionVersion. A reserved word may become a field without a version change
// when 0, what every version-1 file holds there, means "unknown" for it
// (ProcessSlot::host_pid, DeviceEntry::context_overhead_state). The compute
// isolation fields (per container+device quota, GPU time used, throttled time,
// a budget, launch tickets) were reserved up front the same way.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tessera::vgpu {

// "TESSVGPU" read as a little-endian 64-bit integer.
inline constexpr uint64_t kRegionMagic = 0x5550475653534554ull;
inline constexpr uint32_t kRegionVersion = 1;
inline constexpr uint32_t kRegionMaxDevices = 16;
inline constexpr uint32_t kRegionMaxProcesses = 1024;
inline constexpr uint32_t kRegionUuidBytes = 64;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" + NUL fits

// RegionHeader::state
inline constexpr uint32_t kRegionStateUninitialised = 0;
inline constexpr uint32_t kRegionStateReady = 1;

// ProcessSlot::state
inline constexpr uint32_t kSlotFree = 0;
inline constexpr uint32_t kSlotActive = 1;

// Per device, per container: the limit and the container-wide sums. Owned by
// the region lock for writes; readers may load atomics without it.
struct alignas(64) DeviceEntry {
  char uuid[kRegionUuidBytes];           // NUL-terminated; empty = entry unused
  std::atomic<uint64_t> memory_limit;    // bytes; 0 = unlimited
  std::atomic<uint64_t> memory_used;     // bytes reserved by live processes (sum of their slots)
  std::atomic<uint64_t> memory_peak;     // high-water mark of memory_used
  std::atomic<uint64_t> memory_spilled;  // bytes of memory_used served as managed memory (oversubscription)
  std::atomic<uint64_t> oom_refusals;    // allocations refused for exceeding the limit
  // Compute isolation (src/vgpu/compute, docs/compute.md): written by the limiter.
  std::atomic<uint32_t> core_quota_percent;   // 0 or 100 = unlimited
  std::atomic<uint32_t> priority;             // higher = served first under contention
  std::atomic<uint64_t> gpu_time_used_ns;     // measured GPU time charged to this container
  std::atomic<uint64_t> throttled_ns;         // wall time launches spent waiting for budget
  std::atomic<int64_t> budget_ns;             // current budget (may go negative: debt)
  std::atomic<uint64_t> budget_refill_at_ns;  // CLOCK_MONOTONIC of the last refill
  std::atomic<uint64_t> budget_burst_ns;      // cap of budget_ns
  std::atomic<uint64_t> launch_ticket_next;   // FIFO release of waiting launches
  std::atomic<uint64_t> launch_ticket_serving;
  // Device memory a process's first context costs on this device, as measured
  // by the first process of the container (valid when context_overhead_state
  // is kContextOverheadMeasured; 0 otherwise).
  std::atomic<uint64_t> context_overhead_bytes;
  // Whether that measurement was made (kContextOverhead*), so that later
  // processes do not repeat an NVML query that cannot succeed. Was
  // reserved[0]: version-1 files hold 0 (unknown) there.
  std::atomic<uint64_t> context_overhead_state;
  uint64_t reserved[9];
};
static_assert(sizeof(DeviceEntry) == 256);
static_assert(offsetof(DeviceEntry, context_overhead_bytes) == 168);
static_assert(offsetof(DeviceEntry, context_overhead_state) == 176);

// DeviceEntry::context_overhead_state
inline constexpr uint64_t kContextOverheadUnknown = 0;   // nobody has measured yet
inline constexpr uint64_t kContextOverheadMeasured = 1;  // context_overhead_bytes holds it (maybe 0)
// Not measurable in this container (NVML absent or failing, or its per-process
// figure not available): not tried again.
inline constexpr uint64_t kContextOverheadUnmeasurable = 2;
// NVML did not list the measuring process, which did not know its host pid
// (ProcessSlot::host_pid 0): tried again only by a process that knows its own.
inline constexpr uint64_t kContextOverheadHostPidUnknown = 3;
static_assert(offsetof(DeviceEntry, memory_limit) == 64);
static_assert(offsetof(DeviceEntry, core_quota_percent) == 104);
static_assert(offsetof(DeviceEntry, gpu_time_used_ns) == 112);

// Per process of the container that has touched CUDA. Liveness is not the
// pid (pids are reused, and differ between the container and the node agent's
// namespace): the owner holds an open-file-description write lock on byte
// `ProcessSlot index` of the region file for its lifetime (see docs/region.md).
struct alignas(64) ProcessSlot {
  std::atomic<uint32_t> state;  // kSlotFree / kSlotActive
  uint32_t pid;                 // as seen inside the container (getpid())
  uint64_t generation;          // bumped at every claim
  uint64_t started_ns;          // CLOCK_REALTIME at claim
  // The process's pid in the driver's (the host's) pid namespace, the pid NVML
  // reports for it; 0 = not known yet. Zeroed when the slot is claimed or
  // freed. libvgpu writes it itself when it can tell the host pid (its pid
  // namespace is the initial one, or /proc shows the initial namespace's
  // pids); otherwise the node agent writes it (compare-exchange from 0, then
  // re-check `generation`; see docs/region.md). Readers matching NVML's
  // per-process data use it when non-zero, else `pid`.
  std::atomic<uint64_t> host_pid;
  uint64_t reserved0[4];
  std::atomic<uint64_t> memory_used[kRegionMaxDevices];       // bytes, included in DeviceEntry::memory_used
  std::atomic<uint64_t> memory_spilled[kRegionMaxDevices];    // part of memory_used held as managed memory
  std::atomic<uint64_t> context_bytes[kRegionMaxDevices];     // part of memory_used charged for contexts
  std::atomic<uint64_t> gpu_time_used_ns[kRegionMaxDevices];  // charged by the compute limiter
};
static_assert(sizeof(ProcessSlot) == 64 + 4 * 8 * kRegionMaxDevices);
static_assert(offsetof(ProcessSlot, pid) == 4);
static_assert(offsetof(ProcessSlot, generation) == 8);
static_assert(offsetof(ProcessSlot, host_pid) == 24);  // was reserved0[0]: version 1 files hold 0 there
static_assert(offsetof(ProcessSlot, memory_used) == 64);

inline constexpr size_t kRegionLockBytes = 64;
static_assert(sizeof(pthread_mutex_t) <= kRegionLockBytes);

struct alignas(64) RegionHeader {
  std::atomic<uint64_t> magic;         // kRegionMagic; written last at initialisation
  uint32_t version;                    // kRegionVersion
  uint32_t header_bytes;               // sizeof(RegionHeader)
  uint64_t total_bytes;                // sizeof(Region) == file size
  uint32_t max_devices;                // kRegionMaxDevices
  uint32_t max_processes;              // kRegionMaxProcesses
  uint32_t device_entry_bytes;         // sizeof(DeviceEntry)
  uint32_t process_slot_bytes;         // sizeof(ProcessSlot)
  std::atomic<uint32_t> state;         // kRegionState*
  std::atomic<uint32_t> device_count;  // entries in use, [0, max_devices]
  uint64_t created_ns;                 // CLOCK_REALTIME
  std::atomic<uint64_t> change_seq;    // bumped on every accounting change
  // A process-shared, robust pthread mutex guarding every write to the region.
  // A holder that dies leaves it recoverable (EOWNERDEAD); the next holder
  // recomputes the device sums from the slots before marking it consistent.
  alignas(64) unsigned char lock[kRegionLockBytes];
  uint64_t reserved1[16];
};
static_assert(sizeof(RegionHeader) == 256);
static_assert(offsetof(RegionHeader, lock) == 64);

struct Region {
  RegionHeader header;
  DeviceEntry devices[kRegionMaxDevices];
  ProcessSlot processes[kRegionMaxProcesses];
};
static_assert(offsetof(Region, devices) == 256);
static_assert(offsetof(Region, processes) == 256 + 256 * kRegionMaxDevices);
static_assert(sizeof(Region) == 256 + 256 * kRegionMaxDevices + sizeof(ProcessSlot) * kRegionMaxProcesses);

// Byte offset of the liveness lock of process slot `index` (fcntl F_OFD_SETLK,
// length 1). Byte-range locks are advisory and independent of the bytes'
// contents, so the slot locks simply use bytes [0, kRegionMaxProcesses).
inline constexpr uint64_t region_slot_lock_offset(uint32_t index) {
  return index;
}

// Validates the fixed fields of a header read from a file of `file_bytes`.
// Returns nullptr when valid, or a static message saying what is wrong.
inline const char* validate_region_header(const RegionHeader& h, uint64_t file_bytes) {
  if (file_bytes < sizeof(RegionHeader)) return "file shorter than a region header";
  if (h.magic.load(std::memory_order_acquire) != kRegionMagic) return "bad magic (not a tessera region)";
  if (h.version != kRegionVersion) return "unsupported region version";
  if (h.header_bytes != sizeof(RegionHeader)) return "header size mismatch";
  if (h.total_bytes != sizeof(Region) || file_bytes != sizeof(Region)) return "region size mismatch";
  if (h.max_devices != kRegionMaxDevices || h.max_processes != kRegionMaxProcesses)
    return "table size mismatch";
  if (h.device_entry_bytes != sizeof(DeviceEntry) || h.process_slot_bytes != sizeof(ProcessSlot))
    return "entry size mismatch";
  if (h.state.load(std::memory_order_acquire) != kRegionStateReady) return "region not initialised";
  if (h.device_count.load(std::memory_order_relaxed) > kRegionMaxDevices) return "device count out of range";
  return nullptr;
}

}  // namespace tessera::vgpu
