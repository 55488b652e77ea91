// The `tessera` policy's workload mix across a restart: a scheduler that saw
// the pods arrive and a fresh one that rebuilt its state from the API server
// hold the same mix and make the same choice.
#include "fixture.h"
#include "kube/typed_api.h"

namespace tessera::scheduler::it {
namespace {

// The node an extender answer scores 10 ("" when none).
std::string PrioritizeTen(int port, const Json& pod, const std::vector<std::string>& nodes) {
  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(5);
  http.set_read_timeout(60);
  Json args = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", nodes}};
  if (auto filter = http.Post("/filter", args.dump(), "application/json"); !filter)
    return "filter: no answer";
  auto prio = http.Post("/prioritize", args.dump(), "application/json");
  if (!prio) return "prioritize: no answer";
  for (const Json& h : Json::parse(prio->body)) {
    if (h["Score"] == 10) return h["Host"];
  }
  return "";
}

TEST_F(SchedulerIntegrationTest, RestartedSchedulerRelearnsTheMixFromTheApi) {
  auto nodes = AddNodes(12, 4, 40000, 8);
  SchedulerConfig config = Config();
  config.node_policy = "tessera";
  scheduler_ = StartScheduler(config);
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().nodes == 12; }));
  // 600 pods arrive one by one; kube-scheduler asks about each as it comes:
  // the first 40 are bound, the others stay pending (their filter only, as
  // if their turn had not come or nothing fitted). The live scheduler counts
  // each at its filter. The first 513 are mostly one shape and the rest
  // another, so the mix learned at the 513th pod depends on the order. Names
  // sort as the pods were created (creationTimestamp has whole seconds: ties
  // go by name).
  int bound = 0;
  httplib::Client http("127.0.0.1", scheduler_->port());
  http.set_connection_timeout(5);
  http.set_read_timeout(60);
  for (int i = 0; i < 600; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "pod-%04d", i);
    Json pod = i % 4 == 0 ? AddPod(name, 1, 6000, 10)
               : i < 513  ? AddPod(name, 1, 20000, 50)
                          : AddPod(name, 2, 30000, 100);
    ASSERT_TRUE(pod.contains("metadata"));
    if (i < 40) {
      Attempt a = ScheduleOnce(scheduler_->port(), pod, nodes);
      ASSERT_EQ(a.outcome, Outcome::kBound) << a.message;
      ++bound;
    } else {
      Json args = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", nodes}};
      auto filter = http.Post("/filter", args.dump(), "application/json");
      ASSERT_TRUE(filter && filter->status == 200);
    }
  }
  const WorkloadLearner& live = scheduler_->extender().learner();
  EXPECT_EQ(live.stats().counted, 600u);
  EXPECT_EQ(live.Current()->epoch(), 2u);  // learned at pods 1 and 513
  // Two pods end before the restart, both after the 513th: the live scheduler
  // counted them, the restarted one will not, and the mix (learned at the
  // 513th) does not depend on them.
  kube::CurlTransportOptions transport;
  transport.server = server_->url();
  auto client =
      std::make_shared<kube::Client>(std::make_shared<kube::CurlTransport>(transport), kube::ClientOptions{});
  kube::PodsApi pods(client.get());
  auto finished = server_->GetObject("pods", "default", "pod-0599");
  ASSERT_TRUE(finished);
  (*finished)["status"]["phase"] = "Succeeded";
  ASSERT_TRUE(pods.UpdateStatus("default", *finished).ok());
  ASSERT_TRUE(pods.Delete("default", "pod-0598").ok());
  // The live scheduler lets go of their UIDs.
  ASSERT_TRUE(WaitFor([&] { return live.stats().remembered == 598u; }));
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().pods == size_t(bound); }));

  // A fresh scheduler on the same API server: its state is what the API says.
  auto restarted = StartScheduler(config);
  ASSERT_TRUE(restarted->Ready());  // ready means the mix is rebuilt
  const WorkloadLearner& rebuilt = restarted->extender().learner();
  EXPECT_EQ(rebuilt.stats().counted, 598u);
  EXPECT_EQ(rebuilt.Current()->epoch(), live.Current()->epoch());
  const auto& want = live.Current()->mix();
  const auto& got = rebuilt.Current()->mix();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].shape, want[i].shape) << i;
    EXPECT_EQ(got[i].weight, want[i].weight) << i;
  }
  EXPECT_NE(restarted->MetricsText().find("tessera_scheduler_workload_pods_observed_total 598\n"),
            std::string::npos)
      << restarted->MetricsText();
  ASSERT_TRUE(WaitFor([&] { return restarted->state().Stats().pods == size_t(bound); }));
  // The same choice for new pods of several shapes, from both.
  int probes = 0;
  for (auto [gpus, memory, cores] :
       {std::tuple{1, 3000, 5}, std::tuple{1, 8000, 20}, std::tuple{1, 12000, 30}}) {
    Json pod = AddPod("probe-" + std::to_string(++probes), gpus, memory, cores);
    const std::string before = PrioritizeTen(scheduler_->port(), pod, nodes);
    const std::string after = PrioritizeTen(restarted->port(), pod, nodes);
    EXPECT_EQ(after, before) << pod["metadata"]["name"];
    EXPECT_NE(before, "") << pod["metadata"]["name"];
  }
  restarted->Stop();
}

}  // namespace
}  // namespace tessera::scheduler::it
