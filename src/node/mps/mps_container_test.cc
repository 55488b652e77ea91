#include "node/mps/mps_container.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "node/mps/fake_control_program.h"

namespace tessera::node::mps {
namespace {

class MpsContainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("mps-container-test-" + std::to_string(::getpid()));
    auto fake = std::make_unique<FakeControl>();
    fake_ = fake.get();
    MpsDaemonsOptions options;
    options.root = root_.string();
    daemons_ = std::make_unique<MpsDaemons>(options, std::move(fake));
    MpsGpu gpu;
    gpu.uuid = "GPU-a";
    gpu.memory_mib = 81920;
    ASSERT_TRUE(daemons_->Apply({gpu}).ok());
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  static sharing::ShareRequest Share(int ordinal, int pct, int64_t mib) {
    sharing::ShareRequest request;
    request.mode = core::SharingMode::kMps;
    request.resource_name = "nvidia.com/gpu";
    request.device_ids = {"GPU-a::1"};
    sharing::SharedGpu gpu;
    gpu.uuid = "GPU-a";
    gpu.container_ordinal = ordinal;
    gpu.memory_mib = 81920;
    gpu.replicas = 4;
    gpu.held = 1;
    gpu.active_thread_percentage = pct;
    gpu.memory_limit_mib = mib;
    request.gpus = {gpu};
    return request;
  }

  std::filesystem::path root_;
  FakeControl* fake_ = nullptr;
  std::unique_ptr<MpsDaemons> daemons_;
};

TEST_F(MpsContainerTest, AReplicaGetsThePipeDirectoryAndItsShareByContainerOrdinal) {
  auto edits = MpsContainerSetup(daemons_.get())(Share(0, 25, 20480));
  ASSERT_TRUE(edits.ok()) << edits.error().message;
  EXPECT_EQ(edits->env.at("CUDA_MPS_PIPE_DIRECTORY"), "/run/tessera/mps");
  EXPECT_EQ(edits->env.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
  EXPECT_EQ(edits->env.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=20480M");
  ASSERT_EQ(edits->mounts.size(), 1u);
  EXPECT_EQ(edits->mounts[0].host_path, PipeDirectoryOf(root_.string(), "GPU-a"));
  EXPECT_EQ(edits->mounts[0].container_path, "/run/tessera/mps");
  EXPECT_FALSE(edits->mounts[0].read_only);
  // No libvgpu hook given: nothing of libvgpu.
  EXPECT_EQ(edits->env.count("LD_PRELOAD"), 0u);
}

TEST_F(MpsContainerTest, RefusesTwoGpusAGpuNotInMpsModeAndADaemonThatIsDown) {
  auto two = Share(0, 25, 20480);
  two.gpus.push_back(two.gpus[0]);
  two.gpus[1].uuid = "GPU-b";
  auto refused = MpsContainerSetup(daemons_.get())(two);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("one MPS GPU only"), std::string::npos);

  auto other = Share(0, 25, 20480);
  other.gpus[0].uuid = "GPU-z";
  EXPECT_NE(MpsContainerSetup(daemons_.get())(other).error().message.find("not in mps mode"),
            std::string::npos);

  fake_->Kill(PipeDirectoryOf(root_.string(), "GPU-a"));
  fake_->fail_start = true;
  daemons_->Check();
  auto down = MpsContainerSetup(daemons_.get())(Share(0, 25, 20480));
  ASSERT_FALSE(down.ok());
  EXPECT_NE(down.error().message.find("is not running"), std::string::npos);
  EXPECT_FALSE(PipeDirectoryEdits(*daemons_, "GPU-a").ok());
  fake_->fail_start = false;
  daemons_->Check();
  EXPECT_TRUE(MpsContainerSetup(daemons_.get())(Share(0, 25, 20480)).ok());
}

TEST(ClientEnvTest, SizedClientsAndBadValues) {
  auto env = ClientEnv(0, 30, 8192, 81920);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "30");
  EXPECT_EQ(env->at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=8192M");
  EXPECT_EQ(ClientEnv(2, 100, 81920, 81920)->at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "2=81920M");
  EXPECT_TRUE(ClientEnv(0, 0, 0, 81920)->empty());  // the daemon's defaults
  EXPECT_NE(ClientEnv(0, 101, 0, 81920).error().message.find("101 is not between 1 and 100"),
            std::string::npos);
  EXPECT_FALSE(ClientEnv(0, -1, 0, 81920).ok());
  EXPECT_NE(ClientEnv(0, 50, 90000, 81920).error().message.find("more than the GPU's 81920 MiB"),
            std::string::npos);
  EXPECT_FALSE(ClientEnv(0, 50, -1, 81920).ok());
}

TEST_F(MpsContainerTest, ASizedClientGetsThePipeDirectory) {
  auto edits = PipeDirectoryEdits(*daemons_, "GPU-a");
  ASSERT_TRUE(edits.ok());
  EXPECT_EQ(edits->env.at("CUDA_MPS_PIPE_DIRECTORY"), "/run/tessera/mps");
  EXPECT_EQ(edits->mounts.at(0).host_path, PipeDirectoryOf(root_.string(), "GPU-a"));
}

TEST_F(MpsContainerTest, WithLibvgpuItsEditsComeFirstAndMpsOnesOverThem) {
  sharing::ContainerSetup libvgpu = [](const sharing::ShareRequest&) -> Result<sharing::ContainerEdits> {
    sharing::ContainerEdits edits;
    edits.env["LD_PRELOAD"] = "/usr/local/tessera/libvgpu.so";
    edits.env["CUDA_MPS_PIPE_DIRECTORY"] = "/elsewhere";
    edits.mounts.push_back(
        sharing::ContainerMount{"/usr/local/tessera/libvgpu.so", "/host/libvgpu.so", true});
    return edits;
  };
  auto edits = MpsContainerSetup(daemons_.get(), libvgpu)(Share(0, 25, 20480));
  ASSERT_TRUE(edits.ok());
  EXPECT_EQ(edits->env.at("LD_PRELOAD"), "/usr/local/tessera/libvgpu.so");
  EXPECT_EQ(edits->env.at("CUDA_MPS_PIPE_DIRECTORY"), "/run/tessera/mps");
  EXPECT_EQ(edits->env.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
  ASSERT_EQ(edits->mounts.size(), 2u);
  sharing::ContainerSetup failing = [](const sharing::ShareRequest&) -> Result<sharing::ContainerEdits> {
    return Error{"libvgpu is not installed on this node"};
  };
  auto refused = MpsContainerSetup(daemons_.get(), failing)(Share(0, 25, 20480));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("libvgpu is not installed"), std::string::npos);
}

}  // namespace
}  // namespace tessera::node::mps
