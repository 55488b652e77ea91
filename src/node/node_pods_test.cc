#include "node/node_pods.h"

#include <gtest/gtest.h>

#include "node/testing.h"

namespace tessera::node {
namespace {

kube::Json Pod(const std::string& name, const std::string& allocation, const std::string& phase = "Running") {
  kube::Json pod = {{"metadata", {{"name", name}, {"namespace", "ml"}, {"uid", "uid-" + name}}},
                    {"status", {{"phase", phase}}}};
  if (!allocation.empty()) pod["metadata"]["annotations"]["tessera.io/allocation"] = allocation;
  return pod;
}

std::string Allocation(const std::string& uuid, int mib, int cores) {
  return R"({"version":1,"node":"n1","containers":[{"name":"main","devices":[{"uuid":")" + uuid +
         R"(","memoryMiB":)" + std::to_string(mib) + R"(,"cores":)" + std::to_string(cores) + "}]}]}";
}

TEST(NodePodsTest, CountsRunningPodsWithAllocationsAndReportsBrokenOnes) {
  const std::string a = "GPU-aaaaaaaa-0000-0000-0000-000000000001";
  const std::string b = "GPU-bbbbbbbb-0000-0000-0000-000000000002";
  std::vector<kube::Json> pods = {
      Pod("one", Allocation(a, 2000, 30)),
      Pod("two", Allocation(a, 1000, 20)),
      Pod("done", Allocation(a, 5000, 50), "Succeeded"),
      Pod("cpu-only", ""),
      Pod("broken", R"({"version":1,"node)"),
      Pod("elsewhere", Allocation("GPU-cccccccc-0000-0000-0000-000000000003", 1, 1))};
  auto allocations = AllocationsOf(pods);
  ASSERT_EQ(allocations.pods.size(), 3u);
  EXPECT_EQ(allocations.pods[0].pod_name, "one");
  EXPECT_EQ(allocations.pods[0].uid, "uid-one");
  ASSERT_EQ(allocations.problems.size(), 1u);
  EXPECT_EQ(allocations.problems[0].rfind("ml/broken: ", 0), 0u) << allocations.problems[0];

  std::vector<std::string> problems;
  auto state = AllocatedState("n1", {TestA100(a, 0), TestA100(b, 1)}, allocations, &problems);
  EXPECT_EQ(state.gpus()[0].used.memory_mib, 3000);
  EXPECT_EQ(state.gpus()[0].used.cores, 50);
  EXPECT_EQ(state.gpus()[0].used.slots, 2);
  EXPECT_EQ(state.gpus()[1].used.slots, 0);
  ASSERT_EQ(problems.size(), 1u) << "the pod naming a GPU this node does not have";
  EXPECT_EQ(problems[0].rfind("ml/elsewhere: ", 0), 0u) << problems[0];
}

}  // namespace
}  // namespace tessera::node
