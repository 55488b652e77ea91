// The tables `tessera ps` and `tessera smi` print: running slices from the
// ledger joined with what their regions say they use.
//
// Reading (ReadRegions) is separate from rendering (pure functions of the
// readings), so the tables can be tested on made-up regions and `tessera ps`
// can take two readings a moment apart to show a current compute share.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "core/device.h"
#include "host/nvml_mig.h"
#include "host/region_reader.h"
#include "runner/ledger.h"

namespace tessera::runner {

// What the running jobs' regions say at one moment.
struct RegionReadings {
  // By region path. A job is absent while it has not used CUDA yet (libvgpu
  // creates the region on its first CUDA call) or when its region is refused.
  std::map<std::string, host::RegionSnapshot> regions;
  std::chrono::steady_clock::time_point taken{};
};

// Reads the region of every entry (read-only, validated; see region_reader.h).
RegionReadings ReadRegions(const std::vector<LedgerEntry>& entries);

// True when some job's compute use can be measured in `readings`: a slice
// with a compute quota (1..99 %) that libvgpu limits (--core-policy not
// disable) and a region. Only then is a second reading worth waiting for.
bool AnyComputeMeasured(const std::vector<LedgerEntry>& entries, const RegionReadings& readings);

// One row per (job, GPU) — a --mig job's row names its MIG device, its
// profile's memory and the profile — : job, holder pid, GPU, memory used / limit, peak,
// spilled to host (a column shown only when some job spilled), OOM refusals,
// compute used / quota and the core policy, command. "Compute used" is the
// GPU time libvgpu charged the job between `earlier` and `now`, as a share of
// the wall time between them; "-" when it cannot be known (no `earlier`, no
// quota, --core-policy disable, no region yet).
std::string RenderJobTable(const std::vector<LedgerEntry>& entries, const RegionReadings& now,
                           const RegionReadings* earlier);

// One block per GPU: model, memory, and the slices on it with their usage.
// A GPU that `mig` (MigDriver::List; empty when MIG could not be listed)
// shows in MIG mode lists its MIG devices instead: profile, placement, MIG
// UUID, memory used / total, SMs, and the `tessera run` job holding it.
std::string RenderGpuTable(const std::vector<core::Gpu>& gpus, const std::vector<LedgerEntry>& entries,
                           const RegionReadings& now, const std::vector<host::MigGpuState>& mig = {});

}  // namespace tessera::runner
