// The fragmentation meter and the tessera policy's evaluation against a
// from-scratch reference: on random nodes and mixes, the meter's incremental
// counts, the prepared mix's per-kind needs, AfterEach's side-by-side sums and
// the policy's candidate choice give exactly (bit for bit) what recomputing
// the definition gives. The cold-cost work (issue 18) changed how these are
// computed, never what they decide; this holds it to that.
#include "core/score_fragmentation.h"

#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/fit.h"
#include "core/testing.h"

namespace tessera::core {
namespace {

bool Allows(const TaskShape& shape, const std::string& model) {
  if (shape.use_types.empty()) return true;
  GpuFilter f;
  f.use_types = shape.use_types;
  return TypeAllowed(f, model);
}

// The definition, recomputed: per shape, the GPUs with at least its need free
// (after `taken` milli is removed from GPU `gpu`, -1 = none) fit it; the
// fragment is the free share of the others when the shape fits the node (GPU
// count and host CPU), else all free share; summed shape by shape in mix order.
double Reference(const NodeState& node, const WorkloadMix& mix, int gpu, int taken, int64_t cpu_taken,
                 bool demand_weighted = false) {
  const auto& gpus = node.gpus();
  std::vector<int> free(gpus.size());
  int64_t total = 0;
  for (size_t g = 0; g < gpus.size(); ++g) {
    free[g] = gpus[g].free_milli() - (static_cast<int>(g) == gpu ? taken : 0);
    total += free[g];
  }
  double f = 0;
  for (const MixEntry& e : mix) {
    const TaskShape& s = e.shape;
    int fit = 0;
    int64_t small = 0;
    int64_t demand = -1;
    for (size_t g = 0; g < gpus.size(); ++g) {
      const Gpu& d = gpus[g].gpu;
      int need = s.gpus > 0 && d.usable() && Allows(s, d.model) ? MilliNeeded(s, d) : INT_MAX;
      if (need != INT_MAX && demand < 0) demand = int64_t{s.gpus} * need;
      if (free[g] >= need) {
        ++fit;
      } else {
        small += free[g];
      }
    }
    double w = e.weight;
    if (demand_weighted) w *= static_cast<double>(demand < 0 ? int64_t{s.gpus} * 1000 : demand) / 1000.0;
    bool fits = s.gpus > 0 && fit >= s.gpus &&
                !(node.tracks_cpu() && node.free_cpu_milli() - cpu_taken < s.cpu_milli);
    f += w * static_cast<double>(fits ? small : total);
  }
  return f;
}

struct World {
  std::mt19937_64 rng;
  explicit World(uint64_t seed) : rng(seed) {}
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

  bool model_filters = true;  // whether Shape() may ask for GPU models
  bool one_kind = false;      // whether Node() gives every GPU the same model and memory

  TaskShape Shape() {
    TaskShape s;
    const int gpus[] = {0, 1, 1, 1, 1, 2, 4, 8};
    s.gpus = gpus[Uniform(0, 7)];
    s.cpu_milli = 1000 * Uniform(0, 16);
    if (s.gpus > 0) {
      int kind = Uniform(0, 9);
      if (kind == 0) {
        s.gpu_memory_percent = Uniform(1, 100);
      } else if (kind == 1) {
        s.gpu_memory_mib = 0;  // whole GPU memory
      } else {
        s.gpu_memory_mib = 500 * Uniform(1, 40);
      }
      s.cores = Uniform(0, 3) == 0 ? 100 : Uniform(0, 100);
      if (model_filters && Uniform(0, 7) == 0)
        s.use_types = {Uniform(0, 2) == 0 ? "A100" : Uniform(0, 1) ? "T4" : "SXM4"};
    }
    return s;
  }

  WorkloadMix Mix() {
    WorkloadMix mix;
    // Half the mixes without model filters: then GPUs of equal memory and
    // compute share their needs whatever their model.
    model_filters = Uniform(0, 1) == 0;
    int n = Uniform(1, 70);  // past the meter's 64 inline shapes too
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      mix.push_back({Shape(), static_cast<double>(Uniform(1, 1000))});
      sum += mix.back().weight;
    }
    for (MixEntry& e : mix) e.weight /= sum;
    return mix;
  }

  // A node of one or two GPU kinds (the same compute scaling throughout, as a
  // node's core scaling is), some GPUs unhealthy, partly filled.
  NodeState Node(int id) {
    int count = Uniform(1, 20);  // past the meter's 16 inline GPUs too
    int cores = Uniform(0, 3) == 0 ? 200 : 100;
    std::vector<Gpu> gpus;
    for (int g = 0; g < count; ++g) {
      // Three models, two of them with the same memory.
      const int kind = one_kind ? 2 : Uniform(0, 5);
      const char* model = kind == 0 ? "Tesla T4" : kind == 1 ? "A100-PCIE" : "A100-SXM4";
      Gpu gpu = TestGpu("GPU-" + std::to_string(id) + "-" + std::to_string(g), model,
                        kind == 0 ? 16000 : 81920, 10);
      gpu.cores = cores;
      gpu.healthy = Uniform(0, 15) != 0;
      gpus.push_back(gpu);
    }
    HostResources host;
    if (Uniform(0, 1)) host.cpu_milli = 1000 * Uniform(8, 96);
    NodeState node("n" + std::to_string(id), gpus, host);
    int pods = Uniform(0, 3 * count);
    for (int p = 0; p < pods; ++p) {
      PodRequest pod =
          AppRequest(500 * Uniform(1, 60), Uniform(0, 4) == 0 ? 100 : Uniform(1, 60), Uniform(1, 2));
      pod.cpu_milli = 1000 * Uniform(0, 8);
      FitResult fit = FitNode(node, pod, Uniform(0, 1) ? GpuOrder::kBinpack : GpuOrder::kSpread);
      if (!fit.fits) continue;
      (void)node.Apply(ToAllocation(node, pod, fit.placement), HostDemandOf(pod));
    }
    return node;
  }
};

TEST(FragmentationEquivalenceTest, MeterIsTheDefinitionBitForBit) {
  World w(18);
  for (int round = 0; round < 300; ++round) {
    WorkloadMix mix = w.Mix();
    PreparedMix prepared(mix);
    for (int n = 0; n < 5; ++n) {
      NodeState node = w.Node(round * 10 + n);
      const bool dw = w.Uniform(0, 3) == 0;
      FragmentationMeter generic(node, mix, false, dw);
      FragmentationMeter fast(node, prepared, false, dw);
      const double current = Reference(node, mix, -1, 0, 0, dw);
      ASSERT_EQ(generic.current(), current) << "round " << round;
      ASSERT_EQ(fast.current(), current) << "round " << round;
      // A node's memo: filled by the first meter, read by the second (and
      // not by a meter of the other weighting, which keys it differently).
      NodeMemo memo;
      FragmentationMeter filling(node, prepared, false, dw, &memo);
      FragmentationMeter other_weighting(node, prepared, false, !dw, &memo);
      FragmentationMeter reading(node, prepared, false, dw, &memo);
      ASSERT_EQ(filling.current(), current) << "round " << round;
      ASSERT_EQ(reading.current(), current) << "round " << round;
      ASSERT_EQ(other_weighting.current(), Reference(node, mix, -1, 0, 0, !dw)) << "round " << round;
      std::vector<int> gpus;
      std::vector<int> milli;
      const int64_t cpu = 1000 * w.Uniform(0, 4);
      for (size_t g = 0; g < node.gpus().size(); ++g) {
        const int free = node.gpus()[g].free_milli();
        if (free == 0) continue;
        const int taken = w.Uniform(1, free);
        gpus.push_back(static_cast<int>(g));
        milli.push_back(taken);
        const double after = Reference(node, mix, static_cast<int>(g), taken, cpu, dw);
        ASSERT_EQ(fast.AfterOne(static_cast<int>(g), taken, cpu, 0), after)
            << "round " << round << " gpu " << g;
        ASSERT_EQ(reading.AfterOne(static_cast<int>(g), taken, cpu, 0), after)
            << "round " << round << " gpu " << g;
        ASSERT_EQ(generic.AfterOne(static_cast<int>(g), taken, cpu, 0), after);
      }
      std::vector<double> each(gpus.size());
      fast.AfterEach(gpus, milli, cpu, 0, each);
      for (size_t k = 0; k < gpus.size(); ++k) {
        ASSERT_EQ(each[k], fast.AfterOne(gpus[k], milli[k], cpu, 0))
            << "round " << round << " candidate " << k;
      }
    }
  }
}

// The policy's choice for a one-vGPU pod, as the definition gives it: every
// GPU that fits is a candidate scored ⌊100·σ(−growth/1000)⌋, equal scores to
// the smaller exact growth, then the fuller GPU, then the lower index.
std::optional<std::pair<double, int>> ReferenceChoice(const NodeState& node, const WorkloadMix& mix,
                                                      const PodRequest& pod) {
  if (node.tracks_cpu() && pod.cpu_milli > node.free_cpu_milli()) return std::nullopt;
  const ContainerRequest& c = pod.containers[0];
  const double current = Reference(node, mix, -1, 0, 0);
  int best = -1;
  double best_score = 0, best_growth = 0;
  int best_free_after = 0;
  for (size_t g = 0; g < node.gpus().size(); ++g) {
    const GpuState& gs = node.gpus()[g];
    GpuCheck check = CheckGpu(gs, c, pod.filter);
    if (!check.fits()) continue;
    int free_after = gs.free_milli_with(GpuUsage{check.memory_mib, c.cores, 1, c.cores >= 100});
    int taken = gs.free_milli() - free_after;
    double growth = Reference(node, mix, static_cast<int>(g), taken, pod.cpu_milli) - current;
    double score = std::floor(100.0 / (1.0 + std::exp(growth / 1000)));
    bool better = best < 0 || score > best_score;
    if (!better && score == best_score) {
      better = growth != best_growth ? growth < best_growth : free_after < best_free_after;
    }
    if (better) {
      best = static_cast<int>(g);
      best_score = score;
      best_growth = growth;
      best_free_after = free_after;
    }
  }
  if (best < 0) return std::nullopt;
  return std::pair{best_score, best};
}

TEST(FragmentationEquivalenceTest, PolicyChoosesWhatTheDefinitionGives) {
  World w(1805);
  int compared = 0;
  int biased_count = 0;
  for (int round = 0; round < 200; ++round) {
    WorkloadMix mix = w.Mix();
    // The reference is FGD's band alone: without the node-level strand bias.
    FragmentationPolicy::Options plain;
    plain.strand = 0;
    FragmentationPolicy policy(plain, mix);
    // The default adds that bias to the node's score (0 or -strand_weight)
    // and chooses the same GPU.
    FragmentationPolicy with_strand(FragmentationPolicy::Options{}, mix);
    for (int n = 0; n < 5; ++n) {
      NodeState node = w.Node(round * 10 + n);
      NodeMemo memo;  // the node's, kept over its pods as the extender keeps it
      for (int p = 0; p < 4; ++p) {
        PodRequest pod = AppRequest(250 * w.Uniform(1, 80), w.Uniform(0, 5) == 0 ? 100 : w.Uniform(1, 80));
        pod.cpu_milli = 1000 * w.Uniform(0, 8);
        auto got = policy.Evaluate(node, pod);
        auto want = ReferenceChoice(node, mix, pod);
        std::optional<Candidate> remembered;
        policy.EvaluateInto(node, pod, remembered, &memo);
        ASSERT_EQ(remembered, got) << "round " << round;
        ASSERT_EQ(got.has_value(), want.has_value()) << "round " << round;
        if (!got) continue;
        ++compared;
        ASSERT_EQ(got->score, want->first) << "round " << round;
        ASSERT_EQ(got->placement.containers.at(0).slices.at(0).gpu, want->second) << "round " << round;
        auto biased = with_strand.Evaluate(node, pod);
        ASSERT_TRUE(biased.has_value()) << "round " << round;
        EXPECT_EQ(biased->placement.containers.at(0).slices.at(0).gpu, want->second) << "round " << round;
        EXPECT_TRUE(biased->score == want->first ||
                    biased->score == want->first - FragmentationPolicy::Options{}.strand_weight)
            << "round " << round << ": " << biased->score;
        biased_count += biased->score != want->first ? 1 : 0;
      }
    }
  }
  EXPECT_GT(compared, 1000);   // the cases are not all infeasible
  EXPECT_GT(biased_count, 0);  // and strand biases some of them
}

// The policy's estimates (FragmentationMeter::GrowthEstimates) settle most
// nodes without the exact sums; wherever they do, the choice and the score
// are the exact sums' own. Nodes of one kind (where estimates apply), busy
// and idle, host CPU tracked or not, many mixes; against the same policy
// with the estimates off.
TEST(FragmentationEquivalenceTest, EstimatesChooseWhatTheExactSumsChoose) {
  World w(2611);
  w.one_kind = true;
  int compared = 0;
  for (int round = 0; round < 300; ++round) {
    WorkloadMix mix = w.Mix();
    FragmentationPolicy::Options exact_options;
    exact_options.estimates = false;
    FragmentationPolicy estimating(FragmentationPolicy::Options{}, mix);
    FragmentationPolicy exact(exact_options, mix);
    for (int n = 0; n < 5; ++n) {
      NodeState node = w.Node(round * 10 + n);
      NodeMemo memo;
      for (int p = 0; p < 6; ++p) {
        PodRequest pod = AppRequest(250 * w.Uniform(1, 80), w.Uniform(0, 5) == 0 ? 100 : w.Uniform(1, 80));
        pod.cpu_milli = 1000 * w.Uniform(0, 8);
        std::optional<Candidate> fast;
        estimating.EvaluateInto(node, pod, fast, &memo);
        auto slow = exact.Evaluate(node, pod);
        ASSERT_EQ(fast.has_value(), slow.has_value()) << "round " << round;
        if (!fast) continue;
        ++compared;
        ASSERT_EQ(fast->score, slow->score) << "round " << round;
        ASSERT_EQ(fast->placement, slow->placement) << "round " << round;
      }
    }
  }
  EXPECT_GT(compared, 2000);
}

// A pod that takes nothing of a GPU's free share (the share is bound by the
// cores it does not ask for) changes no term: its growth is exactly 0, which
// the estimates know without the exact sums. Against the exact path.
TEST(FragmentationEquivalenceTest, APodTakingNoneOfTheFreeShareChangesNothing) {
  NodeState node("n", {TestGpu("GPU-a", "A100", 10000, 10), TestGpu("GPU-b", "A100", 10000, 10)});
  // GPU a: 2000 MiB and 80 cores used, free share min(800, 200) = 200 milli.
  ASSERT_TRUE(node.Apply({"n", {{"x", {{"GPU-a", 2000, 80}}, false}}}).ok());
  // GPU b: 9000 MiB used, free share 100 milli.
  ASSERT_TRUE(node.Apply({"n", {{"y", {{"GPU-b", 9000, 10}}, false}}}).ok());
  WorkloadMix mix;
  for (int64_t mib : {500, 1000, 3000}) mix.push_back({ShapeOf(AppRequest(mib, 10)), 1.0 / 3});
  FragmentationPolicy::Options exact_options;
  exact_options.estimates = false;
  FragmentationPolicy estimating(FragmentationPolicy::Options{}, mix);
  FragmentationPolicy exact(exact_options, mix);
  const PodRequest pod = AppRequest(1000, 0);  // memory only: GPU a keeps its 200
  const GpuState& a = node.gpus()[0];
  ASSERT_EQ(a.free_milli() - a.free_milli_with(GpuUsage{1000, 0, 1, false}), 0) << "the case is not set up";
  auto fast = estimating.Evaluate(node, pod);
  auto slow = exact.Evaluate(node, pod);
  ASSERT_TRUE(fast.has_value());
  EXPECT_EQ(fast, slow);
}

// BandWithin answers only where every growth within the error has one band,
// and then the band ⌊100·σ(−g/1000)⌋ gives; at an edge (0 is the 50/49 edge)
// it does not answer.
TEST(FragmentationEquivalenceTest, BandWithinIsTheBandOfEveryGrowthNearby) {
  FragmentationPolicy policy;
  auto band = [](double g) { return std::floor(100.0 / (1.0 + std::exp(g / 1000))); };
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> growth(-6000, 6000);
  int answered = 0;
  for (int i = 0; i < 200000; ++i) {
    const double g = i % 2 ? growth(rng) : std::round(growth(rng));
    const double error = i % 3 == 0 ? 1e-6 : 1e-3;
    auto b = policy.BandWithin(g, error);
    if (!b) continue;
    ++answered;
    for (double x : {g - error, g, g + error}) ASSERT_EQ(*b, band(x)) << "growth " << g;
  }
  EXPECT_GT(answered, 190000);
  // Just above and just below every edge: a growth within the error lies in
  // the neighbouring band.
  for (int b = 1; b < 100; ++b) {
    const double edge = 1000 * std::log(100.0 / b - 1);
    EXPECT_FALSE(policy.BandWithin(edge + 5e-4, 1e-3).has_value()) << "band " << b;
    EXPECT_FALSE(policy.BandWithin(edge - 5e-4, 1e-3).has_value()) << "band " << b;
    EXPECT_EQ(policy.BandWithin(edge - 0.5, 1e-3), band(edge - 0.5)) << "band " << b;
  }
  EXPECT_FALSE(policy.BandWithin(0.0, 1e-6).has_value());
  EXPECT_FALSE(policy.BandWithin(1000 * std::log(100.0 / 30 - 1), 1e-6).has_value());  // the 30/29 edge
  EXPECT_FALSE(policy.BandWithin(1e9, 1e-6).has_value());                              // past exp's range
  FragmentationPolicy::Options linear;
  linear.sigmoid_scale = 0;
  EXPECT_FALSE(FragmentationPolicy(linear).BandWithin(5.0, 1e-6).has_value());
}

}  // namespace
}  // namespace tessera::core
