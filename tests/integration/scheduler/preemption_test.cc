// Preemption on shared GPUs (issue 18 item 2) through the real Scheduler over
// HTTP against the API-server stand-in. A cluster full of low-priority slices;
// a high-priority pod that fits nowhere. The test plays kube-scheduler: it
// posts ExtenderPreemptionArgs to the preempt verb with the victims its
// DefaultPreemption would propose (every lower-priority pod of each node, as
// MetaVictims since the extender is nodeCacheCapable), then does what
// kube-scheduler does with the answer: picks a node, deletes the victims, sets
// the preemptor's status.nominatedNodeName, and schedules the pods again. It
// checks:
//  - the victims agreed are the minimal useful ones (the two slices of one GPU,
//    the lower-priority GPU's), a CPU pod kube-scheduler chose stays, a node
//    where nothing proposed makes room is left out, and a pod larger than any
//    GPU preempts nothing;
//  - a PodDisruptionBudget with no disruption left steers the choice to the
//    other GPU (0 violations reported), and when only guarded pods help the
//    violations are reported;
//  - while the preemptor is nominated, a lower-priority pod cannot take the
//    freed GPU (filter names the hold) but can use what the preemptor leaves;
//    the preemptor binds there, and its hold ends. That test writes the
//    nomination through the API (a status PATCH, as kube-scheduler does), so
//    tests/integration/security leaves it out of the calls it records.
// These tests switch off the scheduler's own GPU preemption
// (preemption.enabled), which would otherwise act on the pods they leave
// unschedulable. GpuPreemptionTest below covers it: there the test plays
// kube-scheduler with filter, prioritize and bind only, as kube-scheduler
// does when its own dry run finds no victims (GPU room is all that is short),
// and checks that the scheduler itself deletes the useful victims and
// nominates the pod, that the pod binds to the freed GPU while a
// lower-priority pod cannot take it, that nothing is preempted when it would
// not help, that a PodDisruptionBudget steers the choice, that a pod whose
// allocation annotation is corrupt is left alone, and that a delete the API
// server fails stops the attempt and withdraws the nomination.
#include "fixture.h"

#include "base/log.h"

namespace tessera::scheduler::it {
namespace {

constexpr int64_t kGpuMiB = 16384;

class PreemptionTest : public SchedulerIntegrationTest {
 protected:
  void SetUp() override {
    SchedulerIntegrationTest::SetUp();
    for (int n = 0; n < 2; ++n) {
      ASSERT_TRUE(server_->CreateObject("nodes", testing::NodeWithGpus(Node(n), n + 1, 2, kGpuMiB, 10)).ok());
    }
    // A node whose one GPU is too small for the preemptor whatever goes.
    ASSERT_TRUE(server_->CreateObject("nodes", testing::NodeWithGpus("small", 9, 1, 8192, 10)).ok());
    SchedulerConfig config = Config();
    config.preemption.enabled = gpu_preemption_;
    scheduler_ = StartScheduler(config);
    kube::ClientOptions o;
    o.qps = 0;
    client_ = ::tessera::testing::ClientOfApiServer(server_->url(), o, std::chrono::milliseconds(2000));
  }

  static std::string Node(int n) { return "node-" + std::to_string(n); }

  // The PodDisruptionBudget "guard": pods labelled app=guarded, no disruption left.
  bool CreateGuardBudget() {
    return server_
        ->CreateObject("poddisruptionbudgets", Json::parse(R"({"metadata":{"name":"guard","namespace":
                    "default"},"spec":{"selector":{"matchLabels":{"app":"guarded"}}},
                    "status":{"disruptionsAllowed":0}})"))
        .ok();
  }

  // A GPU pod of `priority` asking `memory_mib` on one GPU, pinned to GPU
  // `gpu` of node `node_id` when gpu >= 0.
  Json Pod(const std::string& name, int32_t priority, int64_t memory_mib, int node_id = -1, int gpu = -1,
           const Json& labels = Json::object()) {
    Json annotations = Json::object();
    if (gpu >= 0) annotations["nvidia.com/use-gpuuuid"] = testing::GpuUuid(node_id, gpu);
    Json pod = testing::GpuPod("default", name, 1, memory_mib, 10, annotations);
    pod["spec"]["priority"] = priority;
    if (!labels.empty()) pod["metadata"]["labels"] = labels;
    return pod;
  }

  // Creates and schedules `pod` on `nodes`; the created object (with its UID).
  Json Place(const Json& pod, const std::vector<std::string>& nodes, Outcome expected = Outcome::kBound) {
    auto created = server_->CreateObject("pods", pod);
    EXPECT_TRUE(created.ok());
    if (!created.ok()) return Json();
    Attempt a = ScheduleOnce(scheduler_->port(), *created, nodes);
    EXPECT_EQ(a.outcome, expected) << pod["metadata"]["name"] << ": " << a.message;
    return *created;
  }

  std::string Uid(const std::string& name) const {
    auto pod = server_->GetObject("pods", "default", name);
    return pod ? (*pod)["metadata"].value("uid", "") : "";
  }

  // Fills node n's GPU 0 with two slices of priority `p0`, GPU 1 with two of `p1`.
  void Fill(int n, int32_t p0, int32_t p1, const Json& labels1 = Json::object()) {
    for (int gpu = 0; gpu < 2; ++gpu) {
      for (const char* half : {"a", "b"}) {
        const std::string name = "low-" + std::to_string(n) + "-" + std::to_string(gpu) + half;
        Place(Pod(name, gpu == 0 ? p0 : p1, 8000, n + 1, gpu, gpu == 1 ? labels1 : Json::object()),
              {Node(n)});
      }
    }
  }

  // What kube-scheduler posts: every lower-priority pod bound on each node.
  Json PreemptArgs(const Json& preemptor, const std::map<std::string, std::vector<std::string>>& victims) {
    Json map = Json::object();
    for (const auto& [node, names] : victims) {
      Json pods = Json::array();
      for (const std::string& name : names) pods.push_back({{"UID", Uid(name)}});
      map[node] = {{"Pods", pods}, {"NumPDBViolations", 0}};
    }
    return {{"Pod", preemptor}, {"NodeNameToVictims", nullptr}, {"NodeNameToMetaVictims", map}};
  }

  std::pair<int, Json> Preempt(const Json& args) {
    httplib::Client http("127.0.0.1", scheduler_->port());
    http.set_connection_timeout(5);
    http.set_read_timeout(30);
    auto res = http.Post("/preempt", args.dump(), "application/json");
    if (!res) return {0, Json()};
    return {res->status, Json::parse(res->body, nullptr, false)};
  }

  // The UIDs agreed on `node`, as names.
  std::set<std::string> Agreed(const Json& result, const std::string& node) {
    std::set<std::string> names;
    const Json& map = result["NodeNameToMetaVictims"];
    if (!map.contains(node)) return names;
    for (const Json& p : map[node]["Pods"]) {
      for (const Json& pod : server_->ListObjects("pods")) {
        if (pod["metadata"].value("uid", "") == p["UID"]) names.insert(pod["metadata"]["name"]);
      }
    }
    return names;
  }

  std::shared_ptr<kube::Client> client_;
  bool gpu_preemption_ = false;  // preemption.enabled
};

TEST_F(PreemptionTest, TrimsToTheMinimalUsefulVictims) {
  Fill(0, /*p0=*/5, /*p1=*/1);
  Fill(1, /*p0=*/5, /*p1=*/1, {{"app", "guarded"}});
  Place(Pod("small-a", 1, 6000), {"small"});
  // A CPU pod kube-scheduler may choose for CPU or memory (no GPU, no allocation).
  ASSERT_TRUE(server_
                  ->CreateObject("pods", Json::parse(R"({"metadata":{"name":"cpu-0","namespace":"default"},
                    "spec":{"nodeName":"node-0","priority":0,"containers":[{"name":"c","image":"busybox"}]}})"))
                  .ok());
  // Nothing is left for guarded pods to lose.
  ASSERT_TRUE(CreateGuardBudget());
  const std::vector<std::string> all = {"node-0", "node-1", "small"};

  Json high = Place(Pod("high", 1000, 12000), all, Outcome::kUnschedulable);
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().pods >= 9; }));

  Json args = PreemptArgs(high, {{"node-0", {"low-0-0a", "low-0-0b", "low-0-1a", "low-0-1b", "cpu-0"}},
                                 {"node-1", {"low-1-0a", "low-1-0b", "low-1-1a", "low-1-1b"}},
                                 {"small", {"small-a"}}});
  auto [status, result] = Preempt(args);
  ASSERT_EQ(status, 200) << result.dump();
  // node-0: the two slices of the lower-priority GPU, and the CPU pod as proposed.
  EXPECT_EQ(Agreed(result, "node-0"), (std::set<std::string>{"low-0-1a", "low-0-1b", "cpu-0"}));
  EXPECT_EQ(result["NodeNameToMetaVictims"]["node-0"]["NumPDBViolations"], 0);
  // node-1: GPU 1's pods are guarded, so GPU 0's go although their priority is higher.
  EXPECT_EQ(Agreed(result, "node-1"), (std::set<std::string>{"low-1-0a", "low-1-0b"}));
  EXPECT_EQ(result["NodeNameToMetaVictims"]["node-1"]["NumPDBViolations"], 0);
  EXPECT_FALSE(result["NodeNameToMetaVictims"].contains("small")) << result.dump();

  // When only guarded pods are proposed, they are what helps, and the violations are reported.
  auto [guarded_status, guarded] = Preempt(PreemptArgs(high, {{"node-1", {"low-1-1a", "low-1-1b"}}}));
  ASSERT_EQ(guarded_status, 200);
  EXPECT_EQ(Agreed(guarded, "node-1"), (std::set<std::string>{"low-1-1a", "low-1-1b"}));
  EXPECT_EQ(guarded["NodeNameToMetaVictims"]["node-1"]["NumPDBViolations"],
            2);  // both, as kube-scheduler counts

  // A pod larger than any GPU: preempting would not help anywhere.
  Json huge = Place(Pod("huge", 2000, 20000), all, Outcome::kUnschedulable);
  auto [huge_status, none] = Preempt(PreemptArgs(
      huge, {{"node-0", {"low-0-0a", "low-0-0b", "low-0-1a"}}, {"node-1", {"low-1-0a", "low-1-1a"}}}));
  ASSERT_EQ(huge_status, 200);
  EXPECT_TRUE(none["NodeNameToMetaVictims"].empty()) << none.dump();
}

TEST_F(PreemptionTest, HoldsTheFreedRoomUntilThePreemptorBinds) {
  Fill(0, /*p0=*/5, /*p1=*/1);
  Fill(1, /*p0=*/5, /*p1=*/1);
  const std::vector<std::string> all = {"node-0", "node-1"};
  Json high = Place(Pod("high", 1000, 12000), all, Outcome::kUnschedulable);
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().pods == 8; }));
  auto [status, result] =
      Preempt(PreemptArgs(high, {{"node-0", {"low-0-0a", "low-0-0b", "low-0-1a", "low-0-1b"}}}));
  ASSERT_EQ(status, 200) << result.dump();
  ASSERT_EQ(Agreed(result, "node-0"), (std::set<std::string>{"low-0-1a", "low-0-1b"}));

  // kube-scheduler picks node-0: nominates the preemptor and deletes the victims.
  ASSERT_TRUE(client_
                  ->MergePatch(kube::resources::kPods, "default", "high",
                               {{"status", {{"nominatedNodeName", "node-0"}}}}, "status")
                  .ok());
  for (const std::string& victim : Agreed(result, "node-0")) {
    ASSERT_TRUE(server_->DeleteObject("pods", "default", victim).ok()) << victim;
  }
  ASSERT_TRUE(
      WaitFor([&] { return scheduler_->state().HoldCount() == 1 && scheduler_->state().Stats().pods == 6; }));

  // A lower-priority pod that would fit in the freed GPU does not get it.
  auto created = server_->CreateObject("pods", Pod("late", 10, 8000));
  ASSERT_TRUE(created.ok());
  Attempt late = ScheduleOnce(scheduler_->port(), *created, all);
  EXPECT_EQ(late.outcome, Outcome::kUnschedulable) << late.message;
  EXPECT_NE(late.message.find("held for a pod nominated there after preemption"), std::string::npos)
      << late.message;
  // What the preemptor leaves beside it is still given.
  Place(Pod("beside", 10, 4000), all);
  EXPECT_EQ(server_->GetObject("pods", "default", "beside").value()["spec"].value("nodeName", ""), "node-0");

  // The preemptor binds to its node, and the hold ends.
  Json nominated = server_->GetObject("pods", "default", "high").value();
  Attempt bound = ScheduleOnce(scheduler_->port(), nominated, all);
  ASSERT_EQ(bound.outcome, Outcome::kBound) << bound.message;
  EXPECT_EQ(bound.message, "node-0");
  EXPECT_TRUE(WaitFor([&] { return scheduler_->state().HoldCount() == 0; }));
  int pods = 0;
  EXPECT_TRUE(CheckNoOvercommit(*server_, &pods).empty());
}

TEST_F(PreemptionTest, MalformedArgumentsAreRefusedOverHttp) {
  auto [status, body] = Preempt(Json{{"NodeNameToMetaVictims", Json::object()}});
  EXPECT_EQ(status, 400);
  EXPECT_EQ(body.value("Error", ""), "ExtenderPreemptionArgs carries no Pod");
  EXPECT_EQ(scheduler_->state().HoldCount(), 0u);
}

// The scheduler's own GPU preemption, started by filter. No test code here
// writes through a tessera client: tests/integration/security records the
// scheduler's calls from these tests (delete pods, patch pods/status, create
// events).
class GpuPreemptionTest : public PreemptionTest {
 protected:
  GpuPreemptionTest() { gpu_preemption_ = true; }

  bool Exists(const std::string& name) const {
    return server_->GetObject("pods", "default", name).has_value();
  }

  std::string NominatedNode(const std::string& name) const {
    auto pod = server_->GetObject("pods", "default", name);
    if (!pod || !pod->contains("status")) return "";
    return (*pod)["status"].value("nominatedNodeName", "");
  }

  // The Events recorded on pod `name` with `reason`.
  std::vector<std::string> Events(const std::string& name, const std::string& reason) const {
    std::vector<std::string> out;
    for (const Json& e : server_->ListObjects("events")) {
      if (e["involvedObject"].value("name", "") == name && e.value("reason", "") == reason) {
        out.push_back(e.value("message", ""));
      }
    }
    return out;
  }

  GpuPreemptor& preemptor() { return scheduler_->preemptor(); }
};

TEST_F(GpuPreemptionTest, DeletesOnlyTheUsefulVictimsAndThePodBindsToTheFreedGpu) {
  Fill(0, /*p0=*/1, /*p1=*/5);
  Fill(1, /*p0=*/3, /*p1=*/3);
  // A pod whose allocation annotation is corrupt: tessera does not account it, and never deletes it.
  Json broken = Pod("broken", 0, 1000);
  broken["spec"]["nodeName"] = "node-0";
  broken["metadata"]["annotations"]["tessera.io/allocation"] = "{not json";
  ASSERT_TRUE(server_->CreateObject("pods", broken).ok());
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().pods == 8; }));
  const std::vector<std::string> all = {"node-0", "node-1", "small"};

  // Larger than any GPU: nothing would help, nothing is preempted.
  Place(Pod("huge", 2000, 20000), all, Outcome::kUnschedulable);
  ASSERT_TRUE(WaitFor([&] { return preemptor().counters().not_helpful >= 1 && preemptor().Idle(); }));
  EXPECT_EQ(preemptor().counters().victims, 0u);
  EXPECT_TRUE(NominatedNode("huge").empty());

  // Fits nowhere for GPU room only: the two priority-1 halves of node-0's GPU 0 go.
  Json high = Place(Pod("high", 1000, 12000), all, Outcome::kUnschedulable);
  ASSERT_TRUE(WaitFor([&] { return !Exists("low-0-0a") && !Exists("low-0-0b") && preemptor().Idle(); }));
  EXPECT_EQ(NominatedNode("high"), "node-0");
  for (const char* kept :
       {"low-0-1a", "low-0-1b", "low-1-0a", "low-1-0b", "low-1-1a", "low-1-1b", "broken"}) {
    EXPECT_TRUE(Exists(kept)) << kept;
  }
  EXPECT_EQ(preemptor().counters().victims, 2u);
  EXPECT_EQ(preemptor().counters().preemptions, 1u);
  // Why, on the victims and the preemptor.
  auto preempted = Events("low-0-0a", "Preempted");
  ASSERT_EQ(preempted.size(), 1u);
  EXPECT_NE(preempted[0].find("Preempted by pod " + high["metadata"].value("uid", "") + " on node node-0"),
            std::string::npos)
      << preempted[0];
  auto preempting = Events("high", "Preempting");
  ASSERT_EQ(preempting.size(), 1u);
  EXPECT_NE(preempting[0].find("default/low-0-0a (priority 1), default/low-0-0b (priority 1)"),
            std::string::npos)
      << preempting[0];
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().HoldCount() == 1; }));

  // Meanwhile a lower-priority pod that would fit in the freed GPU does not get it.
  auto late = server_->CreateObject("pods", Pod("late", 2, 8000));
  ASSERT_TRUE(late.ok());
  Attempt refused = ScheduleOnce(scheduler_->port(), *late, {"node-0", "node-1"});
  EXPECT_EQ(refused.outcome, Outcome::kUnschedulable) << refused.message;
  EXPECT_NE(refused.message.find("held for a pod nominated there after preemption"), std::string::npos)
      << refused.message;

  // kube-scheduler tries the pod again: it binds to the freed GPU.
  Attempt bound =
      ScheduleOnce(scheduler_->port(), server_->GetObject("pods", "default", "high").value(), all);
  ASSERT_EQ(bound.outcome, Outcome::kBound) << bound.message;
  EXPECT_EQ(bound.message, "node-0");
  auto allocation = core::DecodeAllocation(server_->GetObject("pods", "default", "high")
                                               .value()["metadata"]["annotations"]
                                               .value("tessera.io/allocation", ""));
  ASSERT_TRUE(allocation.ok());
  EXPECT_EQ(allocation->containers[0].devices[0].uuid, testing::GpuUuid(1, 0));
  EXPECT_TRUE(WaitFor([&] { return scheduler_->state().HoldCount() == 0; }));
  EXPECT_TRUE(Exists("late"));
  EXPECT_TRUE(preemptor().Idle());
  EXPECT_EQ(preemptor().counters().victims, 2u);  // late (priority 2) could preempt nothing
}

TEST_F(GpuPreemptionTest, AvoidsAVictimGuardedByAPodDisruptionBudget) {
  // node-0's GPU 0 holds the lowest priority, but its pods may not be disrupted.
  for (int gpu = 0; gpu < 2; ++gpu) {
    for (const char* half : {"a", "b"}) {
      const std::string name = "low-0-" + std::to_string(gpu) + half;
      Place(Pod(name, gpu == 0 ? 1 : 5, 8000, 1, gpu, gpu == 0 ? Json{{"app", "guarded"}} : Json::object()),
            {"node-0"});
    }
  }
  Fill(1, /*p0=*/3, /*p1=*/3);
  ASSERT_TRUE(CreateGuardBudget());
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().pods == 8; }));
  Place(Pod("high", 1000, 12000), {"node-0", "node-1"}, Outcome::kUnschedulable);
  ASSERT_TRUE(WaitFor([&] { return preemptor().counters().preemptions == 1 && preemptor().Idle(); }));
  EXPECT_EQ(NominatedNode("high"), "node-1");
  EXPECT_TRUE(Exists("low-0-0a"));
  EXPECT_TRUE(Exists("low-0-0b"));
  // One GPU of node-1 emptied: two priority-3 pods.
  const int gone = !Exists("low-1-0a") + !Exists("low-1-0b") + !Exists("low-1-1a") + !Exists("low-1-1b");
  EXPECT_EQ(gone, 2);
  EXPECT_TRUE((!Exists("low-1-0a") && !Exists("low-1-0b")) || (!Exists("low-1-1a") && !Exists("low-1-1b")));
}

TEST_F(GpuPreemptionTest, ADeleteTheApiServerFailsStopsTheAttemptAndWithdrawsTheNomination) {
  Fill(0, /*p0=*/1, /*p1=*/5);
  Fill(1, /*p0=*/5, /*p1=*/5);
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().pods == 8; }));
  ::tessera::testing::Fault fault;
  fault.method = "DELETE";
  fault.path_contains = "/pods/low-0-0b";
  fault.status = 500;
  server_->AddFault(fault);
  log::Capture capture;
  Place(Pod("high", 1000, 12000), {"node-0", "node-1"}, Outcome::kUnschedulable);
  ASSERT_TRUE(WaitFor([&] { return preemptor().counters().failures == 1 && preemptor().Idle(); }));
  server_->ClearFaults();
  EXPECT_FALSE(Exists("low-0-0a"));  // deleted before the failure
  EXPECT_TRUE(Exists("low-0-0b"));
  for (const char* kept : {"low-0-1a", "low-0-1b", "low-1-0a", "low-1-0b", "low-1-1a", "low-1-1b"}) {
    EXPECT_TRUE(Exists(kept)) << kept;
  }
  EXPECT_TRUE(NominatedNode("high").empty());
  EXPECT_TRUE(WaitFor([&] { return scheduler_->state().HoldCount() == 0; }));
  EXPECT_TRUE(Events("high", "Preempting").empty());
  auto lines = capture.Matching("gpu preemption failed");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("cannot delete victim default/low-0-0b"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("deleted=default/low-0-0a"), std::string::npos) << lines[0];
}

}  // namespace
}  // namespace tessera::scheduler::it
