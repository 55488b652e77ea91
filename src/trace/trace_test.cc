#include "trace/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "trace/baselines.h"
#include "trace/replay.h"
#include "trace/rng.h"
#include "trace/run_options.h"

namespace tessera::trace {
namespace {

using ::testing::HasSubstr;

TEST(TraceCsvTest, ParsesNodesAndTasks) {
  auto nodes = ParseNodes("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\r\n", "nodes.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.error().message;
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].model, "P100");
  EXPECT_EQ((*nodes)[0].gpus, 2);
  auto tasks = ParseTasks(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
      "t0,4000,1024,1,460,V100M16|V100M32,LS\n"
      "t1,8000,0,0,0,,BE\n",
      "pods.csv");
  ASSERT_TRUE(tasks.ok()) << tasks.error().message;
  EXPECT_EQ((*tasks)[0].gpu_spec, (std::vector<std::string>{"V100M16", "V100M32"}));
  EXPECT_EQ((*tasks)[1].demand(), 0);
  // The multigpu files stop after gpu_milli.
  EXPECT_TRUE(ParseTasks("name,cpu_milli,memory_mib,num_gpu,gpu_milli\nt,1,1,2,1000\n", "m.csv").ok());
}

// The message of a parse that must fail; "(parsed)" when it did not.
template <typename T>
std::string ErrorOf(const Result<T>& result) {
  return result.ok() ? "(parsed)" : result.error().message;
}

TEST(TraceCsvTest, ErrorsNameFileAndLine) {
  const std::string nodes = "sn,cpu_milli,memory_mib,gpu,model\n";
  const std::string tasks = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
  const std::pair<std::string, std::string> cases[] = {
      // {what the parse said, what it must say}
      {ErrorOf(ParseNodes(nodes + "n0,64000,262144,2,P100\nn1,lots,1,1,T4\n", "nodes.csv")),
       "nodes.csv:3: column 'cpu_milli': 'lots' is not an integer"},
      {ErrorOf(ParseNodes("sn,cpu_milli,gpu,model\n", "nodes.csv")),
       "nodes.csv:1: missing column 'memory_mib'"},
      {ErrorOf(ParseNodes(nodes + "n0,1,1,0,\n,1,1,0,\n", "n.csv")),
       "n.csv:3: empty node name (column 'sn')"},
      {ErrorOf(ParseTasks(tasks + "t,1,1,1\n", "p.csv")), "p.csv:2: 4 fields, the header has 5"},
      {ErrorOf(ParseTasks(tasks + "t,1,1,1,1500\n", "p.csv")),
       "p.csv:2: column 'gpu_milli': 1500 is out of range [0, 1000]"},
      {ErrorOf(ParseTasks(tasks + "t,1,1,0,500\n", "p.csv")), "p.csv:2: num_gpu 0 with gpu_milli 500"},
      {ErrorOf(ParseTasks("", "empty.csv")), "empty.csv: empty file (expected a header row)"},
      {ErrorOf(ParseTasks(tasks, "h.csv")), "h.csv: no tasks"},
      {ErrorOf(LoadTasks("/nonexistent/pods.csv")), "/nonexistent/pods.csv: cannot open"},
  };
  for (const auto& [said, expected] : cases) EXPECT_THAT(said, HasSubstr(expected));
}

TEST(RngTest, BoundedDrawsAreInRangeAndShuffleIsAPermutation) {
  Rng rng(7);
  std::vector<int> counts(3, 0);
  for (int i = 0; i < 3000; ++i) ++counts[rng.Below(3)];
  for (int c : counts) EXPECT_GT(c, 800);
  std::vector<int> v(50);
  std::iota(v.begin(), v.end(), 0);
  rng.Shuffle(v);
  std::vector<int> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sorted[i], i);
  Rng a(42), b(42);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.Next(), b.Next());
}

std::vector<TraceTask> SmallTasks() {
  std::vector<TraceTask> tasks;
  // name, cpu, mem, num_gpu, milli
  const int spec[][4] = {{4000, 1, 500, 0}, {8000, 1, 1000, 0}, {2000, 1, 250, 0}, {16000, 2, 1000, 0},
                         {4000, 0, 0, 0},   {4000, 1, 500, 0},  {2000, 1, 250, 0}, {6000, 1, 750, 0},
                         {4000, 1, 500, 0}, {8000, 1, 1000, 0}, {2000, 1, 250, 0}, {4000, 1, 500, 0},
                         {2000, 1, 250, 0}, {6000, 1, 750, 0},  {8000, 0, 0, 0},   {4000, 1, 500, 0},
                         {2000, 1, 250, 0}, {8000, 1, 1000, 0}, {4000, 1, 500, 0}, {2000, 1, 250, 0}};
  for (size_t i = 0; i < std::size(spec); ++i) {
    TraceTask t;
    t.name = "t" + std::to_string(100 + i);
    t.cpu_milli = spec[i][0];
    t.memory_mib = 1024;
    t.num_gpu = spec[i][1];
    t.gpu_milli = spec[i][2];
    tasks.push_back(t);
  }
  return tasks;
}

TEST(WorkloadTest, FollowsTheProtocol) {
  std::vector<TraceTask> tasks = SmallTasks();
  int64_t demand = 0;
  for (const auto& t : tasks) demand += t.demand();
  const int64_t capacity = 10000;
  Workload w = BuildWorkload(tasks, 4, capacity, 42, 1.3);
  // The trace's tasks come first (a permutation), then copies up to 130 %.
  std::vector<int> head(w.arrivals.begin(), w.arrivals.begin() + static_cast<long>(tasks.size()));
  std::sort(head.begin(), head.end());
  for (size_t i = 0; i < tasks.size(); ++i) EXPECT_EQ(head[i], static_cast<int>(i));
  int64_t total = 0;
  for (int i : w.arrivals) total += tasks[i].demand();
  EXPECT_GT(demand, 0);
  EXPECT_LE(total, 13000);
  EXPECT_GT(total, 13000 - 1000);
  EXPECT_EQ(w.node_order.size(), 4u);
  // Same seed, same workload; another seed, another order.
  Workload again = BuildWorkload(tasks, 4, capacity, 42, 1.3);
  EXPECT_EQ(again.arrivals, w.arrivals);
  EXPECT_EQ(again.node_order, w.node_order);
  EXPECT_NE(BuildWorkload(tasks, 4, capacity, 43, 1.3).arrivals, w.arrivals);
  // Too much demand: trimmed to fit.
  Workload trimmed = BuildWorkload(tasks, 4, 4000, 42, 1.3);
  total = 0;
  for (int i : trimmed.arrivals) total += tasks[i].demand();
  EXPECT_LE(total, 5200);
  EXPECT_LT(trimmed.arrivals.size(), tasks.size());
}

// A hand-made cluster: the exact placements of every policy.
Cluster SmallCluster() {
  Cluster c;
  c.nodes = {
      {"n0", 32000, 65536, 2, "T4"}, {"n1", 64000, 131072, 4, "V100M16"}, {"n2", 16000, 65536, 1, "P100"}};
  c.tasks = SmallTasks();
  return c;
}

std::string Placements(const std::string& policy_name) {
  Cluster cluster = SmallCluster();
  Workload w;
  w.arrivals.resize(cluster.tasks.size());
  std::iota(w.arrivals.begin(), w.arrivals.end(), 0);
  w.node_order = {0, 1, 2};
  auto policy = MakeTracePolicy(policy_name, cluster.tasks);
  EXPECT_TRUE(policy.ok());
  ReplayResult r = Replay(cluster, w, **policy, 42, true);
  std::string out;
  for (const Placed& p : r.placements) {
    out += p.node.empty() ? "-" : p.node.substr(1);
    for (int g : p.gpus) out += ":" + std::to_string(g);
    out += " ";
  }
  return out;
}

TEST(SmallTraceTest, ExactPlacementsPerPolicy) {
  // Tasks (cpu, gpus x milli): 500, 1000, 250, 2x1000, cpu-only, 500, 250, 750,
  // 500, 1000, 250, 500, 250, 750, cpu-only, 500, 250, 1000, 500, 250.
  // Nodes in rank order: n0 (2 x T4, 32 cores), n1 (4 x V100, 64), n2 (1 x P100, 16).
  // Output per arrival: node[:gpu...], "-" = failed. Checked by hand for the
  // first arrivals, e.g. DotProd: the 500 slice goes to n2 (smallest product
  // C·c + L·r), the whole GPU to n0's GPU 0 (n2 lacks a whole GPU; n0's
  // product is smaller than n1's), the 250 slice ties n0 and n2 at 99 and
  // goes to the lower rank n0, on GPU 1 (GPU 0 is taken). The rest are a
  // recorded golden: a change here is a change of behaviour.
  const std::pair<const char*, const char*> kGolden[] = {
      {"dotprod", "2:0 0:0 0:1 1:0:1 0 0:1 0:1 1:2 2:0 1:3 1:2 - - - 0 - - - - - "},
      {"clustering", "2:0 0:0 2:0 1:0:1 0 0:1 2:0 1:2 0:1 1:3 1:2 - - - 0 - - - - - "},
      {"packing", "2:0 0:0 2:0 1:0:1 0 0:1 2:0 1:2 0:1 1:3 1:2 - - - 0 - - - - - "},
      {"bestfit", "2:0 0:0 2:0 1:0:1 2 0:1 2:0 1:2 0:1 1:3 1:2 - - - 0 - - - - - "},
      {"fgd", "0:0 0:1 0:0 1:0:1 0 1:2 0:0 1:3 1:2 2:0 1:3 - - - 0 - - - - - "},
      {"random", "2:0 1:0 2:0 1:1:2 1 1:3 0:1 0:0 0:1 - 0:0 1:3 2:0 - 2 - 0:1 - - - "},
      {"tessera", "0:0 0:1 0:0 1:0:1 0 1:2 0:0 1:3 1:2 2:0 1:3 - - - 0 - - - - - "},
      {"tessera-online", "0:0 0:1 1:0 1:1:2 0 0:0 1:0 1:3 1:0 2:0 1:3 - - - 0 - - - - - "},
  };
  for (const auto& [policy, placements] : kGolden) EXPECT_EQ(Placements(policy), placements) << policy;
}

// "tessera:..." experiment variants: the documented spelling of the default
// is the default, option order does not matter, and options written after
// prior=1 / fixed=1 are read (they used to be ignored).
TEST(SmallTraceTest, ExperimentOptionsAreAllRead) {
  const std::string tessera = Placements("tessera");
  EXPECT_EQ(Placements("tessera:sig=1000,inner=1,away=1,prior=1"), tessera);
  EXPECT_EQ(Placements("tessera:prior=1,sig=1000,inner=1,away=1"), tessera);
  // sig=0 without tol scores by exact growth: other placements than FGD's bands,
  // whether it comes before or after prior=1.
  EXPECT_NE(Placements("tessera:prior=1,sig=0"), tessera);
  EXPECT_EQ(Placements("tessera:prior=1,sig=0"), Placements("tessera:sig=0,prior=1"));
}

TEST(TracePolicyTest, MalformedOptionsAreErrorsNamingTheOption) {
  const std::vector<TraceTask> tasks = SmallTasks();
  struct Case {
    std::string policy;
    std::string says;
  };
  const Case cases[] = {
      {"tessera:sig=abc", "option sig: 'abc' is not a number"},
      {"tessera:sig=", "option sig: '' is not a number"},
      {"tessera:sig=1e3x", "option sig: '1e3x' is not a number"},
      {"tessera:sig=nan", "option sig: 'nan' is not a number"},
      {"tessera:sig=-1", "option sig: '-1' is out of range"},
      {"tessera:cov=0", "option cov: '0' is out of range; expected a number in (0, 1]"},
      {"tessera:cov=1.5", "option cov: '1.5' is out of range"},
      {"tessera:relearn=0", "option relearn: '0' is out of range"},
      {"tessera:relearn=2.5", "option relearn: '2.5' is out of range"},
      {"tessera:order=5", "option order: '5' is out of range"},
      {"tessera:inner=2", "option inner: '2' is out of range; expected 0 or 1"},
      {"tessera:slots=2", "option slots: '2' is out of range; expected 0 or 1"},
      {"tessera:hole=3", "option hole: '3' is out of range; expected 0, 1 or 2"},
      {"tessera:hole=-1", "option hole: '-1' is out of range"},
      {"tessera:whole=8", "option whole: '8' is out of range; expected a whole number from 0 to 7"},
      {"tessera:wholew=-0.3", "option wholew: '-0.3' is out of range"},
      {"tessera:whole=1.5", "option whole: '1.5' is out of range"},
      {"tessera:strand=4", "option strand: '4' is out of range; expected a whole number from 0 to 3"},
      {"tessera:strandr=0", "option strandr: '0' is out of range"},
      {"tessera:strand=0.5", "option strand: '0.5' is out of range"},
      {"tessera:strandw=-1", "option strandw: '-1' is out of range"},
      {"tessera:prior=1,whole=x", "option whole: 'x' is not a number"},
      {"tessera:prior=1,bogus=1", "unknown option 'bogus'"},
      {"tessera:fixed=1,sig=abc", "option sig: 'abc' is not a number"},
      {"tessera:prior=1,fixed=1", "prior=1 and fixed=1 exclude each other"},
      {"tessera:sig=1000,sig=500", "option sig is given twice"},
      {"tessera:sig", "option 'sig' is not key=value"},
      {"tessera:sig=1000,", "empty option"},
      {"tessera:", "no options after 'tessera:'"},
  };
  for (const Case& c : cases) {
    auto policy = MakeTracePolicy(c.policy, tasks);
    ASSERT_FALSE(policy.ok()) << c.policy << " was accepted";
    EXPECT_THAT(policy.error().message, HasSubstr("policy '" + c.policy + "'")) << c.policy;
    EXPECT_THAT(policy.error().message, HasSubstr(c.says)) << c.policy;
    EXPECT_THAT(policy.error().message, HasSubstr("options: sig, tol")) << c.policy;
  }
  auto unknown = MakeTracePolicy("fdg", tasks);
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.error().message, HasSubstr("unknown policy 'fdg' (valid: random, dotprod"));
  for (const char* good :
       {"tessera:sig=1500", "tessera:sig=0,tol=40", "tessera:fixed=1,cov=1",
        "tessera:relearn=256,dw=1,pack=-0.5,order=-2,mem=1,away=0", "tessera:prior=1,slots=1,sig=2000",
        "tessera:prior=1,hole=2", "tessera:whole=6,prior=1,hole=1", "tessera:prior=1,whole=7,wholew=1.3",
        "tessera:prior=1,strand=1", "tessera:strand=2,strandw=1.3", "tessera:strand=3,strandr=1.2"}) {
    EXPECT_TRUE(MakeTracePolicy(good, tasks).ok()) << good;
  }
}

TEST(RunOptionsTest, SeedLists) {
  auto seeds = ParseSeeds("42-51");
  ASSERT_TRUE(seeds.ok()) << seeds.error().message;
  EXPECT_EQ(seeds->size(), 10u);
  EXPECT_EQ(seeds->front(), 42u);
  EXPECT_EQ(seeds->back(), 51u);
  EXPECT_EQ(*ParseSeeds("42"), std::vector<uint64_t>{42});
  EXPECT_EQ(*ParseSeeds("40-42,50"), (std::vector<uint64_t>{40, 41, 42, 50}));
  EXPECT_EQ(*ParseSeeds("7-7"), std::vector<uint64_t>{7});
  EXPECT_EQ(ParseSeeds("0-9999")->size(), 10000u);
}

TEST(RunOptionsTest, BadSeedListsAreErrorsThatQuoteTheText) {
  struct Case {
    std::string text;
    std::string says;
  };
  const Case cases[] = {
      {"42-", "'42-' is not a range"},
      {"-42", "'-42' is not a range"},
      {"a-b", "'a-b' is not a range"},
      {"51-42", "range '51-42' ends before it starts"},
      {"x", "'x' is not a seed"},
      {"", "an empty seed"},
      {"42,", "an empty seed"},
      {"42,,43", "an empty seed"},
      {" 42", "' 42' is not a seed"},
      {"1-2-3", "'1-2-3' is not a range"},
      {"1234567890123456789", "is not a seed"},
      {"0-10000", "more than 10000 seeds"},
      {"0-9999,1", "more than 10000 seeds"},
  };
  for (const Case& c : cases) {
    auto seeds = ParseSeeds(c.text);
    ASSERT_FALSE(seeds.ok()) << "'" << c.text << "' was accepted";
    EXPECT_THAT(seeds.error().message, HasSubstr("--seeds '" + c.text + "': ")) << c.text;
    EXPECT_THAT(seeds.error().message, HasSubstr(c.says)) << c.text;
    EXPECT_THAT(seeds.error().message, HasSubstr("examples: 42-51")) << c.text;
  }
}

TEST(RunOptionsTest, TuneMustGoPastFullCapacity) {
  EXPECT_TRUE(CheckTune(1.3).ok());
  EXPECT_TRUE(CheckTune(1.01).ok());
  EXPECT_TRUE(CheckTune(100).ok());
  for (double bad : {0.9, 1.0, 1.004, 0.0, -1.3, 101.0, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    Status s = CheckTune(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_THAT(s.error().message, HasSubstr("must be from 1.01 to 100")) << bad;
  }
  EXPECT_EQ(EndPointKey(1.3), "130");
  EXPECT_EQ(EndPointKey(1.01), "101");
}

// A cluster small enough to replay by hand: the unallocated % at arrived =
// 100 % and at the end, exactly.
TEST(SmallTraceTest, UnallocatedPercentByHand) {
  Cluster cluster;
  // Rank order A, B. Capacity 3 GPUs = 3000 milli.
  cluster.nodes = {{"A", 8000, 65536, 2, "T4"}, {"B", 4000, 65536, 1, "T4"}};
  auto task = [](const std::string& name, int gpus, int milli) {
    TraceTask t;
    t.name = name;
    t.cpu_milli = 1000;
    t.memory_mib = 1024;
    t.num_gpu = gpus;
    t.gpu_milli = milli;
    return t;
  };
  cluster.tasks = {task("t1", 1, 500), task("t2", 1, 700), task("t3", 2, 1000), task("t4", 1, 400),
                   task("t5", 1, 1000)};
  Workload w;
  w.arrivals = {0, 1, 2, 3, 4};
  w.node_order = {0, 1};
  auto policy = MakeTracePolicy("bestfit", cluster.tasks);
  ASSERT_TRUE(policy.ok());
  ReplayResult r = Replay(cluster, w, **policy, 42, true);
  // Best-fit: s = 0.5 (C − c)/128000 + 0.5 (L − r)/8000, score ⌊(1 − s) 100⌋.
  // t1 (500): A: s = 0.5·7000/128000 + 0.5·1500/8000 = 0.1211 → 87;
  //           B: s = 0.5·3000/128000 + 0.5·500/8000 = 0.0430 → 95. B, GPU 0 (500 left).
  // t2 (700): B has 500 left, does not fit; A, GPU 0 (lowest of two equal) → 300 left.
  // t3 (2 whole GPUs): A has one free GPU, B none → fails.
  //   Arrived demand 500 + 700 + 2000 = 3200 ≥ 3000: the 100 % point. Allocated 1200
  //   → unallocated 100 − 100·1200/3000 = 60 %.
  // t4 (400): A (GPU 1): s = 0.5·6000/128000 + 0.5·900/8000 = 0.0797 → 92;
  //           B: s = 0.5·2000/128000 + 0.5·100/8000 = 0.0141 → 98. B, GPU 0 (100 left).
  // t5 (1000): only A's GPU 1 is whole. A.
  //   End: allocated 500 + 700 + 400 + 1000 = 2600 → unallocated 100 − 100·2600/3000 = 13.33 %.
  ASSERT_EQ(r.placements.size(), 5u);
  EXPECT_EQ(r.placements[0].node, "B");
  EXPECT_EQ(r.placements[1].node, "A");
  EXPECT_EQ(r.placements[1].gpus, std::vector<int>{0});
  EXPECT_EQ(r.placements[2].node, "");
  EXPECT_EQ(r.placements[3].node, "B");
  EXPECT_EQ(r.placements[4].node, "A");
  EXPECT_EQ(r.placements[4].gpus, std::vector<int>{1});
  EXPECT_DOUBLE_EQ(r.unallocated_at_100, 60.0);
  EXPECT_DOUBLE_EQ(r.unallocated_at_end, 100.0 - 100.0 * 2600.0 / 3000.0);
  EXPECT_DOUBLE_EQ(r.arrived_at_end, 100.0 * 4600.0 / 3000.0);
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.arrivals, 5);
}

}  // namespace
}  // namespace tessera::trace
