// The dashboard's usage read from a real Prometheus (Debian's package, through
// tests/support/prometheus) that scrapes stand-in tessera-node endpoints
// serving the small cluster's metrics: dashboard.prometheusURL end to end.
#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

#include "prometheus/prometheus_server.h"
#include "scheduler/dashboard/dashboard.h"
#include "scheduler/dashboard/testing.h"

namespace tessera::scheduler::dashboard {
namespace {

using Json = nlohmann::json;
namespace tc = testing;
using ::tessera::testing::PrometheusServer;

TEST(DashboardPrometheusTest, UsageComesFromPrometheusQueries) {
  if (!PrometheusServer::Available()) GTEST_SKIP() << PrometheusServer::NotAvailableMessage();
  httplib::Server metrics;
  metrics.Get(R"(/metrics/([^/]+))", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content(tc::MetricsText(req.matches[1]), "text/plain; version=0.0.4");
  });
  const int port = metrics.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serve([&] { metrics.listen_after_bind(); });
  struct Join {
    httplib::Server& s;
    std::thread& t;
    ~Join() {
      s.stop();
      t.join();
    }
  } join{metrics, serve};

  ::tessera::testing::PrometheusOptions options;
  const std::string address = "127.0.0.1:" + std::to_string(port);
  options.targets = {{address, "/metrics/gpu-a", "node-a"}, {address, "/metrics/gpu-b", "node-b"}};
  auto prometheus = PrometheusServer::Start(options);
  ASSERT_TRUE(prometheus.ok()) << prometheus.error().message;
  ASSERT_TRUE((*prometheus)
                  ->WaitForSeries("count(tessera_container_compute_share_percent) == 4",
                                  std::chrono::seconds(60), nullptr))
      << (*prometheus)->Diagnostics();

  ClusterState state;
  for (const Json& n : tc::Nodes()) state.UpsertNode(n);
  for (const Json& p : tc::Pods()) state.UpsertPod(p);
  DashboardOptions o;
  o.port = 0;
  o.usage.prometheus_url = (*prometheus)->base_url() + "/";
  DashboardDeps d;
  d.state = &state;
  Dashboard dash(o, d);
  for (const Json& p : tc::Pods()) dash.UpsertPod(p);
  dash.RefreshNow();

  Json overview = Json::parse(dash.Get("/api/overview", {}).body);
  EXPECT_EQ(overview["status"]["usage"]["source"], "prometheus");
  EXPECT_FALSE(overview["status"]["usage"].contains("error")) << overview["status"];
  EXPECT_EQ(overview["gpus"]["reporting"], tc::kGpus);
  EXPECT_DOUBLE_EQ(overview["memory"]["usedMiB"].get<double>(), double(tc::kMemoryUsedMiB));
  EXPECT_DOUBLE_EQ(overview["cores"]["used"].get<double>(), double(tc::kUtilizationSum));
  Json gpu = Json::parse(dash.Get("/api/nodes/gpu-a/gpus/" + tc::Uuid("gpu-a", 0), {}).body);
  ASSERT_EQ(gpu["slices"].size(), 2u);
  for (const Json& s : gpu["slices"]) {
    ASSERT_TRUE(s["usage"].is_object()) << s;
    EXPECT_DOUBLE_EQ(s["usage"]["computeShare"].get<double>(), s["pod"] == "train-1" ? 45 : 25);
  }

  // Prometheus gone: the failure is reported, the usage is no longer claimed.
  (*prometheus)->Stop();
  dash.RefreshNow();
  overview = Json::parse(dash.Get("/api/overview", {}).body);
  EXPECT_TRUE(overview["status"]["usage"].contains("error")) << overview["status"];
  EXPECT_TRUE(overview["memory"]["usedMiB"].is_null());
}

}  // namespace
}  // namespace tessera::scheduler::dashboard
