#include "core/node_state.h"

#include <gtest/gtest.h>

namespace tessera::core {
namespace {

Gpu G(const std::string& uuid, int64_t memory = 16000) {
  Gpu g;
  g.uuid = uuid;
  g.model = "T4";
  g.memory_mib = memory;
  return g;
}

TEST(NodeStateTest, ApplyAndReleaseAccountEverything) {
  NodeState node("n", {G("a"), G("b")}, {8000, 32768});
  PodAllocation pod{"n", {{"c", {{"a", 4000, 25}, {"b", 16000, 100}}, false}}};
  ASSERT_TRUE(node.Apply(pod, {2000, 4096}).ok());
  EXPECT_EQ(node.gpus()[0].used, (GpuUsage{4000, 25, 1, false}));
  EXPECT_EQ(node.gpus()[1].used, (GpuUsage{16000, 100, 1, true}));
  EXPECT_EQ(node.free_cpu_milli(), 6000);
  EXPECT_EQ(node.free_host_memory_mib(), 32768 - 4096);
  EXPECT_EQ(node.free_milli_total(), 750);
  EXPECT_EQ(node.idle_gpus(), 0);
  uint64_t v = node.version();
  ASSERT_TRUE(node.Release(pod, {2000, 4096}).ok());
  EXPECT_GT(node.version(), v);
  EXPECT_EQ(node.gpus()[0].used, GpuUsage{});
  EXPECT_EQ(node.gpus()[1].used, GpuUsage{});
  EXPECT_EQ(node.free_milli_total(), 2000);
  EXPECT_EQ(node.idle_gpus(), 2);
  EXPECT_TRUE(node.workload_tags().empty());
}

TEST(NodeStateTest, ApplyIsAllOrNothing) {
  NodeState node("n", {G("a"), G("b")});
  // Second slice does not fit: nothing of the first may stay.
  PodAllocation pod{"n", {{"c", {{"a", 1000, 10}, {"b", 99999, 10}}, false}}};
  Status s = node.Apply(pod);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("99999 MiB asked, 16000 MiB free"), std::string::npos);
  EXPECT_EQ(node.gpus()[0].used, GpuUsage{});
  EXPECT_EQ(node.version(), 0u);
}

TEST(NodeStateTest, RejectsUnknownUuidExclusivityAndOverRelease) {
  NodeState node("n", {G("a")});
  EXPECT_FALSE(node.Apply({"n", {{"c", {{"zzz", 1, 1}}, false}}}).ok());
  ASSERT_TRUE(node.Apply({"n", {{"c", {{"a", 1000, 100}}, false}}}).ok());
  EXPECT_FALSE(node.Apply({"n", {{"d", {{"a", 1000, 0}}, false}}}).ok());  // held exclusively
  EXPECT_FALSE(node.Release({"n", {{"c", {{"a", 2000, 100}}, false}}}).ok());
  EXPECT_EQ(node.gpus()[0].free_milli(), 0);
}

TEST(NodeStateTest, AccountShowsAnOvercommitThatApplyWouldRefuse) {
  NodeState node("n", {G("a", 15360), G("b", 15360)});
  ASSERT_TRUE(node.Account({"n", {{"big", {{"a", 15000, 50}}, false}}}).ok());
  ASSERT_TRUE(node.Account({"n", {{"two", {{"a", 1000, 10}, {"b", 1000, 10}}, false}}}).ok());
  EXPECT_FALSE(node.Apply({"n", {{"late", {{"a", 1000, 10}}, false}}}).ok());
  ASSERT_TRUE(node.Account({"n", {{"late", {{"a", 1000, 10}}, false}}}).ok());
  EXPECT_EQ(node.gpus()[0].used, (GpuUsage{17000, 70, 3, false}));
  EXPECT_EQ(node.gpus()[1].used, (GpuUsage{1000, 10, 1, false}));  // untouched by the overcommit of "a"
  EXPECT_EQ(node.gpus()[0].Overcommit(), "17000 MiB allocated of 15360");
  EXPECT_EQ(node.gpus()[1].Overcommit(), "");
  EXPECT_EQ(node.gpus()[0].free_milli(), 0);
  // An exclusive slice beside another.
  NodeState small("s", {G("x")});
  ASSERT_TRUE(small.Account({"s", {{"c", {{"x", 100, 100}}, false}}}).ok());
  ASSERT_TRUE(small.Account({"s", {{"d", {{"x", 100, 10}}, false}}}).ok());
  EXPECT_EQ(small.gpus()[0].Overcommit(),
            "110% cores allocated of 100, an exclusive slice shares it with 1 other(s)");
  // What no GPU of the node can hold is still refused, and changes nothing.
  uint64_t v = node.version();
  EXPECT_FALSE(node.Account({"n", {{"c", {{"zzz", 1, 1}}, false}}}).ok());
  EXPECT_EQ(node.version(), v);
}

TEST(NodeStateTest, FreeMilliIsScarcerOfMemoryAndCores) {
  NodeState node("n", {G("a", 10000)});
  ASSERT_TRUE(node.Apply({"n", {{"c", {{"a", 1000, 50}}, false}}}).ok());
  EXPECT_EQ(node.gpus()[0].free_milli(), 500);  // cores bind: 50 % left
}

TEST(NodeStateTest, TotalsSumCapacityAndAllocationOverGpus) {
  NodeState node("n", {G("a", 10000), G("b", 6000)});
  node.SetHealthy(1, false);
  ASSERT_TRUE(node.Apply({"n", {{"c", {{"a", 1000, 50}}, false}}}).ok());
  const GpuTotals t = TotalsOf(node.gpus());
  EXPECT_EQ(t.gpus, 2);
  EXPECT_EQ(t.healthy, 1);
  EXPECT_EQ(t.memory_mib, 16000);
  EXPECT_EQ(t.memory_allocated_mib, 1000);
  EXPECT_EQ(t.cores, 200);  // 100 % each
  EXPECT_EQ(t.cores_allocated, 50);
  EXPECT_EQ(t.slots, 20);  // 10 each, the default split
  EXPECT_EQ(t.slots_used, 1);
  EXPECT_EQ(TotalsOf({}).gpus, 0);
}

TEST(NodeStateTest, ReplicaGpusCountAsGpusNotAsCapacity) {
  Gpu timesliced = G("t", 16000);
  timesliced.mode = SharingMode::kTimeslice;
  timesliced.replicas = 4;
  timesliced.slots = 0;
  Gpu mps = G("m", 16000);
  mps.mode = SharingMode::kMps;  // sized per request: capacity like a vGPU GPU
  NodeState node("n", {G("a", 10000), timesliced, mps});
  const GpuTotals t = TotalsOf(node.gpus());
  EXPECT_EQ(t.gpus, 3);
  EXPECT_EQ(t.healthy, 3);
  EXPECT_EQ(t.replica_gpus, 1);
  EXPECT_EQ(t.replicas, 4);
  EXPECT_EQ(t.memory_mib, 26000);
  EXPECT_EQ(t.cores, 200);
}

TEST(NodeStateTest, ComputeOfferedBeyondOneHundredPercentIsSharedThatFar) {
  Gpu g = G("a", 10000);
  g.cores = 200;  // core scaling 2
  NodeState node("n", {g});
  ASSERT_TRUE(node.Apply({"n", {{"c", {{"a", 1000, 80}}, false}}}).ok());
  ASSERT_TRUE(node.Apply({"n", {{"d", {{"a", 1000, 80}}, false}}}).ok());
  EXPECT_EQ(node.gpus()[0].free_cores(), 40);
  EXPECT_EQ(node.gpus()[0].free_milli(), 200);  // 40 of 200 % left
  Status s = node.Apply({"n", {{"e", {{"a", 1000, 50}}, false}}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("50% cores asked, 40% free"), std::string::npos) << s.error().message;
  // 100 still means the whole GPU, alone.
  EXPECT_FALSE(node.Apply({"n", {{"f", {{"a", 1000, 100}}, false}}}).ok());
}

TEST(NodeStateTest, WorkloadTags) {
  NodeState node("n", {G("a"), G("b"), G("c")});
  ASSERT_TRUE(node.Apply({"n", {{"c", {{"a", 1000, 10}}, false}}}).ok());
  ASSERT_TRUE(node.Apply({"n", {{"c", {{"b", 16000, 100}, {"c", 16000, 100}}, false}}}).ok());
  EXPECT_EQ(node.workload_tags(), (std::map<int, int>{{0, 1}, {2, 1}}));
}

}  // namespace
}  // namespace tessera::core
