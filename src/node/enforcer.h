// Enforcer: the node's last line of defence for device memory. libvgpu
// refuses allocations past a container's limit, but a process can get around
// it (a static binary the preload never reaches, a path the library cannot
// see, a program that clears its environment with the preload file disabled).
// The driver's per-process accounting (NVML) sees every byte regardless; each
// pass compares it, per container and GPU, with the container's limit.
//
// Per GPU process the driver reports, the container is found by the region
// directory its mount namespace shows (ProcessInspector). The limit, in order
// of authority: the scheduler's allocation annotation for the container that
// owns the region (from the API server, which the container cannot change);
// else the limit libvgpu recorded in the region; else what the process's
// environment declares (TESSERA_ALLOCATION / CUDA_DEVICE_MEMORY_LIMIT, read
// with libvgpu's own parser). No limit known: nothing to enforce. A DRA
// claim's region (claim_regions.h) takes its limit, first, from the claim's
// limits.json that tessera-dra wrote (source "claim"), and its cores from
// there too (ComputePass), not from an allocation annotation.
//
// Over the limit by more than the tolerance (driver-side rounding, e.g. 2 MiB
// pages, is not visible to libvgpu): the offenders are the container's
// processes on that GPU ordered by how much of their usage libvgpu did not
// account (a process that bypasses the library has all of it unaccounted),
// then by usage; taken until the rest fits. ACTIVE_OOM_KILLER (the process's
// environment, else the node's default; only the node's when the policy says
// containers may not override it) decides: true kills them (SIGKILL), false
// only reports. Either way the caller logs and records an Event.
//
// Compute (ComputePass): the same last resort for a container's gpucores.
// libvgpu's launch limiter holds the quota only for launches it sees, and
// from a region the container can write; the driver's per-process SM
// utilisation (NVML) sees every kernel. Per container and GPU the sum over
// its processes is compared with the cores of its allocation annotation
// (only: the region's quota is the tenant's to rewrite). A pass counts as
// over when the sum exceeds quota + compute_tolerance_percent and either
// another tenant used the GPU in that pass (under the `default` policy a
// lone tenant may use idle time: that harms nobody) or one of the
// container's busy processes is not in its region (it bypasses libvgpu).
// compute_window_passes such passes in a row make a violation (one sample is
// noise: kernels queued before a throttle, NVML's own averaging); it is
// reported once per episode and, with compute_enforcement: kill, the
// offenders are killed (the processes libvgpu does not know first, then the
// busiest) until the rest is within the quota.
//
// Thread-safety: Pass and ComputePass from one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "host/inventory.h"
#include "node/process_inspector.h"
#include "node/region_catalog.h"

namespace tessera::node {

struct EnforcementPolicy {
  bool kill_by_default = false;            // ACTIVE_OOM_KILLER for containers that do not set it
  bool container_may_override = true;      // false: kill_by_default for all, ACTIVE_OOM_KILLER ignored
  uint64_t tolerance_bytes = 64ull << 20;  // usage above the limit that is let pass
  // Compute (ComputePass).
  int compute_tolerance_percent = 10;  // SM utilisation above the quota that is let pass
  int compute_window_passes = 3;       // consecutive passes over before it is a violation
  bool compute_kill = false;           // compute_enforcement: kill (else report)
};

struct Offender {
  ProcessIdentity process;
  uint64_t used_bytes = 0;       // as the driver counts it
  uint64_t accounted_bytes = 0;  // what libvgpu accounted for this process
  bool killed = false;
  std::string kill_error;  // when a kill was attempted and failed
};

struct Violation {
  std::string region;  // the region directory's name
  std::optional<ContainerRef> owner;
  std::string gpu_uuid;
  uint64_t limit_bytes = 0;
  uint64_t used_bytes = 0;   // the driver's count over the container's processes on the GPU
  std::string limit_source;  // "claim", "allocation", "region" or "environment"
  bool kill = false;         // ACTIVE_OOM_KILLER in effect
  bool new_episode = false;  // the container was within its limit on this GPU at the previous pass
  std::vector<Offender> offenders;
};

// A process the driver reports on a GPU, tied to the container (region) whose
// region directory its mount namespace shows.
struct AttributedProcess {
  const RegionDir* region = nullptr;  // points into the regions passed to AttributeGpuProcesses
  std::string gpu_uuid;
  ProcessIdentity process;
  uint64_t used_bytes = 0;   // as the driver counts it on that GPU
  int sm_util_percent = -1;  // the driver's SM utilisation since the last sample; -1 = unknown
};

struct ComputeOffender {
  ProcessIdentity process;
  int sm_util_percent = 0;
  bool in_region = false;  // libvgpu knows it (a live process slot of the region)
  bool killed = false;
  std::string kill_error;
};

struct ComputeViolation {
  std::string region;
  std::optional<ContainerRef> owner;
  std::string gpu_uuid;
  int quota_percent = 0;                   // the allocation's cores
  int used_percent = 0;                    // the container's SM utilisation this pass
  int others_percent = 0;                  // the other processes' on the GPU this pass
  int passes_over = 0;                     // consecutive passes over the quota
  bool kill = false;                       // compute_enforcement: kill
  bool new_episode = false;                // first pass of this run that makes it a violation
  std::vector<ComputeOffender> offenders;  // taken until the rest fits the quota
};

// Every driver-reported process that belongs to one of `regions`; each
// process is inspected once, whatever number of GPUs it uses. Processes of
// no tessera container (the host's, other runtimes') are left out.
std::vector<AttributedProcess> AttributeGpuProcesses(const std::vector<host::GpuSample>& gpus,
                                                     const std::vector<RegionDir>& regions,
                                                     ProcessInspector& inspector);

// The limit the scheduler allocated to a container on a GPU, in bytes, if known.
using AllocationLimit =
    std::function<std::optional<uint64_t>(const ContainerRef&, const std::string& gpu_uuid)>;
// The cores (percent) the scheduler allocated to a container on a GPU, if known.
using AllocationCores = std::function<std::optional<int>(const ContainerRef&, const std::string& gpu_uuid)>;

class Enforcer {
 public:
  Enforcer(EnforcementPolicy policy, ProcessInspector* inspector, AllocationLimit allocation_limit,
           AllocationCores allocation_cores = nullptr);

  // One pass over the processes of the node's containers (AttributeGpuProcesses).
  std::vector<Violation> Pass(const std::vector<AttributedProcess>& processes);

  // The compute check over the same processes; `gpus` (the same sample) tells
  // what the other processes on each GPU used. Without allocation_cores,
  // nothing. Returns the containers in violation this pass.
  std::vector<ComputeViolation> ComputePass(const std::vector<AttributedProcess>& processes,
                                            const std::vector<host::GpuSample>& gpus);

 private:
  const EnforcementPolicy policy_;
  ProcessInspector* const inspector_;
  const AllocationLimit allocation_limit_;
  const AllocationCores allocation_cores_;
  std::set<std::pair<std::string, std::string>> violating_;          // (region, gpu) over the limit last pass
  std::map<std::pair<std::string, std::string>, int> compute_over_;  // (region, gpu) -> passes over in a row
};

}  // namespace tessera::node
