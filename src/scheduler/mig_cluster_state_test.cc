// The scheduler's view of GPUs in MIG mode: their MIG devices come through the
// inventory annotation, and no vGPU slice is placed on them.
#include <gtest/gtest.h>

#include <set>

#include "base/clock.h"
#include "core/allocation_codec.h"
#include "core/inventory_codec.h"
#include "core/pod_request.h"
#include "scheduler/cluster_state.h"
#include "scheduler/testing.h"

namespace tessera::scheduler {
namespace {

using testing::GpuPod;
using testing::MigPod;
using testing::NodeWithDynamicMigGpus;
using testing::NodeWithGpus;

// `name` with two A100-80GB GPUs; GPU 0 in dynamic MIG mode with one 3g.40gb in use.
nlohmann::json NodeWithOneMigGpu(const std::string& name) {
  nlohmann::json node = NodeWithGpus(name, 7, 2, 81920);
  auto& text = node["metadata"]["annotations"][std::string(core::kInventoryAnnotation)];
  auto inv = core::DecodeInventory(text.get<std::string>());
  EXPECT_TRUE(inv.ok());
  core::Gpu& mig = inv->gpus[0];
  mig.mig_capable = true;
  mig.mode = core::SharingMode::kMigDynamic;
  mig.mig_devices = {
      {"MIG-11111111-2222-3333-4444-555555555555", "3g.40gb", 0, 4, 40192, 42, true, "ml/train/main"}};
  text = *core::EncodeInventory(*inv);
  return node;
}

core::PodRequest Request(int64_t memory_mib, int gpus = 1) {
  auto r = core::DerivePodRequest(GpuPod("d", "p", gpus, memory_mib, 10), {});
  EXPECT_TRUE(r.ok());
  return *r;
}

TEST(MigClusterStateTest, MigDevicesReachTheSchedulersNodeState) {
  ClusterState state;
  state.UpsertNode(NodeWithOneMigGpu("n"));
  auto node = state.Node("n");
  ASSERT_TRUE(node.has_value());
  ASSERT_EQ(node->gpus().size(), 2u);
  const core::Gpu& mig = node->gpus()[0].gpu;
  EXPECT_EQ(mig.mode, core::SharingMode::kMigDynamic);
  ASSERT_EQ(mig.mig_devices.size(), 1u);
  EXPECT_EQ(mig.mig_devices[0].profile, "3g.40gb");
  EXPECT_EQ(mig.mig_devices[0].used_by, "ml/train/main");
  EXPECT_EQ(node->gpus()[1].gpu.mode, core::SharingMode::kVgpu);
}

TEST(MigClusterStateTest, NoVgpuSliceGoesToAGpuInMigMode) {
  ClusterState state;
  state.UpsertNode(NodeWithOneMigGpu("n"));
  auto one = state.Filter(Request(1000), {"n"});
  EXPECT_EQ(one.feasible, std::vector<std::string>{"n"}) << "GPU 1 takes it";
  auto reserved =
      state.Reserve("d/p", Request(1000), "n", core::GpuOrder::kBinpack, std::chrono::seconds(60));
  ASSERT_TRUE(reserved.ok()) << reserved.error().message;
  ASSERT_EQ(reserved->containers.size(), 1u);
  ASSERT_EQ(reserved->containers[0].devices.size(), 1u);
  EXPECT_EQ(reserved->containers[0].devices[0].uuid, state.Node("n")->gpus()[1].gpu.uuid);

  auto two = state.Filter(Request(1000, 2), {"n"});
  EXPECT_TRUE(two.feasible.empty());
  ASSERT_EQ(two.failed.count("n"), 1u);
  EXPECT_NE(two.failed["n"].find("in MIG mode"), std::string::npos) << two.failed["n"];
}

// ---- Dynamic MIG through the cluster state (filter, prioritize, reserve) ----

constexpr auto kTtl = std::chrono::seconds(60);

core::PodRequest MigRequest(int64_t memory_mib) {
  auto r = core::DerivePodRequest(MigPod("d", "p", memory_mib), {});
  EXPECT_TRUE(r.ok());
  return *r;
}

// The one MIG device of a one-container allocation.
const core::DeviceSlice& OnlyDevice(const core::PodAllocation& a) {
  EXPECT_EQ(a.containers.size(), 1u);
  EXPECT_EQ(a.containers.at(0).devices.size(), 1u);
  return a.containers.at(0).devices.at(0);
}

// `name` as the pod informer shows it once bound with `allocation`.
nlohmann::json BoundPod(const std::string& name, int64_t memory_mib, const core::PodAllocation& allocation) {
  nlohmann::json pod = MigPod("d", name, memory_mib);
  pod["metadata"]["annotations"][std::string(core::kAllocationAnnotation)] =
      *core::EncodeAllocation(allocation);
  pod["spec"]["nodeName"] = allocation.node;
  pod["status"]["phase"] = "Running";
  return pod;
}

// What the node agent lists once it created the instance for `allocation`'s device.
core::MigDevice Listed(const core::PodAllocation& allocation, const std::string& used_by) {
  const core::DeviceSlice& d = OnlyDevice(allocation);
  return testing::ListedMigDevice(d, "MIG-" + d.mig_profile + "-" + std::to_string(d.mig_start), used_by);
}

std::pair<std::string, int> Where(const core::PodAllocation& a) {
  return {OnlyDevice(a).uuid, OnlyDevice(a).mig_start};
}

TEST(MigClusterStateTest, PodsInARowNeverGetTheSamePlacementReservedOrBound) {
  ClusterState state;
  state.UpsertNode(NodeWithDynamicMigGpus("n", 1, 2));
  const std::string gpu0 = testing::GpuUuid(1, 0), gpu1 = testing::GpuUuid(1, 1);
  std::set<std::pair<std::string, int>> taken;
  for (int i = 0; i < 7; ++i) {
    const std::string key = "d/small-" + std::to_string(i);
    auto a = state.Reserve(key, MigRequest(9728), "n", core::GpuOrder::kSpread, kTtl, Sharing::kDynamicMig);
    ASSERT_TRUE(a.ok()) << i << ": " << a.error().message;
    EXPECT_EQ(OnlyDevice(*a).uuid, gpu0) << "the fuller GPU first";
    EXPECT_EQ(OnlyDevice(*a).mig_profile, "1g.10gb");
    EXPECT_EQ(OnlyDevice(*a).memory_mib, 9728);
    EXPECT_TRUE(taken.insert(Where(*a)).second) << "placement given twice: " << OnlyDevice(*a).mig_start;
    // Every other pod is already bound (the informer saw its annotation).
    if (i % 2 == 1) state.UpsertPod(BoundPod("small-" + std::to_string(i), 9728, *a));
  }
  EXPECT_EQ(state.Stats().mig_placements, 7u);
  // GPU 0 is full: the eighth goes to GPU 1.
  auto eighth =
      state.Reserve("d/small-7", MigRequest(9728), "n", core::GpuOrder::kSpread, kTtl, Sharing::kDynamicMig);
  ASSERT_TRUE(eighth.ok()) << eighth.error().message;
  EXPECT_EQ(OnlyDevice(*eighth).uuid, gpu1);
  // Neither GPU holds a 7g any more; the reason names both.
  auto whole = state.Filter(MigRequest(80000), {"n"}, Sharing::kDynamicMig);
  EXPECT_TRUE(whole.feasible.empty());
  EXPECT_NE(whole.failed["n"].find(gpu0), std::string::npos) << whole.failed["n"];
  EXPECT_NE(whole.failed["n"].find(gpu1), std::string::npos) << whole.failed["n"];
  auto refused =
      state.Reserve("d/whole", MigRequest(80000), "n", core::GpuOrder::kSpread, kTtl, Sharing::kDynamicMig);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("no longer fits on node n"), std::string::npos);
}

TEST(MigClusterStateTest, AnInstanceTheNodeListsIsCountedOnce) {
  ClusterState state;
  state.UpsertNode(NodeWithDynamicMigGpus("n", 1, 1));
  auto first =
      state.Reserve("d/a", MigRequest(40000), "n", core::GpuOrder::kSpread, kTtl, Sharing::kDynamicMig);
  ASSERT_TRUE(first.ok()) << first.error().message;
  ASSERT_EQ(OnlyDevice(*first).mig_profile, "3g.40gb");
  state.UpsertPod(BoundPod("a", 40000, *first));
  // The node created it and lists it, in use by the pod: still one instance.
  state.UpsertNode(NodeWithDynamicMigGpus("n", 1, 1, {{0, {Listed(*first, "d/a/app")}}}));
  auto other_half = state.Filter(MigRequest(40000), {"n"}, Sharing::kDynamicMig);
  EXPECT_EQ(other_half.feasible, std::vector<std::string>{"n"}) << other_half.failed["n"];
  auto second =
      state.Reserve("d/b", MigRequest(40000), "n", core::GpuOrder::kSpread, kTtl, Sharing::kDynamicMig);
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_NE(OnlyDevice(*second).mig_start, OnlyDevice(*first).mig_start);
  EXPECT_FALSE(state.Filter(MigRequest(40000), {"n"}, Sharing::kDynamicMig).feasible.size());
}

TEST(MigClusterStateTest, ADeletedPodsPlacementIsFreeOnceTheNodeNoLongerListsIt) {
  ClusterState state;
  state.UpsertNode(NodeWithDynamicMigGpus("n", 1, 1));
  auto whole = state.Reserve("d/a", MigRequest(0), "n", core::GpuOrder::kSpread, kTtl, Sharing::kDynamicMig);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  ASSERT_EQ(OnlyDevice(*whole).mig_profile, "7g.80gb");
  const nlohmann::json bound = BoundPod("a", 0, *whole);
  state.UpsertPod(bound);
  state.UpsertNode(NodeWithDynamicMigGpus("n", 1, 1, {{0, {Listed(*whole, "d/a/app")}}}));
  EXPECT_TRUE(state.Filter(MigRequest(9728), {"n"}, Sharing::kDynamicMig).feasible.empty());
  // Deleted: the node still lists the instance (not destroyed yet), so it stays taken.
  state.DeletePod(bound);
  EXPECT_EQ(state.Stats().mig_placements, 0u);
  auto listed = state.Filter(MigRequest(9728), {"n"}, Sharing::kDynamicMig);
  EXPECT_TRUE(listed.feasible.empty());
  EXPECT_NE(listed.failed["n"].find("7g.80gb@0"), std::string::npos) << listed.failed["n"];
  // Destroyed: the GPU is free again.
  state.UpsertNode(NodeWithDynamicMigGpus("n", 1, 1));
  EXPECT_EQ(state.Filter(MigRequest(40000), {"n"}, Sharing::kDynamicMig).feasible,
            std::vector<std::string>{"n"});
}

TEST(MigClusterStateTest, ReservationsGivenBackOrExpiredFreeTheirPlacement) {
  FakeClock clock;
  ClusterState state(ClusterStateOptions{&clock, std::chrono::milliseconds(0)});
  state.UpsertNode(NodeWithDynamicMigGpus("n", 1, 1));
  ASSERT_TRUE(
      state.Reserve("d/a", MigRequest(0), "n", core::GpuOrder::kSpread, kTtl, Sharing::kDynamicMig).ok());
  EXPECT_TRUE(state.Filter(MigRequest(9728), {"n"}, Sharing::kDynamicMig).feasible.empty());
  state.Unreserve("d/a");
  EXPECT_EQ(state.Filter(MigRequest(9728), {"n"}, Sharing::kDynamicMig).feasible,
            std::vector<std::string>{"n"});
  ASSERT_TRUE(
      state.Reserve("d/b", MigRequest(0), "n", core::GpuOrder::kSpread, kTtl, Sharing::kDynamicMig).ok());
  EXPECT_TRUE(state.Filter(MigRequest(9728), {"n"}, Sharing::kDynamicMig).feasible.empty());
  clock.Advance(kTtl + std::chrono::seconds(1));
  EXPECT_EQ(state.ExpireReservations(), 1u);
  EXPECT_EQ(state.Filter(MigRequest(9728), {"n"}, Sharing::kDynamicMig).feasible,
            std::vector<std::string>{"n"});
}

TEST(MigClusterStateTest, ARebuiltStateHoldsTheSamePlacementsWhateverTheOrder) {
  // After a restart the informers list pods and nodes in any order: the
  // placements of bound pods are taken again before anything is decided.
  ClusterState first;
  first.UpsertNode(NodeWithDynamicMigGpus("n", 1, 1));
  std::vector<nlohmann::json> pods;
  for (int i = 0; i < 3; ++i) {
    auto a = first.Reserve("d/p" + std::to_string(i), MigRequest(19968), "n", core::GpuOrder::kSpread, kTtl,
                           Sharing::kDynamicMig);
    ASSERT_TRUE(a.ok()) << a.error().message;
    pods.push_back(BoundPod("p" + std::to_string(i), 19968, *a));
  }
  ClusterState restarted;
  for (const auto& p : pods) restarted.UpsertPod(p);  // pods before their node
  restarted.UpsertNode(NodeWithDynamicMigGpus("n", 1, 1));
  EXPECT_EQ(restarted.Stats().mig_placements, 3u);
  EXPECT_EQ(restarted.Stats().inconsistent, 0u);
  for (const char* s : {"first", "restarted"}) {
    ClusterState& state = std::string(s) == "first" ? first : restarted;
    auto next =
        state.Reserve("d/next", MigRequest(19968), "n", core::GpuOrder::kSpread, kTtl, Sharing::kDynamicMig);
    ASSERT_TRUE(next.ok()) << s << ": " << next.error().message;
    for (const auto& p : pods) {
      auto bound = core::DecodeAllocation(
          p["metadata"]["annotations"][std::string(core::kAllocationAnnotation)].get<std::string>());
      EXPECT_NE(OnlyDevice(*bound).mig_start, OnlyDevice(*next).mig_start) << s;
    }
  }
}

TEST(MigClusterStateTest, MigPodsGetOnlyMigAndOtherPodsNeverMig) {
  ClusterState state;
  state.UpsertNode(NodeWithGpus("vgpu", 2, 2, 81920));
  state.UpsertNode(NodeWithDynamicMigGpus("mig", 1, 1));
  auto mig = state.Filter(MigRequest(9728), {"vgpu", "mig"}, Sharing::kDynamicMig);
  EXPECT_EQ(mig.feasible, std::vector<std::string>{"mig"});
  EXPECT_NE(mig.failed["vgpu"].find("not in mig-dynamic mode"), std::string::npos) << mig.failed["vgpu"];
  auto plain = state.Filter(Request(9728), {"vgpu", "mig"});
  EXPECT_EQ(plain.feasible, std::vector<std::string>{"vgpu"});
  EXPECT_NE(plain.failed["mig"].find("in MIG mode"), std::string::npos) << plain.failed["mig"];
  EXPECT_FALSE(state.Reserve("d/p", Request(9728), "mig", core::GpuOrder::kSpread, kTtl).ok());
  auto refused =
      state.Reserve("d/m", MigRequest(9728), "vgpu", core::GpuOrder::kSpread, kTtl, Sharing::kDynamicMig);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("not in mig-dynamic mode"), std::string::npos);
  // Too big for any profile: the Placer's reason reaches the verdict.
  auto huge = state.Filter(MigRequest(100000), {"mig"}, Sharing::kDynamicMig);
  EXPECT_NE(huge.failed["mig"].find("holds 100000 MiB"), std::string::npos) << huge.failed["mig"];
}

TEST(MigClusterStateTest, AllocationsNamingMigInstancesTheNodeCannotHoldAreInconsistent) {
  ClusterState state;
  state.UpsertNode(NodeWithGpus("vgpu", 2, 1, 81920));
  state.UpsertNode(NodeWithDynamicMigGpus("mig", 1, 1));
  auto on = [](const std::string& node, const std::string& uuid, const std::string& profile, int start) {
    core::PodAllocation a;
    a.node = node;
    core::DeviceSlice d{uuid, 9728, 0};
    d.mig_profile = profile;
    d.mig_start = start;
    a.containers.push_back({"app", {d}});
    return a;
  };
  state.UpsertPod(BoundPod("x1", 9728, on("vgpu", testing::GpuUuid(2, 0), "1g.10gb", 0)));  // not dynamic
  state.UpsertPod(BoundPod("x2", 9728, on("mig", testing::GpuUuid(1, 0), "5g.50gb", 0)));   // no such profile
  state.UpsertPod(BoundPod("x3", 9728, on("mig", testing::GpuUuid(1, 0), "1g.10gb", 7)));   // no such start
  EXPECT_EQ(state.Stats().inconsistent, 3u);
  EXPECT_EQ(state.Stats().mig_placements, 0u);
  EXPECT_EQ(state.Filter(MigRequest(0), {"mig"}, Sharing::kDynamicMig).feasible,
            std::vector<std::string>{"mig"});
}

TEST(MigClusterStateTest, PrioritizePrefersTheFullestGpuAndFollowsChanges) {
  ClusterState state;
  state.UpsertNode(NodeWithDynamicMigGpus("empty", 1, 1));
  state.UpsertNode(NodeWithDynamicMigGpus("used", 2, 1));
  const std::vector<std::string> both = {"empty", "used"};
  // Both empty: equal scores, the name that sorts first gets the 10.
  EXPECT_EQ(state.PrioritizeDynamicMig(MigRequest(9728), both), (std::vector<int>{10, 9}));
  ASSERT_TRUE(
      state.Reserve("d/a", MigRequest(9728), "used", core::GpuOrder::kSpread, kTtl, Sharing::kDynamicMig)
          .ok());
  EXPECT_EQ(state.PrioritizeDynamicMig(MigRequest(9728), both), (std::vector<int>{0, 10}));
  state.Unreserve("d/a");
  EXPECT_EQ(state.PrioritizeDynamicMig(MigRequest(9728), both), (std::vector<int>{10, 9}));
  // A node that cannot take it scores 0.
  EXPECT_EQ(state.PrioritizeDynamicMig(MigRequest(100000), both), (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace tessera::scheduler
