// Shared set-up for scheduler integration tests: a FakeApiServer, a
// tessera-scheduler (the real Scheduler class, real HTTP listeners, real
// libcurl client) and a stand-in for kube-scheduler that calls the extender
// verbs over HTTP exactly as kube-scheduler does.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
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
    SchedulerConfig c;
    c.port = 0;
    c.bind_address = "127.0.0.1";
    c.leader_elect = false;
    c.identity = "it";
    c.api_timeout = std::chrono::milliseconds(2000);
    c.reservation_timeout = std::chrono::milliseconds(4000);
    c.http_threads = 16;
    return c;
  }

  // A scheduler of `config` against the stand-in, not started.
  std::unique_ptr<Scheduler> MakeScheduler(const SchedulerConfig& config) const {
    kube::CurlTransportOptions t;
    t.server = server_->url();
    t.connect_timeout = std::chrono::milliseconds(2000);
    kube::ClientOptions o;
    o.qps = 0;
    o.timeout = config.api_timeout;
    auto client = std::make_shared<kube::Client>(std::make_shared<kube::CurlTransport>(t), o);
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
