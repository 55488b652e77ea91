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
                          "gpu-a  2/2   20000Mi/80000Mi  25%      50/200  25%     1/8    1     ok", "cpu-1",
                          "none", "bad", "corrupt: "}));
}

TEST(RenderTest, TopGpusListsEveryGpuWithItsPods) {
  ClusterView view =
      BuildClusterView({GpuNode("gpu-a")}, {PlacedPod("ml", "one", "gpu-a", kGpu1, 10000, 100)}, Fresh());
  const std::string text = TopGpus(view);
  EXPECT_THAT(text, HasSubstr(std::string("gpu-a  1      ") + kGpu1));
  EXPECT_THAT(text, HasSubstr("10000Mi/40000Mi  25%      100/100  1/4    1"));
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

}  // namespace
}  // namespace tessera::kubectl
