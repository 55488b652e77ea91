#include "kubectl/render.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kubectl/testing.h"

namespace tessera::kubectl {
namespace {

using namespace test;
using ::testing::HasSubstr;

ViewOptions Fresh() {
  ViewOptions options;
  options.stale_after = std::chrono::seconds(0);
  return options;
}

TEST(RenderTest, TopNodesShowsAllocationAgainstCapacityAndInventoryState) {
  ClusterView view = BuildClusterView({GpuNode("gpu-a"), Node("cpu-1", ""), Node("bad", "not json")},
                                      {PlacedPod("ml", "one", "gpu-a", kGpu0, 20000, 50)}, Fresh());
  EXPECT_THAT(TopNodes(view),
              HasSubstrs({"NAME", "INVENTORY",
                          // 20000 of 80000 MiB, 50 of 200 cores, 1 of 8 vGPUs, one pod.
                          "gpu-a  2/2   20000Mi/80000Mi  25%      50/200  25%     1/8    -    1     ok",
                          "cpu-1", "none", "bad", "corrupt: "}));
}

TEST(RenderTest, TopGpusListsEveryGpuWithItsPods) {
  ClusterView view =
      BuildClusterView({GpuNode("gpu-a")}, {PlacedPod("ml", "one", "gpu-a", kGpu1, 10000, 100)}, Fresh());
  const std::string text = TopGpus(view);
  EXPECT_THAT(text, HasSubstr(std::string("gpu-a  1      ") + kGpu1));
  EXPECT_THAT(text, HasSubstr("vgpu  10000Mi/40000Mi  25%      100/100  1/4    -    1"));
  EXPECT_THAT(TopGpus(view, "nowhere"), HasSubstr("Node nowhere not found"));
  EXPECT_THAT(TopGpus(BuildClusterView({Node("cpu", "")}, {}), ""), HasSubstr("No GPUs"));
}

TEST(RenderTest, TopPodsShowsStatusPerPodAndFiltersByNamespace) {
  Json corrupt = PlacedPod("ml", "corrupt", "gpu-a", kGpu0, 1000, 10);
  corrupt["metadata"]["annotations"][std::string(core::kAllocationAnnotation)] = "garbage";
  ClusterView view = BuildClusterView({GpuNode("gpu-a")},
                                      {PlacedPod("ml", "one", "gpu-a", kGpu0, 1000, 10),
                                       GpuPod("ml", "waiting", 1000, 10),
                                       corrupt,
                                       GpuPod("other", "elsewhere", 1000, 10),
                                       {{"metadata", {{"name", "web"}, {"namespace", "ml"}}}}},
                                      Fresh());
  const std::string text = TopPods(view, "ml");
  EXPECT_THAT(text, HasSubstrs({"placed", "waiting  <none>", "pending", "corrupt: tessera.io/allocation"}));
  EXPECT_EQ(text.find("elsewhere"), std::string::npos);
  EXPECT_EQ(text.find("web"), std::string::npos) << "not a GPU pod";
  EXPECT_THAT(TopPods(view, ""), HasSubstr("elsewhere"));
  EXPECT_THAT(TopPods(view, "empty"), HasSubstr("No GPU pods in namespace empty"));
}

TEST(RenderTest, DescribeAPlacedPodShowsItsSlicesAndWhy) {
  ClusterView view = BuildClusterView(
      {GpuNode("gpu-a")},
      {PlacedPod("ml", "one", "gpu-a", kGpu1, 12000, 30), PlacedPod("ml", "two", "gpu-a", kGpu1, 8000, 20)},
      Fresh());
  const std::string text = DescribePod(view, *view.FindPod("ml", "one"), {});
  EXPECT_THAT(
      text,
      HasSubstrs({"Node:         gpu-a\n", "main: 1 vGPU x 12000Mi, 30% cores",
                  std::string("main       1    ") + kGpu1 + "  NVIDIA A100-PCIE-40GB  12000Mi  30%",
                  "tessera-scheduler chose node gpu-a",
                  "20000Mi of 40000Mi allocated, 50% of 100% cores, 2 of 4 vGPUs", "Events:\n  <none>"}));
}

TEST(RenderTest, DescribeAPendingPodSaysWhyNoNodeFits) {
  Json pod = GpuPod("ml", "big", 50000, 10);
  pod["status"]["conditions"] = {{{"type", "PodScheduled"},
                                  {"status", "False"},
                                  {"reason", "Unschedulable"},
                                  {"message", "0/2 nodes are available"}}};
  ClusterView view = BuildClusterView({GpuNode("gpu-a"), Node("cpu", ""), Node("bad", "{}")}, {pod}, Fresh());
  DescribeOptions options;
  options.events = {{{"type", "Warning"}, {"reason", "FailedScheduling"}, {"message", "no fit"}}};
  const std::string text = DescribePod(view, *view.FindPod("ml", "big"), options);
  EXPECT_THAT(
      text, HasSubstrs({"Node:         <none>", "Why pending:",
                        "kube-scheduler: PodScheduled=False (Unschedulable): 0/2 nodes are available",
                        "gpu-a", "memory", "bad    GPU inventory unreadable", "Warning  FailedScheduling"}));
  EXPECT_EQ(text.find("cpu  "), std::string::npos) << "a node without inventory is no candidate";

  // The same pod, small enough: it fits now.
  ClusterView small = BuildClusterView({GpuNode("gpu-a")}, {GpuPod("ml", "small", 1000, 10)}, Fresh());
  EXPECT_THAT(DescribePod(small, *small.FindPod("ml", "small"), {}), HasSubstr("fits now (GPU 0)"));
}

TEST(RenderTest, DescribeSaysWhenTheWebhookDidNotHandThePodToTessera) {
  Json pod = GpuPod("ml", "p", 1000, 10);
  pod["spec"]["schedulerName"] = "default-scheduler";
  ClusterView view = BuildClusterView({GpuNode("gpu-a")}, {pod}, Fresh());
  EXPECT_THAT(DescribePod(view, *view.FindPod("ml", "p"), {}),
              HasSubstr("schedulerName is \"default-scheduler\", not \"tessera-scheduler\""));
}

TEST(RenderTest, DescribeAPodWithACorruptAllocationSaysSo) {
  Json pod = PlacedPod("ml", "bad", "gpu-a", kGpu0, 1000, 10);
  pod["metadata"]["annotations"][std::string(core::kAllocationAnnotation)] = "[]";
  ClusterView view = BuildClusterView({GpuNode("gpu-a")}, {pod}, Fresh());
  const std::string text = DescribePod(view, *view.FindPod("ml", "bad"), {});
  EXPECT_THAT(text, HasSubstr("Allocation:   CORRUPT: tessera.io/allocation"));
  EXPECT_THAT(text, HasSubstr("cannot be read"));
}

// A node with a vGPU GPU 0 and a mig-dynamic A100-80GB (kGpu1) listing one
// created instance (1g.10gb at 6, held by ml/made/main); pod "made" holds it,
// pod "waits" a 3g.40gb at 0 tessera-node has not created yet.
ClusterView MigView() {
  return BuildClusterView({MigNode("gpu-m")},
                          {MigPlacedPod("ml", "made", "gpu-m", kGpu1, "1g.10gb", 6, 9728),
                           MigPlacedPod("ml", "waits", "gpu-m", kGpu1, "3g.40gb", 0, 40192),
                           PlacedPod("ml", "vgpu", "gpu-m", kGpu0, 1000, 10)},
                          Fresh());
}

TEST(RenderTest, TopShowsMigInstancesNotSlices) {
  const ClusterView view = MigView();
  // The node: 1 vGPU slice of 4 slots; both instances held; their memory allocated.
  EXPECT_THAT(TopNodes(view),
              HasSubstr("gpu-m  2/2   50920Mi/121920Mi  41%      10/200  5%      1/4    2/2  3     ok"));
  const std::string gpus = TopGpus(view);
  EXPECT_THAT(
      gpus, HasSubstrs(
                {std::string(kGpu1) + "  NVIDIA A100-SXM4-80GB  healthy  mig-dynamic  49920Mi/81920Mi  60%   "
                                      "   -       -      2/2  2",
                 "vgpu         1000Mi/40000Mi   2%       10/100  1/4    -    1",
                 "MIG instances:\nNODE   GPU  PROFILE  PLACEMENT  MEMORY   MIG-UUID           HEALTH   POD\n",
                 "gpu-m  1    3g.40gb  0:4        40192Mi  (not created yet)  healthy  ml/waits/main",
                 "gpu-m  1    1g.10gb  6:1        9728Mi   MIG-made           healthy  ml/made/main"}));
  // Listed by placement: start 0 before start 6.
  EXPECT_LT(gpus.find("3g.40gb"), gpus.find("1g.10gb"));
  EXPECT_THAT(TopPods(view, "ml"),
              HasSubstrs({"made   gpu-m  0      1g.10gb  9728Mi   0%     tessera  placed",
                          "vgpu   gpu-m  1      -        1000Mi   10%    tessera  placed"}));
  // No MIG anywhere: no instance table.
  EXPECT_EQ(TopGpus(BuildClusterView({GpuNode("gpu-a")}, {}, Fresh())).find("MIG instances"),
            std::string::npos);
}

TEST(RenderTest, DescribeAMigPodShowsItsInstanceAndTheGpusInstances) {
  const ClusterView view = MigView();
  const std::string made = DescribePod(view, *view.FindPod("ml", "made"), {});
  EXPECT_THAT(
      made,
      HasSubstrs({"MIG instances:\n  CONTAINER  GPU  UUID",
                  std::string("main       1    ") + kGpu1 + "  1g.10gb  6:1        9728Mi  MIG-made",
                  "GPU 1 (" + std::string(kGpu1) + "): mig-dynamic, 2 MIG instance(s)",
                  "3g.40gb at 0:4  ml/waits/main  (not created yet)", "1g.10gb at 6:1  ml/made/main\n"}));
  EXPECT_EQ(made.find("Slices:"), std::string::npos) << made;
  EXPECT_EQ(made.find("vGPUs"), std::string::npos) << "a MIG GPU has no slots to be over: " << made;
  EXPECT_THAT(DescribePod(view, *view.FindPod("ml", "waits"), {}),
              HasSubstr("3g.40gb  0:4        40192Mi  (not created yet)"));
}

TEST(RenderTest, AMigInstanceOnAGpuNotInMigModeIsAMismatch) {
  // The allocation names an instance on GPU 0, which offers vGPU slices.
  ClusterView view = BuildClusterView(
      {MigNode("gpu-m")}, {MigPlacedPod("ml", "odd", "gpu-m", kGpu0, "1g.10gb", 0, 9728)}, Fresh());
  EXPECT_THAT(TopPods(view, "ml"), HasSubstr("mismatch: MIG instance 1g.10gb@0 on GPU " + std::string(kGpu0) +
                                             ": the GPU is not in MIG mode"));
  const NodeView* node = view.FindNode("gpu-m");
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->state.gpus()[0].used.slots, 0) << "nothing half-accounted";
  EXPECT_EQ(node->mig.size(), 1u) << "only the listed instance";
}

TEST(RenderTest, DescribeAPendingMigPodNamesTheMigDynamicGpus) {
  Json pod = GpuPod("ml", "mig", 9728, 0);
  pod["metadata"]["annotations"]["nvidia.com/vgpu-mode"] = "MIG";
  ClusterView view = BuildClusterView({MigNode("gpu-m"), GpuNode("gpu-a")}, {pod}, Fresh());
  const std::string text = DescribePod(view, *view.FindPod("ml", "mig"), {});
  EXPECT_THAT(text, HasSubstrs({"It asks for dynamic MIG", "gpu-m  GPU 1 (1 instance(s))"}));
  EXPECT_EQ(text.find("gpu-a"), std::string::npos) << "no mig-dynamic GPU there: " << text;
  EXPECT_EQ(text.find("fits now"), std::string::npos) << "the vGPU fit does not apply: " << text;
  ClusterView none = BuildClusterView({GpuNode("gpu-a")}, {pod}, Fresh());
  EXPECT_THAT(DescribePod(none, *none.FindPod("ml", "mig"), {}),
              HasSubstr("no node has a GPU in mig-dynamic mode"));
}

}  // namespace
}  // namespace tessera::kubectl

namespace tessera::kubectl {
namespace {

TEST(RenderModesTest, TopGpusNamesEachModeAndLeavesReplicaGpusUnaccounted) {
  core::NodeInventory inventory = *core::DecodeInventory(
      GpuNode("gpu-s")["metadata"]["annotations"][std::string(core::kInventoryAnnotation)]
          .get<std::string>());
  inventory.gpus[0].mode = core::SharingMode::kMps;
  inventory.gpus[1].mode = core::SharingMode::kTimeslice;
  inventory.gpus[1].replicas = 4;
  inventory.gpus[1].slots = 0;
  const ClusterView view = BuildClusterView({Node("gpu-s", *core::EncodeInventory(inventory))}, {}, Fresh());
  const std::string gpus = TopGpus(view);
  EXPECT_THAT(gpus, HasSubstr("healthy  mps        0Mi/40000Mi  0%       0/100  0/4"));
  EXPECT_THAT(gpus, HasSubstr("healthy  timeslice  -            -        -      4 replicas"));
  // The node's capacity counts the MPS GPU, not the time-sliced one.
  EXPECT_THAT(TopNodes(view), HasSubstr("0Mi/40000Mi"));
}

}  // namespace
}  // namespace tessera::kubectl
