#include "scheduler/preemption.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "base/clock.h"
#include "core/allocation_codec.h"
#include "core/pod_request.h"
#include "scheduler/extender.h"
#include "scheduler/testing.h"

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;
using testing::GpuPod;
using testing::GpuUuid;
using testing::NodeWithGpus;

// A NodeState of `gpus` GPUs of `memory_mib` (node id 1) and `slots` slots each.
core::NodeState Node(int gpus, int64_t memory_mib, int slots = 20) {
  std::vector<core::Gpu> list;
  for (int i = 0; i < gpus; ++i) {
    core::Gpu g;
    g.uuid = GpuUuid(1, i);
    g.index = i;
    g.model = "NVIDIA A100-SXM4-80GB";
    g.memory_mib = memory_mib;
    g.sm_count = 108;
    g.slots = slots;
    list.push_back(g);
  }
  return core::NodeState("n", list);
}

core::PodAllocation Slice(int gpu, int64_t memory_mib, int cores = 10) {
  return {"n", {{"app", {{GpuUuid(1, gpu), memory_mib, cores}}}}};
}

core::PodRequest Request(int64_t memory_mib, int gpus = 1) {
  auto r = core::DerivePodRequest(GpuPod("d", "pre", gpus, memory_mib, 10), {});
  EXPECT_TRUE(r.ok()) << r.error().message;
  return *r;
}

// A GPU victim `name` (uid "uid-<name>") of `priority` holding `allocation`,
// applied to `node`.
Victim GpuVictim(core::NodeState& node, const std::string& name, int32_t priority,
                 const core::PodAllocation& allocation, Json labels = Json::object()) {
  EXPECT_TRUE(node.Apply(allocation).ok()) << name;
  return {"uid-" + name, "d", name, priority, std::move(labels), allocation};
}

std::vector<std::string> Names(const std::vector<Victim>& victims, const TrimmedVictims& t) {
  std::vector<std::string> names;
  for (size_t i : t.kept) names.push_back(victims[i].name.empty() ? victims[i].uid : victims[i].name);
  return names;
}

using Names_ = std::vector<std::string>;

TEST(TrimVictimsTest, KeepsTheFewestVictimsThatMakeRoom) {
  core::NodeState node = Node(2, 16384);
  std::vector<Victim> v;
  v.push_back(GpuVictim(node, "a", 1, Slice(0, 8000)));
  v.push_back(GpuVictim(node, "b", 1, Slice(0, 8000)));
  v.push_back(GpuVictim(node, "c", 5, Slice(1, 12000)));
  // 10000 MiB: GPU 0 needs a and b gone, GPU 1 only c.
  TrimmedVictims t = TrimVictims(node, Request(10000), v, std::vector<DisruptionBudget>{}, 0);
  ASSERT_TRUE(t.fits);
  EXPECT_EQ(Names(v, t), (Names_{"c"}));
  EXPECT_EQ(t.pdb_violations, 0);
}

TEST(TrimVictimsTest, AmongEquallyFewTheLowestPriorityGoes) {
  core::NodeState node = Node(2, 16384);
  std::vector<Victim> v;
  v.push_back(GpuVictim(node, "high", 7, Slice(0, 12000)));
  v.push_back(GpuVictim(node, "low", 2, Slice(1, 12000)));
  TrimmedVictims t = TrimVictims(node, Request(10000), v, std::vector<DisruptionBudget>{}, 0);
  ASSERT_TRUE(t.fits);
  EXPECT_EQ(Names(v, t), (Names_{"low"}));
}

TEST(TrimVictimsTest, NeverKeepsAVictimWhoseGpuThePodCannotUse) {
  core::NodeState node = Node(2, 16384);
  std::vector<Victim> v;
  v.push_back(GpuVictim(node, "elsewhere", 0, Slice(0, 12000)));
  v.push_back(GpuVictim(node, "needed", 3, Slice(1, 12000)));
  core::PodRequest pod = Request(10000);
  pod.filter.use_uuids = {GpuUuid(1, 1)};  // only GPU 1
  TrimmedVictims t = TrimVictims(node, pod, v, std::vector<DisruptionBudget>{}, 0);
  ASSERT_TRUE(t.fits);
  EXPECT_EQ(Names(v, t), (Names_{"needed"}));

  // Proposed alone, the useless victim frees nothing: the node is dropped.
  std::vector<Victim> only = {v[0]};
  TrimmedVictims dropped = TrimVictims(node, pod, only, std::vector<DisruptionBudget>{}, 0);
  EXPECT_FALSE(dropped.fits);
  EXPECT_NE(dropped.reason.find("not enough memory"), std::string::npos) << dropped.reason;
}

TEST(TrimVictimsTest, KeepsNonGpuVictimsAsProposed) {
  core::NodeState node = Node(1, 16384);
  std::vector<Victim> v;
  v.push_back({"uid-cpu", "d", "cpu-only", 0, Json::object(), std::nullopt});  // chosen for CPU
  v.push_back(GpuVictim(node, "small", 0, Slice(0, 2000)));                    // not needed
  v.push_back(GpuVictim(node, "big", 0, Slice(0, 12000)));
  TrimmedVictims t = TrimVictims(node, Request(10000), v, std::vector<DisruptionBudget>{}, 0);
  ASSERT_TRUE(t.fits);
  EXPECT_EQ(Names(v, t), (Names_{"cpu-only", "big"}));
}

TEST(TrimVictimsTest, DropsTheNodeWhenEveryProposedVictimIsNotEnough) {
  core::NodeState node = Node(1, 16384);
  std::vector<Victim> v;
  v.push_back(GpuVictim(node, "a", 0, Slice(0, 4000)));
  ASSERT_TRUE(node.Apply(Slice(0, 8000)).ok());  // a pod kube-scheduler did not propose
  TrimmedVictims t = TrimVictims(node, Request(10000), v, std::vector<DisruptionBudget>{}, 0);
  EXPECT_FALSE(t.fits);
  EXPECT_TRUE(t.kept.empty());
  // A request larger than the GPU never fits.
  EXPECT_FALSE(TrimVictims(node, Request(20000), v, std::nullopt, 0).fits);
}

TEST(TrimVictimsTest, PrefersFewerPdbViolationsOverLowerPriority) {
  core::NodeState node = Node(2, 16384);
  std::vector<Victim> v;
  v.push_back(GpuVictim(node, "guarded", 1, Slice(0, 12000), {{"app", "db"}}));
  v.push_back(GpuVictim(node, "free", 4, Slice(1, 12000), {{"app", "web"}}));
  DisruptionBudget db{"d", {{"matchLabels", {{"app", "db"}}}}, 0, {}};
  TrimmedVictims t = TrimVictims(node, Request(10000), v, std::vector<DisruptionBudget>{db}, 1);
  ASSERT_TRUE(t.fits);
  EXPECT_EQ(Names(v, t), (Names_{"free"}));
  EXPECT_EQ(t.pdb_violations, 0);

  // Without budgets the lower priority goes, and kube-scheduler's count bounds the answer.
  TrimmedVictims unknown = TrimVictims(node, Request(10000), v, std::nullopt, 1);
  EXPECT_EQ(Names(v, unknown), (Names_{"guarded"}));
  EXPECT_EQ(unknown.pdb_violations, 1);

  // When only the guarded pod helps, it is kept and its violation reported.
  std::vector<Victim> only = {v[0]};
  core::PodRequest pod = Request(10000);
  pod.filter.use_uuids = {GpuUuid(1, 0)};
  TrimmedVictims forced = TrimVictims(node, pod, only, std::vector<DisruptionBudget>{db}, 1);
  ASSERT_TRUE(forced.fits);
  EXPECT_EQ(forced.pdb_violations, 1);
}

TEST(TrimVictimsTest, ManyVictimsFallBackToReprievingTheMostImportantFirst) {
  core::NodeState node = Node(1, 16000, 20);
  std::vector<Victim> v;
  for (int i = 0; i < 16; ++i) {
    v.push_back(GpuVictim(node, "v" + std::to_string(i), 100 - i, Slice(0, 1000, 5)));
  }
  ASSERT_GT(v.size(), kMaxExactVictims);
  TrimmedVictims t = TrimVictims(node, Request(3000), v, std::vector<DisruptionBudget>{}, 0);
  ASSERT_TRUE(t.fits);
  EXPECT_EQ(Names(v, t), (Names_{"v13", "v14", "v15"}));  // the three of lowest priority
}

TEST(LabelSelectorTest, MatchesAsKubernetesDoes) {
  const Json labels = {{"app", "db"}, {"tier", "back"}};
  EXPECT_FALSE(LabelSelectorMatches(nullptr, labels));        // nil: nothing
  EXPECT_TRUE(LabelSelectorMatches(Json::object(), labels));  // empty: everything
  EXPECT_TRUE(LabelSelectorMatches(Json::object(), Json()));  // even unlabelled pods
  EXPECT_TRUE(LabelSelectorMatches({{"matchLabels", {{"app", "db"}}}}, labels));
  EXPECT_FALSE(LabelSelectorMatches({{"matchLabels", {{"app", "web"}}}}, labels));
  auto expr = [](const std::string& op, Json values = nullptr) {
    Json e = {{"key", "tier"}, {"operator", op}};
    if (!values.is_null()) e["values"] = values;
    return Json{{"matchExpressions", Json::array({e})}};
  };
  EXPECT_TRUE(LabelSelectorMatches(expr("In", {"back", "mid"}), labels));
  EXPECT_FALSE(LabelSelectorMatches(expr("NotIn", {"back"}), labels));
  EXPECT_TRUE(LabelSelectorMatches(expr("Exists"), labels));
  EXPECT_FALSE(LabelSelectorMatches(expr("DoesNotExist"), labels));
  EXPECT_TRUE(LabelSelectorMatches(expr("DoesNotExist"), Json::object()));
  EXPECT_FALSE(LabelSelectorMatches(expr("Gt", {"1"}), labels));  // unknown operator: nothing
}

TEST(PdbTest, CountsAsKubeSchedulerDoes) {
  std::vector<DisruptionBudget> budgets = ParseDisruptionBudgets(
      {Json::parse(
           R"({"metadata":{"name":"b","namespace":"d"},"spec":{"selector":{"matchLabels":{"app":"db"}}},
                      "status":{"disruptionsAllowed":1,"disruptedPods":{"gone":"2026-01-01T00:00:00Z"}}})"),
       Json::parse(R"({"metadata":{"name":"other","namespace":"x"},"spec":{"selector":{}},
                      "status":{"disruptionsAllowed":0}})")});
  ASSERT_EQ(budgets.size(), 2u);
  Victim a{"1", "d", "a", 0, {{"app", "db"}}, std::nullopt};
  Victim b{"2", "d", "b", 0, {{"app", "db"}}, std::nullopt};
  Victim gone{"3", "d", "gone", 0, {{"app", "db"}}, std::nullopt};
  Victim web{"4", "d", "web", 0, {{"app", "web"}}, std::nullopt};
  std::vector<const Victim*> one = {&a};
  std::vector<const Victim*> two = {&a, &b};
  std::vector<const Victim*> listed = {&gone, &a, &web};
  EXPECT_EQ(CountPdbViolations(one, budgets), 0);     // one disruption allowed
  EXPECT_EQ(CountPdbViolations(two, budgets), 1);     // the second breaks it
  EXPECT_EQ(CountPdbViolations(listed, budgets), 0);  // already disrupted pods take nothing
}

// Holds: the room a nominated preemptor needs is kept from lower-priority pods.
class HoldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterStateOptions o;
    o.clock = &clock_;
    o.inventory_stale_after = std::chrono::milliseconds(0);
    state_ = std::make_unique<ClusterState>(o);
    state_->UpsertNode(NodeWithGpus("n", 1, 1, 16384));
    // A low-priority pod fills most of the GPU.
    Json low = GpuPod("d", "low", 1, 12000, 10);
    low["spec"]["nodeName"] = "n";
    low["metadata"]["annotations"]["tessera.io/allocation"] =
        *core::EncodeAllocation({"n", {{"app", {{GpuUuid(1, 0), 12000, 10}}}}});
    state_->UpsertPod(low);
    low_ = low;
  }

  bool Fits(const std::string& key, int32_t priority, int64_t memory_mib, std::string* reason = nullptr) {
    const core::PodRequest pod = Request(memory_mib);
    std::vector<std::string_view> names = {"n"};
    ClusterState::NodeVerdicts v;
    state_->Filter(pod, names, v);
    state_->ApplyHolds(key, priority, pod, names, v);
    if (reason && !v.failed.empty()) *reason = v.failed[0].second;
    return !v.feasible.empty();
  }

  FakeClock clock_;
  std::unique_ptr<ClusterState> state_;
  Json low_;
};

TEST_F(HoldTest, KeepsFreedRoomFromLowerAndEqualPriorityPodsOnly) {
  state_->SetHold("d/pre", "n", Request(12000), 100, std::chrono::minutes(5));
  state_->SetTerminating("d/low", true);
  // 4384 MiB look free, but the nominee's 12000 come on top of the leaving 12000.
  EXPECT_FALSE(Fits("d/other", 0, 2000));
  state_->DeletePod(low_);  // the victim is gone
  std::string reason;
  EXPECT_FALSE(Fits("d/other", 100, 8000, &reason));  // equal priority: held
  EXPECT_NE(reason.find("held"), std::string::npos) << reason;
  EXPECT_TRUE(Fits("d/other", 0, 4000));     // beside the nominee's 12000 there is room
  EXPECT_TRUE(Fits("d/urgent", 101, 8000));  // higher priority: not held from it
  EXPECT_TRUE(Fits("d/pre", 100, 12000));    // the nominee itself
  state_->ReleaseHold("d/pre");
  EXPECT_TRUE(Fits("d/other", 0, 8000));
  EXPECT_EQ(state_->HoldCount(), 0u);
}

TEST_F(HoldTest, NomineeWhoseVictimsAreNotLeavingYetBlocksTheNode) {
  state_->SetHold("d/pre", "n", Request(12000), 100, std::chrono::minutes(5));
  // "low" is not seen terminating: the nominee has no room yet, so none is given away.
  std::string reason;
  EXPECT_FALSE(Fits("d/other", 0, 1000, &reason));
  EXPECT_NE(reason.find("held for pod d/pre (priority 100)"), std::string::npos) << reason;
  std::string blocked;
  ASSERT_TRUE(state_->ViewFor("d/other", 0, "n", &blocked).has_value());
  EXPECT_FALSE(blocked.empty());
}

TEST_F(HoldTest, HoldExpires) {
  state_->DeletePod(low_);
  state_->SetHold("d/pre", "n", Request(12000), 100, std::chrono::minutes(5));
  EXPECT_FALSE(Fits("d/other", 0, 8000));
  clock_.Advance(std::chrono::minutes(4));
  state_->SetHold("d/pre", "n", Request(12000), 100, std::chrono::minutes(5));  // seen again: no renewal
  EXPECT_FALSE(Fits("d/other", 0, 8000));
  clock_.Advance(std::chrono::minutes(2));
  EXPECT_TRUE(Fits("d/other", 0, 8000));
}

TEST_F(HoldTest, TrackNominationFollowsThePod) {
  Json pre = GpuPod("d", "pre", 1, 12000, 10);
  pre["spec"]["priority"] = 100;
  pre["status"]["nominatedNodeName"] = "n";
  TrackNomination(*state_, {}, pre, false);
  EXPECT_EQ(state_->HoldCount(), 1u);
  state_->DeletePod(low_);
  EXPECT_FALSE(Fits("d/other", 0, 8000));
  pre["spec"]["nodeName"] = "n";  // bound
  TrackNomination(*state_, {}, pre, false);
  EXPECT_EQ(state_->HoldCount(), 0u);
  pre["spec"].erase("nodeName");
  TrackNomination(*state_, {}, pre, false);
  EXPECT_EQ(state_->HoldCount(), 1u);
  TrackNomination(*state_, {}, pre, true);  // deleted
  EXPECT_EQ(state_->HoldCount(), 0u);
  Json cpu = Json::parse(R"({"metadata":{"name":"c","namespace":"d"},"spec":{"containers":[{"name":"a"}]},
                            "status":{"nominatedNodeName":"n"}})");
  TrackNomination(*state_, {}, cpu, false);  // asks for no GPU: nothing to hold
  EXPECT_EQ(state_->HoldCount(), 0u);
}

// The verb through Extender::PreemptBody, as kube-scheduler posts it.
class PreemptVerbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_.UpsertNode(NodeWithGpus("n", 1, 2, 16384));
    state_.UpsertNode(NodeWithGpus("small", 2, 1, 8192));
    AddBound("a", 1, 0, 12000);
    AddBound("b", 2, 1, 12000);
    AddBound("s", 0, 0, 4000, "small", 2);
    ExtenderDeps deps;
    deps.state = &state_;
    deps.not_ready = [this] { return not_ready_; };
    deps.get_pod = [this](const std::string& ns, const std::string& name) -> Result<Json> {
      auto it = pods_.find(ns + "/" + name);
      if (it == pods_.end()) return Error{"not found"};
      return it->second;
    };
    extender_ = std::make_unique<Extender>(std::move(deps));
  }

  void AddBound(const std::string& name, int32_t priority, int gpu, int64_t memory_mib,
                const std::string& node = "n", int node_id = 1) {
    Json pod = GpuPod("d", name, 1, memory_mib, 10);
    pod["metadata"]["uid"] = "uid-" + name;
    pod["spec"]["nodeName"] = node;
    pod["spec"]["priority"] = priority;
    pod["metadata"]["annotations"]["tessera.io/allocation"] =
        *core::EncodeAllocation({node, {{"app", {{GpuUuid(node_id, gpu), memory_mib, 10}}}}});
    state_.UpsertPod(pod);
    pods_["d/" + name] = pod;
  }

  Json Preemptor(int64_t memory_mib) {
    Json pod = GpuPod("d", "pre", 1, memory_mib, 10);
    pod["metadata"]["uid"] = "uid-pre";
    pod["spec"]["priority"] = 100;
    return pod;
  }

  ClusterState state_;
  std::map<std::string, Json> pods_;
  std::string not_ready_;
  std::unique_ptr<Extender> extender_;
};

TEST_F(PreemptVerbTest, MetaVictimsAreTrimmedAndUselessNodesLeftOut) {
  Json args = {
      {"Pod", Preemptor(10000)},
      {"NodeNameToVictims", nullptr},
      {"NodeNameToMetaVictims",
       {{"n",
         {{"Pods", {{{"UID", "uid-a"}}, {{"UID", "uid-b"}}, {{"UID", "uid-cpu"}}}}, {"NumPDBViolations", 0}}},
        {"small", {{"Pods", {{{"UID", "uid-s"}}}}, {"NumPDBViolations", 0}}}}}};
  auto [status, body] = extender_->PreemptBody(args.dump());
  ASSERT_EQ(status, 200) << body;
  Json result = Json::parse(body);
  // a (priority 1) rather than b (2); the CPU pod stays; "small" is too small even empty.
  EXPECT_EQ(result, Json::parse(R"({"NodeNameToMetaVictims":{"n":{"NumPDBViolations":0,
      "Pods":[{"UID":"uid-a"},{"UID":"uid-cpu"}]}}})"));
}

TEST_F(PreemptVerbTest, WholeVictimsAreReadToo) {
  Json args = {
      {"Pod", Preemptor(10000)},
      {"NodeNameToVictims", {{"n", {{"Pods", {pods_["d/b"], pods_["d/a"]}}, {"NumPDBViolations", 0}}}}}};
  auto [status, body] = extender_->PreemptBody(args.dump());
  ASSERT_EQ(status, 200) << body;
  EXPECT_EQ(Json::parse(body)["NodeNameToMetaVictims"]["n"]["Pods"], Json::parse(R"([{"UID":"uid-a"}])"));
}

TEST_F(PreemptVerbTest, BadRequestsAreRefusedWithTheReason) {
  auto status_and_error = [&](const std::string& body) {
    auto [status, answer] = extender_->PreemptBody(body);
    Json j = Json::parse(answer, nullptr, false);
    return std::pair{status, j.is_object() ? j.value("Error", "") : answer};
  };
  EXPECT_EQ(status_and_error("{nope").first, 400);
  EXPECT_EQ(status_and_error("{nope").second, "request body is not valid JSON");
  EXPECT_EQ(status_and_error(R"({"NodeNameToMetaVictims":{}})").second,
            "ExtenderPreemptionArgs carries no Pod");
  Json pod = Preemptor(10000);
  EXPECT_NE(status_and_error(Json{{"Pod", pod}}.dump()).second.find("neither NodeNameToMetaVictims"),
            std::string::npos);
  EXPECT_EQ(status_and_error(
                Json{{"Pod", pod}, {"NodeNameToMetaVictims", {{"n", {{"Pods", {{{"ID", 1}}}}}}}}}.dump())
                .second,
            "NodeNameToMetaVictims[n].Pods has a MetaPod without a UID string");
  EXPECT_EQ(status_and_error(
                Json{{"Pod", pod}, {"NodeNameToMetaVictims", {{"n", {{"NumPDBViolations", "x"}}}}}}.dump())
                .second,
            "NodeNameToMetaVictims[n].NumPDBViolations is not an integer");
  Json bad = pod;
  bad["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = "300";
  auto refused = status_and_error(Json{{"Pod", bad}, {"NodeNameToMetaVictims", Json::object()}}.dump());
  EXPECT_EQ(refused.first, 400);
  EXPECT_NE(refused.second.find("pod d/pre"), std::string::npos) << refused.second;
  not_ready_ = "the pods are not listed yet";
  EXPECT_EQ(status_and_error(Json{{"Pod", pod}, {"NodeNameToMetaVictims", Json::object()}}.dump()).first,
            503);
}

TEST_F(PreemptVerbTest, APodAskingNoGpuKeepsKubeSchedulersProposal) {
  Json cpu = Json::parse(R"({"metadata":{"name":"c","namespace":"d"},"spec":{"containers":[{"name":"a"}]}})");
  Json args = {{"Pod", cpu},
               {"NodeNameToMetaVictims", {{"n", {{"Pods", {{{"UID", "uid-a"}}}}, {"NumPDBViolations", 1}}}}}};
  auto [status, body] = extender_->PreemptBody(args.dump());
  ASSERT_EQ(status, 200);
  EXPECT_EQ(
      Json::parse(body),
      Json::parse(R"({"NodeNameToMetaVictims":{"n":{"NumPDBViolations":1,"Pods":[{"UID":"uid-a"}]}}})"));
}

}  // namespace
}  // namespace tessera::scheduler
