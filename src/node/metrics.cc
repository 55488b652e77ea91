#include "node/metrics.h"

#include <span>

#include "base/prometheus_text.h"

namespace tessera::node {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::optional<ContainerRef> ParseOwner(const std::string& used_by) {
  const auto first = used_by.find('/');
  const auto second = first == std::string::npos ? std::string::npos : used_by.find('/', first + 1);
  if (second == std::string::npos) return std::nullopt;
  return ContainerRef{used_by.substr(0, first), used_by.substr(first + 1, second - first - 1),
                      used_by.substr(second + 1)};
}

// A series without labels: always described, added when its value is known.
struct UnlabelledSeries {
  const char* name;
  MetricType type;
  const char* help;
  std::optional<double> value;
};

void AddUnlabelled(PrometheusText& t, std::span<const UnlabelledSeries> series) {
  for (const auto& s : series) {
    t.Describe(s.name, s.type, s.help);
    if (s.value) t.Add(s.name, {}, *s.value);
  }
}

// Per MIG device: the parent GPU's memory, utilisation and processes, named
// as the GPU's metrics are, with the device's labels.
void AddMigDevices(PrometheusText& t, const std::vector<MigDeviceMetrics>& devices) {
  using T = MetricType;
  t.Describe("tessera_mig_device_info", T::kGauge,
             "1 per MIG device, labelled with its parent GPU, MIG UUID and profile.");
  t.Describe("tessera_mig_device_memory_total_bytes", T::kGauge, "Device memory of the MIG device (NVML).");
  t.Describe("tessera_mig_device_memory_used_bytes", T::kGauge,
             "Device memory in use on the MIG device, all its processes (NVML).");
  t.Describe("tessera_mig_device_utilization_percent", T::kGauge,
             "Percent of the last sample period in which a kernel ran on the MIG device, where NVML reports "
             "it (NVIDIA's NVML does not for MIG devices).");
  t.Describe("tessera_mig_device_processes", T::kGauge, "Compute processes on the MIG device (NVML).");
  for (const auto& d : devices) {
    MetricLabels l = {{"gpu_uuid", d.gpu_uuid},
                      {"gpu_index", std::to_string(d.gpu_index)},
                      {"mig_uuid", d.mig_uuid},
                      {"profile", d.profile}};
    t.Add("tessera_mig_device_info", l, 1);
    if (d.owner) {
      l.insert(l.end(), {{"namespace", d.owner->pod_namespace},
                         {"pod", d.owner->pod_name},
                         {"container", d.owner->container_name}});
    }
    t.Add("tessera_mig_device_memory_total_bytes", l, static_cast<double>(d.memory_total_bytes));
    t.Add("tessera_mig_device_memory_used_bytes", l, static_cast<double>(d.memory_used_bytes));
    if (d.utilization_percent >= 0) t.Add("tessera_mig_device_utilization_percent", l, d.utilization_percent);
    t.Add("tessera_mig_device_processes", l, d.processes);
  }
}

}  // namespace

std::vector<MigDeviceMetrics> MigDeviceMetricsOf(const std::vector<mig::MigDevice>& devices,
                                                 const std::vector<host::MigGpuState>& listed) {
  std::vector<MigDeviceMetrics> out;
  for (const auto& device : devices) {
    for (const auto& gpu : listed) {
      for (const auto& i : gpu.instances) {
        if (i.mig_uuid != device.mig_uuid) continue;
        MigDeviceMetrics d;
        d.gpu_uuid = device.parent_uuid;
        d.gpu_index = device.parent_index;
        d.mig_uuid = device.mig_uuid;
        d.profile = device.profile;
        d.memory_total_bytes = i.memory_mib << 20;
        d.memory_used_bytes = i.memory_used_bytes;
        d.utilization_percent = i.utilization_percent;
        d.processes = i.processes;
        d.owner = ParseOwner(device.used_by);
        out.push_back(std::move(d));
      }
    }
  }
  return out;
}

std::string RenderMetrics(const NodeSnapshot* snapshot, const MonitorCounters& counters,
                          const AgentStatus& status, const std::vector<MigDeviceMetrics>& mig) {
  PrometheusText t;
  using T = MetricType;

  // --- the agent ------------------------------------------------------------
  t.Describe("tessera_node_info", T::kGauge, "1, labelled with the node and the agent's version.");
  t.Add("tessera_node_info", {{"node", status.node_name}, {"version", status.version}}, 1);
  auto count = [](uint64_t n) { return std::optional<double>(static_cast<double>(n)); };
  auto seen = [&](auto value) { return snapshot ? std::optional<double>(value(*snapshot)) : std::nullopt; };
  const UnlabelledSeries agent[] = {
      {"tessera_node_monitor_passes_total", T::kCounter,
       "Monitor passes (GPU sampling, region scan, cleanup, enforcement) completed.", count(counters.passes)},
      {"tessera_node_last_pass_timestamp_seconds", T::kGauge,
       "Unix time of the latest monitor pass; a stale value means the agent is stuck.",
       seen([](const NodeSnapshot& s) { return s.taken_unix_ms / 1000.0; })},
      {"tessera_node_gpu_sample_errors_total", T::kCounter, "Passes in which NVML could not be sampled.",
       count(counters.sample_errors)},
      {"tessera_node_kubelet_registrations_total", T::kCounter,
       "Successful registrations with the kubelet (one per kubelet start).",
       static_cast<double>(status.kubelet_registrations)},
      {"tessera_node_pod_resources_up", T::kGauge,
       "1 when the kubelet's PodResources API answered at the latest pass.",
       seen([](const NodeSnapshot& s) { return s.pod_resources_ok ? 1.0 : 0.0; })},
      {"tessera_node_pod_resources_errors_total", T::kCounter,
       "Passes in which the kubelet's PodResources API could not be read.",
       count(counters.pod_resources_errors)},
      {"tessera_node_regions_removed_total", T::kCounter, "Regions removed because their container is gone.",
       count(counters.regions_removed)},
      {"tessera_node_memory_violations_total", T::kCounter,
       "Times a container's device memory (as the driver counts it) went over its limit.",
       count(counters.violations)},
      {"tessera_node_gpu_overcommits_total", T::kCounter,
       "Times a GPU was found holding more allocations than it offers (once per episode).",
       count(counters.overcommits)},
      {"tessera_node_enforcement_kills_total", T::kCounter,
       "Processes killed because their container was over its memory limit (ACTIVE_OOM_KILLER).",
       count(counters.kills)},
      {"tessera_node_compute_violations_total", T::kCounter,
       "Times a container's SM utilisation (as the driver counts it) stayed over its gpucores for "
       "compute_window_passes monitor passes.",
       count(counters.compute_violations)},
      {"tessera_node_compute_kills_total", T::kCounter,
       "Processes killed because their container stayed over its gpucores (compute_enforcement: kill).",
       count(counters.compute_kills)},
      {"tessera_node_enforcement_kill_failures_total", T::kCounter, "Kills attempted that failed.",
       count(counters.kill_failures)},
      {"tessera_node_host_pids_recorded_total", T::kCounter,
       "Region slots given their process's host pid (containers with their own pid namespace).",
       count(counters.host_pids_recorded)},
  };
  AddUnlabelled(t, agent);
  t.Describe("tessera_node_regions", T::kGauge,
             "Container regions on the node: all of them, corrupt ones (refused, never trusted), and ones no "
             "container listed by the kubelet owns.");
  if (snapshot) {
    t.Add("tessera_node_regions", {{"state", "all"}}, snapshot->regions);
    t.Add("tessera_node_regions", {{"state", "corrupt"}}, snapshot->regions_corrupt);
    t.Add("tessera_node_regions", {{"state", "unowned"}}, snapshot->regions_unowned);
  }
  if (snapshot && snapshot->allocations_known) {
    const UnlabelledSeries unplaced[] = {
        {"tessera_node_unplaced_gpu_pods", T::kGauge,
         "GPU pods bound to this node that tessera-scheduler did not place (see unplaced_pods).",
         static_cast<double>(snapshot->unplaced_pods)}};
    AddUnlabelled(t, unplaced);
  }
  if (status.publisher) {
    const UnlabelledSeries publisher[] = {
        {"tessera_node_inventory_publishes_total", T::kCounter,
         "Successful writes of the node's GPU inventory annotation.", count(status.publisher->publishes)},
        {"tessera_node_inventory_publish_errors_total", T::kCounter,
         "Failed attempts to write the GPU inventory annotation.", count(status.publisher->failures)},
        {"tessera_node_inventory_last_publish_timestamp_seconds", T::kGauge,
         "Unix time of the latest successful inventory write (the heartbeat the scheduler sees).",
         static_cast<double>(status.publisher->last_success_unix)},
    };
    AddUnlabelled(t, publisher);
  }
  if (!mig.empty()) AddMigDevices(t, mig);
  if (!snapshot) return t.Render();

  // --- GPUs -----------------------------------------------------------------
  t.Describe("tessera_gpu_info", T::kGauge, "1 per GPU, labelled with its index and model.");
  t.Describe("tessera_gpu_healthy", T::kGauge,
             "1 when the GPU is advertised healthy, 0 after a critical XID or loss.");
  t.Describe("tessera_gpu_memory_total_bytes", T::kGauge, "Device memory of the GPU (NVML).");
  t.Describe("tessera_gpu_memory_used_bytes", T::kGauge,
             "Device memory in use on the GPU, all processes (NVML).");
  t.Describe("tessera_gpu_utilization_percent", T::kGauge,
             "Percent of the last sample period in which a kernel ran (NVML).");
  t.Describe("tessera_gpu_processes", T::kGauge, "Compute processes on the GPU (NVML).");
  t.Describe("tessera_gpu_memory_offered_bytes", T::kGauge,
             "Device memory offered for sharing (physical x memory_scaling).");
  t.Describe("tessera_gpu_allocated_memory_bytes", T::kGauge,
             "Device memory the scheduler allocated on the GPU to pods bound to this node.");
  t.Describe("tessera_gpu_allocated_cores_percent", T::kGauge,
             "Compute (percent of the GPU) the scheduler allocated on the GPU.");
  t.Describe("tessera_gpu_slots_total", T::kGauge, "vGPUs that may share the GPU (split count).");
  t.Describe("tessera_gpu_slots_used", T::kGauge, "vGPUs the scheduler placed on the GPU.");
  t.Describe("tessera_gpu_held_by_unplaced_pod", T::kGauge,
             "1 while a pod tessera-scheduler did not place holds the GPU whole (unplaced_pods: whole-gpu).");
  t.Describe("tessera_gpu_overcommitted", T::kGauge,
             "1 while the pods bound here hold more of the GPU than it offers (memory, cores, slots or "
             "exclusivity), else 0.");
  for (const auto& gpu : snapshot->gpus) {
    const MetricLabels id = {{"gpu_uuid", gpu.uuid}};
    t.Add("tessera_gpu_info",
          {{"gpu_uuid", gpu.uuid}, {"gpu_index", std::to_string(gpu.index)}, {"model", gpu.model}}, 1);
    t.Add("tessera_gpu_healthy", id, gpu.healthy ? 1 : 0);
    t.Add("tessera_gpu_memory_offered_bytes", id, static_cast<double>(gpu.memory_mib) * kMiB);
    t.Add("tessera_gpu_slots_total", id, gpu.slots);
    t.Add("tessera_gpu_held_by_unplaced_pod", id, gpu.held_by.empty() ? 0 : 1);
    for (const auto& s : snapshot->samples) {
      if (s.uuid != gpu.uuid || s.lost) continue;
      if (s.memory_total_bytes > 0) {
        t.Add("tessera_gpu_memory_total_bytes", id, static_cast<double>(s.memory_total_bytes));
        t.Add("tessera_gpu_memory_used_bytes", id, static_cast<double>(s.memory_used_bytes));
      }
      if (s.utilization_percent >= 0) t.Add("tessera_gpu_utilization_percent", id, s.utilization_percent);
      if (s.processes_known) t.Add("tessera_gpu_processes", id, static_cast<double>(s.processes.size()));
    }
    if (snapshot->allocations_known) {
      for (const auto& a : snapshot->allocated) {
        if (a.gpu.uuid != gpu.uuid) continue;
        t.Add("tessera_gpu_allocated_memory_bytes", id, static_cast<double>(a.used.memory_mib) * kMiB);
        t.Add("tessera_gpu_allocated_cores_percent", id, a.used.cores);
        t.Add("tessera_gpu_slots_used", id, a.used.slots);
        t.Add("tessera_gpu_overcommitted", id, a.Overcommit().empty() ? 0 : 1);
      }
    }
  }

  // --- containers -----------------------------------------------------------
  t.Describe("tessera_container_memory_used_bytes", T::kGauge,
             "Device memory the container's processes hold on the GPU, as libvgpu accounts it.");
  t.Describe("tessera_container_memory_limit_bytes", T::kGauge,
             "The container's memory limit on the GPU (0 = none).");
  t.Describe("tessera_container_memory_peak_bytes", T::kGauge,
             "Highest memory_used seen since the container started.");
  t.Describe("tessera_container_oom_refusals_total", T::kCounter,
             "Allocations libvgpu refused because they would pass the limit.");
  t.Describe("tessera_container_gpu_time_seconds_total", T::kCounter,
             "GPU time the container's kernels used (measured by libvgpu).");
  t.Describe("tessera_container_compute_share_percent", T::kGauge,
             "GPU time used over the last monitor interval, in percent of the GPU.");
  t.Describe("tessera_container_compute_quota_percent", T::kGauge,
             "The container's compute quota on the GPU (0 or 100 = not limited).");
  t.Describe("tessera_container_throttled_seconds_total", T::kCounter,
             "Wall time the container's launches waited for compute budget.");
  t.Describe("tessera_container_processes", T::kGauge, "Live processes of the container using the GPU.");
  for (const auto& c : snapshot->containers) {
    MetricLabels l = {{"namespace", c.owner ? c.owner->pod_namespace : ""},
                      {"pod", c.owner ? c.owner->pod_name : ""},
                      {"container", c.owner ? c.owner->container_name : ""},
                      {"gpu_uuid", c.gpu_uuid},
                      {"region", c.region}};
    t.Add("tessera_container_memory_used_bytes", l, static_cast<double>(c.memory_used_bytes));
    t.Add("tessera_container_memory_limit_bytes", l, static_cast<double>(c.memory_limit_bytes));
    t.Add("tessera_container_memory_peak_bytes", l, static_cast<double>(c.memory_peak_bytes));
    t.Add("tessera_container_oom_refusals_total", l, static_cast<double>(c.oom_refusals));
    t.Add("tessera_container_gpu_time_seconds_total", l, static_cast<double>(c.gpu_time_ns) / 1e9);
    if (c.compute_share_percent >= 0)
      t.Add("tessera_container_compute_share_percent", l, c.compute_share_percent);
    t.Add("tessera_container_compute_quota_percent", l, c.core_quota_percent);
    t.Add("tessera_container_throttled_seconds_total", l, static_cast<double>(c.throttled_ns) / 1e9);
    t.Add("tessera_container_processes", l, c.processes);
  }
  return t.Render();
}

}  // namespace tessera::node
