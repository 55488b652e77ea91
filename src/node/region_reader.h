// RegionSnapshot: a read-only look at a container's (or `tessera run` job's)
// libvgpu region — memory used per device, OOM refusals, GPU time — for
// `tessera ps`, `tessera smi` and `tessera demo`.
//
// The file is mapped read-only and validated (magic, version, sizes) before
// anything in it is read; a foreign or corrupt file is an error, never trusted.
// Counters are read with relaxed atomic loads, without the region lock: a
// snapshot may mix values from a moment apart, which is fine for display.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"

namespace tessera::runner {

struct DeviceUsage {
  std::string uuid;
  uint64_t memory_limit_bytes = 0;  // 0 = unlimited
  uint64_t memory_used_bytes = 0;
  uint64_t memory_peak_bytes = 0;
  uint64_t oom_refusals = 0;
  uint32_t core_quota_percent = 0;
  uint64_t gpu_time_used_ns = 0;
  uint64_t throttled_ns = 0;
};

struct RegionSnapshot {
  std::vector<DeviceUsage> devices;
  int live_processes = 0;  // slots whose owner still holds its liveness lock
};

// Reads `path`. A missing file is an error whose message says so (the job has
// not touched CUDA yet).
Result<RegionSnapshot> ReadRegion(const std::string& path);

}  // namespace tessera::runner
