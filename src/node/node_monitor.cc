#include "node/node_monitor.h"

#include "base/log.h"
#include "host/paths.h"
#include "node/claim_regions.h"
#include "node/limits_file.h"

#include <map>
#include <set>

namespace tessera::node {
namespace {

std::string Mib(uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

std::string Describe(const std::optional<ContainerRef>& owner, const std::string& region) {
  if (!owner) return "the container of region " + region + " (pod unknown)";
  return "container '" + owner->container_name + "' of pod " + owner->pod_namespace + "/" + owner->pod_name;
}

// Writes the host pid into the region slot of each process libvgpu could not
// name by itself (a container with its own pid namespace). Regions are opened
// for writing only when one of their processes lacks it.
uint64_t RecordMissingHostPids(const std::vector<AttributedProcess>& processes) {
  std::map<const RegionDir*, std::vector<host::HostPid>> missing;
  for (const auto& p : processes) {
    if (!p.region->region) continue;
    for (const auto& slot : p.region->region->processes) {
      if (slot.pid == p.process.container_pid && slot.host_pid == 0) {
        missing[p.region].push_back({p.process.container_pid, p.process.host_pid});
      }
    }
  }
  uint64_t recorded = 0;
  for (const auto& [region, pids] : missing) {
    auto written = host::RecordHostPids(region->path + "/" + region->region_file, pids);
    if (written.ok()) {
      recorded += static_cast<uint64_t>(*written);
    } else {
      log::Warn("cannot record host pids in a region",
                {{"region", region->name}, {"error", written.error().message}});
    }
  }
  return recorded;
}

}  // namespace

NodeAllocations VgpuAllocations(const NodeAllocations& allocations) {
  NodeAllocations out;
  out.problems = allocations.problems;
  for (const auto& pod : allocations.pods) {
    PodGpuAllocation kept = pod;
    bool any = false;
    for (auto& c : kept.allocation.containers) {
      std::erase_if(c.devices, [](const core::DeviceSlice& d) { return !d.mig_profile.empty(); });
      any = any || !c.devices.empty();
    }
    if (any) out.pods.push_back(std::move(kept));
  }
  return out;
}

NodeMonitor::NodeMonitor(MonitorOptions options, host::InventorySource* inventory, DeviceState* devices,
                         RegionCatalog* catalog, PodResourcesSource* pod_resources, NodePods* pods,
                         ProcessInspector* inspector, Enforcer* enforcer, EventSink events)
    : options_(std::move(options)),
      inventory_(inventory),
      devices_(devices),
      catalog_(catalog),
      pod_resources_(pod_resources),
      pods_(pods),
      inspector_(inspector),
      enforcer_(enforcer),
      events_(std::move(events)),
      thread_(options_.interval, [this] { PassOnce(); }) {}

NodeMonitor::~NodeMonitor() {
  Stop();
}

std::shared_ptr<const NodeSnapshot> NodeMonitor::Latest() const {
  std::lock_guard lock(mu_);
  return latest_;
}

MonitorCounters NodeMonitor::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

void NodeMonitor::Report(const Violation& v) {
  const std::string who = Describe(v.owner, v.region);
  const std::string over = who + " uses " + Mib(v.used_bytes) + " on GPU " + v.gpu_uuid +
                           ", over its limit of " + Mib(v.limit_bytes) + " (from its " + v.limit_source + ")";
  for (const auto& o : v.kill ? v.offenders : std::vector<Offender>{}) {
    const std::string process = "process " + std::to_string(o.process.host_pid) + " (" + o.process.command +
                                ", pid " + std::to_string(o.process.container_pid) +
                                " in the container) holding " + Mib(o.used_bytes) + ", " +
                                Mib(o.accounted_bytes) + " of it seen by libvgpu";
    if (o.killed) {
      const std::string message = over + ": killed " + process + " (ACTIVE_OOM_KILLER)";
      log::Warn(message);
      if (events_ && v.owner) events_(*v.owner, "GPUMemoryLimitKill", message);
      continue;
    }
    // A kill that fails is retried every pass; it is reported once per episode.
    const std::string message = over + ": could not kill " + process + ": " + o.kill_error;
    if (!v.new_episode) {
      log::Debug(message);
      continue;
    }
    log::Error(message);
    if (events_ && v.owner) events_(*v.owner, "GPUMemoryLimitKillFailed", message);
  }
  if (!v.kill && v.new_episode) {
    std::string message = over + "; ACTIVE_OOM_KILLER is off, so nothing is killed";
    if (!v.offenders.empty()) {
      message += " (the process libvgpu did not account for most: " +
                 std::to_string(v.offenders.front().process.host_pid) + " " +
                 v.offenders.front().process.command + ")";
    }
    log::Warn(message);
    if (events_ && v.owner) events_(*v.owner, "GPUMemoryOverLimit", message);
  }
}

void NodeMonitor::ReportCompute(const ComputeViolation& v) {
  const std::string over = Describe(v.owner, v.region) + " keeps " + std::to_string(v.used_percent) +
                           " % of GPU " + v.gpu_uuid + "'s SMs busy, over its " +
                           std::to_string(v.quota_percent) + " % (gpucores) for " +
                           std::to_string(v.passes_over) + " monitor passes (others used " +
                           std::to_string(v.others_percent) + " %)";
  auto describe = [](const ComputeOffender& o) {
    return "process " + std::to_string(o.process.host_pid) + " (" + o.process.command + ", pid " +
           std::to_string(o.process.container_pid) + " in the container) at " +
           std::to_string(o.sm_util_percent) + " %" + (o.in_region ? "" : ", not seen by libvgpu");
  };
  for (const auto& o : v.kill ? v.offenders : std::vector<ComputeOffender>{}) {
    if (o.killed) {
      const std::string message = over + ": killed " + describe(o) + " (compute_enforcement: kill)";
      log::Warn(message);
      if (events_ && v.owner) events_(*v.owner, "GPUComputeLimitKill", message);
      continue;
    }
    const std::string message = over + ": could not kill " + describe(o) + ": " + o.kill_error;
    if (!v.new_episode) {
      log::Debug(message);
      continue;
    }
    log::Error(message);
    if (events_ && v.owner) events_(*v.owner, "GPUComputeLimitKillFailed", message);
  }
  if (!v.kill && v.new_episode) {
    std::string message = over + "; compute_enforcement is report, so nothing is killed";
    if (!v.offenders.empty()) message += " (the first offender: " + describe(v.offenders.front()) + ")";
    log::Warn(message);
    if (events_ && v.owner) events_(*v.owner, "GPUComputeOverQuota", message);
  }
}

void NodeMonitor::PassOnce() {
  auto snapshot = std::make_shared<NodeSnapshot>();
  const auto now_steady = std::chrono::steady_clock::now();
  snapshot->taken_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  MonitorCounters delta;

  // 1. GPUs.
  auto samples = inventory_->Sample();
  if (samples.ok()) {
    snapshot->samples = std::move(samples).value();
    for (const auto& s : snapshot->samples) {
      if (s.lost && devices_->SetHealth(s.uuid, false)) {
        log::Warn("GPU lost (the driver cannot reach it); marking it unhealthy", {{"gpu", s.uuid}});
      }
    }
  } else {
    ++delta.sample_errors;
    log::Warn("cannot sample the GPUs", {{"error", samples.error().message}});
  }

  // 2. Regions.
  std::vector<RegionDir> regions;
  if (auto scanned = catalog_->Scan(); scanned.ok()) {
    regions = std::move(scanned).value();
  } else {
    log::Warn("cannot scan the regions", {{"error", scanned.error().message}});
  }

  // 3. Owners, and cleanup of regions whose container is gone.
  std::optional<std::vector<ContainerDevices>> containers;  // the kubelet's answer, when it gave one
  if (pod_resources_ != nullptr) {
    auto listed = pod_resources_->List();
    if (listed.ok()) containers = *listed;
    if (listed.ok()) {
      if (pod_resources_failing_) log::Info("the kubelet's PodResources API answers again");
      pod_resources_failing_ = false;
      snapshot->pod_resources_ok = true;
      std::set<std::string> names{options_.resource_name};
      if (options_.more_resource_names) names.merge(options_.more_resource_names());
      AssignOwners(regions, *listed, names);
      auto removed = catalog_->CleanUp(regions, options_.region_grace_seconds);
      if (!removed.empty()) {
        std::set<std::string> gone(removed.begin(), removed.end());
        for (const auto& name : removed)
          log::Info("removed a region: its container is gone", {{"region", name}});
        std::erase_if(regions, [&](const RegionDir& r) { return gone.count(r.name) > 0; });
        delta.regions_removed += removed.size();
      }
    } else {
      ++delta.pod_resources_errors;
      if (!pod_resources_failing_) {
        log::Warn(
            "cannot list pod resources from the kubelet; regions stay unattributed and none is removed until "
            "it "
            "answers",
            {{"error", listed.error().message}});
      }
      pod_resources_failing_ = true;
    }
  }

  // 3b. The limits files of the containers whose pod is now known (limits_file.h).
  if (pods_ != nullptr && pods_->synced()) {
    delta.limits_files_written +=
        WriteContainerLimits(catalog_->root(), regions, VgpuAllocations(pods_->Allocations()),
                             pods_->UnplacedGpuPods(options_.resource_name), options_.unplaced_pods);
  }

  // 3c. DRA claims' regions (tessera-dra's, claim_regions.h): after the
  // clean-up and limits files above, which are tessera-node's own regions'.
  if (!options_.dra_region_dir.empty()) {
    auto claims = ScanClaimRegions(options_.dra_region_dir, host::kRegionFileName);
    if (claims.ok()) {
      if (containers) AssignClaimOwners(*claims, *containers);
      for (auto& dir : *claims) {
        if (!dir.claim->error.empty() && reported_claims_.insert(dir.name).second) {
          log::Error("a DRA claim's limits file is refused: its region's or environment's limits are used",
                     {{"region", dir.name}, {"error", dir.claim->error}});
        }
        regions.push_back(std::move(dir));
      }
    } else {
      log::Warn("cannot scan the DRA claims' regions", {{"error", claims.error().message}});
    }
  }

  // 4. Processes: host pids, enforcement.
  std::vector<AttributedProcess> processes;
  if (samples.ok() && inspector_ != nullptr) {
    processes = AttributeGpuProcesses(snapshot->samples, regions, *inspector_);
  }
  delta.host_pids_recorded += RecordMissingHostPids(processes);
  if (enforcer_ != nullptr) {
    for (const auto& v : enforcer_->Pass(processes)) {
      if (v.new_episode) ++delta.violations;
      for (const auto& o : v.offenders) {
        if (o.killed) ++delta.kills;
        if (v.kill && !o.killed) ++delta.kill_failures;
      }
      Report(v);
    }
    if (samples.ok()) {
      for (const auto& v : enforcer_->ComputePass(processes, snapshot->samples)) {
        if (v.new_episode) ++delta.compute_violations;
        for (const auto& o : v.offenders) {
          if (o.killed) ++delta.compute_kills;
          if (v.kill && !o.killed) ++delta.kill_failures;
        }
        ReportCompute(v);
      }
    }
  }

  // 5. What the scheduler allocated here.
  if (pods_ != nullptr && pods_->synced()) {
    std::vector<std::string> problems;
    auto allocations = VgpuAllocations(pods_->Allocations());
    auto state = AllocatedState("", devices_->Get().gpus, allocations, &problems);
    delta.overcommits += ReportAllocations(allocations, state, problems);
    const auto unplaced = pods_->UnplacedGpuPods(options_.resource_name);
    HandleUnplaced(unplaced, containers ? &*containers : nullptr);
    snapshot->unplaced_pods = static_cast<int>(unplaced.size());
    snapshot->allocations_known = true;
    snapshot->allocated = state.gpus();
  }

  // 6. The snapshot (the devices as step 5 left them).
  snapshot->gpus = devices_->Get().gpus;
  const double interval_ns =
      previous_pass_ == std::chrono::steady_clock::time_point{}
          ? 0
          : static_cast<double>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(now_steady - previous_pass_).count());
  std::map<std::pair<std::string, std::string>, uint64_t> gpu_time;
  for (const auto& r : regions) {
    ++snapshot->regions;
    if (!r.region_error.empty()) {
      ++snapshot->regions_corrupt;
      if (reported_corrupt_.insert(r.name).second) {
        log::Error("region skipped, never trusted (its container is not metered from it)",
                   {{"region", r.name}, {"error", r.region_error}});
      }
      continue;
    }
    if (!r.owner) ++snapshot->regions_unowned;
    if (!r.region) continue;
    for (size_t d = 0; d < r.region->devices.size(); ++d) {
      const auto& dev = r.region->devices[d];
      ContainerGpuUsage c;
      c.region = r.name;
      c.owner = r.owner;
      c.gpu_uuid = dev.uuid;
      c.memory_used_bytes = dev.memory_used_bytes;
      c.memory_limit_bytes = dev.memory_limit_bytes;
      c.memory_peak_bytes = dev.memory_peak_bytes;
      c.oom_refusals = dev.oom_refusals;
      c.core_quota_percent = dev.core_quota_percent;
      c.gpu_time_ns = dev.gpu_time_used_ns;
      c.throttled_ns = dev.throttled_ns;
      for (const auto& p : r.region->processes) {
        if (d < p.memory_used_bytes.size() && (p.memory_used_bytes[d] > 0 || p.gpu_time_used_ns[d] > 0))
          ++c.processes;
      }
      auto key = std::make_pair(r.name, dev.uuid);
      gpu_time[key] = c.gpu_time_ns;
      if (auto prev = previous_gpu_time_.find(key); prev != previous_gpu_time_.end() && interval_ns > 0) {
        const uint64_t gained = c.gpu_time_ns >= prev->second ? c.gpu_time_ns - prev->second : 0;
        c.compute_share_percent = 100.0 * static_cast<double>(gained) / interval_ns;
      }
      snapshot->containers.push_back(std::move(c));
    }
  }
  previous_gpu_time_ = std::move(gpu_time);
  previous_pass_ = now_steady;

  std::lock_guard lock(mu_);
  latest_ = std::move(snapshot);
  ++counters_.passes;
  counters_.sample_errors += delta.sample_errors;
  counters_.pod_resources_errors += delta.pod_resources_errors;
  counters_.regions_removed += delta.regions_removed;
  counters_.violations += delta.violations;
  counters_.kills += delta.kills;
  counters_.kill_failures += delta.kill_failures;
  counters_.host_pids_recorded += delta.host_pids_recorded;
  counters_.overcommits += delta.overcommits;
  counters_.limits_files_written += delta.limits_files_written;
  counters_.compute_violations += delta.compute_violations;
  counters_.compute_kills += delta.compute_kills;
}

void NodeMonitor::HandleUnplaced(const std::vector<UnplacedPod>& unplaced,
                                 const std::vector<ContainerDevices>* containers) {
  const bool whole = options_.unplaced_pods == UnplacedPodsPolicy::kWholeGpu;
  std::set<std::string> seen;
  for (const auto& pod : unplaced) {
    const std::string id = pod.uid.empty() ? pod.key() : pod.uid;
    seen.insert(id);
    if (reported_unplaced_.count(id)) continue;
    const std::string message =
        "pod " + pod.key() + " asks for " + options_.resource_name +
        " but tessera-scheduler did not place it (no tessera.io/allocation annotation: another scheduler, "
        "spec.nodeName set by hand, or a namespace the webhook skips); " +
        (whole ? std::string("under unplaced_pods: whole-gpu it holds the GPUs the kubelet gave it whole, "
                             "without limits, and tessera places nothing else on them while it runs")
               : std::string("under unplaced_pods: refuse its containers see no GPU; create it with "
                             "schedulerName: tessera-scheduler in a namespace the webhook covers"));
    log::Warn(message);
    if (events_) events_({pod.pod_namespace, pod.pod_name, ""}, "UnplacedGPUPod", message);
  }
  reported_unplaced_ = std::move(seen);
  if (!whole || containers == nullptr) return;  // without the kubelet's answer: keep what is published
  std::set<std::string> keys;
  for (const auto& pod : unplaced) keys.insert(pod.key());
  std::map<std::string, std::string> held;
  for (const auto& c : *containers) {
    const std::string key = c.pod_namespace + "/" + c.pod_name;
    if (c.resource_name != options_.resource_name || !keys.count(key)) continue;
    for (const auto& id : c.device_ids) {
      if (auto parsed = ParseDeviceId(id); parsed.ok()) held[parsed->gpu_uuid] = key;
    }
  }
  if (devices_->SetHeldBy(held)) {
    std::string list;
    for (const auto& [uuid, pod] : held) list += (list.empty() ? "" : ", ") + uuid + " by " + pod;
    log::Info("GPUs held whole by pods tessera did not place, published in the inventory",
              {{"gpus", list.empty() ? "none" : list}});
  }
}

uint64_t NodeMonitor::ReportAllocations(const NodeAllocations& allocations, const core::NodeState& state,
                                        const std::vector<std::string>& problems) {
  std::set<std::string> still(problems.begin(), problems.end());
  for (const auto& problem : problems) {
    if (!reported_problems_.count(problem)) {
      log::Error(
          "a pod's allocation is not accounted (the scheduler placed it on a GPU this node does not have?)",
          {{"pod", problem}});
    }
  }
  reported_problems_ = std::move(still);

  uint64_t started = 0;
  std::set<std::string> now;
  for (const auto& g : state.gpus()) {
    const std::string why = g.Overcommit();
    if (why.empty()) {
      if (overcommitted_.count(g.gpu.uuid)) log::Info("GPU " + g.gpu.uuid + " is no longer overcommitted");
      continue;
    }
    now.insert(g.gpu.uuid);
    if (overcommitted_.count(g.gpu.uuid)) continue;
    ++started;
    std::string holders;
    std::vector<ContainerRef> pods;
    for (const auto& pod : allocations.pods) {
      bool here = false;
      for (const auto& c : pod.allocation.containers) {
        for (const auto& d : c.devices) here = here || d.uuid == g.gpu.uuid;
      }
      if (!here) continue;
      holders += (holders.empty() ? "" : ", ") + pod.pod_namespace + "/" + pod.pod_name;
      pods.push_back({pod.pod_namespace, pod.pod_name, ""});
    }
    const std::string message = "GPU " + g.gpu.uuid + " is overcommitted: " + why +
                                " (pods bound to this node with slices on it: " + holders +
                                "); limits inside each container still hold, but together they may not fit";
    log::Error(message);
    if (events_) {
      for (const auto& pod : pods) events_(pod, "GPUOvercommitted", message);
    }
  }
  overcommitted_ = std::move(now);
  return started;
}

}  // namespace tessera::node
