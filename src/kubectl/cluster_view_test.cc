#include "kubectl/cluster_view.h"

#include <gtest/gtest.h>

#include "kubectl/testing.h"

namespace tessera::kubectl {
namespace {

using namespace test;

ViewOptions At(const char* now) {
  ViewOptions options;
  std::tm tm{};
  strptime(now, "%Y-%m-%dT%H:%M:%SZ", &tm);
  options.now = std::chrono::system_clock::from_time_t(timegm(&tm));
  return options;
}

TEST(ClusterViewTest, AccountsPlacedPodsOnTheirNodesGpus) {
  ClusterView view =
      BuildClusterView({GpuNode("b"), GpuNode("a")},
                       {PlacedPod("ml", "one", "a", kGpu0, 10000, 30),
                        PlacedPod("ml", "two", "a", kGpu0, 5000, 20), GpuPod("ml", "waiting", 1000, 10)},
                       At("2030-01-01T00:00:30Z"));
  ASSERT_EQ(view.nodes.size(), 2u);
  EXPECT_EQ(view.nodes[0].name, "a");
  const NodeView* a = view.FindNode("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->inventory, InventoryState::kOk);
  EXPECT_FALSE(a->stale);
  EXPECT_EQ(a->state.gpus()[0].used.memory_mib, 15000);
  EXPECT_EQ(a->state.gpus()[0].used.cores, 50);
  EXPECT_EQ(a->state.gpus()[0].used.slots, 2);
  EXPECT_EQ(a->state.gpus()[1].used.slots, 0);
  EXPECT_EQ(a->pods, (std::vector<std::string>{"ml/one", "ml/two"}));
  const PodView* waiting = view.FindPod("ml", "waiting");
  ASSERT_NE(waiting, nullptr);
  EXPECT_TRUE(waiting->asks_gpu);
  EXPECT_EQ(waiting->source, AllocationSource::kNone);
  EXPECT_TRUE(waiting->node.empty());
}

TEST(ClusterViewTest, ANodeWithoutOrWithACorruptInventoryIsKeptAndSaysSo) {
  ClusterView view = BuildClusterView({Node("cpu", ""), Node("broken", "{\"version\": 1, \"gpus\": 7}")}, {});
  ASSERT_EQ(view.nodes.size(), 2u);
  EXPECT_EQ(view.FindNode("cpu")->inventory, InventoryState::kMissing);
  const NodeView* broken = view.FindNode("broken");
  EXPECT_EQ(broken->inventory, InventoryState::kCorrupt);
  EXPECT_FALSE(broken->inventory_error.empty());
}

TEST(ClusterViewTest, AnOldHeartbeatIsStale) {
  ClusterView view = BuildClusterView({GpuNode("a")}, {}, At("2030-01-01T00:05:00Z"));
  EXPECT_TRUE(view.nodes[0].stale);
  EXPECT_EQ(view.nodes[0].heartbeat_age_seconds, 300);
  ViewOptions never = At("2030-01-01T00:05:00Z");
  never.stale_after = std::chrono::seconds(0);
  EXPECT_FALSE(BuildClusterView({GpuNode("a")}, {}, never).nodes[0].stale);
}

TEST(ClusterViewTest, ACorruptAllocationIsShownNotAccounted) {
  Json pod = PlacedPod("ml", "bad", "a", kGpu0, 1000, 10);
  pod["metadata"]["annotations"][std::string(core::kAllocationAnnotation)] = "{\"version\": 1, \"node\":";
  ClusterView view = BuildClusterView({GpuNode("a")}, {pod});
  const PodView* bad = view.FindPod("ml", "bad");
  EXPECT_EQ(bad->source, AllocationSource::kTessera);
  EXPECT_NE(bad->allocation_error.find("tessera.io/allocation"), std::string::npos) << bad->allocation_error;
  EXPECT_EQ(view.FindNode("a")->state.gpus()[0].used.slots, 0);
}

TEST(ClusterViewTest, AnAllocationNamingAnUnknownGpuIsAMismatch) {
  ClusterView view = BuildClusterView(
      {GpuNode("a")}, {PlacedPod("ml", "odd", "a", "GPU-99999999-aaaa-bbbb-cccc-dddddddddddd", 1000, 10)});
  EXPECT_FALSE(view.FindPod("ml", "odd")->accounting_error.empty());
  EXPECT_EQ(view.FindNode("a")->problems.size(), 1u);
}

TEST(ClusterViewTest, ReadsHamisAnnotation) {
  Json pod = GpuPod("ml", "hami", 3000, 30);
  pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = std::string(kGpu1) + ",NVIDIA,3000,30:;";
  pod["metadata"]["annotations"]["hami.io/vgpu-node"] = "a";
  ClusterView view = BuildClusterView({GpuNode("a")}, {pod});
  const PodView* hami = view.FindPod("ml", "hami");
  EXPECT_EQ(hami->source, AllocationSource::kHami);
  EXPECT_EQ(hami->node, "a");
  EXPECT_FALSE(hami->bound);
  EXPECT_EQ(view.FindNode("a")->state.gpus()[1].used.memory_mib, 3000);
}

TEST(ClusterViewTest, TerminalPodsHoldNothing) {
  Json done = PlacedPod("ml", "done", "a", kGpu0, 1000, 10);
  done["status"]["phase"] = "Succeeded";
  ClusterView view = BuildClusterView({GpuNode("a")}, {done});
  EXPECT_EQ(view.FindNode("a")->state.gpus()[0].used.slots, 0);
}

}  // namespace
}  // namespace tessera::kubectl
