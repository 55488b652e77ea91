#include "node/mig/layout_applier.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/mig/geometry.h"
#include "node/mig/fake_mig_driver.h"
#include "node/mig/mig_manager.h"

namespace tessera::node::mig {
namespace {

using core::mig::FindModel;
using testing::FakeMigDriver;

constexpr const char* kLayout = R"(version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  all-3g.40gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  balanced:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
  unknown-profile:
    - devices: all
      mig-enabled: true
      mig-devices: {"5g.50gb": 1}
  too-many:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2, "1g.10gb": 2}
  gpu1-only:
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 1}
)";

class LayoutApplierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto parsed = core::mig::ParseLayout(kLayout, "layout.yaml");
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    file_ = *parsed;
  }
  ApplyResult Apply(const std::string& config, MigStrategy strategy = MigStrategy::kMixed,
                    std::set<std::string> in_use = {}) {
    ApplyRequest request;
    request.file = &file_;
    request.config = config;
    request.managed = [](int) { return true; };
    request.strategy = strategy;
    request.in_use = std::move(in_use);
    return ApplyLayout(driver_, request);
  }
  void AddA100(bool mig_enabled = true, bool ampere = true) {
    driver_.AddGpu("A100-80GB", "NVIDIA A100-SXM4-80GB", 81920, true, mig_enabled, ampere);
  }

  core::mig::LayoutFile file_;
  FakeMigDriver driver_;
};

TEST_F(LayoutApplierTest, SevenSmallInstancesThenNothingOnReapply) {
  AddA100();
  ApplyResult first = Apply("all-1g.10gb");
  EXPECT_EQ(first.state, ApplyState::kSuccess) << first.Summary();
  EXPECT_EQ(first.created, 7);
  EXPECT_EQ(driver_.Profiles(0).size(), 7u);
  ApplyResult again = Apply("all-1g.10gb");
  EXPECT_EQ(again.state, ApplyState::kSuccess);
  EXPECT_EQ(again.created, 0);
  EXPECT_EQ(again.destroyed, 0);
  EXPECT_EQ(driver_.creates, 7);
}

TEST_F(LayoutApplierTest, AmperePendingUntilResetAndModeSetOnce) {
  AddA100(/*mig_enabled=*/false, /*ampere=*/true);
  ApplyResult first = Apply("all-3g.40gb");
  EXPECT_EQ(first.state, ApplyState::kPending);
  EXPECT_TRUE(first.reset_required);
  EXPECT_NE(first.Summary().find("pending until the GPU is reset"), std::string::npos) << first.Summary();
  ApplyResult second = Apply("all-3g.40gb");
  EXPECT_EQ(second.state, ApplyState::kPending);
  EXPECT_EQ(driver_.mode_calls, 1);  // never set again while pending
  driver_.Reset(0);
  ApplyResult after = Apply("all-3g.40gb");
  EXPECT_EQ(after.state, ApplyState::kSuccess) << after.Summary();
  EXPECT_EQ(driver_.Profiles(0), (std::vector<std::string>{"3g.40gb@0", "3g.40gb@4"}));
}

TEST_F(LayoutApplierTest, HopperSwitchesAtOnceAndCreates) {
  driver_.AddGpu("H100-80GB", "NVIDIA H100 80GB HBM3", 81559, true, false, /*ampere=*/false);
  ApplyResult result = Apply("all-3g.40gb");
  EXPECT_EQ(result.state, ApplyState::kSuccess) << result.Summary();
  EXPECT_EQ(driver_.Profiles(0).size(), 2u);
}

TEST_F(LayoutApplierTest, InstanceInUseIsLeftAndReported) {
  AddA100();
  ASSERT_EQ(Apply("all-1g.10gb").state, ApplyState::kSuccess);
  const std::string held = driver_.gpus_[0].instances.front().mig_uuid;
  const uint32_t held_start = driver_.gpus_[0].instances.front().start;
  ApplyResult result = Apply("all-3g.40gb", MigStrategy::kMixed, {held});
  EXPECT_EQ(result.state, ApplyState::kPending);
  EXPECT_TRUE(result.blocked);
  EXPECT_NE(result.Summary().find("in use by a container and left in place"), std::string::npos)
      << result.Summary();
  // The held one is still there; the others the new layout does not name are gone.
  bool still_there = false;
  for (const auto& i : driver_.gpus_[0].instances) still_there = still_there || i.mig_uuid == held;
  EXPECT_TRUE(still_there);
  EXPECT_EQ(driver_.destroys, 6);
  // Once free, the retry completes the layout.
  ApplyResult retry = Apply("all-3g.40gb");
  EXPECT_EQ(retry.state, ApplyState::kSuccess) << retry.Summary();
  EXPECT_EQ(driver_.Profiles(0), (std::vector<std::string>{"3g.40gb@0", "3g.40gb@4"}));
  (void)held_start;
}

TEST_F(LayoutApplierTest, FailedCreateRollsBackWhatThisCallMade) {
  AddA100();
  driver_.fail_creates_after = 3;
  ApplyResult result = Apply("all-1g.10gb");
  EXPECT_EQ(result.state, ApplyState::kFailed);
  EXPECT_NE(result.Summary().find("injected failure"), std::string::npos);
  EXPECT_TRUE(driver_.Profiles(0).empty());
}

// Bad input: a clear error naming the cause, and nothing applied.
TEST_F(LayoutApplierTest, UnknownProfileAppliesNothing) {
  AddA100();
  ApplyResult result = Apply("unknown-profile");
  EXPECT_EQ(result.state, ApplyState::kFailed);
  EXPECT_NE(result.Summary().find("5g.50gb"), std::string::npos) << result.Summary();
  EXPECT_NE(result.Summary().find("nothing of configuration 'unknown-profile' was applied"),
            std::string::npos);
  EXPECT_EQ(driver_.creates, 0);
  EXPECT_EQ(driver_.mode_calls, 0);
}

TEST_F(LayoutApplierTest, LayoutThatDoesNotFitAppliesNothing) {
  AddA100();
  ApplyResult result = Apply("too-many");
  EXPECT_EQ(result.state, ApplyState::kFailed);
  EXPECT_EQ(driver_.creates, 0);
  EXPECT_FALSE(result.Summary().empty());
}

TEST_F(LayoutApplierTest, MigAskedOfAGpuWithoutItAppliesNothing) {
  AddA100();
  driver_.AddGpu("", "NVIDIA L4", 23034, /*mig_capable=*/false, false, false);
  ApplyResult result = Apply("gpu1-only");
  EXPECT_EQ(result.state, ApplyState::kFailed);
  EXPECT_NE(result.Summary().find("no MIG"), std::string::npos) << result.Summary();
  EXPECT_EQ(driver_.creates, 0);
}

TEST_F(LayoutApplierTest, ConfigurationTheFileLacks) {
  AddA100();
  ApplyResult result = Apply("no-such-config");
  EXPECT_EQ(result.state, ApplyState::kFailed);
  EXPECT_NE(result.Summary().find("no-such-config"), std::string::npos) << result.Summary();
  EXPECT_NE(result.Summary().find("all-1g.10gb"), std::string::npos);  // lists what there is
  EXPECT_EQ(driver_.creates, 0);
}

TEST_F(LayoutApplierTest, SingleStrategyNeedsOneProfile) {
  AddA100();
  ApplyResult result = Apply("balanced", MigStrategy::kSingle);
  EXPECT_EQ(result.state, ApplyState::kFailed);
  EXPECT_NE(result.Summary().find("mig_strategy single"), std::string::npos) << result.Summary();
  EXPECT_EQ(driver_.creates, 0);
  EXPECT_EQ(Apply("all-1g.10gb", MigStrategy::kSingle).state, ApplyState::kSuccess);
}

TEST_F(LayoutApplierTest, UnmanagedGpusAreLeftAlone) {
  AddA100();
  AddA100();
  ApplyRequest request;
  request.file = &file_;
  request.config = "all-1g.10gb";
  request.managed = [](int index) { return index == 1; };
  EXPECT_EQ(ApplyLayout(driver_, request).state, ApplyState::kSuccess);
  EXPECT_TRUE(driver_.Profiles(0).empty());
  EXPECT_EQ(driver_.Profiles(1).size(), 7u);
}

TEST(MigDevicesTest, NamesAndLabelsAsNvidiasPluginAndGfd) {
  EXPECT_EQ(MigResourceName(MigStrategy::kMixed, "1g.10gb"), "nvidia.com/mig-1g.10gb");
  EXPECT_EQ(MigResourceName(MigStrategy::kMixed, "1g.10gb+me"), "nvidia.com/mig-1g.10gb.me");
  EXPECT_EQ(MigResourceName(MigStrategy::kSingle, "3g.40gb"), "nvidia.com/gpu");

  FakeMigDriver driver;
  driver.AddGpu("A100-80GB", "NVIDIA A100-SXM4-80GB", 81920, true, true, true);
  ASSERT_TRUE(driver.CreateInstance(0, 19, 0).ok());
  ASSERT_TRUE(driver.CreateInstance(0, 19, 1).ok());
  ASSERT_TRUE(driver.CreateInstance(0, 9, 4).ok());
  auto devices = MigDevicesOf(
      driver.gpus_, [](int) { return true; }, MigStrategy::kMixed);
  ASSERT_EQ(devices.size(), 3u);
  auto labels = MigNodeLabels(MigStrategy::kMixed, devices, {});
  EXPECT_EQ(labels.at("nvidia.com/mig.strategy"), "mixed");
  EXPECT_EQ(labels.at("nvidia.com/mig-1g.10gb.count"), "2");
  EXPECT_EQ(labels.at("nvidia.com/mig-1g.10gb.memory"), "9728");
  EXPECT_EQ(labels.at("nvidia.com/mig-1g.10gb.multiprocessors"), "14");
  EXPECT_EQ(labels.at("nvidia.com/mig-3g.40gb.count"), "1");
  EXPECT_EQ(labels.at("nvidia.com/mig-3g.40gb.slices.gi"), "3");
  // A profile that is gone loses its labels.
  std::map<std::string, std::optional<std::string>> written(labels.begin(), labels.end());
  devices.pop_back();
  auto after = MigNodeLabels(MigStrategy::kMixed, devices, written);
  ASSERT_TRUE(after.count("nvidia.com/mig-3g.40gb.count"));
  EXPECT_FALSE(after.at("nvidia.com/mig-3g.40gb.count").has_value());

  auto single = MigNodeLabels(MigStrategy::kSingle,
                              MigDevicesOf(
                                  driver.gpus_, [](int) { return true; }, MigStrategy::kSingle),
                              {});
  EXPECT_FALSE(single.count("nvidia.com/gpu.product") && single.at("nvidia.com/gpu.product"));
}

// The manager without Kubernetes: mig_config decides; a layout file it cannot
// read fails with the reason and changes nothing.
TEST(MigManagerTest, UnreadableLayoutFileFailsAndChangesNothing) {
  FakeMigDriver driver;
  driver.AddGpu("A100-80GB", "NVIDIA A100-SXM4-80GB", 81920, true, true, true);
  NodeConfig config;
  config.kubernetes = false;
  config.plugin_dir = "/tmp/tessera-mig-manager-test-" + std::to_string(::getpid());
  config.mig_layout_file = config.plugin_dir + "/no-such-layout.yaml";
  config.mig_config = "all-1g.10gb";
  MigManager manager(config, &driver, nullptr, nullptr);
  manager.Tick();
  MigStatus status = manager.status();
  ASSERT_TRUE(status.state.has_value());
  EXPECT_EQ(*status.state, ApplyState::kFailed);
  EXPECT_NE(status.message.find("cannot read the MIG layout file"), std::string::npos) << status.message;
  EXPECT_EQ(driver.creates, 0);

  // The file appears: the next pass reads it and applies (no restart).
  ASSERT_EQ(::mkdir(config.plugin_dir.c_str(), 0755), 0);
  {
    std::ofstream out(config.mig_layout_file);
    out << kLayout;
  }
  manager.Tick();
  status = manager.status();
  EXPECT_EQ(*status.state, ApplyState::kSuccess) << status.message;
  EXPECT_EQ(driver.creates, 7);
  EXPECT_EQ(manager.devices().Get().devices.size(), 7u);
  manager.Stop();
  std::filesystem::remove_all(config.plugin_dir);
}

}  // namespace
}  // namespace tessera::node::mig
