// deploy/monitoring's alert and dashboard expressions, evaluated by a real Prometheus
// (Debian's) scraping the stand-in cluster: the real tessera-node on the simulated GPUs
// (kubelet and API-server stand-ins, a "container" running through libvgpu) and
// tessera-scheduler's code serving its /metrics. Each expression is read from the
// files in deploy/monitoring, so what is tested is what is shipped; the state is
// set up so that each alert's expression must return a known answer:
//  - a slice at 96% of its memory limit -> TesseraSliceAtMemoryLimit names it;
//  - an allocation refused once scraping runs -> TesseraOomRefusals names it;
//  - a critical XID on GPU 1 -> TesseraGpuUnhealthy names GPU 1, not GPU 0;
//  - a node whose inventory heartbeat is years old -> TesseraInventoryStale = 1;
//  - and nothing for the alerts whose condition the cluster does not meet.
#include <gtest/gtest.h>
#include <httplib.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <functional>
#include <map>
#include <regex>
#include <thread>

#include "base/testing.h"
#include "core/inventory_codec.h"
#include "prometheus/prometheus_server.h"
#include "scheduler/scheduler.h"
#include "testing/node_cluster.h"
#include "testing/scheduler_in_process.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;
using testing::PrometheusServer;

constexpr const char* kNode = "gpu-node-1";

// testing::WaitFor, polling every 100 ms rather than 10: each check is a round of
// Prometheus queries.
bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds deadline = 90s) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(100ms);
  }
  return condition();
}

// alert name (or record name) -> expression, from a PrometheusRule file.
std::map<std::string, std::string> RuleExpressions(const std::string& path) {
  std::map<std::string, std::string> out;
  YAML::Node doc = YAML::LoadFile(path);
  for (const auto& group : doc["spec"]["groups"]) {
    for (const auto& rule : group["rules"]) {
      const std::string name =
          rule["alert"] ? rule["alert"].as<std::string>() : rule["record"].as<std::string>();
      out[name] = rule["expr"].as<std::string>();
    }
  }
  return out;
}

// Every target expression of the dashboard, with Grafana's variables as Grafana would fill them.
std::vector<std::pair<std::string, std::string>> DashboardExpressions(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> out;
  const Json dashboard = Json::parse(testing::ReadFileOrEmpty(path));
  for (const Json& panel : dashboard["panels"]) {
    for (const Json& target : panel.value("targets", Json::array())) {
      std::string expr = target["expr"].get<std::string>();
      expr = std::regex_replace(expr, std::regex("\\$__rate_interval"), "30s");
      expr = std::regex_replace(expr, std::regex("\"\\$node\""), "\".*\"");
      out.emplace_back(panel["title"].get<std::string>(), expr);
    }
  }
  return out;
}

class MonitoringClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PrometheusServer::Available()) GTEST_SKIP() << PrometheusServer::NotAvailableMessage();
    if (!testing::MountNamespacesWork())
      GTEST_SKIP() << "cannot create mount namespaces here (needs root / CAP_SYS_ADMIN)";
    auto gpus = cluster_.Start();
    ASSERT_TRUE(gpus.ok()) << gpus.error().message;
    ASSERT_EQ(gpus->size(), 2u);
    gpus_ = *gpus;
  }

  void TearDown() override {
    if (prometheus_) prometheus_->Stop();
    if (scheduler_) scheduler_->Stop();
    cluster_.Stop();
    if (HasFailure()) std::cerr << "tessera-node log:\n" << cluster_.NodeLog() << "\n";
  }

  void StartNode() {
    ASSERT_TRUE(cluster_.StartNode({{"--heartbeat-seconds", "1"}}).ok());
    ASSERT_TRUE(cluster_.kubelet().WaitForRegistrations(1, 60s)) << cluster_.NodeLog();
  }

  void StartScheduler() {
    scheduler::SchedulerConfig config = testing::LoopbackSchedulerConfig("monitoring-test");
    config.inventory_stale = 30s;
    auto started = testing::StartReadyScheduler(config, testing::ClientOfApiServer(cluster_.api().url()));
    ASSERT_TRUE(started.ok()) << started.error().message;
    scheduler_ = std::move(started).value();
  }

  // A GPU node whose agent last published long ago.
  void AddNodeWithOldHeartbeat() {
    core::NodeInventory inventory;
    inventory.node = "old-node";
    inventory.heartbeat = "2020-01-01T00:00:00Z";
    core::Gpu gpu;
    gpu.uuid = "GPU-99999999-aaaa-bbbb-cccc-dddddddddddd";
    gpu.model = "NVIDIA A100-SXM4-80GB";
    gpu.memory_mib = 81920;
    inventory.gpus.push_back(gpu);
    Json node = {
        {"metadata",
         {{"name", "old-node"},
          {"annotations", {{std::string(core::kInventoryAnnotation), *core::EncodeInventory(inventory)}}}}}};
    ASSERT_TRUE(cluster_.api().CreateObject("nodes", node).ok());
  }

  // The pod as tessera-scheduler's bind leaves it: container "main", `mib` MiB on GPU 0.
  std::string BindPod(const std::string& name, int64_t mib) {
    auto text = cluster_.BindPod("ml", name, {{gpus_[0].uuid, mib, 30}});
    EXPECT_TRUE(text.ok()) << text.error().message;
    return text.ok() ? *text : "";
  }

  // The kubelet admits the container through tessera's plugin; a process runs in it
  // (its own mount namespace, the region bind-mounted, libvgpu preloaded) doing `probe_args`.
  void RunContainer(const std::string& pod, const std::string& allocation, const std::string& probe_args) {
    v1beta1::ContainerAllocateResponse allocated;
    auto status = cluster_.kubelet().AdmitContainer("ml", pod, "main", {gpus_[0].uuid + "::0"}, &allocated);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_FALSE(cluster_.RegionHostDir(allocated).empty());
    // No context overhead: the slice's use is exactly what the probe allocates.
    const pid_t pid =
        cluster_.StartContainer({.allocated = &allocated,
                                 .allocation = allocation,
                                 .env = {{"TESSERA_CONTEXT_OVERHEAD", "0"}},
                                 .command_line = std::string(TESSERA_VGPU_PROBE) + " " + probe_args,
                                 .output = cluster_.Path(pod + ".out")});
    ASSERT_GT(pid, 0);
  }

  void StartPrometheus() {
    testing::PrometheusOptions options;
    options.targets = {{"127.0.0.1:" + std::to_string(cluster_.metrics_port()), "/metrics", "tessera-node"},
                       {"127.0.0.1:" + std::to_string(scheduler_->port()), "/metrics", "tessera-scheduler"}};
    auto started = PrometheusServer::Start(options);
    ASSERT_TRUE(started.ok()) << started.error().message;
    prometheus_ = std::move(started).value();
  }

  // The series an expression returns now; fails the test on a query error.
  Json Eval(const std::string& expr) {
    auto result = prometheus_->Query(expr);
    EXPECT_TRUE(result.ok()) << expr << ": " << (result.ok() ? "" : result.error().message);
    return result.ok() ? *result : Json::array();
  }

  // Waits until `expr` returns exactly the series `want` says it should (by one label).
  bool WaitForSeriesWith(const std::string& expr, const std::string& label, const std::string& value) {
    return WaitFor([&] {
      Json r = Eval(expr);
      return r.size() == 1 && r[0]["metric"].value(label, "") == value;
    });
  }

  void Poke(int times) {
    httplib::Client http("127.0.0.1", scheduler_->port());
    Json pod = {
        {"metadata", {{"name", "p"}, {"namespace", "ml"}, {"uid", "u1"}}},
        {"spec",
         {{"containers",
           {{{"name", "main"},
             {"resources", {{"limits", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}}}}}}}}}};
    Json args = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", {kNode}}};
    for (int i = 0; i < times; ++i) http.Post("/filter", args.dump(), "application/json");
  }

  testing::NodeCluster cluster_{{.libvgpu = TESSERA_VGPU_LIB, .temp_prefix = "tmon"}};
  std::vector<core::Gpu> gpus_;
  std::unique_ptr<scheduler::Scheduler> scheduler_;
  std::unique_ptr<PrometheusServer> prometheus_;
};

TEST_F(MonitoringClusterTest, AlertAndDashboardExpressionsReturnWhatTheClusterStateImplies) {
  const auto alerts =
      RuleExpressions(std::string(TESSERA_SOURCE_DIR) + "/deploy/monitoring/prometheus-rules.yaml");
  ASSERT_EQ(alerts.size(), 11u);
  AddNodeWithOldHeartbeat();
  StartNode();
  StartScheduler();
  // A 1000 MiB slice; the container takes 960 MiB, then waits for the barrier file before
  // asking for 100 MiB more, which libvgpu must refuse.
  const std::string allocation = BindPod("full", 1000);
  const std::string barrier = cluster_.Path("go");
  RunContainer("full", allocation, "init ctx:0 alloc:960 waitfile:" + barrier + " alloc:100 hold");
  StartPrometheus();
  Poke(20);

  // The slice at 96% of its limit.
  ASSERT_TRUE(WaitForSeriesWith(alerts.at("TesseraSliceAtMemoryLimit"), "pod", "full"))
      << prometheus_->Diagnostics() << cluster_.dir().Read("full.out");
  Json at_limit = Eval(alerts.at("TesseraSliceAtMemoryLimit"));
  EXPECT_NEAR(std::stod(at_limit[0]["value"][1].get<std::string>()), 0.96, 1e-9);
  EXPECT_EQ(at_limit[0]["metric"]["gpu_uuid"], gpus_[0].uuid);

  // No refusal yet: the counter is scraped at 0 first, so its increase is the refusal itself.
  ASSERT_TRUE(
      WaitFor([&] { return Eval("tessera_container_oom_refusals_total{pod=\"full\"} == 0").size() == 1; }));
  EXPECT_TRUE(Eval(alerts.at("TesseraOomRefusals")).empty());
  std::ofstream(barrier).put('\n');
  ASSERT_TRUE(WaitForSeriesWith(alerts.at("TesseraOomRefusals"), "pod", "full"))
      << prometheus_->Diagnostics() << cluster_.dir().Read("full.out");

  // The old node's inventory is stale in tessera-scheduler's view; gpu-node-1's is not.
  ASSERT_TRUE(WaitFor([&] {
    Json r = Eval(alerts.at("TesseraInventoryStale"));
    return r.size() == 1 && r[0]["value"][1] == "1";
  })) << prometheus_->Diagnostics();

  // Healthy GPUs: nothing; a critical XID on GPU 1: GPU 1 alone.
  EXPECT_TRUE(Eval(alerts.at("TesseraGpuUnhealthy")).empty());
  const auto injected = cluster_.RunCli("sim inject-xid --gpu 1 --xid 79");
  ASSERT_EQ(injected.exit_code, 0) << injected.output;
  ASSERT_TRUE(WaitForSeriesWith(alerts.at("TesseraGpuUnhealthy"), "gpu_uuid", gpus_[1].uuid))
      << prometheus_->Diagnostics();

  // What the cluster does not do, the alerts do not say: no overcommit, no kills, no failed
  // publishing, no extender errors. The latency alerts evaluate (their thresholds are about
  // wall time, which a test does not judge); the dashboard's latency panel shows a mean.
  for (const char* quiet : {"TesseraGpuOvercommitted", "TesseraEnforcementKills",
                            "TesseraInventoryNotPublished", "TesseraExtenderErrors"}) {
    EXPECT_TRUE(Eval(alerts.at(quiet)).empty()) << quiet << ": " << Eval(alerts.at(quiet)).dump();
  }
  for (const char* slow :
       {"TesseraExtenderFilterSlow", "TesseraExtenderPrioritizeSlow", "TesseraExtenderBindSlow"}) {
    Eval(alerts.at(slow));
  }

  // Every dashboard expression evaluates; the ones about this cluster's state show it.
  const auto panels =
      DashboardExpressions(std::string(TESSERA_SOURCE_DIR) + "/deploy/monitoring/grafana-dashboard.json");
  ASSERT_GE(panels.size(), 20u);
  // Each panel's series, all its targets together; the filter's mean latency on its own.
  std::map<std::string, Json> by_title;
  Json filter_latency;
  Poke(20);
  ASSERT_TRUE(WaitFor([&] {
    by_title.clear();
    for (const auto& [title, expr] : panels) {
      Json& all = by_title[title];
      if (all.is_null()) all = Json::array();
      for (const Json& series : Eval(expr)) all.push_back(series);
      if (title == "Extender mean latency" && expr.find("filter") != std::string::npos)
        filter_latency = Eval(expr);
    }
    return filter_latency.size() == 1 && filter_latency[0]["value"][1] != "NaN" &&
           by_title["OOM refusals"].size() == 1;
  })) << prometheus_->Diagnostics();
  EXPECT_GT(std::stod(filter_latency[0]["value"][1].get<std::string>()), 0.0);
  EXPECT_EQ(by_title["Per GPU"].size(), 2u * 6u) << "6 targets x the 2 GPUs of gpu-node-1";
  ASSERT_EQ(by_title["Unhealthy GPUs"].size(), 1u);
  EXPECT_EQ(by_title["Unhealthy GPUs"][0]["value"][1], "1");
  ASSERT_EQ(by_title["Stale inventories"].size(), 1u);
  EXPECT_EQ(by_title["Stale inventories"][0]["value"][1], "1");
  ASSERT_EQ(by_title["Memory used of limit"].size(), 1u);
  EXPECT_EQ(by_title["Memory used of limit"][0]["metric"]["node"], kNode);
  EXPECT_EQ(by_title["Memory used of limit"][0]["metric"]["pod"], "full");
  EXPECT_EQ(by_title["Inventory heartbeat age"].size(), 1u);
}

TEST_F(MonitoringClusterTest, HamiNamesCarryTesseraValuesUnderHamiLabels) {
  auto rules = RuleExpressions(std::string(TESSERA_SOURCE_DIR) + "/deploy/monitoring/hami-compat-rules.yaml");
  const std::string helper = "(" + rules.at("tessera:hami_gpu_labels") + ")";
  StartNode();
  StartScheduler();
  const std::string allocation = BindPod("train", 2000);
  RunContainer("train", allocation, "init ctx:0 alloc:500 hold");
  StartPrometheus();
  // The rules as Prometheus evaluates them in order: the helper's series substituted inline.
  auto expr = [&](const std::string& record) {
    std::string text = rules.at(record);  // not std::regex_replace: the helper's "$1" must stay as it is
    const std::string name = "tessera:hami_gpu_labels";
    for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + helper.size())) {
      text.replace(at, name.size(), helper);
    }
    return text;
  };
  ASSERT_TRUE(WaitFor([&] { return Eval(expr("vGPU_device_memory_limit_in_bytes")).size() == 1; }))
      << prometheus_->Diagnostics();
  Json limit = Eval(expr("vGPU_device_memory_limit_in_bytes"))[0];
  EXPECT_EQ(limit["metric"]["podnamespace"], "ml");
  EXPECT_EQ(limit["metric"]["podname"], "train");
  EXPECT_EQ(limit["metric"]["ctrname"], "main");
  EXPECT_EQ(limit["metric"]["deviceuuid"], gpus_[0].uuid);
  EXPECT_EQ(limit["value"][1], std::to_string(2000LL * 1024 * 1024));

  ASSERT_TRUE(WaitFor([&] { return Eval(expr("GPUDeviceMemoryAllocated")).size() == 2; }));
  for (const Json& gpu : Eval(expr("GPUDeviceMemoryAllocated"))) {
    const Json& labels = gpu["metric"];
    EXPECT_EQ(labels.value("nodeid", ""), kNode) << gpu.dump();
    const bool first = labels.value("deviceuuid", "") == gpus_[0].uuid;
    EXPECT_EQ(labels.value("deviceidx", ""), first ? "0" : "1") << gpu.dump();
    EXPECT_EQ(gpu["value"][1], first ? std::to_string(2000LL * 1024 * 1024) : "0");
  }
  Json host = Eval(expr("HostGPUMemoryUsage"));
  ASSERT_EQ(host.size(), 2u);
  EXPECT_EQ(host[0]["metric"].value("devicetype", ""), "NVIDIA-" + gpus_[0].model) << host.dump();
  for (const auto& [record, text] : rules) {
    if (record.find(':') == std::string::npos) {
      EXPECT_FALSE(Eval(expr(record)).empty()) << record;
    }
  }
}

}  // namespace
}  // namespace tessera
