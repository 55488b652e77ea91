// NodeMonitor: the agent's periodic look at the node, every monitor interval.
// One pass:
//   1. samples the GPUs (NVML: memory, utilization, compute processes); a GPU
//      the driver reports lost turns unhealthy in the advertised devices;
//   2. scans the region directories and reads each region (a corrupt one is
//      reported and skipped, never trusted);
//   3. asks the kubelet (PodResources) which container holds which devices and
//      so which container owns each region; removes the regions of containers
//      that are gone (region_catalog.h has the rules); without an answer from
//      the kubelet nothing is removed;
//   3b. writes each owned container's limits file from its pod's allocation
//      annotation, or the unplaced-pod policy for a pod tessera did not place
//      (limits_file.h), so libvgpu holds it to limits it cannot rewrite;
//   3c. scans tessera-dra's claim regions (options.dra_region_dir,
//      claim_regions.h) and ties them to containers by their CDI devices;
//      they join the regions below, with their claim's limits;
//   4. ties every process the driver reports to its container (by the region
//      directory its mount namespace shows), writes the host pid of those
//      libvgpu could not learn by itself into their region slots
//      (docs/region.md), and runs the enforcer, reporting what it did (log
//      line, Event on the pod, counters), for memory and for compute
//      (Enforcer::ComputePass: NVML's per-process SM utilisation against the
//      allocation's cores);
//   5. accounts what the scheduler allocated to the pods bound here (their
//      annotations), overcommit included: a GPU holding more than it offers
//      is reported once per episode (error log, Event on each pod with a
//      slice there, counter) and shown by the gauges; GPU pods tessera did
//      not place are reported once each (log, Event) and, under
//      unplaced_pods: whole-gpu, the GPUs the kubelet gave them are marked
//      held in the advertised devices (so the inventory tells the scheduler);
//   6. publishes the result as an immutable snapshot, from which /metrics is
//      rendered: scrapes never touch NVML or the file system, and see one
//      consistent pass.
// Compute share per container and GPU is the GPU time its region gained
// between two passes over the wall time between them.
//
// Thread-safety: Start/Stop from one controlling thread; Latest(), counters()
// from any thread; PassOnce() is for tests (not concurrently with Start).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/periodic_thread.h"
#include "contract/container_contract.h"
#include "core/node_state.h"
#include "host/inventory.h"
#include "node/config.h"
#include "node/device_state.h"
#include "node/enforcer.h"
#include "node/node_pods.h"
#include "node/pod_resources.h"
#include "node/region_catalog.h"

namespace tessera::node {

// One container's use of one GPU.
struct ContainerGpuUsage {
  std::string region;  // region directory name
  std::optional<ContainerRef> owner;
  std::string gpu_uuid;
  uint64_t memory_used_bytes = 0;
  uint64_t memory_limit_bytes = 0;
  uint64_t memory_peak_bytes = 0;
  uint64_t oom_refusals = 0;
  uint32_t core_quota_percent = 0;
  uint64_t gpu_time_ns = 0;
  uint64_t throttled_ns = 0;
  double compute_share_percent = -1;  // over the last interval; -1 before two passes
  int processes = 0;
};

struct NodeSnapshot {
  int64_t taken_unix_ms = 0;
  std::vector<core::Gpu> gpus;            // as advertised (health included)
  std::vector<host::GpuSample> samples;   // live usage
  bool allocations_known = false;         // the pod informer has synced
  std::vector<core::GpuState> allocated;  // per GPU, what the scheduler placed here
  std::vector<ContainerGpuUsage> containers;
  int regions = 0;
  int regions_corrupt = 0;
  int regions_unowned = 0;  // no container listed by the kubelet owns them (yet)
  int unplaced_pods = 0;    // GPU pods bound here that tessera-scheduler did not place
  bool pod_resources_ok = false;
};

struct MonitorCounters {
  uint64_t passes = 0;
  uint64_t sample_errors = 0;
  uint64_t pod_resources_errors = 0;
  uint64_t regions_removed = 0;
  uint64_t violations = 0;  // new over-limit episodes
  uint64_t kills = 0;       // processes killed by enforcement
  uint64_t kill_failures = 0;
  uint64_t host_pids_recorded = 0;    // region slots given their host pid
  uint64_t overcommits = 0;           // GPUs found holding more than they offer (once per episode)
  uint64_t limits_files_written = 0;  // limits files written or rewritten (limits_file.h)
  uint64_t compute_violations = 0;    // new over-quota episodes (Enforcer::ComputePass)
  uint64_t compute_kills = 0;         // processes killed by compute enforcement
};

// Pure: `allocations` without their MIG devices (a device slice carrying a
// `mig` member, docs/mig.md). A container on a MIG instance runs without
// libvgpu, has no region and holds a mig-dynamic GPU the monitor's DeviceState
// does not list, so the monitor neither accounts nor reports it; a pod left
// with no device at all is dropped.
NodeAllocations VgpuAllocations(const NodeAllocations& allocations);

// Where enforcement reports go besides the log (an Event on the pod).
using EventSink =
    std::function<void(const ContainerRef& owner, const std::string& reason, const std::string& message)>;

struct MonitorOptions {
  std::chrono::milliseconds interval{1000};
  int64_t region_grace_seconds = 300;
  std::string resource_name = std::string(contract::kDefaultGpuResource);
  // Further resources whose containers have regions too (time-sliced
  // replicas, node/sharing): their regions are tied to pods the same way.
  std::function<std::set<std::string>()> more_resource_names;
  UnplacedPodsPolicy unplaced_pods = UnplacedPodsPolicy::kRefuse;
  // tessera-dra's region root (claim_regions.h): DRA claims' regions there are
  // tied to containers, metered and enforced, never removed. "" = none.
  std::string dra_region_dir;
};

class NodeMonitor {
 public:
  // Every pointer must outlive the monitor; `pod_resources` and `pods` may be
  // null (no kubelet PodResources / no API server): regions then stay
  // unowned and nothing is cleaned up, allocations are unknown.
  NodeMonitor(MonitorOptions options, host::InventorySource* inventory, DeviceState* devices,
              RegionCatalog* catalog, PodResourcesSource* pod_resources, NodePods* pods,
              ProcessInspector* inspector, Enforcer* enforcer, EventSink events);
  ~NodeMonitor();
  NodeMonitor(const NodeMonitor&) = delete;
  NodeMonitor& operator=(const NodeMonitor&) = delete;

  void Start() { thread_.Start(); }
  void Stop() { thread_.Stop(); }
  void PassOnce();

  std::shared_ptr<const NodeSnapshot> Latest() const;
  MonitorCounters counters() const;

 private:
  void Report(const Violation& violation);
  void ReportCompute(const ComputeViolation& violation);
  // Step 5's reports: new overcommits and allocations naming unknown GPUs.
  // Returns how many GPUs turned overcommitted.
  uint64_t ReportAllocations(const NodeAllocations& allocations, const core::NodeState& state,
                             const std::vector<std::string>& problems);
  // Step 5 for pods tessera did not place; `containers` is this pass's
  // PodResources answer (null when the kubelet did not answer).
  void HandleUnplaced(const std::vector<UnplacedPod>& unplaced,
                      const std::vector<ContainerDevices>* containers);

  const MonitorOptions options_;
  host::InventorySource* const inventory_;
  DeviceState* const devices_;
  RegionCatalog* const catalog_;
  PodResourcesSource* const pod_resources_;
  NodePods* const pods_;
  ProcessInspector* const inspector_;
  Enforcer* const enforcer_;
  const EventSink events_;

  // Previous pass's GPU time per (region, gpu), for the compute share.
  std::map<std::pair<std::string, std::string>, uint64_t> previous_gpu_time_;  // monitor thread only
  std::chrono::steady_clock::time_point previous_pass_{};                      // monitor thread only
  bool pod_resources_failing_ = false;                                         // monitor thread only
  std::set<std::string> reported_corrupt_;   // monitor thread only: corrupt regions already logged
  std::set<std::string> overcommitted_;      // monitor thread only: GPUs in an overcommit episode
  std::set<std::string> reported_problems_;  // monitor thread only: unaccountable allocations logged
  std::set<std::string> reported_unplaced_;  // monitor thread only: UIDs of unplaced pods reported
  std::set<std::string> reported_claims_;    // monitor thread only: claim limits errors logged

  mutable std::mutex mu_;
  std::shared_ptr<const NodeSnapshot> latest_;  // guarded by mu_
  MonitorCounters counters_;                    // guarded by mu_
  PeriodicThread thread_;                       // PassOnce every interval; last: stopped first
};

}  // namespace tessera::node
