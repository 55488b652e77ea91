#include "node/node_monitor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "base/testing.h"
#include "core/allocation_codec.h"
#include "node/enforcer.h"
#include "node/testing.h"
#include "vgpu/region.h"

namespace tessera::node {
namespace {

namespace fs = std::filesystem;

constexpr const char* kOwned = "aaaaaaaa-0000-4000-8000-000000000001";
constexpr const char* kGone = "bbbbbbbb-0000-4000-8000-000000000002";
constexpr const char* kCorrupt = "cccccccc-0000-4000-8000-000000000003";

class FakePodResources final : public PodResourcesSource {
 public:
  Result<std::vector<ContainerDevices>> List() override {
    if (!answering) return Error{"connection refused"};
    return containers;
  }
  bool answering = true;
  std::vector<ContainerDevices> containers;
};

class NodeMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    catalog_ = std::make_unique<RegionCatalog>(root_, "vgpu.region");
    inventory_ = std::make_unique<host::StaticInventory>(
        std::vector<core::Gpu>{TestA100("GPU-0", 0), TestA100("GPU-1", 1)});
    devices_.SetGpus(*inventory_->Discover());
    for (const char* name : {kOwned, kGone, kCorrupt}) {
      fs::create_directories(root_ + "/" + name);
      ASSERT_TRUE(
          WriteRegionRecord(root_, name, {"nvidia.com/gpu", {std::string("GPU-0::") + name[0]}, 0}).ok());
    }
    std::ofstream(root_ + "/" + kCorrupt + "/vgpu.region") << "garbage";
    char error[256] = {};
    ASSERT_TRUE(region_.open_file((root_ + "/" + kOwned + "/vgpu.region").c_str(), error, sizeof error))
        << error;
    ASSERT_TRUE(region_.claim_slot());
    device_ = region_.find_or_add_device("GPU-0", 4096ull << 20);
    ASSERT_TRUE(region_.reserve(device_, 1024ull << 20).ok);
    pod_resources_.containers = {{"ml", "train", "main", "nvidia.com/gpu", {"GPU-0::a"}}};
  }

  std::unique_ptr<NodeMonitor> Make(PodResourcesSource* pod_resources) {
    MonitorOptions options;
    options.region_grace_seconds = 0;
    return std::make_unique<NodeMonitor>(options, inventory_.get(), &devices_, catalog_.get(), pod_resources,
                                         nullptr, nullptr, nullptr, nullptr);
  }

  ::tessera::testing::TempDir tmp_{"tn-monitor"};
  const std::string root_ = tmp_.path();
  std::unique_ptr<host::StaticInventory> inventory_;
  DeviceState devices_;
  std::unique_ptr<RegionCatalog> catalog_;
  FakePodResources pod_resources_;
  vgpu::SharedRegion region_;
  int device_ = -1;
};

TEST_F(NodeMonitorTest, APassAttributesMetersAndCleansUp) {
  auto monitor = Make(&pod_resources_);
  monitor->PassOnce();
  auto snapshot = monitor->Latest();
  ASSERT_NE(snapshot, nullptr);
  EXPECT_TRUE(snapshot->pod_resources_ok);
  // The gone pod's region is removed; the corrupt one is owned by nobody either
  // and goes too, its file never read as a region.
  EXPECT_FALSE(fs::exists(root_ + "/" + kGone));
  EXPECT_EQ(monitor->counters().regions_removed, 2u);
  EXPECT_TRUE(fs::exists(root_ + "/" + kOwned));
  ASSERT_EQ(snapshot->containers.size(), 1u);
  const auto& c = snapshot->containers[0];
  ASSERT_TRUE(c.owner.has_value());
  EXPECT_EQ(c.owner->pod_name, "train");
  EXPECT_EQ(c.gpu_uuid, "GPU-0");
  EXPECT_EQ(c.memory_used_bytes, 1024ull << 20);
  EXPECT_EQ(c.memory_limit_bytes, 4096ull << 20);
  EXPECT_EQ(c.processes, 1);
  EXPECT_LT(c.compute_share_percent, 0) << "no share before a second pass";

  // 50 ms of GPU time charged between two passes at least 100 ms apart: a
  // share between 0 and 50 %.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  region_.raw()->devices[device_].gpu_time_used_ns.fetch_add(50'000'000);
  monitor->PassOnce();
  snapshot = monitor->Latest();
  ASSERT_EQ(snapshot->containers.size(), 1u);
  EXPECT_GT(snapshot->containers[0].compute_share_percent, 0.0);
  EXPECT_LE(snapshot->containers[0].compute_share_percent, 50.0);
  EXPECT_EQ(monitor->counters().passes, 2u);
}

TEST_F(NodeMonitorTest, WithoutTheKubeletNothingIsRemovedAndCorruptRegionsAreCounted) {
  pod_resources_.answering = false;
  auto monitor = Make(&pod_resources_);
  monitor->PassOnce();
  for (const char* name : {kOwned, kGone, kCorrupt}) EXPECT_TRUE(fs::exists(root_ + "/" + name)) << name;
  auto snapshot = monitor->Latest();
  EXPECT_FALSE(snapshot->pod_resources_ok);
  EXPECT_EQ(snapshot->regions, 3);
  EXPECT_EQ(snapshot->regions_corrupt, 1);
  EXPECT_EQ(snapshot->regions_unowned, 2);  // the corrupt one is counted as corrupt only
  EXPECT_EQ(monitor->counters().pod_resources_errors, 1u);
  // The corrupt file is untouched.
  std::ifstream in(root_ + "/" + kCorrupt + "/vgpu.region");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "garbage");
}

TEST_F(NodeMonitorTest, AGpuTheDriverLostTurnsUnhealthy) {
  host::GpuSample lost;
  lost.uuid = "GPU-1";
  lost.lost = true;
  host::GpuSample fine;
  fine.uuid = "GPU-0";
  fine.memory_total_bytes = 85899345920ull;
  inventory_->SetSamples({fine, lost});
  const uint64_t before = devices_.Get().version;
  auto monitor = Make(nullptr);
  monitor->PassOnce();
  auto state = devices_.Get();
  EXPECT_GT(state.version, before) << "every ListAndWatch stream resends the list";
  EXPECT_TRUE(state.gpus[0].healthy);
  EXPECT_FALSE(state.gpus[1].healthy);
  EXPECT_FALSE(monitor->Latest()->gpus[1].healthy);
}

// Processes as the test declares them; kills are recorded, not performed.
class FakeInspector final : public ProcessInspector {
 public:
  std::map<uint32_t, ProcessIdentity> processes;
  std::vector<uint32_t> killed;
  std::optional<ProcessIdentity> Inspect(uint32_t pid) override {
    auto it = processes.find(pid);
    if (it == processes.end()) return std::nullopt;
    return it->second;
  }
  Status Kill(const ProcessIdentity& p) override {
    killed.push_back(p.host_pid);
    return Status::Ok();
  }
};

// A DRA claim's container (tessera-dra's region root, claim_regions.h): its
// process that bypasses libvgpu and holds more than the claim's 1024 MiB is
// killed, the Event names the container the kubelet lists with the claim's
// CDI device, and the claim's region is metered; tessera-dra's directories
// are never removed, owned or not.
TEST_F(NodeMonitorTest, ADraClaimsContainerIsHeldToTheClaimsLimits) {
  ::tessera::testing::TempDir dra_tmp{"tn-monitor-dra"};
  const std::string dra = dra_tmp.path();
  const char* kClaimGpu = "GPU-1a2b3c4d-0000-1111-2222-333344445555";  // a UUID the payload codec accepts
  const std::string claim = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0";
  const std::string unowned = "11111111-2222-4333-8444-555555555555";
  for (const auto& uid : {claim, unowned}) fs::create_directories(dra + "/" + uid);
  // What tessera-dra writes (claim_preparer.cc): one entry, claim:<ns>/<name>.
  core::PodAllocation limits;
  limits.node = "node-a";
  limits.containers.push_back(core::ContainerAllocation{"claim:team/gpu-a", {{kClaimGpu, 1024, 30}}});
  auto encoded = core::EncodeAllocation(limits);
  ASSERT_TRUE(encoded.ok()) << encoded.error().message;
  dra_tmp.Write(claim + ".limits/limits.json", *encoded);
  vgpu::SharedRegion claim_region;
  char error[256] = {};
  ASSERT_TRUE(claim_region.open_file((dra + "/" + claim + "/vgpu.region").c_str(), error, sizeof error))
      << error;
  ASSERT_TRUE(claim_region.claim_slot());
  const int claim_device =
      claim_region.find_or_add_device(kClaimGpu, 4096ull << 20);  // what the tenant wrote
  ASSERT_TRUE(claim_region.reserve(claim_device, 256ull << 20).ok);

  struct stat st {};
  ASSERT_EQ(::stat((dra + "/" + claim).c_str(), &st), 0);
  FakeInspector inspector;
  ProcessIdentity bypass;
  bypass.host_pid = 4242;
  bypass.command = "static-cuda";
  bypass.container_pid = 12;
  bypass.sees_region_dir = true;
  bypass.region_dev = st.st_dev;
  bypass.region_ino = st.st_ino;
  inspector.processes[4242] = bypass;
  host::GpuSample gpu;
  gpu.uuid = kClaimGpu;
  gpu.processes_known = true;
  gpu.processes = {{4242, 1800ull << 20}};
  inventory_->SetSamples({gpu});
  pod_resources_.containers.push_back(
      {"team", "trainer", "main", "", {}, {"tessera.io/gpu=" + claim + "-gpu-0-s1"}});

  EnforcementPolicy policy;
  policy.kill_by_default = true;
  policy.tolerance_bytes = 0;
  Enforcer enforcer(policy, &inspector, [](const ContainerRef&, const std::string&) {
    return std::optional<uint64_t>(8192ull << 20);  // an annotation is no claim's source
  });
  std::vector<std::pair<ContainerRef, std::string>> events;
  MonitorOptions options;
  options.region_grace_seconds = 0;
  options.dra_region_dir = dra;
  NodeMonitor monitor(options, inventory_.get(), &devices_, catalog_.get(), &pod_resources_, nullptr,
                      &inspector, &enforcer,
                      [&](const ContainerRef& owner, const std::string& reason, const std::string& message) {
                        events.push_back({owner, reason + ": " + message});
                      });
  monitor.PassOnce();

  EXPECT_EQ(inspector.killed, std::vector<uint32_t>{4242});
  EXPECT_EQ(monitor.counters().kills, 1u);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].first, (ContainerRef{"team", "trainer", "main"}));
  EXPECT_NE(events[0].second.find("GPUMemoryLimitKill"), std::string::npos) << events[0].second;
  EXPECT_NE(events[0].second.find("over its limit of 1024 MiB (from its claim)"), std::string::npos)
      << events[0].second;
  for (const auto& uid : {claim, unowned}) EXPECT_TRUE(fs::exists(dra + "/" + uid)) << uid;
  bool metered = false;
  for (const auto& c : monitor.Latest()->containers) {
    if (c.region != claim) continue;
    metered = true;
    ASSERT_TRUE(c.owner.has_value());
    EXPECT_EQ(c.owner->pod_name, "trainer");
    EXPECT_EQ(c.memory_used_bytes, 256ull << 20);
  }
  EXPECT_TRUE(metered);
}

// A container on a mig-dynamic GPU's instance has no region and its GPU is not
// among the monitor's devices: neither a problem nor a share of a vGPU GPU.
// A vGPU slice naming a GPU the node lacks still is one.
TEST(VgpuAllocationsTest, MigDevicesAreNeitherAccountedNorReported) {
  auto pod = [](const std::string& name, std::vector<core::DeviceSlice> devices) {
    PodGpuAllocation p{"ml", name, name + "-uid", {}};
    p.allocation.containers.push_back({"main", std::move(devices)});
    return p;
  };
  NodeAllocations all;
  all.pods = {pod("vgpu", {{"GPU-0", 4096, 25}}), pod("mig", {{"GPU-MIG", 10240, 0, "1g.10gb", 6}}),
              pod("both", {{"GPU-0", 2048, 10}, {"GPU-MIG", 20480, 0, "2g.20gb", 0}}),
              pod("lost", {{"GPU-9", 1024, 10}})};
  const std::vector<core::Gpu> gpus = {TestA100("GPU-0", 0)};

  std::vector<std::string> unfiltered;
  AllocatedState("", gpus, all, &unfiltered);
  EXPECT_EQ(unfiltered.size(), 3u) << "the MIG devices name a GPU the monitor does not list";

  const auto vgpu = VgpuAllocations(all);
  ASSERT_EQ(vgpu.pods.size(), 3u) << "the pod holding only a MIG device is dropped";
  EXPECT_EQ(vgpu.pods[0].pod_name, "vgpu");
  EXPECT_EQ(vgpu.pods[1].pod_name, "both");
  ASSERT_EQ(vgpu.pods[1].allocation.containers[0].devices.size(), 1u);
  EXPECT_EQ(vgpu.pods[1].allocation.containers[0].devices[0].uuid, "GPU-0");
  std::vector<std::string> problems;
  auto state = AllocatedState("", gpus, vgpu, &problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("ml/lost"), std::string::npos) << problems[0];
  ASSERT_EQ(state.gpus().size(), 1u);
  EXPECT_EQ(state.gpus()[0].used.memory_mib, 4096 + 2048);
}

}  // namespace
}  // namespace tessera::node
