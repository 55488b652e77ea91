#include "scheduler/cluster_state.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <random>
#include <tuple>

#include "base/clock.h"
#include "core/pod_request.h"
#include "core/policy_placer.h"
#include "core/score_fragmentation.h"
#include "scheduler/testing.h"

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;
using std::chrono::seconds;
using testing::GpuPod;
using testing::Heartbeat;
using testing::NodeWithGpus;
using Wall = std::chrono::system_clock::time_point;

constexpr const char* kModel = "NVIDIA A100-SXM4-80GB";

// node-binpack, counting how often a node is evaluated afresh (cache misses).
class CountingPolicy : public core::Policy {
 public:
  CountingPolicy() : inner_(std::move(core::MakePolicy("node-binpack")).value()) {}
  std::string_view name() const override { return "counting"; }
  std::optional<core::Candidate> Evaluate(const core::NodeState& node,
                                          const core::PodRequest& pod) const override {
    ++evaluations;
    return inner_->Evaluate(node, pod);
  }
  mutable std::atomic<int> evaluations{0};

 private:
  std::unique_ptr<core::Policy> inner_;
};

// A ClusterState whose wall clock only moves when the test says so.
class StaleInventoryTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(std::chrono::milliseconds(120000)); }

  void Make(std::chrono::milliseconds stale_after) {
    ClusterStateOptions options;
    options.clock = &clock_;
    options.inventory_stale_after = stale_after;
    state_ = std::make_unique<ClusterState>(options);
  }

  // A node with one 10000-MiB GPU whose agent last wrote at `heartbeat`.
  void AddNode(const std::string& name, Wall heartbeat, int id = 1) {
    state_->UpsertNode(NodeWithGpus(name, id, 1, 10000, 10, kModel, Heartbeat(heartbeat)));
  }

  core::PodRequest Request(int64_t memory_mib) {
    auto r = core::DerivePodRequest(GpuPod("d", "p", 1, memory_mib, 10), {});
    EXPECT_TRUE(r.ok());
    return *r;
  }

  const Wall t0_ = std::chrono::time_point_cast<seconds>(Wall{} + std::chrono::hours(24 * 365 * 57));
  FakeClock clock_{t0_};
  std::unique_ptr<ClusterState> state_;
};

TEST_F(StaleInventoryTest, StaleNodeDoesNotFitAndTheReasonSaysWhatToCheck) {
  AddNode("fresh", t0_, 1);
  AddNode("silent", t0_ - seconds(300), 2);
  clock_.AdvanceTo(t0_ + seconds(10));
  auto out = state_->Filter(Request(1000), {"fresh", "silent"});
  EXPECT_EQ(out.feasible, std::vector<std::string>{"fresh"});
  ASSERT_EQ(out.failed.count("silent"), 1u);
  const std::string& reason = out.failed["silent"];
  EXPECT_NE(reason.find("GPU inventory is stale"), std::string::npos) << reason;
  EXPECT_NE(reason.find("last heartbeat " + Heartbeat(t0_ - seconds(300))), std::string::npos) << reason;
  EXPECT_NE(reason.find("310 s ago"), std::string::npos) << reason;
  EXPECT_NE(reason.find("tessera-node"), std::string::npos) << reason;

  auto policy = core::MakePolicy("node-binpack");
  ASSERT_TRUE(policy.ok());
  EXPECT_EQ(state_->Prioritize(Request(1000), **policy, {"fresh", "silent"}), (std::vector<int>{10, 0}));

  auto reserved = state_->Reserve("d/p", Request(1000), "silent", core::GpuOrder::kBinpack, seconds(60));
  ASSERT_FALSE(reserved.ok());
  EXPECT_NE(reserved.error().message.find("GPU inventory is stale"), std::string::npos);
  EXPECT_EQ(state_->Stats().nodes_stale, 1u);
  EXPECT_EQ(state_->Stats().nodes, 2u);
}

TEST_F(StaleInventoryTest, NodeTurnsStaleAsTimePassesAndFreshAgainOnAHeartbeat) {
  AddNode("n", t0_);
  const core::PodRequest request = Request(6000);
  // Fill the evaluation caches for this shape, and account a pod on the node.
  EXPECT_EQ(state_->Filter(request, {"n"}).feasible.size(), 1u);
  ASSERT_TRUE(
      state_->Reserve("d/a", Request(6000), "n", core::GpuOrder::kBinpack, std::chrono::hours(1)).ok());
  CountingPolicy policy;
  EXPECT_EQ(state_->Prioritize(Request(1000), policy, {"n"}), std::vector<int>{10});
  EXPECT_EQ(policy.evaluations, 1);

  clock_.AdvanceTo(t0_ + seconds(120));  // exactly the limit: still fresh
  EXPECT_EQ(state_->Stats().nodes_stale, 0u);
  auto out = state_->Filter(Request(1000), {"n"});
  EXPECT_EQ(out.feasible.size(), 1u);

  clock_.AdvanceTo(t0_ + seconds(121));  // no event at all, only time
  out = state_->Filter(Request(1000), {"n"});
  EXPECT_TRUE(out.feasible.empty());
  EXPECT_NE(out.failed["n"].find("121 s ago"), std::string::npos) << out.failed["n"];
  EXPECT_EQ(state_->Stats().nodes_stale, 1u);

  EXPECT_EQ(state_->Prioritize(Request(1000), policy, {"n"}), std::vector<int>{0});
  EXPECT_EQ(policy.evaluations, 1);  // stale is decided before the cache, which stays

  // The agent writes again: only the heartbeat changes. The node is not
  // rebuilt (no evaluation afresh, the reservation still counts) and the
  // cached verdicts stay right.
  AddNode("n", clock_.WallNow());
  EXPECT_EQ(state_->Stats().nodes_stale, 0u);
  EXPECT_EQ(state_->Prioritize(Request(1000), policy, {"n"}), std::vector<int>{10});
  EXPECT_EQ(policy.evaluations, 1);
  EXPECT_EQ(state_->Node("n")->gpus()[0].used.memory_mib, 6000);
  out = state_->Filter(request, {"n"});
  EXPECT_TRUE(out.feasible.empty());
  EXPECT_NE(out.failed["n"].find("not enough memory"), std::string::npos) << out.failed["n"];
  EXPECT_EQ(state_->Filter(Request(1000), {"n"}).feasible.size(), 1u);
  state_->Unreserve("d/a");
  EXPECT_EQ(state_->Filter(request, {"n"}).feasible.size(), 1u);
  EXPECT_EQ(state_->Prioritize(Request(1000), policy, {"n"}), std::vector<int>{10});
  EXPECT_EQ(policy.evaluations, 2);  // usage changed: evaluated afresh
}

TEST_F(StaleInventoryTest, ZeroDisablesTheCheckAndAHeartbeatAheadOfTheClockIsFresh) {
  Make(std::chrono::milliseconds(0));
  AddNode("old", t0_ - std::chrono::hours(24 * 30));
  EXPECT_EQ(state_->Filter(Request(1000), {"old"}).feasible.size(), 1u);
  EXPECT_EQ(state_->Stats().nodes_stale, 0u);

  Make(std::chrono::milliseconds(120000));
  AddNode("ahead", t0_ + seconds(30));  // the node's clock runs ahead of ours
  EXPECT_EQ(state_->Filter(Request(1000), {"ahead"}).feasible.size(), 1u);
}

TEST_F(StaleInventoryTest, InventoryChangeWithTheHeartbeatRebuildsTheNode) {
  AddNode("n", t0_);
  const core::PodRequest request = Request(8000);
  EXPECT_EQ(state_->Filter(request, {"n"}).feasible.size(), 1u);
  // The GPU now reports less memory: a real change, not only a heartbeat.
  clock_.AdvanceTo(t0_ + seconds(30));
  state_->UpsertNode(NodeWithGpus("n", 1, 1, 4000, 10, kModel, Heartbeat(clock_.WallNow())));
  auto out = state_->Filter(request, {"n"});
  EXPECT_TRUE(out.feasible.empty());
  EXPECT_NE(out.failed["n"].find("not enough memory"), std::string::npos) << out.failed["n"];
}

TEST(ClusterStateNamesTest, DeletedNodesFreeTheirSlotAndRepeatedNamesAreAnsweredOnce) {
  ClusterState state;
  auto request = core::DerivePodRequest(GpuPod("d", "p", 1, 6000, 10), {});
  ASSERT_TRUE(request.ok());
  state.UpsertNode(NodeWithGpus("a", 1, 1, 10000));
  state.UpsertNode(NodeWithGpus("b", 2, 1, 4000));
  EXPECT_EQ(state.Filter(*request, {"a", "b"}).feasible, std::vector<std::string>{"a"});
  EXPECT_EQ(state.Filter(*request, {"a", "c"}).feasible, std::vector<std::string>{"a"});
  // b goes away and c takes its slot: c's verdict is its own, not b's, also
  // for the very lists asked before (their names were looked up already).
  state.DeleteNode(NodeWithGpus("b", 2, 1, 4000));
  state.UpsertNode(NodeWithGpus("c", 3, 1, 10000));
  EXPECT_EQ(state.Filter(*request, {"a", "c"}).feasible, (std::vector<std::string>{"a", "c"}));
  auto before = state.Filter(*request, {"a", "b"});
  EXPECT_EQ(before.feasible, std::vector<std::string>{"a"});
  EXPECT_NE(before.failed["b"].find("unknown"), std::string::npos) << before.failed["b"];
  auto out = state.Filter(*request, {"a", "b", "c"});
  EXPECT_EQ(out.feasible, (std::vector<std::string>{"a", "c"}));
  EXPECT_NE(out.failed["b"].find("unknown"), std::string::npos) << out.failed["b"];
  // A name listed twice is answered once, at its first position; unknown
  // names too.
  std::vector<std::string_view> names = {"c", "a", "c", "x", "a", "x"};
  ClusterState::NodeVerdicts verdicts;
  for (int round = 0; round < 2; ++round) {  // the second from the name-list memo
    state.Filter(*request, names, verdicts);
    EXPECT_EQ(verdicts.feasible, (std::vector<uint32_t>{0, 1}));
    ASSERT_EQ(verdicts.failed.size(), 1u);
    EXPECT_EQ(verdicts.failed[0].first, 3u);
  }
  auto policy = core::MakePolicy("node-binpack");
  ASSERT_TRUE(policy.ok());
  ClusterState::NodeScores scores;
  state.Prioritize(*request, **policy, names, scores);
  EXPECT_EQ(scores.positions, (std::vector<uint32_t>{0, 1, 3}));
  EXPECT_EQ(scores.scores.size(), 3u);
  EXPECT_EQ(scores.scores[2], 0);  // unknown
  std::vector<uint32_t> first;
  state.FirstListings(names, first);
  EXPECT_EQ(first, (std::vector<uint32_t>{0, 1, 3}));
  EXPECT_EQ(state.Stats().nodes, 2u);
}

TEST(ClusterStateNamesTest, AShapeInUseKeepsItsCacheWhileManyOthersComeAndGo) {
  ClusterState state;
  state.UpsertNode(NodeWithGpus("n", 1, 1, 80000));
  auto shape = [](int64_t memory) { return *core::DerivePodRequest(GpuPod("d", "p", 1, memory, 10), {}); };
  CountingPolicy busy;   // the shape asked for all along
  CountingPolicy other;  // a new shape every time
  EXPECT_EQ(busy.evaluations, 0);
  (void)state.Prioritize(shape(1000), busy, {"n"});
  for (int i = 0; i < 600; ++i) {
    (void)state.Prioritize(shape(2000 + i), other, {"n"});
    if (i % 50 == 0) (void)state.Prioritize(shape(1000), busy, {"n"});
  }
  EXPECT_EQ(other.evaluations, 600);
  EXPECT_EQ(busy.evaluations, 1);  // never evicted, though 600 shapes passed through 256 places
}

TEST(ClusterStateNamesTest, ManyNodesEvaluatedAfreshGetTheVerdictsOfOneByOne) {
  // 300 nodes to evaluate afresh: the request shares them with the helper
  // thread. Every third node is too small; the answers must equal those of
  // one-node requests (which never involve the helper).
  ClusterState state;
  std::vector<std::string> names;
  for (int i = 0; i < 300; ++i) {
    names.push_back("n" + std::to_string(i));
    state.UpsertNode(NodeWithGpus(names.back(), i + 1, 2, i % 3 == 0 ? 4000 : 10000 + 100 * i));
  }
  auto request = core::DerivePodRequest(GpuPod("d", "p", 2, 6000, 10), {});
  ASSERT_TRUE(request.ok());
  auto policy = core::MakePolicy("node-spread");
  ASSERT_TRUE(policy.ok());
  auto all = state.Filter(*request, names);
  EXPECT_EQ(all.feasible.size(), 200u);
  std::vector<int> scores = state.Prioritize(*request, **policy, names);
  ClusterState one;  // fresh caches
  std::vector<std::optional<double>> raw;
  for (size_t i = 0; i < names.size(); ++i) {
    one.UpsertNode(NodeWithGpus(names[i], static_cast<int>(i) + 1, 2, i % 3 == 0 ? 4000 : 10000 + 100 * i));
    auto alone = one.Filter(*request, {names[i]});
    EXPECT_EQ(all.failed.count(names[i]), alone.failed.count(names[i])) << names[i];
    if (alone.failed.count(names[i])) {
      EXPECT_EQ(all.failed[names[i]], alone.failed[names[i]]);
    }
    auto c = (*policy)->Evaluate(*one.Node(names[i]), *request);
    raw.push_back(c ? std::optional<double>(c->score) : std::nullopt);
  }
  std::vector<std::string_view> views(names.begin(), names.end());
  std::vector<int> expected;
  ExtenderScores(views, raw, expected);
  EXPECT_EQ(scores, expected);
}

// A policy that keeps each node's free milli-GPU in its memo and, when it
// finds its memo filled, checks it against the node: what ClusterState must
// guarantee (a memo is forgotten when its node changes, kept otherwise).
class MemoProbePolicy : public core::Policy {
 public:
  std::string_view name() const override { return "memo-probe"; }
  std::optional<core::Candidate> Evaluate(const core::NodeState& node,
                                          const core::PodRequest& pod) const override {
    std::optional<core::Candidate> out;
    EvaluateInto(node, pod, out, nullptr);
    return out;
  }
  void EvaluateInto(const core::NodeState& node, const core::PodRequest& pod,
                    std::optional<core::Candidate>& out, core::NodeMemo* memo) const override {
    (void)pod;
    const auto free = static_cast<double>(node.free_milli_total());
    if (memo != nullptr && memo->owner == 1) {
      ++hits;
      if (memo->value != free) ++stale;
    } else if (memo != nullptr) {
      ++fills;
      memo->owner = 1;
      memo->value = free;
    }
    out = core::Candidate{free, {}};
  }
  mutable std::atomic<int> hits{0}, fills{0}, stale{0};
};

TEST(ClusterStateNamesTest, ANodesMemoIsKeptUntilItsUsageChanges) {
  ClusterState state;
  std::vector<std::string> names;
  for (int i = 0; i < 100; ++i) {  // enough for the helper thread to share the nodes
    names.push_back("n" + std::to_string(i));
    state.UpsertNode(NodeWithGpus(names.back(), i + 1, 2, 40000, 10));
  }
  MemoProbePolicy probe;
  int reserved = 0;
  for (int round = 0; round < 6; ++round) {
    // A third of the nodes change before each round but the first.
    if (round > 0) {
      for (int i = round % 3; i < 100; i += 3) {
        auto used = core::DerivePodRequest(GpuPod("d", "u", 1, 2000, 10), {});
        ASSERT_TRUE(used.ok());
        ASSERT_TRUE(state
                        .Reserve("d/u" + std::to_string(++reserved), *used, names[i],
                                 core::GpuOrder::kBinpack, std::chrono::hours(1))
                        .ok());
      }
    }
    const int hits = probe.hits, fills = probe.fills;
    // A new shape every round: its evaluation cache is empty, every node is evaluated.
    auto request = core::DerivePodRequest(GpuPod("d", "new", 1, 1000 + round, 5), {});
    ASSERT_TRUE(request.ok());
    (void)state.Prioritize(*request, probe, names);
    EXPECT_EQ(probe.fills - fills, round == 0 ? 100 : 34 - (round % 3 == 0 ? 0 : 1)) << "round " << round;
    EXPECT_EQ(probe.hits - hits, round == 0 ? 0 : 100 - (probe.fills - fills)) << "round " << round;
  }
  EXPECT_EQ(probe.stale, 0);
}

// The tessera policy through ClusterState's node memos, end to end: every
// round a different shape is scored after reservations changed a third of
// the nodes, and the extender scores must be those of evaluating each node
// afresh. Extender scores are coarse (0-10), so a stale memo can go unseen
// here; the keep/forget contract itself is held by the probe test above.
TEST(ClusterStateNamesTest, NodeMemosFollowTheNodesUsageAcrossShapes) {
  std::mt19937 random(11);
  ClusterState state;
  std::vector<std::string> names;
  for (int i = 0; i < 90; ++i) {
    names.push_back("n" + std::to_string(i));
    state.UpsertNode(NodeWithGpus(names.back(), i + 1, 4, 40000, 10));
  }
  core::WorkloadMix mix;
  for (int64_t mib : {4000, 10000, 18000, 30000}) {
    auto shape = core::DerivePodRequest(GpuPod("d", "s", 1, mib, 20), {});
    ASSERT_TRUE(shape.ok());
    mix.push_back({core::ShapeOf(*shape), 0.25});
  }
  core::FragmentationPolicy policy(core::FragmentationPolicy::Options{}, mix);
  int reserved = 0;
  for (int round = 0; round < 12; ++round) {
    for (int k = 0; k < 30; ++k) {
      auto used = core::DerivePodRequest(GpuPod("d", "u", 1, 2000 + 1000 * (random() % 8), 10), {});
      ASSERT_TRUE(used.ok());
      (void)state.Reserve("d/u" + std::to_string(++reserved), *used, names[random() % names.size()],
                          core::GpuOrder::kBinpack, std::chrono::hours(1));
    }
    auto request = core::DerivePodRequest(GpuPod("d", "new", 1, 3000 + 500 * round, 15), {});
    ASSERT_TRUE(request.ok());
    std::vector<int> scores = state.Prioritize(*request, policy, names);
    std::vector<std::optional<double>> raw;
    for (const std::string& n : names) {
      auto c = policy.Evaluate(*state.Node(n), *request);  // a copy of the node, no memo
      raw.push_back(c ? std::optional<double>(c->score) : std::nullopt);
    }
    std::vector<std::string_view> views(names.begin(), names.end());
    std::vector<int> expected;
    ExtenderScores(views, raw, expected);
    ASSERT_EQ(scores, expected) << "round " << round;
  }
}

// What kube-scheduler binds to (the one node prioritize scores 10) is what the
// trace benchmark's engine decides: core::Placer over the same nodes, given in
// name order, with the same policy.
TEST(ClusterStateNamesTest, TheNodeScoredTenIsThePlacersChoice) {
  std::mt19937 random(7);
  ClusterState state;
  std::vector<std::string> names;
  int pods = 0;
  for (int i = 0; i < 40; ++i) {
    // Names out of order and in twins (same GPUs, same usage: equal scores).
    const int kind = i / 2;
    names.push_back("node-" + std::to_string((i * 17) % 40));
    const int gpus = 1 + kind % 4;
    const int64_t memory = kind % 3 == 0 ? 24000 : 81920;
    state.UpsertNode(NodeWithGpus(names.back(), i + 1, gpus, memory, 4));
    for (int p = 0; p < kind % 5; ++p) {
      auto used = core::DerivePodRequest(GpuPod("d", "u", 1, 2000 + 1000 * (kind % 3), 10 * (kind % 4)), {});
      ASSERT_TRUE(used.ok());
      (void)state.Reserve("d/u" + std::to_string(++pods), *used, names.back(), core::GpuOrder::kBinpack,
                          std::chrono::hours(1));
    }
  }
  std::vector<std::string> by_name = names;
  std::sort(by_name.begin(), by_name.end());
  std::vector<core::NodeState> nodes;
  for (const std::string& n : by_name) nodes.push_back(*state.Node(n));
  core::Placer placer(nodes);
  int decisions = 0;
  for (std::string policy_name : {"node-binpack", "node-spread", "gpu-binpack", "gpu-spread", "tessera"}) {
    auto policy = core::MakePolicy(policy_name);
    ASSERT_TRUE(policy.ok());
    for (auto [gpus, memory, cores] :
         {std::tuple{1, 1000, 5}, std::tuple{1, 20000, 30}, std::tuple{2, 8000, 50},
          std::tuple{1, 81920, 100}, std::tuple{4, 30000, 20}}) {
      auto request = core::DerivePodRequest(GpuPod("d", "new", gpus, memory, cores), {});
      ASSERT_TRUE(request.ok());
      std::shuffle(names.begin(), names.end(), random);  // kube-scheduler's order varies
      std::vector<int> scores = state.Prioritize(*request, **policy, names);
      auto decision = placer.Choose(*request, **policy);
      const std::string what = policy_name + " " + std::to_string(gpus) + "x" + std::to_string(memory);
      ASSERT_EQ(std::count(scores.begin(), scores.end(), 10), decision ? 1 : 0) << what;
      if (!decision) continue;
      ++decisions;
      const size_t ten = std::find(scores.begin(), scores.end(), 10) - scores.begin();
      EXPECT_EQ(names[ten], by_name[decision->node]) << what;
    }
  }
  EXPECT_GE(decisions, 20);  // most shapes fit somewhere
}

// Bind commits the placement the policy chose at prioritize: three GPUs of
// 10000 MiB with 4000/7000/10000 free and a learned mix of 4000 MiB pods,
// where tessera puts a 3000 MiB pod on the middle GPU — not the one a
// binpack or spread FitNode would take. From prioritize's cache while the
// node is unchanged; evaluated anew, the same way, once it has changed.
TEST(ClusterStateReserveTest, ReserveCommitsThePolicysCandidateCachedOrAnew) {
  ClusterState state;
  state.UpsertNode(NodeWithGpus("n", 1, 3, 10000));
  auto request = [](int64_t mib) { return *core::DerivePodRequest(GpuPod("d", "p", 1, mib, 0), {}); };
  ASSERT_TRUE(state.Reserve("d/a", request(6000), "n", core::GpuOrder::kBinpack, std::chrono::hours(1)).ok());
  ASSERT_TRUE(state.Reserve("d/b", request(3000), "n", core::GpuOrder::kSpread, std::chrono::hours(1)).ok());
  std::shared_ptr<core::Policy> tessera = std::move(core::MakePolicy("tessera").value());
  for (int i = 0; i < 3; ++i) tessera->Observe(request(4000));
  const core::PodRequest pod = request(3000);
  const core::NodeState before = *state.Node("n");
  auto uuid_of = [&](const core::Placement& p) {
    return before.gpus()[p.containers.at(0).slices.at(0).gpu].gpu.uuid;
  };
  const std::string binpack = uuid_of(core::FitNode(before, pod, core::GpuOrder::kBinpack).placement);
  const std::string spread = uuid_of(core::FitNode(before, pod, core::GpuOrder::kSpread).placement);
  const std::string chosen = uuid_of(tessera->Evaluate(before, pod)->placement);
  ASSERT_NE(chosen, binpack);
  ASSERT_NE(chosen, spread);

  const ClusterStats base = state.Stats();  // the set-up's reservations evaluated anew
  EXPECT_EQ(state.Prioritize(pod, *tessera, {"n"}), std::vector<int>{10});
  auto reserved = state.Reserve("d/new", pod, "n", tessera.get(), std::chrono::hours(1));
  ASSERT_TRUE(reserved.ok()) << reserved.error().message;
  EXPECT_EQ(reserved->containers.at(0).devices.at(0).uuid, chosen);
  EXPECT_EQ(state.Stats().reserves_from_cache, base.reserves_from_cache + 1);
  EXPECT_EQ(state.Stats().reserves_evaluated, base.reserves_evaluated);

  // Given back; another pod changes the node: the cached candidate no
  // longer holds, and the policy decides again against the node as it is.
  state.Unreserve("d/new");
  ASSERT_TRUE(state.Reserve("d/c", request(500), "n", core::GpuOrder::kSpread, std::chrono::hours(1)).ok());
  const core::NodeState now = *state.Node("n");
  const uint64_t evaluated = state.Stats().reserves_evaluated;
  auto again = state.Reserve("d/new", pod, "n", tessera.get(), std::chrono::hours(1));
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(state.Stats().reserves_evaluated, evaluated + 1);
  EXPECT_EQ(state.Stats().reserves_from_cache, base.reserves_from_cache + 1);
  EXPECT_EQ(*again, core::ToAllocation(now, pod, tessera->Evaluate(now, pod)->placement));

  // With the GPUs in HAMi's spread order (tessera's node, spread GPUs).
  state.Unreserve("d/new");
  auto ordered = core::WithGpuOrder(tessera, core::GpuOrder::kSpread);
  auto spreaded = state.Reserve("d/new", pod, "n", ordered.get(), std::chrono::hours(1));
  ASSERT_TRUE(spreaded.ok());
  EXPECT_EQ(*spreaded,
            core::ToAllocation(now, pod, core::FitNode(now, pod, core::GpuOrder::kSpread).placement));

  // Nothing fits: the reason is fit's, and nothing is held.
  auto big = state.Reserve("d/big", request(9000), "n", tessera.get(), std::chrono::hours(1));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.error().message.find("no longer fits on node n"), std::string::npos) << big.error().message;
  EXPECT_FALSE(state.AllocationOf("d/big").has_value());
}

// A composed policy's cached scores are dropped with its node policy's at a relearn.
TEST(ClusterStateReserveTest, DropScoresOfDropsTheGpuOrderedFormsToo) {
  ClusterState state;
  state.UpsertNode(NodeWithGpus("n", 1, 2, 10000));
  std::shared_ptr<core::Policy> tessera = std::move(core::MakePolicy("tessera").value());
  const core::PodRequest pod = *core::DerivePodRequest(GpuPod("d", "p", 1, 1000, 0), {});
  tessera->Observe(pod);
  (void)state.Prioritize(pod, *tessera, {"n"});
  (void)state.Prioritize(pod, *core::WithGpuOrder(tessera, core::GpuOrder::kBinpack), {"n"});
  const size_t with_both = state.Stats().evaluation_caches;
  state.DropScoresOf("tessera", tessera->epoch());
  EXPECT_EQ(state.Stats().evaluation_caches, with_both) << "current epoch kept";
  state.DropScoresOf("tessera", tessera->epoch() + 1);
  EXPECT_EQ(state.Stats().evaluation_caches, with_both - 2);
}

}  // namespace
}  // namespace tessera::scheduler
