#include "scheduler/mig_placement.h"

#include <gtest/gtest.h>

#include "core/allocation_codec.h"

namespace tessera::scheduler {
namespace {

constexpr const char* kA100 = "NVIDIA A100-SXM4-80GB";

core::Gpu DynamicGpu(int index) {
  core::Gpu gpu;
  gpu.uuid = "GPU-0000000" + std::to_string(index) + "-0000-1111-2222-333344445555";
  gpu.index = index;
  gpu.model = kA100;
  gpu.memory_mib = 81920;
  gpu.sm_count = 108;
  gpu.slots = 0;
  gpu.mig_capable = true;
  gpu.mode = core::SharingMode::kMigDynamic;
  return gpu;
}

core::PodRequest Asking(int64_t memory_mib, int cores = 0, int gpus = 1) {
  core::PodRequest pod;
  pod.containers.push_back({"main", gpus, memory_mib, std::nullopt, cores, std::nullopt});
  return pod;
}

// Places `pod` with `pending` and, when it fits, adds its instances to `pending`.
Result<std::vector<MigContainerPlacement>> PlaceAndKeep(const core::NodeState& node,
                                                        const core::PodRequest& pod,
                                                        std::vector<PendingMigInstance>& pending) {
  auto placed = PlaceDynamicMig(node, pod, pending);
  if (placed.ok()) {
    for (const auto& c : *placed) {
      for (const auto& d : c.devices) pending.push_back({node.gpus()[d.gpu].gpu.uuid, d.instance});
    }
  }
  return placed;
}

TEST(MigPlacementTest, SevenSmallPodsFillOneGpuThenFortyGigabytesGoElsewhereAndFitAgainWhenFreed) {
  const core::NodeState node("n", {DynamicGpu(0), DynamicGpu(1)});
  std::vector<PendingMigInstance> pending;
  for (int i = 0; i < 7; ++i) {
    auto placed = PlaceAndKeep(node, Asking(9728), pending);
    ASSERT_TRUE(placed.ok()) << i << ": " << placed.error().message;
    ASSERT_EQ((*placed)[0].devices.size(), 1u);
    EXPECT_EQ((*placed)[0].devices[0].gpu, 0) << "the fuller GPU first: pod " << i;
    EXPECT_EQ((*placed)[0].devices[0].instance.profile, "1g.10gb");
    EXPECT_EQ((*placed)[0].devices[0].memory_mib, 9728u);
  }
  // 40 GB: no room on GPU 0 (seven compute slices in use), so GPU 1.
  auto forty = PlaceAndKeep(node, Asking(40000), pending);
  ASSERT_TRUE(forty.ok()) << forty.error().message;
  EXPECT_EQ((*forty)[0].devices[0].gpu, 1);
  EXPECT_EQ((*forty)[0].devices[0].instance.profile, "3g.40gb");
  ASSERT_TRUE(PlaceAndKeep(node, Asking(40000), pending).ok()) << "the other half of GPU 1";
  auto refused = PlaceDynamicMig(node, Asking(40000), pending);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("no mig-dynamic GPU has one"), std::string::npos);
  EXPECT_NE(refused.error().message.find(DynamicGpu(0).uuid), std::string::npos) << refused.error().message;

  // Pods whose instances sit on memory slices 0..3 of GPU 0 are deleted: a
  // 3g.40gb fits there again.
  std::erase_if(pending, [](const PendingMigInstance& p) {
    return p.gpu_uuid == DynamicGpu(0).uuid && p.instance.start < 4;
  });
  auto again = PlaceDynamicMig(node, Asking(40000), pending);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ((*again)[0].devices[0].gpu, 0);
  EXPECT_EQ((*again)[0].devices[0].instance, (core::mig::Instance{"3g.40gb", 0}));
}

TEST(MigPlacementTest, InstancesInTheInventoryCountAndOnlyDynamicGpusTakeRequests) {
  core::Gpu full = DynamicGpu(0);
  full.mig_devices = {
      {"MIG-00000000-0000-0000-0000-000000000001", "7g.80gb", 0, 8, 80640, 98, true, "a/b/c"}};
  core::Gpu vgpu = DynamicGpu(1);
  vgpu.mode = core::SharingMode::kVgpu;
  vgpu.mig_capable = false;
  vgpu.slots = 10;
  core::Gpu layout = DynamicGpu(2);
  layout.mode = core::SharingMode::kMigStatic;
  const core::NodeState node("n", {full, vgpu, layout});
  auto refused = PlaceDynamicMig(node, Asking(9000));
  ASSERT_FALSE(refused.ok());
  const std::string& why = refused.error().message;
  EXPECT_NE(why.find("7g.80gb@0"), std::string::npos) << why;
  EXPECT_NE(why.find(vgpu.uuid + " (#1, " + kA100 + "): not in mig-dynamic mode"), std::string::npos) << why;
  EXPECT_NE(why.find(layout.uuid + " (#2, " + kA100 + "): not in mig-dynamic mode"), std::string::npos)
      << why;
}

TEST(MigPlacementTest, ComputeShareAndBadRequestsNameTheCause) {
  const core::NodeState node("n", {DynamicGpu(0)});
  // 5 GB with half the SMs: the smallest profile with >= 49 of 98 SMs is 4g.40gb.
  auto half = PlaceDynamicMig(node, Asking(5000, 50));
  ASSERT_TRUE(half.ok()) << half.error().message;
  EXPECT_EQ((*half)[0].devices[0].instance.profile, "4g.40gb");
  // No gpumem: the whole GPU.
  auto whole = PlaceDynamicMig(node, Asking(0));
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  EXPECT_EQ((*whole)[0].devices[0].instance.profile, "7g.80gb");
  // Bigger than any profile.
  auto huge = PlaceDynamicMig(node, Asking(100000));
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.error().message.find("holds 100000 MiB"), std::string::npos) << huge.error().message;
  // Two devices for one container need two GPUs.
  auto two = PlaceDynamicMig(node, Asking(9000, 0, 2));
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.error().message.find("already holds another device of this container"), std::string::npos);
  // A model without a MIG table.
  core::Gpu t4 = DynamicGpu(0);
  t4.model = "Tesla T4";
  t4.memory_mib = 15360;
  auto none = PlaceDynamicMig(core::NodeState("n", {t4}), Asking(1000));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("Tesla T4"), std::string::npos) << none.error().message;
}

TEST(MigPlacementTest, TheAllocationRecordsProfileAndPlacement) {
  const core::NodeState node("n", {DynamicGpu(0)});
  const core::PodRequest pod = Asking(9728);
  auto placed = PlaceDynamicMig(node, pod);
  ASSERT_TRUE(placed.ok()) << placed.error().message;
  core::PodAllocation allocation = ToMigAllocation(node, pod, *placed);
  ASSERT_EQ(allocation.containers.size(), 1u);
  const core::DeviceSlice& d = allocation.containers[0].devices[0];
  EXPECT_EQ(d.uuid, DynamicGpu(0).uuid);
  EXPECT_EQ(d.mig_profile, "1g.10gb");
  EXPECT_EQ(d.mig_start, static_cast<int>((*placed)[0].devices[0].instance.start));
  EXPECT_EQ(d.memory_mib, 9728);
  auto text = core::EncodeAllocation(allocation);
  ASSERT_TRUE(text.ok()) << text.error().message;
  EXPECT_EQ(*core::DecodeAllocation(*text), allocation);
}

TEST(MigPlacementTest, OnlyPodsWithHamisAnnotationAskForMig) {
  EXPECT_TRUE(WantsDynamicMig({{"metadata", {{"annotations", {{"nvidia.com/vgpu-mode", "mig"}}}}}}));
  EXPECT_TRUE(WantsDynamicMig({{"metadata", {{"annotations", {{"nvidia.com/vgpu-mode", "MIG"}}}}}}));
  EXPECT_FALSE(WantsDynamicMig({{"metadata", {{"annotations", {{"nvidia.com/vgpu-mode", "hami-core"}}}}}}));
  EXPECT_FALSE(WantsDynamicMig({{"metadata", {{"annotations", {{"nvidia.com/vgpu-mode", 1}}}}}}));
  EXPECT_FALSE(WantsDynamicMig({{"metadata", {{"name", "p"}}}}));
  EXPECT_FALSE(WantsDynamicMig(nlohmann::json::array()));
}

}  // namespace
}  // namespace tessera::scheduler
