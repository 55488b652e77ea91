// tessera-scheduler end to end against the API-server stand-in.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "fixture.h"
#include "kube/typed_api.h"
#include "scheduler/webhook.h"
#include "testing/process.h"

namespace tessera::scheduler::it {
namespace {

// Usage per GPU as the scheduler's state has it equals the sum of the pods'
// annotations in the API (after reservations have drained).
std::vector<std::string> StateMatchesApi(const ClusterState& state,
                                         const ::tessera::testing::FakeApiServer& server,
                                         const std::vector<std::string>& nodes) {
  std::map<std::string, core::GpuUsage> from_api;
  for (const Json& pod : server.ListObjects("pods")) {
    auto ann = pod["metadata"].value("annotations", Json::object());
    if (!ann.contains("tessera.io/allocation")) continue;
    std::string phase = pod.contains("status") ? pod["status"].value("phase", "") : "";
    if (phase == "Succeeded" || phase == "Failed") continue;
    auto alloc = core::DecodeAllocation(ann["tessera.io/allocation"].get<std::string>());
    if (!alloc.ok()) continue;
    for (const auto& c : alloc->containers) {
      for (const auto& d : c.devices) {
        from_api[d.uuid].memory_mib += d.memory_mib;
        from_api[d.uuid].cores += d.cores;
        from_api[d.uuid].slots += 1;
      }
    }
  }
  std::vector<std::string> diffs;
  for (const std::string& name : nodes) {
    auto node = state.Node(name);
    if (!node) {
      diffs.push_back("state lacks " + name);
      continue;
    }
    for (const auto& g : node->gpus()) {
      const core::GpuUsage& want = from_api[g.gpu.uuid];
      if (g.used.memory_mib != want.memory_mib || g.used.cores != want.cores || g.used.slots != want.slots) {
        diffs.push_back(g.gpu.uuid + ": state " + std::to_string(g.used.memory_mib) + " MiB/" +
                        std::to_string(g.used.cores) + "%/" + std::to_string(g.used.slots) + " slots, API " +
                        std::to_string(want.memory_mib) + "/" + std::to_string(want.cores) + "/" +
                        std::to_string(want.slots));
      }
    }
  }
  return diffs;
}

// Schedules pods [0, count) with `workers` threads; a pod is retried after an
// error (a bind that lost a race, a scheduler that went away) until it binds
// or is unschedulable. `port` may change while running.
struct RunResult {
  std::atomic<int> bound{0};
  std::atomic<int> unschedulable{0};
  std::atomic<int> errors{0};
  std::mutex mu;
  std::vector<std::string> unbound;
  std::string last_error;
};

void RunPods(const std::vector<Json>& pods, const std::vector<std::string>& nodes, std::atomic<int>& port,
             int workers, RunResult& result, std::atomic<int>* progress = nullptr) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < pods.size(); i = next++) {
        bool done = false;
        for (int attempt = 0; attempt < 400 && !done; ++attempt) {
          Attempt a = ScheduleOnce(port.load(), pods[i], nodes);
          if (a.outcome == Outcome::kBound) {
            ++result.bound;
            if (progress) ++*progress;
            done = true;
          } else if (a.outcome == Outcome::kUnschedulable) {
            ++result.unschedulable;
            std::lock_guard lock(result.mu);
            result.unbound.push_back(pods[i]["metadata"]["name"]);
            done = true;
          } else {
            ++result.errors;
            {
              std::lock_guard lock(result.mu);
              result.last_error = a.message;
            }
            // A pod may already be bound by a bind whose answer was lost.
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST_F(SchedulerIntegrationTest, EndpointsAnswerOverHttp) {
  auto nodes = AddNodes(1, 2, 81920, 10);
  scheduler_ = StartScheduler(Config());
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().nodes == 1; }));
  httplib::Client http("127.0.0.1", scheduler_->port());
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto ready = http.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  auto garbage = http.Post("/filter", "{not json", "application/json");
  ASSERT_TRUE(garbage);
  EXPECT_EQ(garbage->status, 400);
  EXPECT_NE(Json::parse(garbage->body)["Error"].get<std::string>().find("not valid JSON"), std::string::npos);

  // The webhook knows the largest GPU from the node inventory.
  Json review = {
      {"apiVersion", "admission.k8s.io/v1"},
      {"kind", "AdmissionReview"},
      {"request", {{"uid", "u-1"}, {"object", scheduler::testing::GpuPod("default", "big", 1, 90000, 10)}}}};
  auto mutate = http.Post("/mutate", review.dump(), "application/json");
  ASSERT_TRUE(mutate);
  Json answer = Json::parse(mutate->body);
  EXPECT_EQ(answer["response"]["uid"], "u-1");
  EXPECT_EQ(answer["response"]["allowed"], false);
  EXPECT_NE(answer["response"]["status"]["message"].get<std::string>().find("81920"), std::string::npos);

  Json pod = AddPod("p", 1, 1000, 10);
  Attempt a = ScheduleOnce(scheduler_->port(), pod, nodes);
  EXPECT_EQ(a.outcome, Outcome::kBound) << a.message;
  auto bound = server_->GetObject("pods", "default", "p");
  ASSERT_TRUE(bound);
  EXPECT_EQ((*bound)["spec"]["nodeName"], "node-0");
  EXPECT_TRUE((*bound)["metadata"]["annotations"].contains("tessera.io/allocation"));

  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("tessera_scheduler_binds_total 1"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("tessera_scheduler_nodes 1"), std::string::npos);
}

TEST_F(SchedulerIntegrationTest, NodeWithAStaleInventoryIsRefusedUntilItsAgentWritesAgain) {
  // node-1's agent last wrote ten minutes ago (the scheduler's default
  // inventoryStaleSeconds is 120); node-0's inventory is fresh.
  const auto old = std::chrono::system_clock::now() - std::chrono::minutes(10);
  ASSERT_TRUE(server_->CreateObject("nodes", scheduler::testing::NodeWithGpus("node-0", 1, 1, 81920)).ok());
  ASSERT_TRUE(server_
                  ->CreateObject("nodes", scheduler::testing::NodeWithGpus(
                                              "node-1", 2, 1, 81920, 10, "NVIDIA A100-SXM4-80GB",
                                              scheduler::testing::Heartbeat(old)))
                  .ok());
  scheduler_ = StartScheduler(Config());
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().nodes == 2; }));
  httplib::Client http("127.0.0.1", scheduler_->port());
  const std::vector<std::string> nodes = {"node-0", "node-1"};
  Json args = {{"Pod", scheduler::testing::GpuPod("default", "p", 1, 1000, 10)},
               {"Nodes", nullptr},
               {"NodeNames", nodes}};
  auto filter = http.Post("/filter", args.dump(), "application/json");
  ASSERT_TRUE(filter);
  Json answer = Json::parse(filter->body);
  EXPECT_EQ(answer["NodeNames"], Json::array({"node-0"}));
  const std::string reason = answer["FailedNodes"].value("node-1", "");
  EXPECT_NE(reason.find("GPU inventory is stale: last heartbeat " + scheduler::testing::Heartbeat(old)),
            std::string::npos)
      << filter->body;
  EXPECT_NE(reason.find("is tessera-node running on this node?"), std::string::npos) << reason;
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("tessera_scheduler_nodes_stale_inventory 1"), std::string::npos)
      << metrics->body;

  // The agent writes again (a fresh heartbeat, same GPUs): node-1 is back.
  kube::CurlTransportOptions t;
  t.server = server_->url();
  kube::Client client(std::make_shared<kube::CurlTransport>(t), kube::ClientOptions{});
  Json fresh = scheduler::testing::NodeWithGpus("node-1", 2, 1, 81920);
  const std::string key(core::kInventoryAnnotation);
  ASSERT_TRUE(
      kube::NodesApi(&client)
          .PatchAnnotations("node-1", {{key, fresh["metadata"]["annotations"][key].get<std::string>()}})
          .ok());
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().nodes_stale == 0; }));
  filter = http.Post("/filter", args.dump(), "application/json");
  ASSERT_TRUE(filter);
  EXPECT_EQ(Json::parse(filter->body)["NodeNames"], Json::array({"node-0", "node-1"})) << filter->body;
  metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("tessera_scheduler_nodes_stale_inventory 0"), std::string::npos)
      << metrics->body;
}

TEST_F(SchedulerIntegrationTest, TwoHundredPodsOverTwentyNodesWithConcurrentBinds) {
  // 20 nodes x 2 GPUs (40000 MiB, 4 slots): room for fewer than 200 pods, so
  // the last binds race for the last slots.
  auto nodes = AddNodes(20, 2, 40000, 4);
  scheduler_ = StartScheduler(Config());
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().nodes == 20; }));
  std::vector<Json> pods;
  for (int i = 0; i < 200; ++i) {
    pods.push_back(i % 4 == 0 ? AddPod("pod-" + std::to_string(i), 2, 15000, 40)
                              : AddPod("pod-" + std::to_string(i), 1, 10000, 25));
  }
  std::atomic<int> port{scheduler_->port()};
  RunResult result;
  RunPods(pods, nodes, port, 8, result);
  EXPECT_EQ(result.bound + result.unschedulable, 200) << result.last_error;
  int bound = 0;
  auto problems = CheckNoOvercommit(*server_, &bound);
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(bound, result.bound.load());
  EXPECT_GE(bound, 60);
  // Once the informer has seen every binding, the state equals the API, and a
  // pod left out really does not fit anywhere.
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().reservations == 0; }));
  auto diffs = StateMatchesApi(scheduler_->state(), *server_, nodes);
  EXPECT_TRUE(diffs.empty()) << diffs.front();
  for (const std::string& name : result.unbound) {
    auto pod = server_->GetObject("pods", "default", name);
    ASSERT_TRUE(pod);
    EXPECT_EQ(ScheduleOnce(scheduler_->port(), *pod, nodes).outcome, Outcome::kUnschedulable) << name;
  }
  EXPECT_EQ(scheduler_->state().Stats().inconsistent, 0u);
}

pid_t SpawnScheduler(const std::string& api, int port) {
  std::vector<std::string> args = {TESSERA_SCHEDULER_BIN,
                                   "--api-server",
                                   api,
                                   "--port",
                                   std::to_string(port),
                                   "--leader-elect",
                                   "false",
                                   "--set",
                                   "kube.timeoutSeconds=2",
                                   "--set",
                                   "reservationTimeoutSeconds=4",
                                   "--set",
                                   "dashboard.enabled=false"};  // its fixed port: see SchedulerBinary
  return ::tessera::testing::Spawn({.argv = args});
}

bool WaitReady(int port) {
  return WaitFor([port] {
    httplib::Client http("127.0.0.1", port);
    http.set_connection_timeout(1);
    auto r = http.Get("/readyz");
    return r && r->status == 200;
  });
}

TEST_F(SchedulerIntegrationTest, KilledSchedulerRestartsFromTheApiWithoutDoubleBooking) {
  auto nodes = AddNodes(20, 2, 40000, 4);
  std::vector<Json> pods;
  for (int i = 0; i < 200; ++i) {
    pods.push_back(i % 4 == 0 ? AddPod("pod-" + std::to_string(i), 2, 15000, 40)
                              : AddPod("pod-" + std::to_string(i), 1, 10000, 25));
  }
  int first_port = FreePort();
  pid_t first = SpawnScheduler(server_->url(), first_port);
  ASSERT_GT(first, 0);
  ASSERT_TRUE(WaitReady(first_port));
  std::atomic<int> port{first_port};
  std::atomic<int> progress{0};
  RunResult result;
  std::thread runner([&] { RunPods(pods, nodes, port, 8, result, &progress); });
  // Kill it (SIGKILL: no clean shutdown) while binds are in flight.
  bool mid_run = WaitFor([&] { return progress.load() >= 60; });
  kill(first, SIGKILL);
  int status = 0;
  waitpid(first, &status, 0);
  int second_port = FreePort();
  pid_t second = SpawnScheduler(server_->url(), second_port);
  ASSERT_GT(second, 0);
  bool ready = WaitReady(second_port);
  port = second_port;
  runner.join();
  // The restarted scheduler's view leaves no usable room behind: every pod
  // left out is still unschedulable against it.
  std::vector<std::string> still_fits;
  for (const std::string& name : result.unbound) {
    auto pod = server_->GetObject("pods", "default", name);
    if (pod && ScheduleOnce(second_port, *pod, nodes).outcome != Outcome::kUnschedulable)
      still_fits.push_back(name);
  }
  kill(second, SIGTERM);
  waitpid(second, &status, 0);
  EXPECT_TRUE(still_fits.empty()) << still_fits.front();
  ASSERT_TRUE(mid_run);
  ASSERT_TRUE(ready);
  EXPECT_EQ(result.bound + result.unschedulable, 200) << result.last_error;
  int bound = 0;
  auto problems = CheckNoOvercommit(*server_, &bound);
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_GE(bound, 60);  // at least the binds made before the kill
  // Every pod the API shows bound was reported bound by exactly one bind.
  EXPECT_LE(bound, result.bound.load() + 8);  // a bind killed mid-flight may land without an answer
}

TEST_F(SchedulerIntegrationTest, ApiServerFaultsGiveClearErrorsAndWorkResumes) {
  auto nodes = AddNodes(2, 1, 40000, 4);
  SchedulerConfig config = Config();
  scheduler_ = StartScheduler(config);
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().nodes == 2; }));
  std::vector<Json> pods;
  for (int i = 0; i < 8; ++i) pods.push_back(AddPod("pod-" + std::to_string(i), 1, 10000, 25));
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().nodes == 2; }));

  // 1. Unreachable: filter still answers from the cache, bind says why it failed.
  server_->Stop();
  Attempt a = ScheduleOnce(scheduler_->port(), pods[0], nodes);
  EXPECT_EQ(a.outcome, Outcome::kError);
  EXPECT_NE(a.message.find("bind default/pod-0"), std::string::npos) << a.message;
  ASSERT_TRUE(server_->Start().ok());
  ASSERT_TRUE(
      WaitFor([&] { return ScheduleOnce(scheduler_->port(), pods[0], nodes).outcome == Outcome::kBound; }));

  // The next POST of a Binding meets `kind` of fault.
  using Kind = ::tessera::testing::Fault::Kind;
  auto on_next_binding = [](Kind kind) {
    ::tessera::testing::Fault fault;
    fault.kind = kind;
    fault.method = "POST";
    fault.path_contains = "/binding";
    fault.times = 1;
    return fault;
  };

  // 2. Garbage instead of the Binding's answer.
  server_->AddFault(on_next_binding(Kind::kGarbage));
  a = ScheduleOnce(scheduler_->port(), pods[1], nodes);
  EXPECT_EQ(a.outcome, Outcome::kError);
  EXPECT_NE(a.message.find("bind default/pod-1"), std::string::npos) << a.message;

  // 3. Slow: the Binding takes longer than the client waits (it lands anyway).
  ::tessera::testing::Fault slow = on_next_binding(Kind::kDelay);
  slow.delay = std::chrono::milliseconds(3000);
  server_->AddFault(slow);
  a = ScheduleOnce(scheduler_->port(), pods[2], nodes);
  EXPECT_EQ(a.outcome, Outcome::kError);

  // 4. Garbage on the watch streams: the informers recover by themselves.
  ::tessera::testing::Fault watch_garbage;
  watch_garbage.kind = Kind::kGarbage;
  watch_garbage.applies_to = ::tessera::testing::Fault::Applies::kWatchOnly;
  watch_garbage.times = 2;
  server_->AddFault(watch_garbage);
  server_->DropWatches();

  // 5. A 500 on the Binding.
  ::tessera::testing::Fault broken = on_next_binding(Kind::kStatus);
  broken.status = 500;
  server_->AddFault(broken);
  a = ScheduleOnce(scheduler_->port(), pods[3], nodes);
  EXPECT_EQ(a.outcome, Outcome::kError);

  // Work resumes: every pod ends up bound (a retried pod whose earlier Binding
  // landed is refused as already bound and counts as bound).
  std::atomic<int> port{scheduler_->port()};
  RunResult result;
  RunPods(pods, nodes, port, 4, result);
  ASSERT_TRUE(WaitFor([&] {
    int bound = 0;
    (void)CheckNoOvercommit(*server_, &bound);
    return bound == 8;
  }));
  int bound = 0;
  auto problems = CheckNoOvercommit(*server_, &bound);
  EXPECT_TRUE(problems.empty()) << problems.front();
  // State is not corrupted: once reservations expire or are confirmed, it
  // equals what the API says.
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().reservations == 0; }));
  auto diffs = StateMatchesApi(scheduler_->state(), *server_, nodes);
  EXPECT_TRUE(diffs.empty()) << diffs.front();
  EXPECT_EQ(scheduler_->state().Stats().inconsistent, 0u);
}

}  // namespace
}  // namespace tessera::scheduler::it
