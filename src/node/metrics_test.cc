#include "node/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tessera::node {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

NodeSnapshot Snapshot() {
  NodeSnapshot s;
  s.taken_unix_ms = 1763900000500;
  core::Gpu gpu;
  gpu.uuid = "GPU-1";
  gpu.index = 0;
  gpu.model = "NVIDIA A100-SXM4-80GB";
  gpu.memory_mib = 81920;
  gpu.slots = 10;
  s.gpus = {gpu};
  host::GpuSample sample;
  sample.uuid = "GPU-1";
  sample.memory_total_bytes = 85899345920ull;
  sample.memory_used_bytes = 3221225472ull;
  sample.utilization_percent = 42;
  sample.processes_known = true;
  sample.processes = {{100, 1}, {101, 2}};
  s.samples = {sample};
  s.allocations_known = true;
  core::GpuState allocated;
  allocated.gpu = gpu;
  allocated.used.memory_mib = 3000;
  allocated.used.cores = 30;
  allocated.used.slots = 2;
  s.allocated = {allocated};
  ContainerGpuUsage c;
  c.region = "r-1";
  c.owner = ContainerRef{"ml", "train-0", "main"};
  c.gpu_uuid = "GPU-1";
  c.memory_used_bytes = 1073741824;
  c.memory_limit_bytes = 2147483648;
  c.memory_peak_bytes = 1610612736;
  c.oom_refusals = 3;
  c.core_quota_percent = 30;
  c.gpu_time_ns = 2500000000;
  c.throttled_ns = 500000000;
  c.compute_share_percent = 29.5;
  c.processes = 1;
  s.containers = {c};
  ContainerGpuUsage unowned = c;
  unowned.region = "r-2";
  unowned.owner.reset();
  unowned.compute_share_percent = -1;
  s.containers.push_back(unowned);
  s.regions = 3;
  s.regions_corrupt = 1;
  s.regions_unowned = 1;
  s.pod_resources_ok = true;
  return s;
}

TEST(MetricsTest, RendersGpuContainerAndAgentMetrics) {
  auto snapshot = Snapshot();
  MonitorCounters counters;
  counters.passes = 12;
  counters.kills = 1;
  AgentStatus status{"node-a", "0.1.0", 2, PublisherStats{5, 1, "", 1763900000}};
  const std::string text = RenderMetrics(&snapshot, counters, status);

  EXPECT_THAT(text, HasSubstr("# TYPE tessera_gpu_memory_total_bytes gauge\n"));
  EXPECT_THAT(text, HasSubstr("tessera_gpu_memory_total_bytes{gpu_uuid=\"GPU-1\"} 85899345920\n"));
  EXPECT_THAT(text, HasSubstr("tessera_gpu_memory_used_bytes{gpu_uuid=\"GPU-1\"} 3221225472\n"));
  EXPECT_THAT(text, HasSubstr("tessera_gpu_utilization_percent{gpu_uuid=\"GPU-1\"} 42\n"));
  EXPECT_THAT(
      text,
      HasSubstr("tessera_gpu_info{gpu_uuid=\"GPU-1\",gpu_index=\"0\",model=\"NVIDIA A100-SXM4-80GB\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tessera_gpu_allocated_memory_bytes{gpu_uuid=\"GPU-1\"} 3145728000\n"));
  EXPECT_THAT(text, HasSubstr("tessera_gpu_allocated_cores_percent{gpu_uuid=\"GPU-1\"} 30\n"));
  EXPECT_THAT(text, HasSubstr("tessera_gpu_slots_used{gpu_uuid=\"GPU-1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tessera_gpu_slots_total{gpu_uuid=\"GPU-1\"} 10\n"));
  EXPECT_THAT(text, HasSubstr("tessera_gpu_processes{gpu_uuid=\"GPU-1\"} 2\n"));

  const std::string labels =
      "{namespace=\"ml\",pod=\"train-0\",container=\"main\",gpu_uuid=\"GPU-1\",region=\"r-1\"}";
  EXPECT_THAT(text, HasSubstr("tessera_container_memory_used_bytes" + labels + " 1073741824\n"));
  EXPECT_THAT(text, HasSubstr("tessera_container_memory_limit_bytes" + labels + " 2147483648\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tessera_container_oom_refusals_total counter\n"));
  EXPECT_THAT(text, HasSubstr("tessera_container_oom_refusals_total" + labels + " 3\n"));
  EXPECT_THAT(text, HasSubstr("tessera_container_gpu_time_seconds_total" + labels + " 2.5\n"));
  EXPECT_THAT(text, HasSubstr("tessera_container_compute_share_percent" + labels + " 29.5\n"));
  EXPECT_THAT(text, HasSubstr("tessera_container_compute_quota_percent" + labels + " 30\n"));
  EXPECT_THAT(text, HasSubstr("tessera_container_throttled_seconds_total" + labels + " 0.5\n"));
  // A region nobody owns yet keeps its series, with empty pod labels; its share
  // is unknown until two passes have seen it.
  const std::string unowned = "{namespace=\"\",pod=\"\",container=\"\",gpu_uuid=\"GPU-1\",region=\"r-2\"}";
  EXPECT_THAT(text, HasSubstr("tessera_container_memory_used_bytes" + unowned + " 1073741824\n"));
  EXPECT_THAT(text, Not(HasSubstr("tessera_container_compute_share_percent" + unowned)));

  EXPECT_THAT(text, HasSubstr("tessera_node_info{node=\"node-a\",version=\"0.1.0\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tessera_node_monitor_passes_total 12\n"));
  EXPECT_THAT(text, HasSubstr("tessera_node_enforcement_kills_total 1\n"));
  EXPECT_THAT(text, HasSubstr("tessera_node_regions{state=\"corrupt\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tessera_node_kubelet_registrations_total 2\n"));
  EXPECT_THAT(text, HasSubstr("tessera_node_inventory_publishes_total 5\n"));
  EXPECT_THAT(text, HasSubstr("tessera_node_last_pass_timestamp_seconds 1763900000.5\n"));
}

TEST(MetricsTest, BeforeTheFirstPassOnlyTheAgentIsDescribed) {
  const std::string text = RenderMetrics(nullptr, MonitorCounters{}, AgentStatus{"node-a", "0.1.0", 0, {}});
  EXPECT_THAT(text, HasSubstr("tessera_node_info{"));
  EXPECT_THAT(text, Not(HasSubstr("tessera_gpu_")));
  EXPECT_THAT(text, Not(HasSubstr("tessera_node_inventory_publishes_total")));
}

// An A100-80GB in MIG mode as MigDriver::List reports it: a 1g.10gb a pod
// holds (with a utilisation, as an NVML that has one reports it) and a
// 3g.40gb nobody holds (no utilisation: NVIDIA's NVML has none for MIG).
std::vector<host::MigGpuState> MigGpus() {
  host::MigGpuState gpu;
  gpu.index = 1;
  gpu.uuid = "GPU-2";
  gpu.name = "NVIDIA A100-SXM4-80GB";
  gpu.memory_mib = 81920;
  gpu.pci_device_id = 0x20B210DE;
  gpu.mig_capable = gpu.mig_enabled = true;
  host::MigInstanceState small;
  small.profile_id = 19;
  small.start = 6;
  small.has_compute_instance = true;
  small.mig_uuid = "MIG-a";
  small.memory_mib = 9728;
  small.memory_used_bytes = 1073741824;
  small.utilization_percent = 37;
  small.processes = 1;
  host::MigInstanceState half = small;
  half.profile_id = 9;
  half.start = 0;
  half.mig_uuid = "MIG-b";
  half.memory_mib = 40192;
  half.memory_used_bytes = 0;
  half.utilization_percent = -1;
  half.processes = 0;
  gpu.instances = {half, small};
  return {gpu};
}

// The two as tessera-node advertises them; the 1g.10gb given to a pod.
std::vector<mig::MigDevice> Advertised() {
  mig::MigDevice small;
  small.mig_uuid = "MIG-a";
  small.parent_uuid = "GPU-2";
  small.parent_index = 1;
  small.profile = "1g.10gb";
  small.used_by = "ml/infer-0/main";
  mig::MigDevice half = small;
  half.mig_uuid = "MIG-b";
  half.profile = "3g.40gb";
  half.used_by = "";
  return {half, small};
}

TEST(MetricsTest, MigDevicesHaveMemoryUtilisationAndTheirPod) {
  const auto devices = MigDeviceMetricsOf(Advertised(), MigGpus());
  ASSERT_EQ(devices.size(), 2u);
  auto snapshot = Snapshot();
  const std::string text =
      RenderMetrics(&snapshot, MonitorCounters{}, AgentStatus{"node-a", "0.1.0", 0, {}}, devices);

  const std::string held =
      "{gpu_uuid=\"GPU-2\",gpu_index=\"1\",mig_uuid=\"MIG-a\",profile=\"1g.10gb\",namespace=\"ml\",pod="
      "\"infer-0\","
      "container=\"main\"}";
  EXPECT_THAT(text, HasSubstr("# TYPE tessera_mig_device_memory_used_bytes gauge\n"));
  EXPECT_THAT(text, HasSubstr("tessera_mig_device_memory_total_bytes" + held + " 10200547328\n"));
  EXPECT_THAT(text, HasSubstr("tessera_mig_device_memory_used_bytes" + held + " 1073741824\n"));
  EXPECT_THAT(text, HasSubstr("tessera_mig_device_utilization_percent" + held + " 37\n"));
  EXPECT_THAT(text, HasSubstr("tessera_mig_device_processes" + held + " 1\n"));
  EXPECT_THAT(text, HasSubstr("tessera_mig_device_info{gpu_uuid=\"GPU-2\",gpu_index=\"1\",mig_uuid=\"MIG-a\","
                              "profile=\"1g.10gb\"} 1\n"));

  const std::string free = "{gpu_uuid=\"GPU-2\",gpu_index=\"1\",mig_uuid=\"MIG-b\",profile=\"3g.40gb\"}";
  EXPECT_THAT(text, HasSubstr("tessera_mig_device_memory_total_bytes" + free + " 42144366592\n"));
  EXPECT_THAT(text, HasSubstr("tessera_mig_device_memory_used_bytes" + free + " 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("tessera_mig_device_utilization_percent" + free)));
  // The GPU's own series are untouched.
  EXPECT_THAT(text, HasSubstr("tessera_gpu_memory_used_bytes{gpu_uuid=\"GPU-1\"} 3221225472\n"));

  // No MIG devices: no MIG series described.
  EXPECT_THAT(RenderMetrics(&snapshot, MonitorCounters{}, AgentStatus{}),
              Not(HasSubstr("tessera_mig_device")));
}

TEST(MetricsTest, AMigDeviceNvmlNoLongerListsHasNoSeries) {
  auto gpus = MigGpus();
  gpus[0].instances.pop_back();  // MIG-a destroyed since it was advertised
  const auto devices = MigDeviceMetricsOf(Advertised(), gpus);
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].mig_uuid, "MIG-b");
  EXPECT_EQ(devices[0].profile, "3g.40gb");
  EXPECT_FALSE(devices[0].owner);
  EXPECT_EQ(devices[0].memory_total_bytes, 40192ull << 20);
}

}  // namespace
}  // namespace tessera::node
