#include "scheduler/gpu_preemptor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "base/clock.h"
#include "base/log.h"
#include "core/allocation_codec.h"
#include "core/pod_request.h"
#include "scheduler/testing.h"

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;
using testing::GpuPod;
using testing::GpuUuid;
using testing::NodeWithGpus;

// Two nodes of two 16 GiB GPUs; pods as the informer and the API server have
// them (one map: the fakes below read and write it).
class GpuPreemptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterStateOptions o;
    o.clock = &clock_;
    o.inventory_stale_after = std::chrono::milliseconds(0);
    state_ = std::make_unique<ClusterState>(o);
    state_->UpsertNode(NodeWithGpus("n", 1, 2, 16384));
    state_->UpsertNode(NodeWithGpus("m", 2, 2, 16384));
  }

  // A pod bound to `node` (id `node_id`) holding `memory_mib` on GPU `gpu`.
  void AddBound(const std::string& name, int32_t priority, const std::string& node, int node_id, int gpu,
                int64_t memory_mib, Json labels = Json::object()) {
    Json pod = GpuPod("d", name, 1, memory_mib, 10);
    pod["metadata"]["uid"] = "uid-" + name;
    pod["metadata"]["resourceVersion"] = "1";
    pod["metadata"]["labels"] = std::move(labels);
    pod["spec"]["nodeName"] = node;
    pod["spec"]["priority"] = priority;
    pod["metadata"]["annotations"]["tessera.io/allocation"] =
        *core::EncodeAllocation({node, {{"app", {{GpuUuid(node_id, gpu), memory_mib, 10}}}}});
    state_->UpsertPod(pod);
    pods_["d/" + name] = pod;
  }

  Json Preemptor(int64_t memory_mib, int32_t priority = 100, int gpus = 1) {
    Json pod = GpuPod("d", "pre", gpus, memory_mib, 10);
    pod["metadata"]["uid"] = "uid-pre";
    pod["spec"]["priority"] = priority;
    pods_["d/pre"] = pod;
    return pod;
  }

  static core::PodRequest Request(const Json& pod) {
    auto r = core::DerivePodRequest(pod, {});
    EXPECT_TRUE(r.ok()) << r.error().message;
    return *r;
  }

  Result<Json> Lookup(const std::string& ns, const std::string& name) const {
    auto it = pods_.find(ns + "/" + name);
    if (it == pods_.end()) return Error{"not found"};
    return it->second;
  }

  GpuPreemptionDecision Decide(const Json& pod, std::vector<std::string> nodes = {"n", "m"}) {
    return DecideGpuPreemption(
        *state_, [this](const std::string& ns, const std::string& name) { return Lookup(ns, name); }, pod,
        Request(pod), nodes, budgets_);
  }

  static std::set<std::string> Names(const GpuPreemptionPlan& plan) {
    std::set<std::string> names;
    for (const Victim& v : plan.victims) names.insert(v.name);
    return names;
  }

  FakeClock clock_;
  std::unique_ptr<ClusterState> state_;
  std::map<std::string, Json> pods_;
  std::vector<DisruptionBudget> budgets_;
};

// Node n: GPU 0 holds a priority-1 slice, GPU 1 a priority-5 slice; node m
// is full with priority-3 slices.
class DecisionTest : public GpuPreemptionTest {
 protected:
  void SetUp() override {
    GpuPreemptionTest::SetUp();
    AddBound("a", 1, "n", 1, 0, 12000, {{"app", "guarded"}});
    AddBound("b", 5, "n", 1, 1, 12000);
    AddBound("c", 3, "m", 2, 0, 12000);
    AddBound("d", 3, "m", 2, 1, 12000);
  }
};

TEST_F(DecisionTest, PreemptsTheLowestPriorityPodThatMakesRoom) {
  GpuPreemptionDecision d = Decide(Preemptor(12000));
  ASSERT_TRUE(d.plan) << d.reason;
  EXPECT_EQ(d.plan->node, "n");
  EXPECT_EQ(Names(*d.plan), (std::set<std::string>{"a"}));
  EXPECT_EQ(d.plan->pdb_violations, 0);
  EXPECT_EQ(d.plan->victims[0].uid, "uid-a");
}

TEST_F(DecisionTest, PrefersTheFewestVictims) {
  // m's GPU 0 now holds two priority-0 slices, which together free less than one priority-3 slice.
  state_->DeletePod(pods_["d/c"]);
  pods_.erase("d/c");
  AddBound("c1", 0, "m", 2, 0, 6000);
  AddBound("c2", 0, "m", 2, 0, 6000);
  GpuPreemptionDecision d = Decide(Preemptor(12000));
  ASSERT_TRUE(d.plan) << d.reason;
  EXPECT_EQ(Names(*d.plan), (std::set<std::string>{"a"}));  // one pod of priority 1, not two of 0
}

TEST_F(DecisionTest, NothingWhenItWouldNotHelp) {
  // Larger than any GPU.
  GpuPreemptionDecision big = Decide(Preemptor(20000));
  EXPECT_FALSE(big.plan);
  EXPECT_EQ(
      big.reason,
      "no pod of lower priority whose removal could make room runs on any of the 2 node(s) it was given");
  // It fits already (a free GPU on a third node).
  state_->UpsertNode(NodeWithGpus("free", 3, 1, 16384));
  GpuPreemptionDecision fits = Decide(Preemptor(12000), {"n", "free"});
  EXPECT_FALSE(fits.plan);
  EXPECT_NE(fits.reason.find("fits on node free without preemption"), std::string::npos) << fits.reason;
  // Only nodes it was given count.
  GpuPreemptionDecision none = Decide(Preemptor(12000), {"unknown"});
  EXPECT_FALSE(none.plan);
}

TEST_F(DecisionTest, NeverAPodOfEqualOrHigherPriority) {
  GpuPreemptionDecision equal = Decide(Preemptor(12000, /*priority=*/1));
  EXPECT_FALSE(equal.plan);
  EXPECT_NE(equal.reason.find("no pod of lower priority"), std::string::npos) << equal.reason;
  // Priority 4 may take a (1), c or d (3), never b (5): a, the lowest.
  GpuPreemptionDecision four = Decide(Preemptor(12000, 4));
  ASSERT_TRUE(four.plan);
  EXPECT_EQ(Names(*four.plan), (std::set<std::string>{"a"}));
}

// Asked before any node is walked: in a cluster without priority classes
// every pending pod would otherwise cost a walk of every node.
TEST_F(DecisionTest, NoNodeIsWalkedWhenNoPodAnywhereHasALowerPriority) {
  EXPECT_TRUE(state_->AnyPodBelowPriority(2));
  EXPECT_FALSE(state_->AnyPodBelowPriority(1));
  GpuPreemptionDecision d = Decide(Preemptor(12000, /*priority=*/1));
  EXPECT_FALSE(d.plan);
  EXPECT_EQ(d.reason, "no pod of lower priority holds a GPU slice anywhere in the cluster (its priority: 1)");
  // The count follows the pods: without a (priority 1), nothing is below 3.
  state_->DeletePod(pods_["d/a"]);
  EXPECT_FALSE(state_->AnyPodBelowPriority(3));
  EXPECT_TRUE(state_->AnyPodBelowPriority(4));
  AddBound("e", -7, "n", 1, 0, 1000);
  EXPECT_TRUE(state_->AnyPodBelowPriority(-6));
}

TEST_F(DecisionTest, AvoidsAVictimWhoseBudgetHasNoDisruptionLeft) {
  budgets_ = ParseDisruptionBudgets({Json::parse(R"({"metadata":{"name":"g","namespace":"d"},
      "spec":{"selector":{"matchLabels":{"app":"guarded"}}},"status":{"disruptionsAllowed":0}})")});
  GpuPreemptionDecision d = Decide(Preemptor(12000));
  ASSERT_TRUE(d.plan) << d.reason;
  // a is guarded: a priority-3 pod on m goes instead (0 violations beats a lower priority).
  EXPECT_EQ(d.plan->node, "m");
  EXPECT_EQ(d.plan->victims.size(), 1u);
  EXPECT_EQ(d.plan->pdb_violations, 0);
  // When only the guarded pod helps, it is chosen and the violation reported.
  GpuPreemptionDecision only = Decide(Preemptor(12000, /*priority=*/2), {"n"});
  ASSERT_TRUE(only.plan) << only.reason;
  EXPECT_EQ(Names(*only.plan), (std::set<std::string>{"a"}));
  EXPECT_EQ(only.plan->pdb_violations, 1);
}

TEST_F(DecisionTest, WaitsWhileItsNominatedNodeHasTerminatingVictims) {
  pods_["d/a"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  state_->SetTerminating("d/a", true);  // as TrackNomination marks it from the informer
  Json pre = Preemptor(12000);
  pre["status"]["nominatedNodeName"] = "n";
  GpuPreemptionDecision d = Decide(pre);
  EXPECT_FALSE(d.plan);
  EXPECT_NE(d.reason.find("nominated to node n, where pod d/a of lower priority is still terminating"),
            std::string::npos)
      << d.reason;
  // Not nominated: a leaving is enough, nothing more is preempted.
  GpuPreemptionDecision other = Decide(Preemptor(12000));
  EXPECT_FALSE(other.plan);
  EXPECT_NE(other.reason.find("once the pods terminating there are gone"), std::string::npos) << other.reason;
}

TEST_F(DecisionTest, AVictimWhoseAllocationCannotBeReadIsPassedOver) {
  // The informer's copy of a no longer matches what was accounted.
  pods_["d/a"]["metadata"]["annotations"]["tessera.io/allocation"] = "{not json";
  GpuPreemptionDecision d = Decide(Preemptor(12000));
  ASSERT_TRUE(d.plan) << d.reason;
  EXPECT_EQ(Names(*d.plan).count("a"), 0u);
  ASSERT_FALSE(d.notes.empty());
  EXPECT_NE(d.notes[0].find("pod d/a on node n: its tessera.io/allocation annotation cannot be read"),
            std::string::npos)
      << d.notes[0];
}

TEST(PreemptionIneligibilityTest, SaysWhyAPodMayNotPreempt) {
  Json pod = GpuPod("d", "p", 1, 1000, 10);
  auto request = *core::DerivePodRequest(pod, {});
  EXPECT_EQ(PreemptionIneligibility(pod, request), "");
  Json never = pod;
  never["spec"]["preemptionPolicy"] = "Never";
  EXPECT_EQ(PreemptionIneligibility(never, request), "its preemptionPolicy is Never");
  Json bound = pod;
  bound["spec"]["nodeName"] = "n";
  EXPECT_EQ(PreemptionIneligibility(bound, request), "it is bound already");
  Json deleting = pod;
  deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  EXPECT_EQ(PreemptionIneligibility(deleting, request), "it is being deleted");
  Json cpu = Json::parse(R"({"metadata":{"name":"c","namespace":"d"},"spec":{"containers":[{"name":"a"}]}})");
  EXPECT_EQ(PreemptionIneligibility(cpu, *core::DerivePodRequest(cpu, {})), "it asks for no GPU");
}

// The preemptor against fake API calls that act on pods_.
class PreemptorTest : public GpuPreemptionTest {
 protected:
  void SetUp() override {
    GpuPreemptionTest::SetUp();
    // n's GPU 0: two priority-1 halves; GPU 1: one slice of a priority above the preemptor's.
    AddBound("a1", 1, "n", 1, 0, 8000);
    AddBound("a2", 1, "n", 1, 0, 8000);
    AddBound("b", 200, "n", 1, 1, 12000);
  }

  GpuPreemptorDeps Deps() {
    GpuPreemptorDeps deps;
    deps.state = state_.get();
    deps.clock = &clock_;
    deps.is_leader = [this] { return leader_; };
    deps.get_pod = [this](const std::string& ns, const std::string& name) { return Lookup(ns, name); };
    deps.list_disruption_budgets = [this]() -> Result<std::vector<Json>> {
      if (!budgets_error_.empty()) return Error{budgets_error_};
      return std::vector<Json>{};
    };
    deps.read_pod = [this](const std::string& ns, const std::string& name) -> kube::ApiResult<Json> {
      auto it = pods_.find(ns + "/" + name);
      if (it == pods_.end()) return kube::ApiError{404, "NotFound", "pods \"" + name + "\" not found"};
      return it->second;
    };
    deps.patch_pod_status = [this](const std::string& ns, const std::string& name,
                                   const Json& patch) -> kube::ApiResult<Json> {
      calls_.push_back("patch " + ns + "/" + name + " " + patch["status"].dump());
      auto it = pods_.find(ns + "/" + name);
      if (it == pods_.end()) return kube::ApiError{404, "NotFound", "not found"};
      it->second["status"].update(patch["status"]);
      return it->second;
    };
    deps.delete_pod = [this](const std::string& ns, const std::string& name) -> kube::ApiStatus {
      calls_.push_back("delete " + ns + "/" + name);
      if (name == fail_delete_) return kube::ApiError{500, "InternalError", "etcd is unavailable"};
      auto it = pods_.find(ns + "/" + name);
      if (it == pods_.end()) return kube::ApiError{404, "NotFound", "not found"};
      state_->DeletePod(it->second);
      pods_.erase(it);
      return kube::ApiStatus::Ok();
    };
    deps.record_event = [this](const Json& pod, const std::string& reason, const std::string& message) {
      events_.push_back(pod["metadata"].value("name", "") + " " + reason + ": " + message);
    };
    return deps;
  }

  bool leader_ = true;
  std::string budgets_error_;
  std::string fail_delete_;
  std::vector<std::string> calls_;
  std::vector<std::string> events_;
};

TEST_F(PreemptorTest, DeletesTheVictimsNominatesThePodAndSaysWhy) {
  GpuPreemptor preemptor(Deps(), {});
  Json pre = Preemptor(16000);  // a whole GPU: both halves of GPU 0 must go
  auto outcome = preemptor.Attempt(pre, Request(pre), {"n"});
  ASSERT_EQ(outcome.kind, GpuPreemptor::Outcome::Kind::kPreempted) << outcome.message;
  EXPECT_EQ(pods_.count("d/a1") + pods_.count("d/a2"), 0u);
  EXPECT_EQ(pods_.count("d/b"), 1u);
  // Nominated first, then each victim marked and deleted.
  ASSERT_EQ(calls_.size(), 5u);
  EXPECT_EQ(calls_[0], R"(patch d/pre {"nominatedNodeName":"n"})");
  EXPECT_NE(calls_[1].find("patch d/a1"), std::string::npos);
  EXPECT_NE(calls_[1].find(R"("reason":"PreemptionByScheduler")"), std::string::npos) << calls_[1];
  EXPECT_NE(calls_[1].find(R"("type":"DisruptionTarget")"), std::string::npos);
  EXPECT_EQ(calls_[2], "delete d/a1");
  EXPECT_EQ(calls_[4], "delete d/a2");
  EXPECT_EQ(pods_["d/pre"]["status"]["nominatedNodeName"], "n");
  EXPECT_EQ(state_->HoldCount(), 1u);
  ASSERT_EQ(events_.size(), 3u);
  EXPECT_EQ(events_[0].rfind("a1 Preempted: Preempted by pod uid-pre on node n", 0), 0u) << events_[0];
  EXPECT_EQ(events_[2].rfind("pre Preempting:", 0), 0u) << events_[2];
  EXPECT_NE(events_[2].find("d/a1 (priority 1), d/a2 (priority 1)"), std::string::npos) << events_[2];
  EXPECT_EQ(preemptor.counters().victims, 2u);
  EXPECT_EQ(preemptor.counters().preemptions, 1u);
}

TEST_F(PreemptorTest, ClearsTheNominationOfLowerPriorityPodsOnThatNode) {
  Json low = GpuPod("d", "nominee", 1, 4000, 10);
  low["spec"]["priority"] = 50;
  pods_["d/nominee"] = low;
  state_->SetHold("d/nominee", "n", Request(low), 50, std::chrono::minutes(5));
  Json high = GpuPod("d", "other", 1, 4000, 10);
  pods_["d/other"] = high;
  state_->SetHold("d/other", "n", Request(high), 300, std::chrono::minutes(5));
  GpuPreemptor preemptor(Deps(), {});
  Json pre = Preemptor(12000);
  ASSERT_EQ(preemptor.Attempt(pre, Request(pre), {"n"}).kind, GpuPreemptor::Outcome::Kind::kPreempted);
  EXPECT_EQ(calls_.back(), R"(patch d/nominee {"nominatedNodeName":null})");
  EXPECT_EQ(std::count(calls_.begin(), calls_.end(), R"(patch d/other {"nominatedNodeName":null})"), 0);
}

TEST_F(PreemptorTest, NotTwiceWhileTheVictimsAreStillThere) {
  GpuPreemptor preemptor(Deps(), {});
  Json pre = Preemptor(16000);
  // The first attempt's victims are deleted but still seen (terminating).
  auto keep = pods_;
  ASSERT_EQ(preemptor.Attempt(pre, Request(pre), {"n"}).kind, GpuPreemptor::Outcome::Kind::kPreempted);
  pods_["d/a1"] = keep["d/a1"];
  pods_["d/a1"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  calls_.clear();
  auto again = preemptor.Attempt(pre, Request(pre), {"n"});
  EXPECT_EQ(again.kind, GpuPreemptor::Outcome::Kind::kSkipped);
  EXPECT_NE(again.message.find("pod d/a1, preempted for it before, is still terminating"), std::string::npos)
      << again.message;
  EXPECT_TRUE(calls_.empty());
}

TEST_F(PreemptorTest, NeverForAPodThatMayNotPreemptOrOnAFollower) {
  GpuPreemptor preemptor(Deps(), {});
  Json never = Preemptor(16000);
  never["spec"]["preemptionPolicy"] = "Never";
  EXPECT_EQ(preemptor.Attempt(never, Request(never), {"n"}).kind, GpuPreemptor::Outcome::Kind::kSkipped);
  leader_ = false;
  Json pre = Preemptor(16000);
  EXPECT_EQ(preemptor.Attempt(pre, Request(pre), {"n"}).kind, GpuPreemptor::Outcome::Kind::kSkipped);
  EXPECT_TRUE(calls_.empty());
  EXPECT_EQ(pods_.size(), 4u);
}

TEST_F(PreemptorTest, BudgetsThatCannotBeListedStopTheAttempt) {
  budgets_error_ = "connection refused";
  GpuPreemptor preemptor(Deps(), {});
  Json pre = Preemptor(16000);
  auto outcome = preemptor.Attempt(pre, Request(pre), {"n"});
  EXPECT_EQ(outcome.kind, GpuPreemptor::Outcome::Kind::kFailed);
  EXPECT_NE(outcome.message.find("PodDisruptionBudgets could not be listed (connection refused)"),
            std::string::npos);
  EXPECT_TRUE(calls_.empty());
}

TEST_F(PreemptorTest, ADeleteFailingMidwayStopsAndWithdrawsTheNomination) {
  fail_delete_ = "a2";
  GpuPreemptor preemptor(Deps(), {});
  Json pre = Preemptor(16000);
  log::Capture capture;
  auto outcome = preemptor.Attempt(pre, Request(pre), {"n"});
  ASSERT_EQ(outcome.kind, GpuPreemptor::Outcome::Kind::kFailed);
  EXPECT_EQ(outcome.message, "cannot delete victim d/a2: etcd is unavailable");
  EXPECT_EQ(pods_.count("d/a1"), 0u);  // deleted before the failure
  EXPECT_EQ(pods_.count("d/a2"), 1u);
  EXPECT_EQ(pods_.count("d/b"), 1u);  // never a victim
  EXPECT_TRUE(pods_["d/pre"]["status"]["nominatedNodeName"].is_null());
  EXPECT_EQ(calls_.back(), R"(patch d/pre {"nominatedNodeName":null})");
  EXPECT_EQ(state_->HoldCount(), 0u);
  auto lines = capture.Matching("gpu preemption failed");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("deleted=d/a1"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("not_deleted=d/a2"), std::string::npos) << lines[0];
  // No event on the preemptor claims a preemption that did not happen.
  for (const std::string& e : events_) EXPECT_EQ(e.find("Preempting"), std::string::npos) << e;
  EXPECT_EQ(preemptor.counters().failures, 1u);
}

TEST_F(PreemptorTest, OnUnschedulableRunsOnePodAtMostOncePerRetryPeriod) {
  GpuPreemptionOptions options;
  options.pod_retry = std::chrono::seconds(10);
  GpuPreemptor preemptor(Deps(), options);
  preemptor.Start();
  auto wait_idle = [&] {
    for (int i = 0; i < 500 && !preemptor.Idle(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return preemptor.Idle();
  };
  Json big = Preemptor(20000);  // helps nowhere: an attempt that preempts nothing
  preemptor.OnUnschedulable(big, Request(big), {"n"});
  ASSERT_TRUE(wait_idle());
  EXPECT_EQ(preemptor.counters().attempts, 1u);
  EXPECT_EQ(preemptor.counters().not_helpful, 1u);
  preemptor.OnUnschedulable(big, Request(big), {"n"});  // too soon
  ASSERT_TRUE(wait_idle());
  EXPECT_EQ(preemptor.counters().attempts, 1u);
  clock_.Advance(std::chrono::seconds(11));
  preemptor.OnUnschedulable(big, Request(big), {"n"});
  ASSERT_TRUE(wait_idle());
  EXPECT_EQ(preemptor.counters().attempts, 2u);
  preemptor.Stop();
  EXPECT_EQ(pods_.size(), 4u);
}

TEST_F(PreemptorTest, DisabledDoesNothing) {
  GpuPreemptionOptions options;
  options.enabled = false;
  GpuPreemptor preemptor(Deps(), options);
  preemptor.Start();
  Json pre = Preemptor(16000);
  preemptor.OnUnschedulable(pre, Request(pre), {"n"});
  EXPECT_TRUE(preemptor.Idle());
  EXPECT_EQ(preemptor.counters().requested, 0u);
  EXPECT_EQ(pods_.size(), 4u);
}

}  // namespace
}  // namespace tessera::scheduler
