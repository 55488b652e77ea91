#include "core/policy.h"

#include <gtest/gtest.h>

#include "core/policy_placer.h"
#include "core/score_fragmentation.h"
#include "core/testing.h"

namespace tessera::core {
namespace {

Gpu G(const std::string& uuid) {
  return TestGpu(uuid, "A100", 10000, /*slots=*/10);
}

std::vector<NodeState> TwoNodes() {
  NodeState a("a", {G("a0"), G("a1")});
  NodeState b("b", {G("b0"), G("b1")});
  EXPECT_TRUE(b.Apply({"b", {{"x", {{"b1", 5000, 50}}, false}}}).ok());
  return {a, b};
}

std::string Place(Placer& placer, const Policy& policy, const PodRequest& pod) {
  auto d = placer.Choose(pod, policy);
  if (!d) return "-";
  auto a = placer.Commit(*d, pod);
  EXPECT_TRUE(a.ok());
  return a->node + "/" + a->containers[0].devices[0].uuid;
}

TEST(PolicyTest, BinpackAndSpread) {
  for (auto [name, expect] : std::vector<std::pair<std::string, std::string>>{{"node-binpack", "b/b1"},
                                                                              {"node-spread", "a/a0"},
                                                                              {"gpu-binpack", "b/b1"},
                                                                              {"gpu-spread", "a/a0"}}) {
    Placer placer(TwoNodes());
    auto policy = MakePolicy(name);
    ASSERT_TRUE(policy.ok());
    EXPECT_EQ(Place(placer, **policy, AppRequest(2000, 20)), expect) << name;
  }
}

TEST(PolicyTest, TiesGoToTheFirstNode) {
  Placer placer({NodeState("x", {G("x0")}), NodeState("y", {G("y0")})});
  auto policy = MakePolicy("node-binpack");
  EXPECT_EQ(Place(placer, **policy, AppRequest(1000, 10)), "x/x0");
}

TEST(PolicyTest, UnknownPolicyListsTheValidOnes) {
  auto policy = MakePolicy("nope");
  ASSERT_FALSE(policy.ok());
  EXPECT_NE(policy.error().message.find("tessera"), std::string::npos);
}

TEST(PolicyTest, DeterministicAcrossRunsAndCaching) {
  // Shapes (distinct requests) and the arrival sequence over them.
  std::vector<PodRequest> shapes = {AppRequest(3000, 30), AppRequest(5000, 50), AppRequest(10000, 100),
                                    AppRequest(2000, 20), AppRequest(10000, 100, 2)};
  std::vector<int> arrivals = {0, 1, 3, 0, 2, 3, 3, 1, 4, 0, 3, 3};
  for (const std::string& name : PolicyNames()) {
    std::vector<std::string> first;
    std::vector<std::string> cached;
    for (int run = 0; run < 2; ++run) {
      Placer placer({NodeState("a", {G("a0"), G("a1")}), NodeState("b", {G("b0"), G("b1"), G("b2")})});
      auto policy = MakePolicy(name);
      for (int shape : arrivals) {
        const PodRequest& pod = shapes[shape];
        (*policy)->Observe(pod);
        auto d = placer.Choose(pod, **policy, nullptr, run == 0 ? -1 : shape);
        std::string where = "-";
        if (d) {
          auto a = placer.Commit(*d, pod);
          where = a->node;
          for (const auto& dev : a->containers[0].devices) where += "," + dev.uuid;
        }
        (run == 0 ? first : cached).push_back(where);
      }
    }
    EXPECT_EQ(first, cached) << name;
  }
}

// Three GPUs, 4000/7000/10000 MiB free, a mix of 4000 MiB pods: a 3000 MiB
// pod goes where no 4000 MiB slot is lost and the GPU is fuller — the middle
// one, which neither FitNode order picks (binpack: the first, spread: the
// last). The extender's bind is tested on this node (tests/integration).
NodeState ThreeGpusPartlyUsed() {
  NodeState node("n", {G("g0"), G("g1"), G("g2")});
  EXPECT_TRUE(node.Apply({"n", {{"x", {{"g0", 6000, 0}}, false}, {"y", {{"g1", 3000, 0}}, false}}}).ok());
  return node;
}

int FirstGpu(const Placement& p) {
  return p.containers.at(0).slices.at(0).gpu;
}

TEST(PolicyTest, TesseraPicksGpusNeitherFitNodeOrderPicks) {
  auto policy = MakePolicy("tessera");
  for (int i = 0; i < 3; ++i) (*policy)->Observe(AppRequest(4000, 0));
  const NodeState node = ThreeGpusPartlyUsed();
  const PodRequest pod = AppRequest(3000, 0);
  auto c = (*policy)->Evaluate(node, pod);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(FirstGpu(c->placement), 1);
  EXPECT_EQ(FirstGpu(FitNode(node, pod, GpuOrder::kBinpack).placement), 0);
  EXPECT_EQ(FirstGpu(FitNode(node, pod, GpuOrder::kSpread).placement), 2);
}

TEST(PolicyTest, WithGpuOrderKeepsTheNodeScoreAndPlacesGpusInOrder) {
  std::shared_ptr<Policy> tessera = std::move(MakePolicy("tessera").value());
  for (int i = 0; i < 3; ++i) tessera->Observe(AppRequest(4000, 0));
  const NodeState node = ThreeGpusPartlyUsed();
  const PodRequest pod = AppRequest(3000, 0);
  for (GpuOrder order : {GpuOrder::kBinpack, GpuOrder::kSpread}) {
    auto ordered = WithGpuOrder(tessera, order);
    EXPECT_EQ(ordered->name(), "tessera+gpu-" + std::string(GpuOrderName(order)));
    EXPECT_EQ(ordered->epoch(), tessera->epoch());
    auto c = ordered->Evaluate(node, pod);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->score, tessera->Evaluate(node, pod)->score);
    EXPECT_EQ(c->placement, FitNode(node, pod, order).placement);
  }
  // A policy that places GPUs in that order already is returned as it is.
  std::shared_ptr<const Policy> binpack = std::move(MakePolicy("node-binpack").value());
  EXPECT_EQ(WithGpuOrder(binpack, GpuOrder::kBinpack).get(), binpack.get());
  auto spread = WithGpuOrder(binpack, GpuOrder::kSpread);
  EXPECT_EQ(spread->name(), "node-binpack+gpu-spread");
  EXPECT_EQ(FirstGpu(spread->Evaluate(node, pod)->placement), 2);
  // Nothing fits: nothing to order.
  EXPECT_FALSE(spread->Evaluate(node, AppRequest(20000, 0)).has_value());
}

// A policy counting its evaluations, to see what the cache spares.
class CountingPolicy : public Policy {
 public:
  std::string_view name() const override { return "counting"; }
  std::optional<Candidate> Evaluate(const NodeState& node, const PodRequest& pod) const override {
    ++evaluations;
    return inner->Evaluate(node, pod);
  }
  uint64_t epoch() const override { return epoch_value; }
  std::unique_ptr<Policy> inner = std::move(MakePolicy("node-binpack").value());
  mutable int evaluations = 0;
  uint64_t epoch_value = 0;
};

TEST(PolicyTest, CachedEvaluationHoldsWhileNodeAndEpochAreUnchanged) {
  CountingPolicy policy;
  NodeState node = ThreeGpusPartlyUsed();
  const PodRequest pod = AppRequest(3000, 0);
  CachedEvaluation cache;
  EXPECT_FALSE(cache.Holds(1, node.version(), 0)) << "empty";
  auto first = cache.Refresh(1, node.version(), node, pod, policy);
  EXPECT_EQ(policy.evaluations, 1);
  EXPECT_EQ(cache.Refresh(1, node.version(), node, pod, policy), first);
  EXPECT_EQ(policy.evaluations, 1);
  EXPECT_TRUE(cache.Holds(1, node.version(), 0));
  (void)cache.Refresh(2, node.version(), node, pod, policy);  // the node was rebuilt
  EXPECT_EQ(policy.evaluations, 2);
  policy.epoch_value = 7;  // the policy relearned
  EXPECT_FALSE(cache.Holds(2, node.version(), 7));
  (void)cache.Refresh(2, node.version(), node, pod, policy);
  EXPECT_EQ(policy.evaluations, 3);
  ASSERT_TRUE(node.Apply({"n", {{"z", {{"g2", 1000, 0}}, false}}}).ok());  // its usage changed
  EXPECT_FALSE(cache.Holds(2, node.version(), 7));
  auto after = cache.Refresh(2, node.version(), node, pod, policy);
  EXPECT_EQ(policy.evaluations, 4);
  EXPECT_EQ(after, policy.inner->Evaluate(node, pod));
}

// Bind commits the policy's placement as it is: on an MPS GPU the slice is
// marked MPS, on an exclusive GPU it holds cores 100 — as FitNode writes them.
TEST(PolicyTest, TesseraSlicesCarryTheGpuModeAsFitNodeWritesIt) {
  auto policy = MakePolicy("tessera");
  Gpu mps = G("m0");
  mps.mode = SharingMode::kMps;
  NodeState mps_node("m", {mps});
  PodRequest share = AppRequest(2000, 30);
  share.containers[0].share = ShareKind::kMps;
  (*policy)->Observe(share);
  auto c = (*policy)->Evaluate(mps_node, share);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->placement, FitNode(mps_node, share).placement);
  EXPECT_TRUE(c->placement.containers[0].slices[0].mps);

  Gpu whole = G("e0");
  whole.mode = SharingMode::kExclusive;
  NodeState exclusive_node("e", {whole});
  PodRequest all = AppRequest(0, 0);  // the whole GPU
  auto e = (*policy)->Evaluate(exclusive_node, all);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->placement, FitNode(exclusive_node, all).placement);
  EXPECT_EQ(e->placement.containers[0].slices[0].cores, 100);
}

TEST(PolicyTest, OutranksIsHigherScoreThenLowerRank) {
  EXPECT_TRUE(Outranks(2.0, 5, 1.0, 0));
  EXPECT_FALSE(Outranks(1.0, 0, 2.0, 5));
  EXPECT_TRUE(Outranks(1.0, 0, 1.0, 1));
  EXPECT_FALSE(Outranks(1.0, 1, 1.0, 0));
  EXPECT_FALSE(Outranks(1.0, 1, 1.0, 1));
  EXPECT_TRUE(Outranks(1.0, std::string_view("a"), 1.0, std::string_view("b")));
}

TEST(FragmentationTest, MeterMatchesRecomputation) {
  // Mix: half 600-milli slices, half whole GPUs.
  TaskShape slice;
  slice.gpus = 1;
  slice.gpu_memory_mib = 6000;
  slice.cores = 60;
  TaskShape whole;
  whole.gpus = 1;
  whole.cores = 100;
  WorkloadMix mix = {{slice, 0.5}, {whole, 0.5}};
  NodeState node("n", {G("a"), G("b")});
  ASSERT_TRUE(node.Apply({"n", {{"x", {{"a", 3000, 30}}, false}}}).ok());
  FragmentationMeter meter(node, mix, false);
  // GPU a has 700 free: fragment for whole GPUs only -> 0.5 * 700.
  EXPECT_DOUBLE_EQ(meter.current(), 350);
  // Put 600 on b: a (700) is a fragment for whole; b (400) for both.
  double after = meter.AfterOne(1, 600, 0, 0);
  NodeState copy = node;
  ASSERT_TRUE(copy.Apply({"n", {{"y", {{"b", 6000, 60}}, false}}}).ok());
  EXPECT_DOUBLE_EQ(after, FragmentationMeter(copy, mix, false).current());
  EXPECT_DOUBLE_EQ(after, 0.5 * 400 + 0.5 * (700 + 400));
}

TEST(FragmentationTest, TypicalShapesCoverTheAskedShare) {
  MixCounter counter;
  TaskShape a;
  a.gpus = 1;
  a.cores = 50;
  TaskShape b = a;
  b.cores = 20;
  TaskShape c = a;
  c.cores = 10;
  counter.Add(a, 6);
  counter.Add(b, 3);
  counter.Add(c, 1);
  WorkloadMix mix = counter.Typical(0.9);
  ASSERT_EQ(mix.size(), 2u);
  EXPECT_DOUBLE_EQ(mix[0].weight, 6.0 / 9);
  EXPECT_EQ(mix[1].shape, b);
}

TEST(FragmentationTest, PolicyAvoidsCreatingFragments) {
  // Having seen 500-milli pods, a 500 slice goes onto the half-used GPU (no
  // fragment left) rather than splitting an idle one.
  auto policy = MakePolicy("tessera");
  for (int i = 0; i < 10; ++i) (*policy)->Observe(AppRequest(5000, 50));
  NodeState node("n", {G("a"), G("b")});
  ASSERT_TRUE(node.Apply({"n", {{"x", {{"b", 5000, 50}}, false}}}).ok());
  auto c = (*policy)->Evaluate(node, AppRequest(5000, 50));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->placement.containers[0].slices[0].gpu, 1);
}

// A node's memo serves the policy that filled it, for that mix only: after
// the mix is relearned (a new PreparedMix) the memo is recomputed, not read.
TEST(FragmentationTest, NodeMemoIsKeptPerMixAndIgnoredByAnother) {
  NodeState node("n", {G("a"), G("b"), G("c")});
  ASSERT_TRUE(node.Apply({"n", {{"x", {{"b", 5000, 50}}, false}}}).ok());
  ASSERT_TRUE(node.Apply({"n", {{"y", {{"c", 8000, 20}}, false}}}).ok());
  FragmentationPolicy halves(FragmentationPolicy::Options{},
                             WorkloadMix{{ShapeOf(AppRequest(5000, 50)), 1.0}});
  FragmentationPolicy fifths(FragmentationPolicy::Options{},
                             WorkloadMix{{ShapeOf(AppRequest(2000, 20)), 1.0}});
  const PodRequest pod = AppRequest(2000, 20);
  NodeMemo memo;
  std::optional<Candidate> got;
  halves.EvaluateInto(node, pod, got, &memo);
  EXPECT_NE(memo.owner, 0u) << "the evaluation kept its counts";
  EXPECT_EQ(got, halves.Evaluate(node, pod));
  const uint64_t halves_key = memo.owner;
  fifths.EvaluateInto(node, pod, got, &memo);
  EXPECT_EQ(got, fifths.Evaluate(node, pod)) << "another mix's memo was read";
  EXPECT_NE(memo.owner, halves_key);
  // The same memo read again by its own policy gives the same answer.
  fifths.EvaluateInto(node, pod, got, &memo);
  EXPECT_EQ(got, fifths.Evaluate(node, pod));
  // Scores differ between the two mixes here, so a memo read across mixes
  // would have been caught above.
  EXPECT_NE(halves.Evaluate(node, pod)->score, fifths.Evaluate(node, pod)->score);
}

// The strand tests' mix: 500-milli slices (5000 MiB of 10000, 50 cores) with
// 4 cores of CPU each.
WorkloadMix HalfGpuSlicesWithFourCores() {
  TaskShape shape;
  shape.gpus = 1;
  shape.gpu_memory_mib = 5000;
  shape.cores = 50;
  shape.cpu_milli = 4000;
  return {{shape, 1.0}};
}

TEST(FragmentationTest, StrandKeepsCpuForTheFreeGpuAmongTiedNodes) {
  // Mix: 500-milli slices with 4 cores each, 8 CPU milli per milli-GPU. Two
  // empty nodes of two GPUs tie in FGD's band for a 500 slice (no fragment
  // either way); node a has 14 cores, b has 40.
  const WorkloadMix mix = HalfGpuSlicesWithFourCores();
  auto choose = [&](int strand, int64_t pod_cpu) {
    FragmentationPolicy::Options o;
    o.strand = strand;
    FragmentationPolicy policy(o, mix);
    Placer placer(
        {NodeState("a", {G("a0"), G("a1")}, {14000, 0}), NodeState("b", {G("b0"), G("b1")}, {40000, 0})});
    PodRequest pod = AppRequest(5000, 50);
    pod.cpu_milli = pod_cpu;
    auto d = placer.Choose(pod, policy);
    return d ? placer.node(d->node).name() : std::string("-");
  };
  // A 6-core slice on a leaves 1,500 milli free with 8 cores, which the mix
  // needs 12 for (before: 2,000 with 14, needing 16: less short): strand
  // sends it to b; without strand the tie goes to the first node.
  EXPECT_EQ(choose(0, 6000), "a");
  EXPECT_EQ(choose(1, 6000), "b");
  EXPECT_EQ(choose(2, 6000), "b");
  // A 2-core slice leaves a less short of CPU (1,500 milli with 12 cores):
  // no penalty, the tie stays with the first node (strand=2: a bonus there).
  EXPECT_EQ(choose(1, 2000), "a");
  EXPECT_EQ(choose(2, 2000), "a");
  // A node that does not track CPU is never biased.
  FragmentationPolicy::Options o;
  o.strand = 1;
  FragmentationPolicy policy(o, mix);
  Placer untracked({NodeState("a", {G("a0"), G("a1")}), NodeState("b", {G("b0"), G("b1")}, {40000, 0})});
  PodRequest pod = AppRequest(5000, 50);
  pod.cpu_milli = 6000;
  auto d = untracked.Choose(pod, policy);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(untracked.node(d->node).name(), "a");
}

TEST(FragmentationTest, StrandByDefaultOutweighsTheBand) {
  // Same mix. Node a (14 cores, two idle GPUs) is FGD's better band for a
  // 6-core 500 slice (no fragment); b (40 cores, one GPU with 700 free) keeps
  // a 200 fragment (a lower band). Placing on a leaves its free GPU shorter of
  // CPU: with the default weight (100) b wins; with 0.3 the band still does.
  const WorkloadMix mix = HalfGpuSlicesWithFourCores();
  auto choose = [&](double weight) {
    FragmentationPolicy::Options o;
    o.strand_weight = weight;
    FragmentationPolicy policy(o, mix);
    NodeState b("b", {G("b0")}, {40000, 0});
    EXPECT_TRUE(b.Apply({"b", {{"x", {{"b0", 3000, 30}}, false}}}).ok());
    Placer placer({NodeState("a", {G("a0"), G("a1")}, {14000, 0}), b});
    PodRequest pod = AppRequest(5000, 50);
    pod.cpu_milli = 6000;
    auto d = placer.Choose(pod, policy);
    return d ? placer.node(d->node).name() : std::string("-");
  };
  EXPECT_EQ(FragmentationPolicy::Options{}.strand_weight, 100);
  EXPECT_EQ(choose(100), "b");
  EXPECT_EQ(choose(0.3), "a");
  EXPECT_EQ(choose(0), "a");
}

TEST(FragmentationTest, StrandPenalisesCpuOnlyPodsThatStrandGpu) {
  // A CPU-only pod among tied nodes: `away` prefers the node with less free
  // GPU (a, one GPU), but its 10 cores would leave a's free GPU (1,000 milli,
  // needing 8 cores) with 4; strand sends it to b, which keeps enough.
  const WorkloadMix mix = HalfGpuSlicesWithFourCores();
  auto choose = [&](int strand) {
    FragmentationPolicy::Options o;
    o.strand = strand;
    FragmentationPolicy policy(o, mix);
    Placer placer({NodeState("a", {G("a0")}, {14000, 0}), NodeState("b", {G("b0"), G("b1")}, {40000, 0})});
    PodRequest pod;
    pod.cpu_milli = 10000;
    auto d = placer.Choose(pod, policy);
    return d ? placer.node(d->node).name() : std::string("-");
  };
  EXPECT_EQ(choose(0), "a");
  EXPECT_EQ(choose(1), "b");
}

}  // namespace
}  // namespace tessera::core
