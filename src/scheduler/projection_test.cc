#include "scheduler/projection.h"

#include <gtest/gtest.h>

#include "core/allocation_codec.h"
#include "core/pod_request.h"
#include "core/score_fragmentation.h"
#include "kube/client.h"
#include "scheduler/cluster_state.h"
#include "scheduler/scale_testing.h"
#include "scheduler/testing.h"
#include "scheduler/workload_learner.h"

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;

Json AllocatedPod(int p) {
  Json pod = testing::RealisticPod(p, 1, 4000, 20);
  pod["metadata"]["annotations"][std::string(core::kAllocationAnnotation)] =
      R"({"node":"gpu-node-1","containers":[{"name":"app","devices":[{"uuid":"GPU-1","memory_mib":4000,"cores":20}]}]})";
  pod["metadata"]["annotations"]["nvidia.com/use-gputype"] = "A100";
  pod["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = std::string(4000, 'x');
  pod["spec"]["nodeName"] = "gpu-node-1";
  pod["status"]["conditions"].push_back(
      {{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"}, {"message", "no GPU"}});
  return pod;
}

TEST(ProjectPodTest, KeepsWhatSchedulingReadsAndDropsTheRest) {
  const Json original = AllocatedPod(3);
  Json projected = original;
  ProjectPod(projected);
  // What the cluster state, the learner, bind and the dashboard read.
  EXPECT_EQ(kube::KeyOf(projected), kube::KeyOf(original));
  EXPECT_EQ(kube::UidOf(projected), kube::UidOf(original));
  EXPECT_EQ(kube::ResourceVersionOf(projected), kube::ResourceVersionOf(original));
  EXPECT_EQ(kube::AnnotationOf(projected, core::kAllocationAnnotation),
            kube::AnnotationOf(original, core::kAllocationAnnotation));
  EXPECT_EQ(kube::AnnotationOf(projected, "nvidia.com/use-gputype"), "A100");
  EXPECT_EQ(projected["spec"]["nodeName"], "gpu-node-1");
  EXPECT_EQ(projected["spec"]["schedulerName"], original["spec"]["schedulerName"]);
  EXPECT_EQ(projected["status"]["phase"], "Running");
  EXPECT_EQ(projected["metadata"]["creationTimestamp"], original["metadata"]["creationTimestamp"]);
  ASSERT_EQ(projected["status"]["conditions"].size(), 1u);
  EXPECT_EQ(projected["status"]["conditions"][0]["message"], "no GPU");
  auto want = core::DerivePodRequest(original, {});
  auto got = core::DerivePodRequest(projected, {});
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ(core::ShapeOf(*got), core::ShapeOf(*want));
  EXPECT_EQ(got->filter.use_types, want->filter.use_types);
  EXPECT_EQ(got->cpu_milli, want->cpu_milli);
  EXPECT_EQ(got->host_memory_mib, want->host_memory_mib);
  // What nothing reads is gone.
  EXPECT_FALSE(projected["spec"]["containers"][0].contains("env"));
  EXPECT_FALSE(projected["spec"].contains("volumes"));
  EXPECT_FALSE(projected["metadata"].contains("ownerReferences"));
  EXPECT_EQ(kube::AnnotationOf(projected, "kubectl.kubernetes.io/last-applied-configuration"), "");
  EXPECT_LT(projected.dump().size() * 4, original.dump().size());
}

TEST(ProjectNodeTest, KeepsTheInventoryAddressesAndTaints) {
  const Json original =
      testing::RealisticNode("gpu-node-1", 1, 8, testing::Heartbeat(std::chrono::system_clock::now()));
  Json projected = original;
  ProjectNode(projected);
  EXPECT_EQ(kube::NameOf(projected), "gpu-node-1");
  EXPECT_EQ(kube::AnnotationOf(projected, core::kInventoryAnnotation),
            kube::AnnotationOf(original, core::kInventoryAnnotation));
  EXPECT_EQ(projected["status"]["addresses"], original["status"]["addresses"]);
  EXPECT_EQ(projected["spec"]["taints"], original["spec"]["taints"]);
  EXPECT_EQ(projected["metadata"]["labels"], original["metadata"]["labels"]);
  EXPECT_FALSE(projected["status"].contains("images"));
  EXPECT_FALSE(projected["status"].contains("conditions"));
  EXPECT_FALSE(projected["metadata"].contains("uid"));  // no reader wants it
  EXPECT_LT(projected.dump().size() * 2, original.dump().size());
  ClusterState state;
  state.UpsertNode(projected);
  EXPECT_EQ(state.Stats().gpus, 8u);
}

TEST(ProjectNodeTest, AnInventoryMegabytesLongIsRefusedWithTheReason) {
  Json node = testing::NodeWithGpus("big", 1, 1, 81920);
  node["metadata"]["annotations"][std::string(core::kInventoryAnnotation)] = std::string(3 << 20, ' ');
  Json projected = node;
  ProjectNode(projected);
  EXPECT_LT(projected.dump().size(), 4096u);  // nothing of the megabytes is kept
  EXPECT_EQ(kube::AnnotationOf(projected, kRefusedInventoryAnnotation), std::to_string(3 << 20));
  // Either way (projected, or handed over whole), the node is not used and says why.
  for (const Json* n : {&projected, &node}) {
    ClusterState state;
    state.UpsertNode(testing::NodeWithGpus("ok", 2, 1, 81920));
    state.UpsertNode(*n);
    EXPECT_EQ(state.Stats().nodes_without_inventory, 1u);
    EXPECT_EQ(state.Stats().nodes, 1u);  // the other node is untouched
    auto request = core::DerivePodRequest(testing::GpuPod("ns", "p", 1, 1000, 10), {});
    ASSERT_TRUE(request.ok());
    auto out = state.Filter(*request, {"big", "ok"});
    EXPECT_EQ(out.feasible, std::vector<std::string>{"ok"});
    ASSERT_TRUE(out.failed.count("big"));
    EXPECT_NE(out.failed["big"].find("3145728 bytes, longer than the 262144"), std::string::npos)
        << out.failed["big"];
  }
}

TEST(ProjectPodTest, APodWithAThousandContainersIsKeptSmallAndAnswered) {
  Json pod = testing::GpuPod("ns", "wide", 1, 1000, 5);
  Json one = pod["spec"]["containers"][0];
  one["env"] = Json::array({{{"name", "X"}, {"value", std::string(200, 'v')}}});
  pod["spec"]["containers"] = Json::array();
  for (int i = 0; i < 1000; ++i) {
    one["name"] = "c" + std::to_string(i);
    pod["spec"]["containers"].push_back(one);
  }
  const size_t whole = pod.dump().size();
  ProjectPod(pod);
  EXPECT_EQ(pod["spec"]["containers"].size(), 1000u);
  EXPECT_LT(pod.dump().size() * 2, whole);  // the env of each is gone
  // Filter answers it: 1,000 GPUs asked, 8 on the node.
  ClusterState state;
  state.UpsertNode(testing::NodeWithGpus("n", 1, 8, 81920));
  auto request = core::DerivePodRequest(pod, {});
  ASSERT_TRUE(request.ok()) << request.error().message;
  auto out = state.Filter(*request, {"n"});
  EXPECT_TRUE(out.feasible.empty());
  ASSERT_TRUE(out.failed.count("n"));
  EXPECT_FALSE(out.failed["n"].empty());
}

// The informers decode only PodFields/NodeFields of each object: projecting
// that gives what projecting the whole object gives.
Json ProjectedWhole(const Json& object, void (*project)(Json&)) {
  Json whole = object;
  project(whole);
  return whole;
}

Json ProjectedSelected(const Json& object, void (*project)(Json&), const kube::FieldSelection& fields) {
  auto selected = kube::ParseSelected(object.dump(), fields);
  EXPECT_TRUE(selected.has_value());
  if (!selected) return nullptr;
  EXPECT_LT(selected->dump().size(), object.dump().size());
  project(*selected);
  return *selected;
}

TEST(ProjectionFieldsTest, ProjectingTheSelectedFieldsEqualsProjectingTheWholeObject) {
  std::vector<Json> pods = {AllocatedPod(1), testing::RealisticPod(2, 2, 8000, 50),
                            testing::GpuPod("ns", "plain", 1, 1000, 10)};
  Json odd = AllocatedPod(4);
  odd["metadata"]["deletionTimestamp"] = "2026-11-26T09:00:00Z";
  odd["metadata"]["labels"]["app"] = "x";
  odd["metadata"]["annotations"]["hami.io/vgpu-node"] = "n";
  odd["spec"]["priority"] = -5;
  odd["spec"]["initContainers"] = odd["spec"]["containers"];
  odd["spec"]["containers"].push_back(7);  // not an object: dropped either way
  odd["status"]["nominatedNodeName"] = "n2";
  odd["status"]["conditions"].push_back({{"type", "Ready"}, {"status", "True"}});
  pods.push_back(odd);
  Json strange = testing::GpuPod("ns", "strange", 1, 1000, 10);
  strange["spec"]["containers"] = Json::object({{"name", "not a list"}});
  strange["status"] = "not an object";
  pods.push_back(strange);
  for (const Json& pod : pods) {
    SCOPED_TRACE(kube::NameOf(pod));
    EXPECT_EQ(ProjectedSelected(pod, ProjectPod, *PodFields()), ProjectedWhole(pod, ProjectPod));
  }
  Json node =
      testing::RealisticNode("gpu-node-1", 1, 8, testing::Heartbeat(std::chrono::system_clock::now()));
  EXPECT_EQ(ProjectedSelected(node, ProjectNode, *NodeFields()), ProjectedWhole(node, ProjectNode));
  Json big = testing::NodeWithGpus("big", 1, 1, 81920);
  big["metadata"]["annotations"][std::string(core::kInventoryAnnotation)] = std::string(3 << 20, ' ');
  big["metadata"]["annotations"]["other"] = std::string(1 << 20, 'x');
  EXPECT_EQ(ProjectedSelected(big, ProjectNode, *NodeFields()), ProjectedWhole(big, ProjectNode));
}

TEST(EvaluationCacheBoundTest, ShapesBeyondTheBoundEvictTheOldest) {
  EXPECT_EQ(ClusterState::MaxEvaluationCaches(5000), ClusterState::kMaxCachedEvaluations / 5000);
  EXPECT_EQ(ClusterState::MaxEvaluationCaches(1), ClusterState::kMaxEvaluationCaches);
  EXPECT_EQ(ClusterState::MaxEvaluationCaches(1000000), ClusterState::kMinEvaluationCaches);
  // 200,000 nodes would give one cache; 8 stay.
  ClusterState state;
  std::vector<std::string> names;
  for (int n = 0; n < 20; ++n) {
    names.push_back("n" + std::to_string(n));
    state.UpsertNode(testing::NodeWithGpus(names.back(), n + 1, 1, 81920));
  }
  const size_t bound = ClusterState::MaxEvaluationCaches(20);
  for (int shape = 0; shape < 400; ++shape) {
    auto request = core::DerivePodRequest(testing::GpuPod("ns", "p", 1, 1000 + shape, 10), {});
    ASSERT_TRUE(request.ok());
    (void)state.Filter(*request, names);
    ASSERT_LE(state.Stats().evaluation_caches, bound) << "after shape " << shape;
  }
  EXPECT_EQ(state.Stats().evaluation_caches, bound);
}

TEST(WorkloadLearnerBoundTest, RemembersAtMostTheBoundOldestFirstOut) {
  WorkloadLearner learner(core::FragmentationPolicy::Options{}, 4);
  auto request = core::DerivePodRequest(testing::GpuPod("ns", "p", 1, 1000, 10), {});
  ASSERT_TRUE(request.ok());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(learner.Observe("uid-" + std::to_string(i), *request).counted, 1u);
  EXPECT_EQ(learner.stats().remembered, 4u);
  EXPECT_EQ(learner.stats().evicted, 6u);
  EXPECT_EQ(learner.Observe("uid-9", *request).counted, 0u);  // recent: still known
  EXPECT_EQ(learner.Observe("uid-0", *request).counted, 1u);  // the oldest was let go
  learner.Forget("uid-8");
  EXPECT_EQ(learner.stats().remembered, 3u);
  EXPECT_EQ(learner.stats().counted, 11u);
}

}  // namespace
}  // namespace tessera::scheduler
