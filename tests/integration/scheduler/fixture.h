// Shared set-up for scheduler integration tests: a FakeApiServer, a
// tessera-scheduler (the real Scheduler class, real HTTP listeners, real
// libcurl client) and a stand-in for kube-scheduler that calls the extender
// verbs over HTTP exactly as kube-scheduler does.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <thread>

#include "apiserver/fake_apiserver.h"
#include "base/testing.h"
#include "core/allocation_codec.h"
#include "core/inventory_codec.h"
#include "kube/client.h"
#include "kube/curl_transport.h"
#include "scheduler/scheduler.h"
#include "scheduler/testing.h"
#include "testing/ports.h"
#include "testing/process.h"
#include "testing/scheduler_in_process.h"

namespace tessera::scheduler::it {

using Json = nlohmann::json;

using ::tessera::testing::FreePort;
using ::tessera::testing::WaitFor;

enum class Outcome { kBound, kUnschedulable, kError };

struct Attempt {
  Outcome outcome = Outcome::kError;
  std::string message;
};

// One scheduling cycle as kube-scheduler runs it with the extender:
// filter (NodeNames) -> prioritize -> bind on the best-scoring node.
inline Attempt ScheduleOnce(int port, const Json& pod, const std::vector<std::string>& nodes) {
  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(5);
  http.set_tcp_nodelay(true);
  http.set_read_timeout(60);
  Json args = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", nodes}};
  auto filter = http.Post("/filter", args.dump(), "application/json");
  if (!filter) return {Outcome::kError, "filter: no answer"};
  Json fr = Json::parse(filter->body, nullptr, false);
  if (fr.is_discarded() || fr.value("Error", "") != "") return {Outcome::kError, "filter: " + filter->body};
  if (!fr["NodeNames"].is_array() || fr["NodeNames"].empty()) return {Outcome::kUnschedulable, fr.dump()};
  Json pargs = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", fr["NodeNames"]}};
  auto prio = http.Post("/prioritize", pargs.dump(), "application/json");
  if (!prio) return {Outcome::kError, "prioritize: no answer"};
  Json list = Json::parse(prio->body, nullptr, false);
  if (!list.is_array() || list.empty()) return {Outcome::kError, "prioritize: " + prio->body};
  std::string best;
  int best_score = -1;
  for (const Json& h : list) {
    if (h["Score"].get<int>() > best_score) {
      best_score = h["Score"];
      best = h["Host"];
    }
  }
  Json bargs = {{"PodName", pod["metadata"]["name"]},
                {"PodNamespace", pod["metadata"]["namespace"]},
                {"PodUID", pod["metadata"].value("uid", "")},
                {"Node", best}};
  auto bind = http.Post("/bind", bargs.dump(), "application/json");
  if (!bind) return {Outcome::kError, "bind: no answer"};
  Json br = Json::parse(bind->body, nullptr, false);
  if (br.is_discarded()) return {Outcome::kError, "bind: " + bind->body};
  if (br.value("Error", "") != "") {
    std::string error = br["Error"];
    // A retried pod whose earlier Binding landed although its answer was lost.
    if (error.find("already bound") != std::string::npos) return {Outcome::kBound, error};
    return {Outcome::kError, "bind: " + error};
  }
  return {Outcome::kBound, best};
}

// Per-GPU totals from the pods' allocation annotations, checked against each
// node's inventory. Returns the violations (empty = none) and counts bound pods.
inline std::vector<std::string> CheckNoOvercommit(const ::tessera::testing::FakeApiServer& server,
                                                  int* bound_pods) {
  std::map<std::string, core::Gpu> gpus;
  for (const Json& node : server.ListObjects("nodes")) {
    auto text = node["metadata"]["annotations"].value(std::string(core::kInventoryAnnotation), "");
    auto inv = core::DecodeInventory(text);
    if (!inv.ok()) continue;
    for (const core::Gpu& g : inv->gpus) gpus[g.uuid] = g;
  }
  struct Use {
    int64_t memory = 0;
    int cores = 0;
    int slots = 0;
  };
  std::map<std::string, Use> used;
  std::vector<std::string> problems;
  int bound = 0;
  for (const Json& pod : server.ListObjects("pods")) {
    auto ann = pod["metadata"].value("annotations", Json::object());
    if (!ann.contains("tessera.io/allocation")) continue;
    ++bound;
    auto alloc = core::DecodeAllocation(ann["tessera.io/allocation"].get<std::string>());
    if (!alloc.ok()) {
      problems.push_back("unreadable allocation on " + pod["metadata"]["name"].get<std::string>());
      continue;
    }
    if (pod["spec"].value("nodeName", "") != alloc->node)
      problems.push_back("pod bound to another node than its allocation");
    for (const auto& c : alloc->containers) {
      for (const auto& d : c.devices) {
        used[d.uuid].memory += d.memory_mib;
        used[d.uuid].cores += d.cores;
        used[d.uuid].slots += 1;
      }
    }
  }
  for (const auto& [uuid, u] : used) {
    auto g = gpus.find(uuid);
    if (g == gpus.end()) {
      problems.push_back("unknown GPU " + uuid);
      continue;
    }
    if (u.memory > g->second.memory_mib) problems.push_back(uuid + " memory " + std::to_string(u.memory));
    if (u.cores > 100) problems.push_back(uuid + " cores " + std::to_string(u.cores));
    if (u.slots > g->second.slots) problems.push_back(uuid + " slots " + std::to_string(u.slots));
  }
  if (bound_pods) *bound_pods = bound;
  return problems;
}

// The tessera-scheduler binary (TESSERA_SCHEDULER_BIN) as a process: started
// with the given flags on its own port, its output appended to one log (a
// restarted binary's follows the first one's), stopped with SIGTERM when
// destroyed.
class SchedulerBinary {
 public:
  explicit SchedulerBinary(std::string log_path) : log_(std::move(log_path)) {}
  SchedulerBinary(const SchedulerBinary&) = delete;
  SchedulerBinary& operator=(const SchedulerBinary&) = delete;
  ~SchedulerBinary() { Stop(); }

  int port() const { return port_; }

  // Starts it against `api_server` with `flags` after --api-server, --port
  // and no dashboard (its fixed default port would collide between tests run
  // side by side); true once /healthz answers.
  bool Start(const std::string& api_server, const std::vector<std::string>& flags) {
    if (port_ <= 0) return false;
    std::vector<std::string> argv = {TESSERA_SCHEDULER_BIN, "--api-server=" + api_server,
                                     "--port=" + std::to_string(port_), "--set=dashboard.enabled=false"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const int log = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log < 0) return false;
    pid_ = ::tessera::testing::Spawn({.argv = argv, .stdout_fd = log, .stderr_fd = log});
    ::close(log);
    return pid_ >= 0 && WaitFor([&] { return Get("/healthz").first == 200; });
  }
  void Kill() { ::tessera::testing::KillAndWait(pid_, SIGKILL); }
  void Stop() { ::tessera::testing::KillAndWait(pid_, SIGTERM); }

  // {HTTP status, body} of a GET on its extender port; {0, ""} without an answer.
  std::pair<int, std::string> Get(const std::string& path) const {
    httplib::Client http("127.0.0.1", port_);
    http.set_connection_timeout(2);
    http.set_read_timeout(10);
    auto res = http.Get(path);
    return res ? std::pair{res->status, res->body} : std::pair{0, std::string()};
  }

  // The value of an unlabelled metric, or -1.
  double Metric(const std::string& name) const {
    const std::string text = Get("/metrics").second;
    const std::string head = "\n" + name + " ";
    auto at = text.find(head);
    return at == std::string::npos ? -1 : std::stod(text.substr(at + head.size()));
  }

  std::string Log() const { return ::tessera::testing::ReadFileOrEmpty(log_); }

 private:
  const std::string log_;
  const int port_ = FreePort();
  pid_t pid_ = -1;
};

class SchedulerIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::tessera::testing::FakeApiServerOptions o;
    o.bookmark_interval = std::chrono::milliseconds(200);
    o.keep_alive_seconds = 1;
    o.threads = 96;
    server_ = std::make_unique<::tessera::testing::FakeApiServer>(o);
    auto st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.error().message;
  }

  void TearDown() override {
    scheduler_.reset();
    server_->Stop();
  }

  SchedulerConfig Config() const {
    SchedulerConfig c = ::tessera::testing::LoopbackSchedulerConfig("it");
    c.api_timeout = std::chrono::milliseconds(2000);
    c.reservation_timeout = std::chrono::milliseconds(4000);
    c.http_threads = 16;
    return c;
  }

  // A scheduler of `config` against the stand-in, not started.
  std::unique_ptr<Scheduler> MakeScheduler(const SchedulerConfig& config) const {
    kube::ClientOptions o;
    o.qps = 0;
    o.timeout = config.api_timeout;
    auto client = ::tessera::testing::ClientOfApiServer(server_->url(), o, std::chrono::milliseconds(2000));
    return std::make_unique<Scheduler>(config, client);
  }

  // The same, started and ready.
  std::unique_ptr<Scheduler> StartScheduler(const SchedulerConfig& config) {
    auto s = MakeScheduler(config);
    auto st = s->Start();
    EXPECT_TRUE(st.ok()) << st.error().message;
    EXPECT_TRUE(WaitFor([&] { return s->Ready(); }));
    return s;
  }

  std::vector<std::string> AddNodes(int count, int gpus, int64_t memory_mib, int slots) {
    std::vector<std::string> names;
    for (int i = 0; i < count; ++i) {
      std::string name = "node-" + std::to_string(i);
      auto r = server_->CreateObject("nodes",
                                     scheduler::testing::NodeWithGpus(name, i + 1, gpus, memory_mib, slots));
      EXPECT_TRUE(r.ok());
      names.push_back(name);
    }
    return names;
  }

  Json AddPod(const std::string& name, int gpus, int64_t memory_mib, int cores) {
    auto r =
        server_->CreateObject("pods", scheduler::testing::GpuPod("default", name, gpus, memory_mib, cores));
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : Json();
  }

  std::unique_ptr<::tessera::testing::FakeApiServer> server_;
  std::unique_ptr<Scheduler> scheduler_;
};

}  // namespace tessera::scheduler::it
