// A restarted tessera-scheduler decides nothing before its view is complete.
//
// The real binary, with leader election on, against the API-server stand-in:
// it binds a pod that fills a T4, is killed with SIGKILL (its Lease stays,
// naming it), and comes back with the same identity — as a container restart
// in the shipped Deployment does — while the API server answers 500 to every
// pod list. Until the pods are listed it must neither place nor bind (errors
// kube-scheduler retries, not "unschedulable" and not a decision), must not
// take its Lease back, and /readyz and the metrics must say why. Once the
// fault clears, the GPU is known to be full and nothing is double-booked.
#include "fixture.h"

namespace tessera::scheduler::it {
namespace {

using ::tessera::testing::Fault;

constexpr const char* kIdentity = "tessera-scheduler-0";

class SchedulerRestartTest : public SchedulerIntegrationTest {
 protected:
  void TearDown() override {
    binary_.Stop();
    SchedulerIntegrationTest::TearDown();
    if (HasFailure()) std::cerr << "tessera-scheduler log:\n" << Log() << std::endl;
  }

  // The tessera-scheduler binary, as the Deployment runs it.
  void StartBinary() {
    ASSERT_TRUE(binary_.Start(
        server_->url(),
        {"--leader-elect=true", "--identity=" + std::string(kIdentity),
         "--set=leaderElection.namespace=kube-system", "--set=leaderElection.leaseDurationSeconds=15",
         "--set=leaderElection.renewDeadlineSeconds=10", "--set=leaderElection.retryPeriodSeconds=1",
         "--set=inventoryStaleSeconds=0"}))
        << Log();
  }

  void KillBinary() { binary_.Kill(); }
  std::pair<int, std::string> Get(const std::string& path) const { return binary_.Get(path); }
  double Metric(const std::string& name) const { return binary_.Metric(name); }
  std::string Log() const { return binary_.Log(); }

  // The Lease's holder and transitions as the API server has them.
  std::pair<std::string, int> Lease() const {
    auto lease = server_->GetObject("leases", "kube-system", "tessera-scheduler");
    if (!lease) return {"", -1};
    const Json& spec = (*lease)["spec"];
    return {spec.value("holderIdentity", ""), spec.value("leaseTransitions", 0)};
  }

  // Failed pod lists so far (the informer's retries).
  size_t FailedPodLists() const {
    size_t n = 0;
    for (const auto& r : server_->Requests()) {
      if (r.method == "GET" && r.path == "/api/v1/pods" && !r.watch && r.status == 500) ++n;
    }
    return n;
  }

  ::tessera::testing::TempDir tmp_{"tessera-restart-test"};
  SchedulerBinary binary_{tmp_.Path("scheduler.log")};
  const int port_ = binary_.port();
};

Json UseGpu(const std::string& uuid) {
  return Json{{"nvidia.com/use-gpuuuid", uuid}};
}

TEST_F(SchedulerRestartTest, ARestartedSchedulerDecidesNothingBeforeItHasListedItsPods) {
  ASSERT_GT(port_, 0);
  auto r = server_->CreateObject("nodes", testing::NodeWithGpus("t4-node", 1, 1, 15360, 10, "Tesla T4"));
  ASSERT_TRUE(r.ok());
  const std::string t4 = testing::GpuUuid(1, 0);
  const std::vector<std::string> nodes = {"t4-node"};

  StartBinary();
  ASSERT_TRUE(WaitFor([&] { return Get("/readyz").first == 200 && Metric("tessera_scheduler_leader") == 1; }))
      << Log();
  auto p0 = server_->CreateObject("pods", testing::GpuPod("default", "p0", 1, 15000, 50, UseGpu(t4)));
  ASSERT_TRUE(p0.ok());
  Attempt first = ScheduleOnce(port_, *p0, nodes);
  ASSERT_EQ(first.outcome, Outcome::kBound) << first.message;
  ASSERT_EQ(Lease().first, kIdentity);
  const int transitions = Lease().second;

  // Killed: the Lease still names it. Pod lists fail while it comes back.
  KillBinary();
  // (On the watch too: the informer first asks for a streaming list.)
  server_->AddFault({Fault::Kind::kStatus, "GET", "/api/v1/pods", Fault::Applies::kAll, 500});
  server_->ClearRequests();
  StartBinary();
  // It has listed the nodes and failed to list the pods a few times.
  ASSERT_TRUE(WaitFor([&] { return FailedPodLists() >= 3; })) << Log();

  auto [ready_status, ready_body] = Get("/readyz");
  EXPECT_EQ(ready_status, 503);
  EXPECT_NE(ready_body.find("the pods are not listed yet"), std::string::npos) << ready_body;
  EXPECT_EQ(Metric("tessera_scheduler_ready"), 0);
  EXPECT_EQ(Metric("tessera_scheduler_leader"), 0) << "a replica without a complete view does not lead";
  EXPECT_EQ(Metric("tessera_scheduler_pods"), 0);

  // p1 asks for the same GPU: an error kube-scheduler retries, at every verb.
  auto p1 = server_->CreateObject("pods", testing::GpuPod("default", "p1", 1, 15000, 50, UseGpu(t4)));
  ASSERT_TRUE(p1.ok());
  httplib::Client http("127.0.0.1", port_);
  Json args = {{"Pod", *p1}, {"Nodes", nullptr}, {"NodeNames", nodes}};
  auto filter = http.Post("/filter", args.dump(), "application/json");
  ASSERT_TRUE(filter);
  Json filtered = Json::parse(filter->body);
  const std::string error = filtered.value("Error", "");
  EXPECT_NE(error.find("is not ready to decide: the pods are not listed yet"), std::string::npos) << error;
  EXPECT_TRUE(filtered["NodeNames"].is_null()) << filter->body;
  EXPECT_TRUE(filtered["FailedNodes"].empty()) << "not a false 'unschedulable': " << filter->body;
  auto prioritize = http.Post("/prioritize", args.dump(), "application/json");
  ASSERT_TRUE(prioritize);
  EXPECT_EQ(prioritize->status, 503);
  Json bind_args = {{"PodName", "p1"},
                    {"PodNamespace", "default"},
                    {"PodUID", (*p1)["metadata"]["uid"]},
                    {"Node", "t4-node"}};
  auto bind = http.Post("/bind", bind_args.dump(), "application/json");
  ASSERT_TRUE(bind);
  const std::string bind_error = Json::parse(bind->body).value("Error", "");
  EXPECT_NE(bind_error.find("is not ready to decide"), std::string::npos) << bind->body;
  EXPECT_FALSE(server_->GetObject("pods", "default", "p1")->contains("/spec/nodeName"_json_pointer));
  EXPECT_GE(Metric("tessera_scheduler_not_ready_refusals_total"), 3);
  EXPECT_EQ(Lease(), (std::pair<std::string, int>{kIdentity, transitions})) << "the Lease was not touched";

  // The fault clears: the view completes, the restarted process leads again
  // and p1 does not fit on the full T4.
  server_->ClearFaults();
  ASSERT_TRUE(WaitFor([&] { return Get("/readyz").first == 200 && Metric("tessera_scheduler_leader") == 1; }))
      << Log();
  EXPECT_EQ(Metric("tessera_scheduler_pods"), 1);
  Attempt second = ScheduleOnce(port_, *p1, nodes);
  EXPECT_EQ(second.outcome, Outcome::kUnschedulable) << second.message;
  EXPECT_NE(second.message.find("MiB free"), std::string::npos) << second.message;
  int bound = 0;
  EXPECT_TRUE(CheckNoOvercommit(*server_, &bound).empty());
  EXPECT_EQ(bound, 1);
  EXPECT_EQ(Metric("tessera_scheduler_inconsistent_annotations_total"), 0);
}

}  // namespace
}  // namespace tessera::scheduler::it
