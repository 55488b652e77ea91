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
// with libvgpu's own parser). No limit known: nothing to enforce.
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
// Thread-safety: Pass from one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
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
  std::string limit_source;  // "allocation", "region" or "environment"
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
  uint64_t used_bytes = 0;  // as the driver counts it on that GPU
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

class Enforcer {
 public:
  Enforcer(EnforcementPolicy policy, ProcessInspector* inspector, AllocationLimit allocation_limit);

  // One pass over the processes of the node's containers (AttributeGpuProcesses).
  std::vector<Violation> Pass(const std::vector<AttributedProcess>& processes);

 private:
  const EnforcementPolicy policy_;
  ProcessInspector* const inspector_;
  const AllocationLimit allocation_limit_;
  std::set<std::pair<std::string, std::string>> violating_;  // (region, gpu) over the limit last pass
};

}  // namespace tessera::node
