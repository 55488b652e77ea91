#include "scheduler/dashboard/dashboard.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/pod_request.h"
#include "scheduler/dashboard/assets.h"
#include "scheduler/dashboard/testing.h"

namespace tessera::scheduler::dashboard {
namespace {

using Json = nlohmann::json;
namespace tc = testing;

// A Fetch answering for the test cluster's nodes: gpu-a and gpu-b serve their
// metrics, `broken` serves a page that is not Prometheus text, cpu-only
// refuses the connection.
Result<std::string> ClusterFetch(const std::string& url, std::chrono::milliseconds) {
  const std::string node = url.substr(url.rfind('/') + 1);
  if (node == "broken") return std::string("<html>oops</html>\n");
  std::string text = tc::MetricsText(node);
  if (text.empty()) return Error{"GET " + url + ": Connection refused"};
  return text;
}

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const Json& n : tc::Nodes()) state_.UpsertNode(n);
    for (const Json& p : tc::Pods()) state_.UpsertPod(p);
  }

  std::unique_ptr<Dashboard> Make(UsageCollector::Fetch fetch = ClusterFetch, std::string prometheus = "") {
    DashboardOptions o;
    o.port = 0;
    o.bind_address = "127.0.0.1";
    o.usage.node_url_template = "http://{address}:1/metrics/{node}";
    o.usage.prometheus_url = std::move(prometheus);
    DashboardDeps d;
    d.state = &state_;
    d.probe_api = [this] { return api_error_; };
    d.fetch = std::move(fetch);
    auto dash = std::make_unique<Dashboard>(o, d);
    for (const Json& n : tc::Nodes()) dash->UpsertNode(n);
    for (const Json& p : tc::Pods()) dash->UpsertPod(p);
    dash->RefreshNow();
    return dash;
  }

  static Json GetJson(const Dashboard& d, const std::string& path,
                      const std::unordered_map<std::string, std::string>& query = {}, int want = 200) {
    Dashboard::Response r = d.Get(path, query);
    EXPECT_EQ(r.status, want) << path << ": " << r.body;
    EXPECT_EQ(r.content_type, "application/json");
    Json j = Json::parse(r.body, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.body;
    return j;
  }

  ClusterState state_;
  std::string api_error_;
};

TEST_F(DashboardTest, OverviewShowsCapacityAllocationAndUse) {
  auto dash = Make();
  Json o = GetJson(*dash, "/api/overview");
  EXPECT_EQ(o["gpus"]["total"], tc::kGpus);
  EXPECT_EQ(o["gpus"]["reporting"], tc::kGpus);
  EXPECT_EQ(o["memory"]["capacityMiB"], tc::kMemoryCapacityMiB);
  EXPECT_EQ(o["memory"]["allocatedMiB"], tc::kMemoryAllocatedMiB);
  EXPECT_DOUBLE_EQ(o["memory"]["usedMiB"].get<double>(), double(tc::kMemoryUsedMiB));
  EXPECT_EQ(o["cores"]["capacity"], 400);
  EXPECT_EQ(o["cores"]["allocated"], tc::kCoresAllocated);
  EXPECT_DOUBLE_EQ(o["cores"]["used"].get<double>(), double(tc::kUtilizationSum));
  EXPECT_EQ(o["nodes"]["total"], 4);
  EXPECT_EQ(o["nodes"]["ok"], 2);
  EXPECT_EQ(o["pods"]["total"], 5);
  EXPECT_EQ(o["pods"]["pending"], 1);
  ASSERT_EQ(o["pending"]["items"].size(), 1u);
  EXPECT_EQ(o["pending"]["items"][0]["name"], "waiting");
  EXPECT_EQ(o["pending"]["items"][0]["waiting"]["message"], tc::kWaitingMessage);
  EXPECT_TRUE(o["status"]["apiServer"]["ok"]);
  EXPECT_EQ(o["status"]["usage"]["nodesOk"], 2);
  EXPECT_EQ(o["status"]["usage"]["nodesFailed"], 2);
}

TEST_F(DashboardTest, FragmentationIsTheShareOfFreeCapacityTheTypicalRequestsCannotUse) {
  auto dash = Make();
  Json f = GetJson(*dash, "/api/overview")["fragmentation"];
  // Without a learned mix, the known GPU pods' shapes are the typical requests.
  EXPECT_EQ(f["source"], "pods");
  ASSERT_FALSE(f["shapes"].empty());
  // The pending pod asks 20000 MiB of a 16000 MiB GPU: for it every free
  // share is a fragment, so the share is positive, and never above 1.
  const double share = f["share"].get<double>();
  EXPECT_GT(share, 0.0);
  EXPECT_LE(share, 1.0);
  // The same figure from core's meter over the cluster state's nodes.
  core::MixCounter counter;
  for (const Json& p : tc::Pods()) {
    auto r = core::DerivePodRequest(p, core::ResourceConfig{});
    if (r.ok() && !r->containers.empty()) counter.Add(core::ShapeOf(*r));
  }
  const core::WorkloadMix mix = counter.Typical();
  double fragment = 0, free = 0;
  for (const char* name : {"gpu-a", "gpu-b"}) {
    auto node = state_.Node(name);
    ASSERT_TRUE(node);
    fragment += core::FragmentationMeter(*node, mix, false).current();
    for (const auto& g : node->gpus()) free += g.free_milli();
  }
  EXPECT_NEAR(share, fragment / free, 1e-9);
}

TEST_F(DashboardTest, BadInputIsShownAsSuch) {
  auto dash = Make();
  Json nodes = GetJson(*dash, "/api/nodes", {{"limit", "10"}});
  std::map<std::string, Json> by_name;
  for (const Json& n : nodes["items"]) by_name[n["name"]] = n;
  ASSERT_EQ(by_name.size(), 4u);
  EXPECT_EQ(by_name["cpu-only"]["status"], "no-inventory");
  EXPECT_NE(by_name["cpu-only"]["message"].get<std::string>().find("publishes no"), std::string::npos);
  EXPECT_EQ(by_name["broken"]["status"], "unreadable");
  EXPECT_NE(by_name["broken"]["message"].get<std::string>().find("unreadable"), std::string::npos);
  EXPECT_EQ(by_name["broken"]["metrics"]["state"], "error");
  EXPECT_NE(by_name["broken"]["metrics"]["error"].get<std::string>().find("not Prometheus text: line 1"),
            std::string::npos);
  EXPECT_NE(by_name["cpu-only"]["metrics"]["error"].get<std::string>().find("Connection refused"),
            std::string::npos);
  EXPECT_EQ(by_name["gpu-a"]["status"], "ok");

  Json problems = GetJson(*dash, "/api/pods", {{"state", "problem"}});
  ASSERT_EQ(problems["total"], 1);
  EXPECT_EQ(problems["items"][0]["name"], "garbled");
  EXPECT_NE(problems["items"][0]["problem"].get<std::string>().find("cannot be read"), std::string::npos);
  Json o = GetJson(*dash, "/api/overview");
  EXPECT_EQ(o["problems"]["nodesTotal"], 2);
  EXPECT_EQ(o["problems"]["podsTotal"], 1);
}

TEST_F(DashboardTest, DeadApiServerIsReportedWithTheLastKnownCluster) {
  auto dash = Make();
  api_error_ = "connect to 127.0.0.1:9: Connection refused";
  dash->RefreshNow(false);
  Json o = GetJson(*dash, "/api/overview");
  EXPECT_FALSE(o["status"]["apiServer"]["ok"]);
  EXPECT_EQ(o["status"]["apiServer"]["error"], api_error_);
  EXPECT_EQ(o["gpus"]["total"], tc::kGpus);  // still shown, as last seen
  api_error_.clear();
  dash->RefreshNow(false);
  EXPECT_TRUE(GetJson(*dash, "/api/overview")["status"]["apiServer"]["ok"]);
}

TEST_F(DashboardTest, ListsPaginateAndBadQueriesGetAClearError) {
  auto dash = Make();
  Json page = GetJson(*dash, "/api/nodes", {{"limit", "1"}, {"offset", "1"}});
  EXPECT_EQ(page["total"], 4);
  ASSERT_EQ(page["items"].size(), 1u);
  EXPECT_EQ(page["items"][0]["name"], "cpu-only");  // by name: broken, cpu-only, gpu-a, gpu-b
  EXPECT_EQ(GetJson(*dash, "/api/nodes", {{"q", "gpu"}})["total"], 2);
  EXPECT_EQ(GetJson(*dash, "/api/pods", {{"ns", "ml"}})["total"], 3);
  EXPECT_EQ(GetJson(*dash, "/api/pods", {{"state", "pending"}})["items"][0]["name"], "waiting");
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"limit", "abc"}, {"limit", "100000"}, {"offset", "-1"}, {"sort", "weight"}}) {
    Json e = GetJson(*dash, "/api/nodes", {{key, value}}, 400);
    EXPECT_NE(e["error"].get<std::string>().find(value), std::string::npos) << e;
  }
  GetJson(*dash, "/api/pods", {{"state", "sleeping"}}, 400);
  EXPECT_NE(GetJson(*dash, "/api/nodes/nowhere", {}, 404)["error"].get<std::string>().find("nowhere"),
            std::string::npos);
  GetJson(*dash, "/api/nodes/gpu-a/gpus/GPU-none", {}, 404);
  GetJson(*dash, "/api/whatever", {}, 404);
}

TEST_F(DashboardTest, GpuShowsItsSlicesWithLimitUseAndShareOverTime) {
  auto dash = Make();
  dash->RefreshNow();  // a second usage round: two points of history
  Json g = GetJson(*dash, "/api/nodes/gpu-a/gpus/" + tc::Uuid("gpu-a", 0));
  EXPECT_EQ(g["allocated"]["memoryMiB"], 12000);
  EXPECT_DOUBLE_EQ(g["utilization"].get<double>(), 70);
  EXPECT_EQ(g["history"].size(), 2u);
  ASSERT_EQ(g["slices"].size(), 2u);
  std::map<std::string, Json> by_pod;
  for (const Json& s : g["slices"]) by_pod[s["pod"]] = s;
  EXPECT_EQ(by_pod["train-1"]["memoryMiB"], 8000);
  EXPECT_EQ(by_pod["train-1"]["cores"], 50);
  EXPECT_DOUBLE_EQ(by_pod["train-1"]["usage"]["memoryUsedMiB"].get<double>(), 5000);
  EXPECT_DOUBLE_EQ(by_pod["train-1"]["usage"]["computeShare"].get<double>(), 45);
  EXPECT_EQ(by_pod["train-1"]["usage"]["history"].size(), 2u);
  Json node = GetJson(*dash, "/api/nodes/gpu-a");
  EXPECT_EQ(node["gpuList"].size(), 2u);
  EXPECT_EQ(node["podList"].size(), 2u);
  Json ns = GetJson(*dash, "/api/namespaces");
  ASSERT_EQ(ns["items"].size(), 2u);
  EXPECT_EQ(ns["items"][0]["name"], "ml");
  EXPECT_EQ(ns["items"][0]["memoryMiB"], 12000);
  EXPECT_DOUBLE_EQ(ns["items"][0]["memoryUsedMiB"].get<double>(), 6000);
}

TEST_F(DashboardTest, AViewReusesTheNodesThatDidNotChange) {
  auto dash = Make();
  auto before = dash->view();
  Json pod = tc::BoundPod("ml", "train-3", 1, 1000, 10, "gpu-b", {1});
  state_.UpsertPod(pod);
  dash->UpsertPod(pod);
  dash->RefreshNow(false);
  auto after = dash->view();
  ASSERT_EQ(before->nodes.size(), after->nodes.size());
  for (size_t i = 0; i < after->nodes.size(); ++i) {
    if (after->nodes[i]->name == "gpu-b") {
      EXPECT_NE(before->nodes[i], after->nodes[i]);
      EXPECT_EQ(after->nodes[i]->state.gpus()[1].used.memory_mib, 2000 + 1000);  // infer-1 and train-3
    } else if (after->mix.key == before->mix.key) {
      EXPECT_EQ(before->nodes[i], after->nodes[i]) << after->nodes[i]->name;
    }
  }
}

// A MIG pod bound on `node` with one instance of `profile` at `start` on GPU `uuid`.
Json MigBoundPod(const std::string& name, const std::string& node, const std::string& uuid,
                 const std::string& profile, int start, int64_t memory_mib) {
  Json pod = scheduler::testing::MigPod("ml", name, memory_mib);
  core::DeviceSlice d{uuid, memory_mib, 0};
  d.mig_profile = profile;
  d.mig_start = start;
  pod["metadata"]["annotations"][std::string(core::kAllocationAnnotation)] =
      *core::EncodeAllocation({node, {{"app", {d}}}});
  pod["metadata"]["creationTimestamp"] = "2030-01-01T00:00:00Z";
  pod["spec"]["nodeName"] = node;
  pod["status"] = {{"phase", "Running"}};
  return pod;
}

TEST_F(DashboardTest, MigInstancesTheSchedulerHoldsShowBeforeTheNodeListsThem) {
  // mig-1: one A100-80GB in mig-dynamic mode. The node lists the 1g.10gb at 6
  // of ml/made; ml/bound's 3g.40gb at 0 is bound but not created yet.
  const std::string gpu = scheduler::testing::GpuUuid(7, 0);
  core::DeviceSlice made{gpu, 9728, 0, "1g.10gb", 6};
  const Json node = scheduler::testing::NodeWithDynamicMigGpus(
      "mig-1", 7, 1, {{0, {scheduler::testing::ListedMigDevice(made, "MIG-made", "ml/made/app")}}});
  const std::vector<Json> pods = {MigBoundPod("made", "mig-1", gpu, "1g.10gb", 6, 9728),
                                  MigBoundPod("bound", "mig-1", gpu, "3g.40gb", 0, 40192)};
  auto dash = Make();
  state_.UpsertNode(node);
  dash->UpsertNode(node);
  for (const Json& p : pods) {
    state_.UpsertPod(p);
    dash->UpsertPod(p);
  }
  dash->RefreshNow(false);

  Json n = GetJson(*dash, "/api/nodes/mig-1");
  ASSERT_EQ(n["gpuList"].size(), 1u);
  const Json& g = n["gpuList"][0];
  EXPECT_EQ(g["mode"], "mig-dynamic");
  EXPECT_EQ(g["slots"], 0);
  EXPECT_EQ(g["allocated"]["slots"], 0) << "a MIG instance is no vGPU slice";
  EXPECT_EQ(g["allocated"]["memoryMiB"], 9728 + 40192);
  EXPECT_EQ(n["memory"]["allocatedMiB"], 9728 + 40192);
  EXPECT_EQ(n["migInstances"], (Json{{"total", 2}, {"held", 2}}));
  ASSERT_EQ(g["migInstances"].size(), 2u) << g.dump();
  const Json& pending = g["migInstances"][0];  // by start
  EXPECT_EQ(pending["profile"], "3g.40gb");
  EXPECT_EQ(pending["start"], 0);
  EXPECT_EQ(pending["size"], 4);
  EXPECT_EQ(pending["state"], "pending");
  EXPECT_TRUE(pending["uuid"].is_null());
  EXPECT_EQ(pending["pod"], "ml/bound");
  const Json& created = g["migInstances"][1];
  EXPECT_EQ(created["state"], "created");
  EXPECT_EQ(created["uuid"], "MIG-made");
  EXPECT_EQ(created["pod"], "ml/made") << "the claim and the listed instance are one";
  EXPECT_EQ(created["usedBy"], "ml/made/app");

  // The GPU page: instances with their containers, no slices.
  Json page = GetJson(*dash, "/api/nodes/mig-1/gpus/" + gpu);
  EXPECT_TRUE(page["slices"].empty()) << page.dump();
  ASSERT_EQ(page["migInstances"].size(), 2u);
  EXPECT_EQ(page["migInstances"][0]["container"], "app");
  EXPECT_FALSE(page.contains("overcommit")) << page.dump();
  // The pod list names the instance; namespaces count it apart from vGPUs.
  Json bound = GetJson(*dash, "/api/pods", {{"q", "bound"}});
  ASSERT_EQ(bound["items"].size(), 1u);
  EXPECT_EQ(bound["items"][0]["slices"][0]["mig"], (Json{{"profile", "3g.40gb"}, {"start", 0}}));
  Json ns = GetJson(*dash, "/api/namespaces");
  EXPECT_EQ(ns["items"][0]["name"], "ml");
  EXPECT_EQ(ns["items"][0]["migInstances"], 2);
  EXPECT_EQ(ns["items"][0]["slices"], 2) << "train-1 and train-2 only";

  // A reservation (filter passed, not bound yet) shows at once: the node's
  // record is rebuilt although its inventory did not change.
  auto before = dash->view();
  auto request = core::DerivePodRequest(scheduler::testing::MigPod("ml", "next", 9728), {});
  ASSERT_TRUE(request.ok());
  auto reserved = state_.Reserve("ml/next", *request, "mig-1", core::GpuOrder::kBinpack,
                                 std::chrono::minutes(1), Sharing::kDynamicMig);
  ASSERT_TRUE(reserved.ok()) << reserved.error().message;
  dash->RefreshNow(false);
  EXPECT_NE(before->FindNode("mig-1"), dash->view()->FindNode("mig-1"));
  Json after = GetJson(*dash, "/api/nodes/mig-1");
  ASSERT_EQ(after["gpuList"][0]["migInstances"].size(), 3u) << after.dump();
  bool seen = false;
  for (const Json& m : after["gpuList"][0]["migInstances"]) {
    if (m["pod"] == "ml/next") {
      seen = true;
      EXPECT_EQ(m["state"], "pending");
      EXPECT_EQ(m["profile"], "1g.10gb");
    }
  }
  EXPECT_TRUE(seen) << after.dump();
  Json overview = GetJson(*dash, "/api/overview");
  EXPECT_EQ(overview["gpus"]["mig"], 1);
  EXPECT_EQ(overview["gpus"]["migInstances"], 3);
  EXPECT_EQ(overview["memory"]["allocatedMiB"], tc::kMemoryAllocatedMiB + 2 * 9728 + 40192);
}

TEST_F(DashboardTest, GpusShowTheirSharingModeAndReplicaGpusAddNoCapacity) {
  // modes-1: GPU 0 time-sliced into 4 replicas, GPU 1 in MPS mode.
  Json node = scheduler::testing::NodeWithGpus("modes-1", 8, 2, 16000, 10);
  auto& text = node["metadata"]["annotations"][std::string(core::kInventoryAnnotation)];
  auto inv = core::DecodeInventory(text.get<std::string>());
  ASSERT_TRUE(inv.ok());
  inv->gpus[0].mode = core::SharingMode::kTimeslice;
  inv->gpus[0].replicas = 4;
  inv->gpus[0].slots = 0;
  inv->gpus[1].mode = core::SharingMode::kMps;
  text = *core::EncodeInventory(*inv);
  auto dash = Make();
  Json before = GetJson(*dash, "/api/overview");
  state_.UpsertNode(node);
  dash->UpsertNode(node);
  dash->RefreshNow(false);
  Json n = GetJson(*dash, "/api/nodes/modes-1");
  ASSERT_EQ(n["gpuList"].size(), 2u);
  EXPECT_EQ(n["gpuList"][0]["mode"], "timeslice");
  EXPECT_EQ(n["gpuList"][0]["replicas"], 4);
  EXPECT_EQ(n["gpuList"][1]["mode"], "mps");
  EXPECT_FALSE(n["gpuList"][1].contains("replicas"));
  EXPECT_EQ(n["memory"]["capacityMiB"], 16000) << "only the MPS GPU's memory is tessera's to allocate";
  EXPECT_EQ(n["replicas"], (Json{{"gpus", 1}, {"total", 4}}));
  Json overview = GetJson(*dash, "/api/overview");
  EXPECT_EQ(overview["gpus"]["modes"]["timeslice"], before["gpus"]["modes"]["timeslice"].get<int>() + 1);
  EXPECT_EQ(overview["gpus"]["modes"]["mps"], before["gpus"]["modes"]["mps"].get<int>() + 1);
  EXPECT_EQ(overview["gpus"]["modes"]["exclusive"], 0);
  EXPECT_EQ(overview["gpus"]["replicas"], before["gpus"]["replicas"].get<int>() + 4);
  EXPECT_EQ(overview["memory"]["capacityMiB"], before["memory"]["capacityMiB"].get<int64_t>() + 16000);
}

TEST_F(DashboardTest, UsageFromPrometheusAndItsFailures) {
  auto prometheus = [](const std::string& url, std::chrono::milliseconds) -> Result<std::string> {
    const std::string metric = url.substr(url.find("query=") + 6);
    Json result = Json::array();
    for (const char* node : {"gpu-a", "gpu-b"}) {
      auto samples = ParseMetricsText(tc::MetricsText(node));
      for (const MetricSample& s : *samples) {
        if (s.name != metric) continue;
        Json labels = {{"__name__", s.name}, {"instance", node}};
        for (const auto& [k, v] : s.labels) labels[k] = v;
        result.push_back({{"metric", labels}, {"value", {1.7e9, std::to_string(s.value)}}});
      }
    }
    return Json{{"status", "success"}, {"data", {{"resultType", "vector"}, {"result", result}}}}.dump();
  };
  auto dash = Make(prometheus, "http://prometheus:9090");
  Json o = GetJson(*dash, "/api/overview");
  EXPECT_EQ(o["status"]["usage"]["source"], "prometheus");
  EXPECT_DOUBLE_EQ(o["memory"]["usedMiB"].get<double>(), double(tc::kMemoryUsedMiB));

  auto garbage = [](const std::string&, std::chrono::milliseconds) -> Result<std::string> {
    return std::string("<html>");
  };
  auto broken = Make(garbage, "http://prometheus:9090");
  Json b = GetJson(*broken, "/api/overview");
  EXPECT_NE(b["status"]["usage"]["error"].get<std::string>().find("not a Prometheus query answer"),
            std::string::npos);
  EXPECT_TRUE(b["memory"]["usedMiB"].is_null());
}

TEST(UsageCollectorTest, NeverMoreRequestsInFlightThanTheConcurrency) {
  std::atomic<int> in_flight{0}, most{0}, calls{0};
  UsageOptions o;
  o.concurrency = 3;
  std::vector<UsageTarget> targets;
  for (int i = 0; i < 40; ++i) targets.push_back({"n" + std::to_string(i), "10.0.0.1"});
  UsageCollector c(
      o, [&] { return targets; },
      [&](const std::string&, std::chrono::milliseconds) -> Result<std::string> {
        const int now = ++in_flight;
        for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {
        }
        ++calls;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        --in_flight;
        return Error{"timed out"};
      });
  c.RunRound();
  EXPECT_EQ(calls.load(), 40);
  EXPECT_LE(most.load(), 3);
  auto s = c.Snapshot();
  EXPECT_EQ(s->nodes.size(), 40u);
  EXPECT_EQ(s->nodes.at("n7").error, "timed out");
}

TEST(UsageCollectorTest, NodeUrlFillsTheTemplate) {
  UsageOptions o;
  o.node_url_template = "https://{address}:9394/metrics?node={node}";
  UsageCollector c(o, [] { return std::vector<UsageTarget>{}; });
  EXPECT_EQ(c.NodeUrl({"n1", "10.1.2.3"}), "https://10.1.2.3:9394/metrics?node=n1");
  EXPECT_EQ(c.NodeUrl({"n1", "fd00::1"}), "https://[fd00::1]:9394/metrics?node=n1");
  EXPECT_EQ(c.NodeUrl({"n1", ""}), "");
}

TEST(DashboardAssetsTest, EveryPageAndScriptIsInTheBinary) {
  for (const char* path : {"/index.html", "/app.js", "/style.css"}) {
    const Asset* a = FindAsset(path);
    ASSERT_NE(a, nullptr) << path;
    EXPECT_FALSE(a->body.empty());
    // Nothing names another origin (the SVG namespace is a name, never fetched).
    std::string body(a->body);
    for (size_t at; (at = body.find("http://www.w3.org/2000/svg")) != std::string::npos;) body.erase(at, 26);
    EXPECT_EQ(body.find("http://"), std::string::npos) << path;
    EXPECT_EQ(body.find("https://"), std::string::npos) << path;
    EXPECT_EQ(body.find("//cdn"), std::string::npos) << path;
  }
  EXPECT_EQ(FindAsset("/nope.js"), nullptr);
}

}  // namespace
}  // namespace tessera::scheduler::dashboard
