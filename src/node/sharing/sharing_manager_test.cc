#include "node/sharing/sharing_manager.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "base/testing.h"

namespace tessera::node::sharing {
namespace {

using core::SharingMode;

std::vector<core::Gpu> TwoGpus() {
  std::vector<core::Gpu> gpus(2);
  for (int i = 0; i < 2; ++i) {
    gpus[i].uuid = "GPU-0000000" + std::to_string(i) + "-0000-0000-0000-000000000000";
    gpus[i].index = i;
    gpus[i].model = "NVIDIA L4";
    gpus[i].memory_mib = 23034;
    gpus[i].slots = 10;
  }
  return gpus;
}

std::string TimeSlicing(int replicas) {
  return "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      "
         "replicas: " +
         std::to_string(replicas) + "\n";
}

class SharingManagerTest : public ::testing::Test {
 protected:
  // A new inode each time, as a ConfigMap update does: the change is seen
  // whatever the clock's granularity.
  void WriteFile(const std::string& text) {
    const std::string temp = path_ + ".new";
    std::ofstream(temp) << text;
    ASSERT_EQ(std::rename(temp.c_str(), path_.c_str()), 0);
  }

  int Replicas(const std::string& uuid) const {
    for (const auto& gpu : manager_->replicas().Get().value) {
      if (gpu.gpu.uuid == uuid) return gpu.mode.replicas;
    }
    return 0;
  }

  void Make(const std::string& sharing = "") {
    config_.nvidia_config_file = path_;
    config_.sharing = sharing;
    config_.plugin_dir = tmp_.path();
    manager_ = std::make_unique<SharingManager>(config_, nullptr, [this] { return in_use_; });
    manager_->OnModesChanged([this](const ModeAssignment&) { ++changes_; });
  }

  ::tessera::testing::TempDir tmp_{"tn-share"};
  const std::string path_ = tmp_.Path("nvidia.yaml");
  NodeConfig config_;
  std::optional<std::set<std::string>> in_use_ = std::set<std::string>{};
  std::unique_ptr<SharingManager> manager_;
  int changes_ = 0;
  const std::vector<core::Gpu> gpus_ = TwoGpus();
};

TEST_F(SharingManagerTest, PrepareResolvesModesAndTheVgpuList) {
  WriteFile(TimeSlicing(3));
  config_.resource_name = "tessera.io/vgpu";
  Make("[{gpus: \"0\", mode: exclusive}]");
  ASSERT_TRUE(manager_->Prepare(gpus_, [] { return std::string("r"); }).ok());
  EXPECT_FALSE(manager_->Replicated(gpus_[0].uuid));
  EXPECT_TRUE(manager_->Replicated(gpus_[1].uuid));  // NVIDIA's "all" yields to the exclusive rule
  EXPECT_TRUE(manager_->ServesResource("nvidia.com/gpu"));
  auto vgpu = manager_->ApplyModes(gpus_);
  ASSERT_EQ(vgpu.size(), 1u);
  EXPECT_EQ(vgpu[0].mode, SharingMode::kExclusive);
  EXPECT_EQ(vgpu[0].slots, 1);
  auto listed = manager_->InventoryGpus();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].mode, SharingMode::kTimeslice);
  EXPECT_EQ(listed[0].replicas, 3);
  EXPECT_EQ(listed[0].slots, 0);
  EXPECT_EQ(manager_->Labels().at("tessera.io/gpu.sharing-modes"), "exclusive.timeslice");
}

TEST_F(SharingManagerTest, BadFileAtStartIsAnError) {
  WriteFile(TimeSlicing(1));
  Make();
  auto prepared = manager_->Prepare(gpus_, [] { return std::string("r"); });
  ASSERT_FALSE(prepared.ok());
  EXPECT_NE(prepared.error().message.find("number of replicas must be >= 2"), std::string::npos);
  Make();
  config_.nvidia_config_file = tmp_.Path("missing.yaml");
  prepared = manager_->Prepare(gpus_, [] { return std::string("r"); });
  ASSERT_FALSE(prepared.ok());
  EXPECT_NE(prepared.error().message.find("nvidia_config_file"), std::string::npos);
}

// The rule of issue 15: a GPU moves between modes only when no container uses it.
TEST_F(SharingManagerTest, AGpuInUseKeepsItsModeUntilFree) {
  WriteFile(TimeSlicing(4));
  Make();
  ASSERT_TRUE(manager_->Prepare(gpus_, [] { return std::string("r"); }).ok());
  EXPECT_EQ(Replicas(gpus_[0].uuid), 4);

  in_use_ = std::set<std::string>{gpus_[0].uuid};
  WriteFile(TimeSlicing(2));
  manager_->Tick();
  EXPECT_EQ(Replicas(gpus_[0].uuid), 4) << "in use: kept";
  EXPECT_EQ(Replicas(gpus_[1].uuid), 2) << "free: moved";
  EXPECT_EQ(changes_, 1);

  manager_->Tick();  // still in use: nothing new
  EXPECT_EQ(Replicas(gpus_[0].uuid), 4);
  EXPECT_EQ(changes_, 1);

  in_use_ = std::set<std::string>{};
  manager_->Tick();
  EXPECT_EQ(Replicas(gpus_[0].uuid), 2);
  EXPECT_EQ(changes_, 2);
}

TEST_F(SharingManagerTest, WithoutPodResourcesNothingMoves) {
  WriteFile(TimeSlicing(4));
  Make();
  ASSERT_TRUE(manager_->Prepare(gpus_, [] { return std::string("r"); }).ok());
  in_use_.reset();
  WriteFile(TimeSlicing(2));
  manager_->Tick();
  EXPECT_EQ(Replicas(gpus_[0].uuid), 4);
  EXPECT_EQ(Replicas(gpus_[1].uuid), 4);
  EXPECT_EQ(changes_, 0);
}

// A file that no longer parses, or whose modes conflict, changes nothing.
TEST_F(SharingManagerTest, RejectedFileChangesNothing) {
  WriteFile(TimeSlicing(4));
  Make();
  ASSERT_TRUE(manager_->Prepare(gpus_, [] { return std::string("r"); }).ok());
  WriteFile("version: v1\nsharing:\n  timeSlicing: {}\n");
  manager_->Tick();
  EXPECT_EQ(Replicas(gpus_[0].uuid), 4);
  // Only GPU 1 shared, GPU 0 back to vgpu under nvidia.com/gpu: replicas and
  // vGPU devices would share the name.
  WriteFile(TimeSlicing(4) + "      devices: [1]\n");
  manager_->Tick();
  EXPECT_EQ(Replicas(gpus_[0].uuid), 4);
  EXPECT_EQ(changes_, 0);
}

// nvidia_config_file as a directory: the label picks the file, as NVIDIA's config-manager does.
TEST(NvidiaConfigPathTest, DirectoryLabelDefaultAndOnlyFile) {
  ::tessera::testing::TempDir tmp{"tn-share-dir"};
  NodeConfig config;
  config.nvidia_config_file = tmp.Path("configs");
  std::filesystem::create_directories(config.nvidia_config_file);
  std::ofstream(config.nvidia_config_file + "/a100-shared") << TimeSlicing(4);
  EXPECT_EQ(*NvidiaConfigPath(config, std::nullopt),
            config.nvidia_config_file + "/a100-shared");  // the only file
  std::ofstream(config.nvidia_config_file + "/t4-mps") << TimeSlicing(2);
  EXPECT_EQ(*NvidiaConfigPath(config, std::nullopt), "") << "several files, no label, no default: none";
  EXPECT_EQ(*NvidiaConfigPath(config, std::string("t4-mps")), config.nvidia_config_file + "/t4-mps");
  config.nvidia_config_default = "a100-shared";
  EXPECT_EQ(*NvidiaConfigPath(config, std::nullopt), config.nvidia_config_file + "/a100-shared");
  for (const std::string bad : {"missing", "../etc", ".hidden", ""}) {
    auto path = NvidiaConfigPath(config, bad);
    ASSERT_FALSE(path.ok()) << bad;
    EXPECT_NE(path.error().message.find("nvidia.com/device-plugin.config"), std::string::npos)
        << path.error().message;
  }
  NodeConfig file;
  file.nvidia_config_file = config.nvidia_config_file + "/t4-mps";
  EXPECT_EQ(*NvidiaConfigPath(file, std::string("ignored")), file.nvidia_config_file);
}

}  // namespace
}  // namespace tessera::node::sharing
