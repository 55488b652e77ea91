// The chaos test's end-of-run and continuous checks find what they are meant
// to find: a GPU over capacity in memory, cores, slices or exclusivity, a pod
// bound without its allocation, an allocation naming another node or GPU.
#include "invariants.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/allocation_codec.h"
#include "core/inventory_codec.h"

namespace tessera::chaos {
namespace {

using Json = nlohmann::json;

constexpr const char* kGpuA = "GPU-00000001-0000-4000-8000-000000000000";
constexpr const char* kGpuB = "GPU-00000001-0000-4000-8000-000000000001";

Json Node(const std::string& name, std::vector<std::string> uuids) {
  core::NodeInventory inventory;
  inventory.node = name;
  inventory.heartbeat = "2026-11-26T00:00:00Z";
  for (size_t i = 0; i < uuids.size(); ++i) {
    core::Gpu gpu;
    gpu.uuid = uuids[i];
    gpu.index = static_cast<int>(i);
    gpu.model = "NVIDIA A100-SXM4-80GB";
    gpu.memory_mib = 81920;
    gpu.slots = 4;
    gpu.cores = 100;
    inventory.gpus.push_back(gpu);
  }
  auto text = core::EncodeInventory(inventory);
  EXPECT_TRUE(text.ok());
  return {
      {"metadata", {{"name", name}, {"annotations", {{std::string(core::kInventoryAnnotation), *text}}}}}};
}

// A pod bound to `node` holding `slices`; `allocated_on` "" = `node`.
Json Pod(const std::string& name, const std::string& node, std::vector<core::DeviceSlice> slices,
         const std::string& allocated_on = "") {
  core::PodAllocation allocation;
  allocation.node = allocated_on.empty() ? node : allocated_on;
  allocation.containers.push_back({"app", std::move(slices), false});
  auto text = core::EncodeAllocation(allocation);
  EXPECT_TRUE(text.ok());
  return {{"metadata",
           {{"name", name},
            {"namespace", "chaos"},
            {"annotations", {{std::string(core::kAllocationAnnotation), *text}}}}},
          {"spec", {{"nodeName", node}}}};
}

std::string Joined(const std::vector<std::string>& violations) {
  std::string all;
  for (const auto& v : violations) all += v + "\n";
  return all;
}

TEST(ChaosInvariantsTest, PodsWithinTheGpusTheyWereGivenHold) {
  const std::vector<Json> nodes = {Node("n1", {kGpuA, kGpuB})};
  const std::vector<Json> pods = {Pod("a", "n1", {{kGpuA, 40000, 50}}),
                                  Pod("b", "n1", {{kGpuA, 41920, 50}}),
                                  Pod("c", "n1", {{kGpuB, 81920, 100}}),
                                  // Not bound yet, and finished: neither counts.
                                  {{"metadata", {{"name", "pending"}, {"namespace", "chaos"}}}}};
  EXPECT_EQ(Joined(FindViolations(nodes, pods)), "");
}

TEST(ChaosInvariantsTest, AGpuOverCapacityIsNamedWithItsPods) {
  const std::vector<Json> nodes = {Node("n1", {kGpuA, kGpuB})};
  auto violations =
      FindViolations(nodes, {Pod("a", "n1", {{kGpuA, 40000, 60}}), Pod("b", "n1", {{kGpuA, 42000, 50}})});
  ASSERT_EQ(violations.size(), 1u) << Joined(violations);
  EXPECT_NE(violations[0].find(std::string("GPU ") + kGpuA), std::string::npos) << violations[0];
  EXPECT_NE(violations[0].find("memory 82000 of 81920 MiB"), std::string::npos) << violations[0];
  EXPECT_NE(violations[0].find("cores 110 of 100"), std::string::npos) << violations[0];
  EXPECT_NE(violations[0].find("chaos/a, chaos/b"), std::string::npos) << violations[0];
}

TEST(ChaosInvariantsTest, TooManySlicesAndAnExclusiveSliceBesideAnotherAreOverCapacity) {
  const std::vector<Json> nodes = {Node("n1", {kGpuA, kGpuB})};
  std::vector<Json> pods;
  for (int i = 0; i < 5; ++i) pods.push_back(Pod("s" + std::to_string(i), "n1", {{kGpuA, 1000, 0}}));
  pods.push_back(Pod("whole", "n1", {{kGpuB, 1000, 100}}));
  pods.push_back(Pod("beside", "n1", {{kGpuB, 1000, 0}}));
  const std::string all = Joined(FindViolations(nodes, pods));
  EXPECT_NE(all.find("slices 5 of 4"), std::string::npos) << all;
  EXPECT_NE(all.find("an exclusive slice beside 1 other(s)"), std::string::npos) << all;
}

TEST(ChaosInvariantsTest, APodBoundWithoutItsAllocationIsAViolation) {
  const std::vector<Json> nodes = {Node("n1", {kGpuA})};
  const Json bare = {{"metadata", {{"name", "bare"}, {"namespace", "chaos"}}},
                     {"spec", {{"nodeName", "n1"}}}};
  const std::string all = Joined(FindViolations(nodes, {bare}));
  EXPECT_NE(all.find("pod chaos/bare is bound to n1 without an allocation"), std::string::npos) << all;
  Json finished = bare;
  finished["status"]["phase"] = "Succeeded";
  EXPECT_EQ(Joined(FindViolations(nodes, {finished})), "") << "a finished pod holds nothing";
}

TEST(ChaosInvariantsTest, AnAllocationOnAnotherNodeOrGpuIsAViolation) {
  const std::vector<Json> nodes = {Node("n1", {kGpuA}), Node("n2", {kGpuB})};
  const std::string all = Joined(FindViolations(
      nodes, {Pod("moved", "n1", {{kGpuA, 1000, 0}}, "n2"), Pod("foreign", "n1", {{kGpuB, 1000, 0}})}));
  EXPECT_NE(all.find("pod chaos/moved is bound to n1 but allocated on n2"), std::string::npos) << all;
  EXPECT_NE(all.find(std::string("pod chaos/foreign holds ") + kGpuB + ", not a GPU of n1"),
            std::string::npos)
      << all;
  const Json garbled = {{"metadata",
                         {{"name", "garbled"},
                          {"namespace", "chaos"},
                          {"annotations", {{std::string(core::kAllocationAnnotation), "{not json"}}}}},
                        {"spec", {{"nodeName", "n1"}}}};
  EXPECT_NE(Joined(FindViolations(nodes, {garbled})).find("pod chaos/garbled has an unreadable allocation"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::chaos
