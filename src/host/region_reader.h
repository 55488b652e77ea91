// RegionReader: a read-only look at a container's (or a `tessera run` job's)
// libvgpu region — per device the limit, memory in use, OOM refusals, GPU
// time, quota and throttled time, and per live process its share — for the
// node agent's metrics and enforcement and for `tessera ps`/`smi`/`demo`.
//
// The file is mapped read-only and validated (magic, version, sizes, every
// UUID NUL-terminated) before anything in it is read; a foreign or corrupt
// file is an error, never trusted, and never modified. Counters are read with
// relaxed atomic loads, without the region lock (a reader must not stall the
// container's allocations): a snapshot may mix values a moment apart, which is
// fine for display and for enforcement that re-checks every pass.
//
// Liveness comes from the slots' open-file-description locks, not from pids:
// a process counts while it holds the lock on its slot's byte, which the kernel
// drops however the process dies. So memory of a crashed process whose
// container has no live process left to reclaim it is not reported as used.
//
// Thread-safety: a plain function; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace tessera::host {

struct DeviceUsage {
  std::string uuid;
  uint64_t memory_limit_bytes = 0;  // 0 = unlimited
  // Sum over the live processes' slots (dead processes not yet reclaimed by
  // libvgpu are left out).
  uint64_t memory_used_bytes = 0;
  uint64_t memory_peak_bytes = 0;
  uint64_t memory_spilled_bytes = 0;  // part of memory_used served as host-backed managed memory
  uint64_t oom_refusals = 0;
  uint32_t core_quota_percent = 0;  // 0 or 100 = no limit
  uint32_t priority = 0;
  uint64_t gpu_time_used_ns = 0;
  uint64_t throttled_ns = 0;
};

struct ProcessUsage {
  uint32_t pid = 0;       // as seen inside the container's pid namespace
  uint64_t host_pid = 0;  // in the driver's (host's) pid namespace; 0 = not known yet
  uint64_t started_ns = 0;
  // Indexed like RegionSnapshot::devices.
  std::vector<uint64_t> memory_used_bytes;
  std::vector<uint64_t> gpu_time_used_ns;
};

struct RegionSnapshot {
  std::vector<DeviceUsage> devices;
  std::vector<ProcessUsage> processes;  // live processes only
  int live_processes = 0;               // == processes.size()
  uint64_t created_ns = 0;              // CLOCK_REALTIME when the region was initialised

  // The entry for `uuid`, or nullptr.
  const DeviceUsage* Find(const std::string& uuid) const;
};

// Reads `path`. A missing file is an error whose message says so (the job or
// container has not used CUDA yet); `missing` (optional) is set to tell that
// case apart from a refused file.
Result<RegionSnapshot> ReadRegion(const std::string& path, bool* missing = nullptr);

// A process of the container: its pid there and its pid on the host.
struct HostPid {
  uint32_t container_pid = 0;
  uint64_t host_pid = 0;
};

// Fills in ProcessSlot::host_pid for the live slots of `pids` that do not have
// one yet — the one write the node agent makes into a region, by the protocol
// of docs/region.md (compare-exchange from 0, then the slot's generation is
// re-checked and the write undone if the slot changed hands meanwhile).
// Returns how many slots were written. The file is validated as for reading.
Result<int> RecordHostPids(const std::string& path, const std::vector<HostPid>& pids);

}  // namespace tessera::host
