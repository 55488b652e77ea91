// The dashboard as a person sees it: tessera-scheduler (the real Scheduler,
// real listeners) against the API-server stand-in holding the small cluster
// of scheduler/dashboard/testing.h, usage read from stand-in tessera-node
// endpoints, every page loaded in headless Chromium over WebDriver.
//
// Each page must load without console errors (the browser log, which also
// carries Content-Security-Policy violations and failed requests), show the
// cluster's numbers, and leaves a screenshot in TESSERA_DASHBOARD_ARTIFACTS.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "apiserver/fake_apiserver.h"
#include "scheduler/dashboard/testing.h"
#include "scheduler/scheduler.h"
#include "testing/ports.h"
#include "testing/scheduler_in_process.h"
#include "webdriver.h"

namespace tessera::scheduler::dashboard {
namespace {

using Json = nlohmann::json;
namespace tc = testing;
using ::tessera::testing::WebDriver;

bool WaitFor(const std::function<bool()>& condition,
             std::chrono::seconds deadline = std::chrono::seconds(60)) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return condition();
}

// The dashboard's way of writing MiB (app.js, mib()).
std::string Mib(double v) {
  char buf[64];
  if (v >= 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f GiB", v / 1024);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f MiB", v);
  }
  return buf;
}

class DashboardBrowserTest : public ::testing::Test {
 protected:
  // A failure here is recorded and reported by each test (a fatal failure
  // inside SetUpTestSuite would make gtest report the tests as skipped).
  static void Fail(const std::string& why) { setup_error_ = why; }

  static void SetUpTestSuite() {
    if (!WebDriver::Available()) return;
    std::filesystem::create_directories(TESSERA_DASHBOARD_ARTIFACTS);
    env_ = new Env();
    // tessera-node's /metrics of each node, at /metrics/<node>.
    env_->metrics.Get(R"(/metrics/([^/]+))", [](const httplib::Request& req, httplib::Response& res) {
      const std::string node = req.matches[1];
      if (node == "broken") {
        res.set_content("<html>not metrics</html>", "text/html");
        return;
      }
      std::string text = tc::MetricsText(node);
      if (text.empty()) {
        res.status = 404;
        return;
      }
      res.set_content(text, "text/plain; version=0.0.4");
    });
    const int metrics_port = env_->metrics.bind_to_any_port("127.0.0.1");
    env_->metrics_thread = std::thread([] { env_->metrics.listen_after_bind(); });

    ::tessera::testing::FakeApiServerOptions o;
    o.bookmark_interval = std::chrono::milliseconds(200);
    o.keep_alive_seconds = 1;
    env_->api = std::make_unique<::tessera::testing::FakeApiServer>(o);
    if (!env_->api->Start().ok()) return Fail("the API-server stand-in did not start");
    for (const Json& n : tc::Nodes("127.0.0.1")) {
      if (!env_->api->CreateObject("nodes", n).ok()) return Fail("cannot create node " + n.dump());
    }
    std::vector<Json> with_status;  // the stand-in defaults status on create, as the real server does
    for (const Json& p : tc::Pods()) {
      auto created = env_->api->CreateObject("pods", p);
      if (!created.ok()) return Fail("cannot create pod: " + created.error().message);
      Json updated = *created;
      updated["status"] = p["status"];
      with_status.push_back(std::move(updated));
    }

    SchedulerConfig c = ::tessera::testing::LoopbackSchedulerConfig("dashboard-it");
    c.api_timeout = std::chrono::milliseconds(2000);
    c.reservation_timeout = std::chrono::milliseconds(4000);
    c.dashboard.enabled = true;
    c.dashboard.port = 0;
    c.dashboard.bind_address = "127.0.0.1";
    c.dashboard.node_metrics_url = "http://{address}:" + std::to_string(metrics_port) + "/metrics/{node}";
    c.dashboard.usage_refresh = std::chrono::milliseconds(1000);
    kube::ClientOptions co;
    co.qps = 0;
    co.timeout = c.api_timeout;
    auto client =
        ::tessera::testing::ClientOfApiServer(env_->api->url(), co, std::chrono::milliseconds(1000));
    for (const Json& p : with_status) {
      auto r = client->UpdateStatus(kube::resources::kPods, p["metadata"]["namespace"], p);
      if (!r.ok()) return Fail("cannot write pod status: " + r.error().message);
    }
    env_->scheduler = std::make_unique<Scheduler>(c, client);
    if (auto s = env_->scheduler->Start(); !s)
      return Fail("the scheduler did not start: " + s.error().message);
    env_->base = "http://127.0.0.1:" + std::to_string(env_->scheduler->dashboard_port());

    // The view holds the whole cluster, usage included.
    httplib::Client http("127.0.0.1", env_->scheduler->dashboard_port());
    const bool shown = WaitFor([&] {
      auto r = http.Get("/api/overview");
      if (!r || r->status != 200) return false;
      Json overview = Json::parse(r->body, nullptr, false);
      return !overview.is_discarded() && overview["gpus"]["reporting"] == tc::kGpus &&
             overview["pods"]["total"] == 5;
    });
    if (!shown) {
      auto last = http.Get("/api/overview");
      return Fail("the dashboard never showed the stand-in cluster; its overview: " +
                  (last ? last->body.substr(0, 2000) : std::string("no answer")));
    }

    const std::string dir = TESSERA_DASHBOARD_ARTIFACTS;
    // ctest runs each test in its own process, several at once: each browser
    // gets a profile of its own (two Chromiums cannot share one).
    env_->profile =
        std::filesystem::temp_directory_path() / ("tessera-dashboard-chromium-" + std::to_string(getpid()));
    auto started = env_->driver.Start(::tessera::testing::FreePort(), env_->profile.string(),
                                      dir + "/chromedriver-" + std::to_string(getpid()) + ".log");
    if (!started.ok()) return Fail("WebDriver: " + started.error().message);
  }

  static void TearDownTestSuite() {
    if (!env_) return;
    env_->driver.Quit();
    if (!env_->profile.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(env_->profile, ignored);
    }
    env_->scheduler.reset();
    env_->api->Stop();
    env_->metrics.stop();
    if (env_->metrics_thread.joinable()) env_->metrics_thread.join();
    delete env_;
    env_ = nullptr;
  }

  void SetUp() override {
    if (!WebDriver::Available()) GTEST_SKIP() << WebDriver::NotAvailableMessage();
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    ASSERT_NE(env_, nullptr);
  }

  // Loads `route`, waits for the page to say it has rendered it, checks the
  // console and keeps a screenshot as `name`.png.
  // `expected_error`, when given, is a console entry the page must log (a
  // 404 the API answered on purpose); every other SEVERE entry fails.
  void Load(const std::string& route, const std::string& name, const std::string& expected_error = "") {
    WebDriver& d = env_->driver;
    (void)d.BrowserLog();  // what the previous page logged is its own
    ASSERT_TRUE(d.Navigate(env_->base + "/" + route).ok());
    const std::string page = route.empty() ? "overview" : route.substr(2, route.find_first_of("/?", 2) - 2);
    ASSERT_TRUE(WaitFor([&] {
      auto r = d.Execute("return document.body.dataset.state + ' ' + document.body.dataset.route;");
      return r.ok() && *r == "loaded " + (page.empty() ? "overview" : page);
    })) << route
        << " never finished rendering";
    auto log = d.BrowserLog();
    ASSERT_TRUE(log.ok()) << log.error().message;
    for (const Json& entry : *log) {
      if (!expected_error.empty() && entry.value("message", "").find(expected_error) != std::string::npos)
        continue;
      EXPECT_NE(entry.value("level", ""), "SEVERE") << route << ": console: " << entry.dump();
    }
    auto shot = d.Screenshot(std::string(TESSERA_DASHBOARD_ARTIFACTS) + "/" + name + ".png");
    EXPECT_TRUE(shot.ok()) << shot.error().message;
  }

  // textContent of the elements matching `selector`.
  std::vector<std::string> Texts(const std::string& selector) {
    auto r = env_->driver.Execute("return Array.from(document.querySelectorAll(" + Json(selector).dump() +
                                  ")).map(e => e.textContent);");
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? r->get<std::vector<std::string>>() : std::vector<std::string>{};
  }
  std::string Text(const std::string& selector) {
    auto all = Texts(selector);
    return all.empty() ? "<no " + selector + ">" : all[0];
  }
  static bool Contains(const std::vector<std::string>& texts, const std::string& what) {
    for (const auto& t : texts) {
      if (t.find(what) != std::string::npos) return true;
    }
    return false;
  }

  struct Env {
    httplib::Server metrics;
    std::thread metrics_thread;
    std::unique_ptr<::tessera::testing::FakeApiServer> api;
    std::unique_ptr<Scheduler> scheduler;
    std::string base;
    WebDriver driver;
    std::filesystem::path profile;
  };
  static Env* env_;
  static std::string setup_error_;
};

DashboardBrowserTest::Env* DashboardBrowserTest::env_ = nullptr;
std::string DashboardBrowserTest::setup_error_;

TEST_F(DashboardBrowserTest, OverviewShowsTheClusterFigures) {
  Load("", "overview");
  EXPECT_EQ(Text("[data-testid=gpus-total]"), std::to_string(tc::kGpus));
  EXPECT_EQ(Text("[data-testid=memory-capacity]"), Mib(tc::kMemoryCapacityMiB));
  EXPECT_EQ(Text("[data-testid=memory-allocated]"), Mib(tc::kMemoryAllocatedMiB));
  EXPECT_EQ(Text("[data-testid=memory-used]"), Mib(tc::kMemoryUsedMiB));
  EXPECT_EQ(Text("[data-testid=cores-allocated]"), std::to_string(tc::kCoresAllocated) + " %");
  EXPECT_EQ(Text("[data-testid=cores-used]"), std::to_string(tc::kUtilizationSum) + " %");
  EXPECT_EQ(Text("[data-testid=nodes-total]"), "4");
  EXPECT_EQ(Text("[data-testid=pending-count]"), "1");
  EXPECT_NE(Text("[data-testid=pending-reason]").find(tc::kWaitingMessage), std::string::npos);
  EXPECT_NE(Text("[data-testid=fragmentation-share]").find(" %"), std::string::npos);
  const auto problems = Texts("#problems td");
  EXPECT_TRUE(Contains(problems, "cpu-only"));
  EXPECT_TRUE(Contains(problems, "publishes no"));
  EXPECT_TRUE(Contains(problems, "web/garbled"));
  EXPECT_TRUE(Contains(problems, "cannot be read"));
  EXPECT_TRUE(Texts("[data-testid=api-down]").empty());
}

TEST_F(DashboardBrowserTest, NodesListEveryNodeWithItsStatus) {
  Load("#/nodes", "nodes");
  const auto cells = Texts("#nodes td");
  for (const char* name : {"gpu-a", "gpu-b", "cpu-only", "broken", "no-inventory", "unreadable"}) {
    EXPECT_TRUE(Contains(cells, name)) << name;
  }
  EXPECT_TRUE(Contains(cells, "not Prometheus text"));  // broken's endpoint serves HTML
  EXPECT_TRUE(Contains(cells, "HTTP 404"));             // cpu-only's has no metrics
}

TEST_F(DashboardBrowserTest, NodePageShowsItsGpusAndPods) {
  Load("#/node/gpu-a", "node-gpu-a");
  EXPECT_EQ(Texts("#gpus tbody tr").size(), 2u);
  const auto pods = Texts("#node-pods [data-testid=pod-name]");
  EXPECT_TRUE(Contains(pods, "ml/train-1"));
  EXPECT_TRUE(Contains(pods, "ml/train-2"));
  Load("#/node/cpu-only", "node-cpu-only");
  EXPECT_NE(Text("[data-testid=node-message]").find("publishes no"), std::string::npos);
}

TEST_F(DashboardBrowserTest, GpuPageShowsEachSliceWithLimitUseAndShare) {
  Load("#/gpu/gpu-a/" + tc::Uuid("gpu-a", 0), "gpu");
  const auto pods = Texts("[data-testid=slice-pod]");
  ASSERT_EQ(pods.size(), 2u);
  const auto limits = Texts("[data-testid=slice-limit]");
  const auto used = Texts("[data-testid=slice-used]");
  const auto shares = Texts("[data-testid=slice-share]");
  for (size_t i = 0; i < pods.size(); ++i) {
    const bool first = pods[i] == "ml/train-1";
    EXPECT_EQ(limits[i], Mib(first ? 8000 : 4000));
    EXPECT_EQ(used[i], Mib(first ? 5000 : 1000));
    EXPECT_EQ(shares[i], first ? "45 %" : "25 %");
  }
  // One line per slice with usage, and the GPU's own.
  EXPECT_EQ(Texts("svg.chart path").size(), 3u);
}

TEST_F(DashboardBrowserTest, PodsAndNamespaces) {
  Load("#/pods", "pods");
  const auto names = Texts("[data-testid=pod-name]");
  for (const char* pod : {"ml/train-1", "ml/train-2", "ml/waiting", "web/infer-1", "web/garbled"}) {
    EXPECT_TRUE(Contains(names, pod)) << pod;
  }
  Load("#/namespaces", "namespaces");
  EXPECT_EQ(Text("[data-testid=ns-memory-ml]"), Mib(8000 + 4000));
  EXPECT_EQ(Text("[data-testid=ns-memory-web]"), Mib(2 * 2000));
}

TEST_F(DashboardBrowserTest, MigGpusListTheirInstancesCreatedOrNot) {
  // mig-1: an A100-80GB in mig-dynamic mode listing ml/made's 1g.10gb at 6;
  // ml/bound's 3g.40gb at 0 is bound but not created yet. Removed at the end:
  // the last test counts the fixture's GPUs.
  const std::string gpu = scheduler::testing::GpuUuid(7, 0);
  core::DeviceSlice made{gpu, 9728, 0, "1g.10gb", 6};
  core::DeviceSlice bound{gpu, 40192, 0, "3g.40gb", 0};
  ASSERT_TRUE(
      env_->api
          ->CreateObject("nodes",
                         scheduler::testing::NodeWithDynamicMigGpus(
                             "mig-1", 7, 1,
                             {{0, {scheduler::testing::ListedMigDevice(made, "MIG-made", "ml/made/app")}}}))
          .ok());
  for (const auto& [name, device] : {std::pair{"made", made}, std::pair{"bound", bound}}) {
    Json pod = scheduler::testing::MigPod("ml", name, device.memory_mib);
    pod["metadata"]["annotations"][std::string(core::kAllocationAnnotation)] =
        *core::EncodeAllocation({"mig-1", {{"app", {device}}}});
    pod["spec"]["nodeName"] = "mig-1";
    ASSERT_TRUE(env_->api->CreateObject("pods", pod).ok());
  }
  httplib::Client http("127.0.0.1", env_->scheduler->dashboard_port());
  auto instances = [&] {
    auto r = http.Get("/api/nodes/mig-1");
    Json j = r && r->status == 200 ? Json::parse(r->body, nullptr, false) : Json();
    return j.is_object() ? j["gpuList"][0].value("migInstances", Json::array()).size() : 0u;
  };
  ASSERT_TRUE(WaitFor([&] { return instances() == 2; }));

  Load("#/node/mig-1", "node-mig");
  EXPECT_EQ(Texts("[data-testid=mig-profile]"), (std::vector<std::string>{"3g.40gb", "1g.10gb"}));
  const auto states = Texts("[data-testid=mig-state]");
  ASSERT_EQ(states.size(), 2u);
  EXPECT_EQ(states[0], "not created yet");
  EXPECT_NE(states[1].find("MIG-made"), std::string::npos) << states[1];
  EXPECT_EQ(Texts("[data-testid=mig-pod]"), (std::vector<std::string>{"ml/bound", "ml/made"}));
  Load("#/gpu/mig-1/" + gpu, "gpu-mig");
  EXPECT_EQ(Texts("[data-testid=mig-pod]"), (std::vector<std::string>{"ml/bound/app", "ml/made/app"}));
  EXPECT_TRUE(Texts("[data-testid=slice-pod]").empty());

  for (const char* name : {"made", "bound"}) ASSERT_TRUE(env_->api->DeleteObject("pods", "ml", name).ok());
  ASSERT_TRUE(env_->api->DeleteObject("nodes", "", "mig-1").ok());
  ASSERT_TRUE(WaitFor([&] {
    auto r = http.Get("/api/overview");
    Json j = r && r->status == 200 ? Json::parse(r->body, nullptr, false) : Json();
    return j.is_object() && j["nodes"]["total"] == 4 && j["pods"]["total"] == 5;
  }));
}

TEST_F(DashboardBrowserTest, AnUnknownNodeSaysSo) {
  // The browser logs every non-2xx fetch; this one is the page's question.
  Load("#/node/nowhere", "node-unknown",
       "/api/nodes/nowhere - Failed to load resource: the server responded with a status of 404");
  EXPECT_NE(Text("[data-testid=error]").find("nowhere"), std::string::npos);
}

// Last (gtest runs a suite's tests in order): it stops the API server.
TEST_F(DashboardBrowserTest, ZDeadApiServerIsShownWithTheLastKnownCluster) {
  env_->api->Stop();
  ASSERT_TRUE(WaitFor([&] {
    httplib::Client http("127.0.0.1", env_->scheduler->dashboard_port());
    auto r = http.Get("/api/overview");
    return r && Json::parse(r->body, nullptr, false)["status"]["apiServer"]["ok"] == false;
  })) << "the dashboard never noticed the API server had stopped";
  Load("", "overview-api-down");
  EXPECT_NE(Text("[data-testid=api-down]").find("API server unreachable"), std::string::npos);
  EXPECT_EQ(Text("[data-testid=gpus-total]"), std::to_string(tc::kGpus));
}

}  // namespace
}  // namespace tessera::scheduler::dashboard
