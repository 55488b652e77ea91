// tessera-node in a (stand-in) cluster: the real binary on the simulated GPUs,
// registered with the kubelet stand-in (device plugin + PodResources), talking
// to the API-server stand-in, scraped by a real Prometheus. Covers the node
// half of the design end to end:
//  - the inventory annotation and labels are published, carry a heartbeat, are
//    consumed by the scheduler's own code (a filter call over HTTP), and follow
//    a GPU turning unhealthy on an injected XID;
//  - a container's region is tied to its pod through the kubelet's PodResources
//    and shows in the metrics with pod labels, which Prometheus scrapes;
//  - a process that bypasses libvgpu and takes its container over the limit
//    the scheduler allocated is killed, with an Event on the pod;
//  - the region of a pod that is gone is removed.
// "Containers" are real processes in their own mount namespace with the region
// directory bind-mounted where Allocate said, as a container runtime does.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "apiserver/fake_apiserver.h"
#include "base/testing.h"
#include "core/allocation_codec.h"
#include "core/inventory_codec.h"
#include "host/region_reader.h"
#include "kubelet_standin.h"
#include "node/inventory_publisher.h"
#include "prometheus/prometheus_server.h"
#include "scheduler/scheduler.h"
#include "testing/node_cluster.h"
#include "testing/process.h"
#include "testing/scheduler_in_process.h"

namespace tessera::node {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Json = nlohmann::json;
using tessera::testing::FakeApiServer;
using tessera::testing::KubeletStandIn;

constexpr const char* kNode = "gpu-node-1";

using ::tessera::testing::NodeCluster;
using ::tessera::testing::WaitFor;

// `command`'s output (stdout and stderr), through /bin/sh.
std::string RunShell(const std::string& command) {
  return ::tessera::testing::RunShell(command).output;
}

class NodeClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto gpus = cluster_.Start();  // as NVML (the simulator's) reports them
    ASSERT_TRUE(gpus.ok()) << gpus.error().message;
    ASSERT_EQ(gpus->size(), 2u);
    gpus_ = *gpus;
  }

  void TearDown() override {
    cluster_.Stop();
    if (HasFailure()) std::cerr << "tessera-node log:\n" << NodeLog() << std::endl;
  }

  // Starts the binary with the test's settings; `overrides` replaces or adds flags.
  void StartNode(std::map<std::string, std::string> overrides = {}) {
    ASSERT_TRUE(cluster_.StartNode(overrides).ok());
    ASSERT_TRUE(cluster_.kubelet().WaitForRegistrations(1, 60s)) << NodeLog();
  }

  std::string NodeLog() const { return cluster_.NodeLog(); }

  std::optional<core::NodeInventory> PublishedInventory() const { return cluster_.PublishedInventory(); }

  // The scheduler's own code (no leader election) against the API-server
  // stand-in, started and ready; null (and a failure) when it is not.
  std::unique_ptr<scheduler::Scheduler> StartScheduler() {
    auto scheduler = ::tessera::testing::StartReadyScheduler(
        ::tessera::testing::LoopbackSchedulerConfig("it"),
        ::tessera::testing::ClientOfApiServer(cluster_.api().url(), {}, std::chrono::milliseconds(5000),
                                              "tessera-scheduler-beside-the-node"));
    if (!scheduler.ok()) {
      ADD_FAILURE() << scheduler.error().message;
      return nullptr;
    }
    return std::move(scheduler).value();
  }

  // A pod whose one container asks for two GPUs of `memory_mib` each.
  static Json PodOfTwoGpus(const std::string& memory_mib) {
    return {
        {"metadata", {{"name", "p"}, {"namespace", "ml"}, {"uid", "u1"}}},
        {"spec",
         {{"containers",
           {{{"name", "main"},
             {"resources", {{"limits", {{"nvidia.com/gpu", "2"}, {"nvidia.com/gpumem", memory_mib}}}}}}}}}}};
  }

  // The extender's /filter answer for `pod` on this node, as kube-scheduler
  // asks it (null when there is none).
  static Json Filter(const scheduler::Scheduler& scheduler, const Json& pod) {
    httplib::Client http("127.0.0.1", scheduler.port());
    const Json args = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", {kNode}}};
    auto res = http.Post("/filter", args.dump(), "application/json");
    return res ? Json::parse(res->body, nullptr, false) : Json();
  }

  // Metrics are published at the end of each monitor pass: wait for a line.
  bool MetricsShow(const std::string& text) const {
    return WaitFor([&] { return Metrics().find(text) != std::string::npos; });
  }

  std::string Metrics() const {
    httplib::Client http("127.0.0.1", cluster_.metrics_port());
    http.set_connection_timeout(2);
    auto res = http.Get("/metrics");
    return res && res->status == 200 ? res->body : "";
  }

  // The pod the scheduler would have bound here: its allocation annotation
  // gives container "main" `mib` MiB on GPU 0.
  std::string BindPod(const std::string& name, int64_t mib) {
    return BindPodWith(name, {{gpus_[0].uuid, mib, 30}});
  }

  // The same with container "main"'s slices given.
  std::string BindPodWith(const std::string& name, std::vector<core::DeviceSlice> slices) {
    auto text = cluster_.BindPod("ml", name, std::move(slices));
    EXPECT_TRUE(text.ok()) << text.error().message;
    return text.ok() ? *text : "";
  }

  // A GPU pod bound here by someone else than tessera-scheduler: no
  // allocation annotation, one container asking for one nvidia.com/gpu.
  void BindUnplacedPod(const std::string& name) {
    Json pod = {
        {"metadata", {{"name", name}, {"namespace", "ml"}}},
        {"spec",
         {{"nodeName", kNode},
          {"containers",
           {{{"name", "main"}, {"image", "cuda"}, {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}}}}},
        {"status", {{"phase", "Running"}}}};
    EXPECT_TRUE(cluster_.api().CreateObject("pods", pod).ok());
  }

  // The events with this reason, by the pod they are about.
  std::map<std::string, Json> EventsFor(const std::string& reason) const {
    std::map<std::string, Json> out;
    for (const Json& e : cluster_.api().ListObjects("events")) {
      if (e.value("reason", "") == reason) out[e["involvedObject"].value("name", "")] = e;
    }
    return out;
  }

  // The probe's output file once it holds `text` (or what it holds at the deadline).
  std::string OutputOnce(const std::string& path, const std::string& text) {
    std::string content;
    WaitFor([&] {
      std::ifstream in(path);
      content.assign(std::istreambuf_iterator<char>(in), {});
      return content.find(text) != std::string::npos;
    });
    return content;
  }

  // The kubelet admits the pod's container: Allocate through tessera's plugin.
  v1beta1::ContainerAllocateResponse Admit(const std::string& pod, int gpu = 0) {
    v1beta1::ContainerAllocateResponse response;
    auto status = cluster_.kubelet().AdmitContainer("ml", pod, "main", {gpus_[gpu].uuid + "::0"}, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  // Starts a "container" process (NodeCluster::StartContainer) running
  // vgpu_probe with `probe_args`, with the environment the kubelet (plugin env)
  // and the webhook (Downward API) give (no TESSERA_ALLOCATION when
  // `allocation` is empty: a pod the webhook never saw); `preload` whether
  // libvgpu is loaded.
  pid_t StartContainerProcess(const v1beta1::ContainerAllocateResponse& allocated,
                              const std::string& allocation, bool preload, const std::string& probe_args,
                              const std::string& out, bool own_pid_namespace = false) {
    EXPECT_FALSE(cluster_.RegionHostDir(allocated).empty());
    return cluster_.StartContainer({.allocated = &allocated,
                                    .allocation = allocation,
                                    .env = {{"ACTIVE_OOM_KILLER", "true"}},
                                    .preload_libvgpu = preload,
                                    .command_line = std::string(TESSERA_VGPU_PROBE) + " " + probe_args,
                                    .output = out,
                                    .own_pid_namespace = own_pid_namespace});
  }

  static bool NamespacesWork() { return ::tessera::testing::MountNamespacesWork(); }

  NodeCluster cluster_{{.sim_gpus = "2xA100-80GB", .libvgpu = TESSERA_VGPU_LIB}};
  const std::string root_ = cluster_.root();
  std::vector<core::Gpu> gpus_;
};

TEST_F(NodeClusterTest, PublishesTheInventoryTheSchedulerPlacesOnAndFollowsHealth) {
  StartNode();
  ASSERT_TRUE(WaitFor([&] { return PublishedInventory().has_value(); })) << NodeLog();
  auto inventory = *PublishedInventory();
  EXPECT_EQ(inventory.node, kNode);
  ASSERT_EQ(inventory.gpus.size(), 2u);
  EXPECT_EQ(inventory.gpus[0].uuid, gpus_[0].uuid);
  EXPECT_EQ(inventory.gpus[0].slots, 4);
  EXPECT_EQ(inventory.gpus[0].memory_mib, gpus_[0].memory_mib);
  EXPECT_TRUE(inventory.gpus[0].healthy);
  // The labels follow the annotation in a second request.
  ASSERT_TRUE(WaitFor([&] {
    auto node = cluster_.api().GetObject("nodes", "", kNode);
    return node && node->value("/metadata/labels"_json_pointer, Json::object()).contains(kGpuCountLabel);
  }));
  auto node = cluster_.api().GetObject("nodes", "", kNode);
  EXPECT_EQ((*node)["metadata"]["labels"][kGpuProductLabel], "NVIDIA-A100-SXM4-80GB");
  EXPECT_EQ((*node)["metadata"]["labels"][kGpuCountLabel], "2");

  // The heartbeat moves on without any change.
  const std::string first_heartbeat = inventory.heartbeat;
  EXPECT_TRUE(WaitFor([&] {
    auto now = PublishedInventory();
    return now && now->heartbeat != first_heartbeat;
  }));

  // The scheduler's own code places a GPU pod on the published GPUs.
  auto scheduler = StartScheduler();
  ASSERT_TRUE(scheduler);
  const Json pod = PodOfTwoGpus("20000");
  auto filter = [&] { return Filter(*scheduler, pod); };
  ASSERT_TRUE(WaitFor([&] {
    Json r = filter();
    return r.is_object() && r["NodeNames"].is_array() && r["NodeNames"].size() == 1;
  })) << filter().dump();

  // A critical XID on GPU 1: within seconds the annotation says so, and the
  // scheduler no longer finds two GPUs for the pod here.
  std::string out = cluster_.RunCli("sim inject-xid --gpu 1 --xid 79").output;
  ASSERT_TRUE(WaitFor([&] {
    auto now = PublishedInventory();
    return now && !now->gpus[1].healthy && now->gpus[0].healthy;
  })) << out
      << NodeLog();
  ASSERT_TRUE(WaitFor([&] {
    Json r = filter();
    return r.is_object() && r["FailedNodes"].contains(kNode);
  })) << filter().dump();
  EXPECT_NE(filter()["FailedNodes"][kNode].get<std::string>().find("unhealthy"), std::string::npos)
      << filter().dump();
  scheduler->Stop();
}

TEST_F(NodeClusterTest, APublishFailureIsRetriedAndTheApiServerRecoveryPicksItUp) {
  cluster_.api().AddFault(
      {testing::Fault::Kind::kStatus, "PATCH", "/nodes/", testing::Fault::Applies::kAll, 503});
  StartNode();
  ASSERT_TRUE(
      WaitFor([&] { return NodeLog().find("cannot publish the GPU inventory") != std::string::npos; }));
  EXPECT_FALSE(PublishedInventory().has_value());
  cluster_.api().ClearFaults();
  ASSERT_TRUE(WaitFor([&] { return PublishedInventory().has_value(); })) << NodeLog();
  EXPECT_EQ(Metrics().find("tessera_node_inventory_publish_errors_total 0\n"), std::string::npos)
      << Metrics();
  EXPECT_NE(Metrics().find("tessera_node_inventory_publish_errors_total "), std::string::npos) << Metrics();
}

TEST_F(NodeClusterTest, ContainersAreAttributedMeteredAndScrapedByPrometheus) {
  if (!NamespacesWork()) GTEST_SKIP() << "cannot create mount namespaces here (needs root / CAP_SYS_ADMIN)";
  if (!testing::PrometheusServer::Available())
    GTEST_SKIP() << testing::PrometheusServer::NotAvailableMessage();
  StartNode();
  const std::string allocation = BindPod("train", 4000);
  auto allocated = Admit("train");
  StartContainerProcess(allocated, allocation, true, "init ctx:0 alloc:1000 hold", root_ + "/a.out");

  // The agent ties the region to ml/train/main and meters it.
  const std::string labels =
      "namespace=\"ml\",pod=\"train\",container=\"main\",gpu_uuid=\"" + gpus_[0].uuid + "\"";
  ASSERT_TRUE(MetricsShow("tessera_container_memory_limit_bytes{" + labels)) << Metrics() << NodeLog();
  EXPECT_TRUE(
      MetricsShow("tessera_gpu_allocated_memory_bytes{gpu_uuid=\"" + gpus_[0].uuid + "\"} 4194304000\n"))
      << Metrics();

  // A real Prometheus scrapes the endpoint and answers a query on it.
  testing::PrometheusOptions options;
  options.targets = {{"127.0.0.1:" + std::to_string(cluster_.metrics_port())}};
  auto prometheus = testing::PrometheusServer::Start(options);
  ASSERT_TRUE(prometheus.ok()) << prometheus.error().message;
  Json series;
  ASSERT_TRUE((*prometheus)
                  ->WaitForSeries("tessera_container_memory_used_bytes{pod=\"train\",container=\"main\"}",
                                  60s, &series))
      << (*prometheus)->Diagnostics();
  ASSERT_EQ(series.size(), 1u) << series.dump();
  EXPECT_EQ(series[0]["metric"]["namespace"], "ml");
  EXPECT_EQ(series[0]["metric"]["gpu_uuid"], gpus_[0].uuid);
  const double used = std::stod(series[0]["value"][1].get<std::string>());
  EXPECT_GE(used, 1000.0 * 1024 * 1024) << "1000 MiB allocated, plus the context";
  EXPECT_LE(used, 4000.0 * 1024 * 1024);
  ASSERT_TRUE((*prometheus)->WaitForSeries("tessera_gpu_memory_total_bytes", 60s, &series));
  EXPECT_EQ(series.size(), 2u);
}

TEST_F(NodeClusterTest, AProcessThatBypassesLibvgpuIsKilledAndThePodGetsAnEvent) {
  if (!NamespacesWork()) GTEST_SKIP() << "cannot create mount namespaces here (needs root / CAP_SYS_ADMIN)";
  StartNode();
  const std::string allocation = BindPod("train", 4000);
  auto allocated = Admit("train");
  // Through libvgpu: 1000 MiB, within the limit. Then, in the same container,
  // a process without the library takes 4000 MiB more.
  pid_t honest =
      StartContainerProcess(allocated, allocation, true, "init ctx:0 alloc:1000 hold", root_ + "/a.out");
  ASSERT_TRUE(WaitFor([&] {
    std::ifstream in(root_ + "/a.out");
    return std::string(std::istreambuf_iterator<char>(in), {}).find("holding") != std::string::npos;
  }));
  pid_t bypass =
      StartContainerProcess(allocated, allocation, false, "init ctx:0 alloc:4000 hold", root_ + "/b.out");

  int status = 0;
  ASSERT_TRUE(WaitFor([&] { return ::waitpid(bypass, &status, WNOHANG) == bypass; })) << NodeLog();
  cluster_.ForgetContainer(bypass);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_EQ(::waitpid(honest, &status, WNOHANG), 0) << "the process within the limit keeps running";

  ASSERT_TRUE(WaitFor([&] {
    for (const Json& e : cluster_.api().ListObjects("events")) {
      if (e.value("reason", "") == "GPUMemoryLimitKill") return true;
    }
    return false;
  })) << NodeLog();
  for (const Json& e : cluster_.api().ListObjects("events")) {
    if (e.value("reason", "") != "GPUMemoryLimitKill") continue;
    EXPECT_EQ(e["involvedObject"]["kind"], "Pod");
    EXPECT_EQ(e["involvedObject"]["name"], "train");
    EXPECT_EQ(e["involvedObject"]["namespace"], "ml");
    EXPECT_EQ(e["type"], "Warning");
    const std::string message = e.value("message", "");
    EXPECT_NE(message.find("over its limit of 4000 MiB (from its allocation)"), std::string::npos) << message;
    EXPECT_NE(message.find("0 MiB of it seen by libvgpu"), std::string::npos) << message;
  }
  EXPECT_TRUE(MetricsShow("tessera_node_enforcement_kills_total 1\n")) << Metrics();
}

// The gauges show what the scheduler allocated, overcommit included: a pod
// that does not fit beside the others is neither dropped from the gauges nor
// allowed to hide the pods on other GPUs, and the overcommit is reported.
TEST_F(NodeClusterTest, AnOvercommitIsShownByTheGaugesAndReported) {
  StartNode();
  const int64_t offered = gpus_[0].memory_mib;
  BindPodWith("big", {{gpus_[0].uuid, offered - 1361, 50}});
  BindPodWith("two", {{gpus_[0].uuid, 1000, 10}, {gpus_[1].uuid, 1000, 10}});
  const std::string gpu0 = "{gpu_uuid=\"" + gpus_[0].uuid + "\"} ";
  const std::string gpu1 = "{gpu_uuid=\"" + gpus_[1].uuid + "\"} ";
  ASSERT_TRUE(MetricsShow("tessera_gpu_slots_used" + gpu0 + "2\n")) << Metrics() << NodeLog();
  EXPECT_NE(Metrics().find("tessera_gpu_overcommitted" + gpu0 + "0\n"), std::string::npos) << Metrics();

  BindPodWith("late", {{gpus_[0].uuid, 1000, 10}});
  const int64_t total_mib = offered - 1361 + 2000;
  ASSERT_TRUE(MetricsShow("tessera_gpu_allocated_memory_bytes" + gpu0 +
                          std::to_string(total_mib * 1024 * 1024) + "\n"))
      << Metrics();
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find("tessera_gpu_slots_used" + gpu0 + "3\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("tessera_gpu_allocated_cores_percent" + gpu0 + "70\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("tessera_gpu_overcommitted" + gpu0 + "1\n"), std::string::npos) << metrics;
  // GPU 1 is not overcommitted and keeps showing "two"'s slice.
  EXPECT_NE(metrics.find("tessera_gpu_allocated_memory_bytes" + gpu1 + "1048576000\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("tessera_gpu_slots_used" + gpu1 + "1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("tessera_gpu_overcommitted" + gpu1 + "0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("tessera_node_gpu_overcommits_total 1\n"), std::string::npos) << metrics;

  // An Event on each pod with a slice on the GPU, once, and an error line.
  std::set<std::string> told;
  ASSERT_TRUE(WaitFor([&] {
    told.clear();
    for (const Json& e : cluster_.api().ListObjects("events")) {
      if (e.value("reason", "") != "GPUOvercommitted") continue;
      told.insert(e["involvedObject"].value("name", ""));
      EXPECT_FALSE(e["involvedObject"].contains("fieldPath")) << e.dump();
      const std::string message = e.value("message", "");
      EXPECT_NE(message.find(std::to_string(total_mib) + " MiB allocated of " + std::to_string(offered)),
                std::string::npos)
          << message;
    }
    return told.size() == 3;
  })) << NodeLog();
  EXPECT_EQ(told, (std::set<std::string>{"big", "two", "late"}));
  EXPECT_NE(NodeLog().find("GPU " + gpus_[0].uuid + " is overcommitted"), std::string::npos) << NodeLog();

  // Deleting the pod that overcommitted ends the episode.
  ASSERT_TRUE(cluster_.api().DeleteObject("pods", "ml", "late").ok());
  ASSERT_TRUE(MetricsShow("tessera_gpu_overcommitted" + gpu0 + "0\n")) << Metrics();
  EXPECT_NE(NodeLog().find("GPU " + gpus_[0].uuid + " is no longer overcommitted"), std::string::npos);
}

// A GPU pod tessera-scheduler did not place, under the default policy
// (unplaced_pods: refuse): its container sees no GPU through libvgpu, the pod
// gets an Event saying why, and the agent counts it.
TEST_F(NodeClusterTest, APodTesseraDidNotPlaceIsRefusedItsGpusAndTold) {
  if (!NamespacesWork()) GTEST_SKIP() << "cannot create mount namespaces here (needs root / CAP_SYS_ADMIN)";
  StartNode();
  BindUnplacedPod("legacy");
  auto allocated = Admit("legacy", 1);
  EXPECT_EQ(allocated.envs().at("TESSERA_UNPLACED_PODS"), "refuse");
  StartContainerProcess(allocated, "", true, "init count", root_ + "/a.out");
  const std::string out = OutputOnce(root_ + "/a.out", "count ");
  EXPECT_NE(out.find("count 0 0"), std::string::npos) << out;
  EXPECT_NE(out.find("tessera-scheduler did not place this container's pod"), std::string::npos) << out;

  ASSERT_TRUE(WaitFor([&] { return EventsFor("UnplacedGPUPod").count("legacy") == 1; })) << NodeLog();
  const std::string message = EventsFor("UnplacedGPUPod")["legacy"].value("message", "");
  EXPECT_NE(message.find("under unplaced_pods: refuse its containers see no GPU"), std::string::npos)
      << message;
  EXPECT_TRUE(MetricsShow("tessera_node_unplaced_gpu_pods 1\n")) << Metrics();
  EXPECT_EQ(Metrics().find("tessera_gpu_held_by_unplaced_pod{gpu_uuid=\"" + gpus_[0].uuid + "\"} 1"),
            std::string::npos);

  // A pod the scheduler placed on the same node is not affected.
  const std::string allocation = BindPod("placed", 2000);
  auto placed = Admit("placed");
  StartContainerProcess(placed, allocation, true, "init count ctx:0 alloc:1000", root_ + "/b.out");
  const std::string placed_out = OutputOnce(root_ + "/b.out", "alloc ");
  EXPECT_NE(placed_out.find("count 0 1"), std::string::npos) << placed_out;
  EXPECT_NE(placed_out.find("alloc 0"), std::string::npos) << placed_out;
  EXPECT_EQ(EventsFor("UnplacedGPUPod").count("placed"), 0u);
}

// Under unplaced_pods: whole-gpu the container gets the GPU the kubelet gave
// it, whole; the inventory says the GPU is held, and tessera-scheduler places
// nothing else there until the pod is gone.
TEST_F(NodeClusterTest, APodTesseraDidNotPlaceHoldsItsGpuWholeWhenConfigured) {
  if (!NamespacesWork()) GTEST_SKIP() << "cannot create mount namespaces here (needs root / CAP_SYS_ADMIN)";
  StartNode({{"--unplaced-pods", "whole-gpu"}});
  BindUnplacedPod("legacy");
  auto allocated = Admit("legacy", 1);
  StartContainerProcess(allocated, "", true, "init count ctx:0 alloc:60000 hold", root_ + "/a.out");
  const std::string out = OutputOnce(root_ + "/a.out", "holding");
  EXPECT_NE(out.find("count 0 1"), std::string::npos) << "only the kubelet's GPU: " << out;
  EXPECT_NE(out.find("alloc 0"), std::string::npos) << "no slice limit on it: " << out;

  ASSERT_TRUE(WaitFor([&] {
    auto inventory = PublishedInventory();
    return inventory && inventory->gpus[1].held_by == "ml/legacy" && inventory->gpus[0].held_by.empty();
  })) << NodeLog();
  EXPECT_TRUE(MetricsShow("tessera_gpu_held_by_unplaced_pod{gpu_uuid=\"" + gpus_[1].uuid + "\"} 1\n"))
      << Metrics();
  ASSERT_TRUE(WaitFor([&] { return EventsFor("UnplacedGPUPod").count("legacy") == 1; })) << NodeLog();

  // The scheduler's own code: a pod asking for both GPUs does not fit, and
  // says which pod holds the second.
  auto scheduler = StartScheduler();
  ASSERT_TRUE(scheduler);
  const Json pod = PodOfTwoGpus("1000");
  Json answer;
  ASSERT_TRUE(WaitFor([&] {
    answer = Filter(*scheduler, pod);
    return answer.is_object() && answer["FailedNodes"].contains(kNode);
  })) << answer.dump();
  EXPECT_NE(answer["FailedNodes"][kNode].get<std::string>().find(
                "held whole by pod ml/legacy, which tessera-scheduler did not place"),
            std::string::npos)
      << answer.dump();

  // The pod goes: the GPU is offered again.
  cluster_.kubelet().RemovePod("ml", "legacy");
  ASSERT_TRUE(cluster_.api().DeleteObject("pods", "ml", "legacy").ok());
  ASSERT_TRUE(WaitFor([&] {
    auto inventory = PublishedInventory();
    return inventory && inventory->gpus[1].held_by.empty();
  })) << NodeLog();
  ASSERT_TRUE(WaitFor([&] {
    answer = Filter(*scheduler, pod);
    return answer.is_object() && answer["NodeNames"].is_array() && answer["NodeNames"].size() == 1;
  })) << answer.dump();
  scheduler->Stop();
}

TEST_F(NodeClusterTest, AContainerInItsOwnPidNamespaceIsToldItsHostPid) {
  if (!NamespacesWork()) GTEST_SKIP() << "cannot create mount namespaces here (needs root / CAP_SYS_ADMIN)";
  StartNode();
  const std::string allocation = BindPod("train", 4000);
  auto allocated = Admit("train");
  StartContainerProcess(allocated, allocation, true, "init ctx:0 alloc:100 hold", root_ + "/a.out", true);
  const std::string region_file = cluster_.RegionHostDir(allocated) + "/vgpu.region";
  // libvgpu is pid 1 of its namespace and cannot learn its host pid; the
  // agent finds it through NVML and /proc and writes it into the slot.
  host::RegionSnapshot snapshot;
  ASSERT_TRUE(WaitFor([&] {
    auto read = host::ReadRegion(region_file);
    if (!read.ok() || read->processes.size() != 1 || read->processes[0].host_pid == 0) return false;
    snapshot = *read;
    return true;
  })) << NodeLog();
  EXPECT_EQ(snapshot.processes[0].pid, 1u);
  const std::string status =
      RunShell("cat /proc/" + std::to_string(snapshot.processes[0].host_pid) + "/status");
  EXPECT_NE(status.find("NSpid:\t" + std::to_string(snapshot.processes[0].host_pid) + "\t1\n"),
            std::string::npos)
      << status;
  EXPECT_TRUE(MetricsShow("tessera_node_host_pids_recorded_total 1\n")) << Metrics();
}

TEST_F(NodeClusterTest, TheRegionOfAPodThatIsGoneIsRemoved) {
  StartNode({{"--region-grace-seconds", "0"}});
  BindPod("train", 4000);
  auto allocated = Admit("train");
  const std::string region_host = cluster_.RegionHostDir(allocated);
  ASSERT_TRUE(fs::exists(region_host));
  // Still listed by the kubelet: kept however long it waits.
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(fs::exists(region_host));
  cluster_.kubelet().RemovePod("ml", "train");
  // The directory, then its record, then the pass's counters.
  ASSERT_TRUE(WaitFor([&] { return !fs::exists(region_host) && !fs::exists(region_host + ".json"); }))
      << NodeLog();
  EXPECT_TRUE(MetricsShow("tessera_node_regions_removed_total 1\n")) << Metrics();
}

TEST_F(NodeClusterTest, WithoutTheKubeletsPodResourcesNothingIsRemoved) {
  StartNode({{"--region-grace-seconds", "0"}, {"--pod-resources-socket", root_ + "/podres/missing.sock"}});
  BindPod("train", 4000);
  auto allocated = Admit("train");
  cluster_.kubelet().RemovePod("ml", "train");
  ASSERT_TRUE(WaitFor([&] { return NodeLog().find("cannot list pod resources") != std::string::npos; }));
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(fs::exists(cluster_.RegionHostDir(allocated)));
  EXPECT_TRUE(MetricsShow("tessera_node_pod_resources_up 0\n")) << Metrics();
}

}  // namespace
}  // namespace tessera::node
