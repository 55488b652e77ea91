#include "node/allocate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/clock.h"
#include "base/testing.h"
#include "contract/container_contract.h"
#include "node/device_state.h"
#include "node/region_catalog.h"

namespace tessera::node {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

class AllocateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(root_ + "/lib");
    std::ofstream(root_ + "/lib/libvgpu.so") << "not really an ELF";
    config_.libvgpu_host_path = root_ + "/lib/libvgpu.so";
    config_.region_host_dir = root_ + "/regions";
    std::ofstream(config_.PreloadFileHostPath()) << config_.libvgpu_container_path << "\n";
    for (int i = 0; i < 2; ++i) {
      core::Gpu gpu;
      gpu.uuid = "GPU-" + std::to_string(i);
      gpu.index = i;
      gpu.slots = 4;
      gpus_.push_back(gpu);
    }
  }

  Result<v1beta1::ContainerAllocateResponse> Allocate(std::vector<std::string> ids,
                                                      RegionsInFlight::Request* in_flight = nullptr) {
    v1beta1::ContainerAllocateRequest request;
    for (auto& id : ids) request.add_devices_ids(id);
    AllocateContext context{&config_, &gpus_, [this] { return "region-" + std::to_string(++regions_made_); },
                            in_flight};
    return AllocateContainer(context, request);
  }

  ::tessera::testing::TempDir tmp_{"tn-alloc"};
  const std::string root_ = tmp_.path();
  NodeConfig config_;
  std::vector<core::Gpu> gpus_;
  int regions_made_ = 0;
};

// The monitor's clean-up must not take a region while its Allocate runs
// (regions_in_flight.h): each region is registered with the request before
// anything is written, and stays protected for the grace after it ends.
TEST_F(AllocateTest, RegistersEachRegionWithItsRequestWhileTheRequestRuns) {
  FakeClock clock;
  RegionsInFlight in_flight(&clock);
  {
    RegionsInFlight::Request request(&in_flight);
    ASSERT_TRUE(Allocate({"GPU-0::0"}, &request).ok());
    ASSERT_TRUE(Allocate({"GPU-1::0"}, &request).ok());
    clock.Advance(std::chrono::hours(1));
    EXPECT_TRUE(in_flight.Protects("region-1", 300));
    EXPECT_TRUE(in_flight.Protects("region-2", 300));
  }
  clock.Advance(std::chrono::seconds(300));
  EXPECT_FALSE(in_flight.Protects("region-1", 300));
  ASSERT_TRUE(Allocate({"GPU-0::1"}).ok());
  EXPECT_FALSE(in_flight.Protects("region-3", 300)) << "no request given: nothing registered";
}

TEST_F(AllocateTest, MountsLibvgpuPreloadFileAndAFreshRegionDirectory) {
  auto response = Allocate({"GPU-1::2"});
  ASSERT_TRUE(response.ok()) << response.error().message;

  ASSERT_EQ(response->mounts_size(), 4);
  EXPECT_EQ(response->mounts(0).container_path(), "/usr/local/tessera/libvgpu.so");
  EXPECT_EQ(response->mounts(0).host_path(), config_.libvgpu_host_path);
  EXPECT_TRUE(response->mounts(0).read_only());
  EXPECT_EQ(response->mounts(1).container_path(), "/etc/ld.so.preload");
  EXPECT_EQ(response->mounts(1).host_path(), root_ + "/lib/ld.so.preload");
  EXPECT_TRUE(response->mounts(1).read_only());
  EXPECT_EQ(response->mounts(2).container_path(), "/tmp/tessera");
  EXPECT_EQ(response->mounts(2).host_path(), root_ + "/regions/region-1");
  EXPECT_FALSE(response->mounts(2).read_only());
  // Beside the region directory, not in it: the limits file's, read-only
  // (limits_file.h), empty until the monitor knows the pod.
  EXPECT_EQ(response->mounts(3).container_path(), "/run/tessera/limits");
  EXPECT_EQ(response->mounts(3).host_path(), root_ + "/regions/region-1.limits");
  EXPECT_TRUE(response->mounts(3).read_only());
  struct stat limits {};
  ASSERT_EQ(::stat((root_ + "/regions/region-1.limits").c_str(), &limits), 0);
  EXPECT_EQ(limits.st_mode & 0777, 0755u);
  EXPECT_TRUE(fs::is_empty(root_ + "/regions/region-1.limits"));

  // The region directory exists and any container user can write into it.
  struct stat st {};
  ASSERT_EQ(::stat((root_ + "/regions/region-1").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0777u);

  EXPECT_EQ(response->envs().at("CUDA_DEVICE_MEMORY_SHARED_CACHE"), "/tmp/tessera/vgpu.region");
  EXPECT_EQ(response->envs().count("LD_PRELOAD"), 0u);
  EXPECT_EQ(response->envs().count("NVIDIA_VISIBLE_DEVICES"), 0u);  // the webhook wires it
  EXPECT_EQ(response->envs().count("CUDA_OVERSUBSCRIBE"), 0u);
  EXPECT_EQ(response->envs().count("GPU_CORE_UTILIZATION_POLICY"), 0u);
  // For a container whose pod tessera did not place: the node's policy and
  // the GPUs behind the kubelet's device IDs.
  EXPECT_EQ(response->envs().at("TESSERA_UNPLACED_PODS"), "refuse");
  EXPECT_EQ(response->envs().at("TESSERA_KUBELET_GPUS"), "GPU-1");
  EXPECT_EQ(response->annotations().at(std::string(contract::kRegionDirAnnotation)),
            root_ + "/regions/region-1");
  EXPECT_EQ(response->devices_size(), 0);

  // Beside the directory, out of the container's reach: the record that lets
  // the agent tie the directory to a pod through the kubelet's PodResources.
  std::ifstream in(root_ + "/regions/region-1.json");
  ASSERT_TRUE(in) << "no region record";
  std::stringstream text;
  text << in.rdbuf();
  auto record = DecodeRegionRecord(text.str());
  ASSERT_TRUE(record.ok()) << record.error().message;
  EXPECT_EQ(record->resource_name, "nvidia.com/gpu");
  EXPECT_THAT(record->device_ids, ElementsAre("GPU-1::2"));
  EXPECT_GT(record->created_unix, 1700000000);
}

TEST_F(AllocateTest, AFailedRecordLeavesNoDirectoryBehind) {
  // A directory in the record's place makes the rename fail.
  fs::create_directories(root_ + "/regions/region-1.json/x");
  auto response = Allocate({"GPU-0::0"});
  ASSERT_FALSE(response.ok());
  EXPECT_NE(response.error().message.find("region record"), std::string::npos) << response.error().message;
  EXPECT_FALSE(fs::exists(root_ + "/regions/region-1"));
  EXPECT_FALSE(fs::exists(root_ + "/regions/region-1.limits"));
}

TEST_F(AllocateTest, ARegionDirectoryThatCannotBeMadeTakesItsRecordBack) {
  // The record is written before the directories it names (region_catalog.h:
  // a kill in between leaves a record the clean-up removes); when a directory
  // then fails, the record goes too.
  fs::create_directories(root_ + "/regions");
  std::ofstream(root_ + "/regions/region-1") << "a file where the directory goes";
  auto response = Allocate({"GPU-0::0"});
  ASSERT_FALSE(response.ok());
  EXPECT_NE(response.error().message.find("cannot create region directory"), std::string::npos)
      << response.error().message;
  EXPECT_FALSE(fs::exists(root_ + "/regions/region-1.json"));
  EXPECT_FALSE(fs::exists(root_ + "/regions/region-1.limits"));
}

TEST_F(AllocateTest, EachContainerGetsItsOwnRegion) {
  auto first = Allocate({"GPU-0::0"});
  auto second = Allocate({"GPU-0::0"});
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(first->mounts(2).host_path(), second->mounts(2).host_path());
}

TEST_F(AllocateTest, EnvironmentFollowsTheNodeConfiguration) {
  config_.unplaced_pods = UnplacedPodsPolicy::kWholeGpu;
  ASSERT_EQ(Allocate({"GPU-0::0"})->envs().at("TESSERA_UNPLACED_PODS"), "whole-gpu");
  config_.ld_so_preload = false;
  config_.memory_scaling = 1.5;
  config_.disable_core_limit = true;
  config_.region_container_dir = "/var/run/vgpu";
  config_.visible_devices = VisibleDevicesMode::kDeviceIds;
  auto response = Allocate({"GPU-1::0", "GPU-0::3", "GPU-1::1"});
  ASSERT_TRUE(response.ok()) << response.error().message;
  ASSERT_EQ(response->mounts_size(), 3);  // no preload file (libvgpu, region, limits)
  EXPECT_EQ(response->mounts(1).container_path(), "/var/run/vgpu");
  EXPECT_EQ(response->envs().at("LD_PRELOAD"), "/usr/local/tessera/libvgpu.so");
  EXPECT_EQ(response->envs().at("CUDA_OVERSUBSCRIBE"), "true");
  EXPECT_EQ(response->envs().at("GPU_CORE_UTILIZATION_POLICY"), "disable");
  EXPECT_EQ(response->envs().at("CUDA_DEVICE_MEMORY_SHARED_CACHE"), "/var/run/vgpu/vgpu.region");
  EXPECT_EQ(response->envs().at("NVIDIA_VISIBLE_DEVICES"), "GPU-1,GPU-0");

  config_.visible_devices = VisibleDevicesMode::kAll;
  response = Allocate({"GPU-1::0"});
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->envs().at("NVIDIA_VISIBLE_DEVICES"), "all");
}

TEST_F(AllocateTest, RefusesDevicesThatAreNotOurs) {
  for (const char* bad : {"GPU-9::0", "GPU-0::4", "garbage"}) {
    auto response = Allocate({"GPU-0::0", bad});
    ASSERT_FALSE(response.ok()) << bad;
    EXPECT_NE(response.error().message.find(bad), std::string::npos) << response.error().message;
  }
  EXPECT_FALSE(fs::exists(root_ + "/regions")) << "a refused request must create nothing";
}

TEST_F(AllocateTest, RefusesWhenLibvgpuIsMissingRatherThanRunUnenforced) {
  fs::remove(config_.libvgpu_host_path);
  auto response = Allocate({"GPU-0::0"});
  ASSERT_FALSE(response.ok());
  EXPECT_NE(response.error().message.find("libvgpu"), std::string::npos);
  EXPECT_NE(response.error().message.find(config_.libvgpu_host_path), std::string::npos);

  std::ofstream(config_.libvgpu_host_path) << "back";
  fs::remove(config_.PreloadFileHostPath());
  response = Allocate({"GPU-0::0"});
  ASSERT_FALSE(response.ok());
  EXPECT_NE(response.error().message.find("ld.so.preload"), std::string::npos);
}

v1beta1::ContainerPreferredAllocationRequest PreferredRequest(std::vector<std::string> available,
                                                              std::vector<std::string> must, int size) {
  v1beta1::ContainerPreferredAllocationRequest request;
  for (auto& id : available) request.add_available_deviceids(id);
  for (auto& id : must) request.add_must_include_deviceids(id);
  request.set_allocation_size(size);
  return request;
}

TEST_F(AllocateTest, PreferredAllocationPutsEachDeviceOnADifferentGpu) {
  auto chosen =
      PreferredDevices(gpus_, PreferredRequest({"GPU-0::0", "GPU-0::1", "GPU-1::0", "GPU-1::1"}, {}, 2));
  ASSERT_TRUE(chosen.ok()) << chosen.error().message;
  EXPECT_THAT(*chosen, UnorderedElementsAre("GPU-0::0", "GPU-1::0"));
}

TEST_F(AllocateTest, PreferredAllocationPrefersTheLeastUsedGpuAndKeepsMustIncludes) {
  // GPU-1 has more free replicas: it is picked first.
  auto chosen = PreferredDevices(gpus_, PreferredRequest({"GPU-0::3", "GPU-1::1", "GPU-1::2"}, {}, 1));
  ASSERT_TRUE(chosen.ok());
  EXPECT_THAT(*chosen, ElementsAre("GPU-1::1"));

  // A must-include on GPU-1 pushes the second device to GPU-0.
  chosen = PreferredDevices(gpus_, PreferredRequest({"GPU-0::3", "GPU-1::1", "GPU-1::2"}, {"GPU-1::2"}, 2));
  ASSERT_TRUE(chosen.ok());
  EXPECT_THAT(*chosen, ElementsAre("GPU-1::2", "GPU-0::3"));

  // More devices than GPUs: repeats a GPU only when it must.
  chosen = PreferredDevices(gpus_, PreferredRequest({"GPU-0::0", "GPU-1::0", "GPU-1::1"}, {}, 3));
  ASSERT_TRUE(chosen.ok());
  EXPECT_THAT(*chosen, UnorderedElementsAre("GPU-0::0", "GPU-1::0", "GPU-1::1"));

  EXPECT_FALSE(PreferredDevices(gpus_, PreferredRequest({"GPU-0::0"}, {}, 2)).ok());
}

TEST_F(AllocateTest, AnMpsGpuSizedPerRequestAddsItsDaemonsPipeDirectory) {
  gpus_[1].mode = core::SharingMode::kMps;
  config_.mps_root = root_ + "/mps";
  // The daemon: a live process of the control program's name. This test's own
  // process stands in (its comm is the program's name, as the kernel keeps it).
  std::ifstream comm_file("/proc/self/comm");
  std::string comm;
  std::getline(comm_file, comm);
  config_.mps_control_binary = "/usr/bin/" + comm;
  const std::string pipe = root_ + "/mps/GPU-1/pipe";

  auto down = Allocate({"GPU-1::0"});  // no daemon yet
  ASSERT_FALSE(down.ok());
  EXPECT_NE(down.error().message.find("MPS control daemon of GPU GPU-1 is not running"), std::string::npos);
  EXPECT_FALSE(fs::exists(root_ + "/regions")) << "a refused request must create nothing";

  fs::create_directories(pipe);
  std::ofstream(pipe + "/nvidia-cuda-mps-control.pid") << ::getpid() << "\n";
  auto response = Allocate({"GPU-1::0"});
  ASSERT_TRUE(response.ok()) << response.error().message;
  EXPECT_EQ(response->envs().at("CUDA_MPS_PIPE_DIRECTORY"), "/run/tessera/mps");
  bool mounted = false;
  for (const auto& m : response->mounts())
    mounted |= m.host_path() == pipe && m.container_path() == "/run/tessera/mps";
  EXPECT_TRUE(mounted);
  // libvgpu stays: it holds the allocation's limits as in any vGPU container.
  EXPECT_EQ(response->mounts(0).host_path(), config_.libvgpu_host_path);

  auto two = Allocate({"GPU-0::0", "GPU-1::1"});
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.error().message.find("one MPS GPU only"), std::string::npos);
  // A vGPU GPU's container gets nothing of MPS.
  auto plain = Allocate({"GPU-0::0"});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->envs().count("CUDA_MPS_PIPE_DIRECTORY"), 0u);
}

}  // namespace
}  // namespace tessera::node
