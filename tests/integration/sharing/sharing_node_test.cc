// Sharing modes per GPU, end to end: the tessera-node binary on the simulated
// GPU with the API-server stand-in (the Node's labels, inventory and Events)
// and the kubelet stand-in (one device plugin per resource, PodResources).
//  - one node, a GPU in vgpu, exclusive, timeslice and mps mode: what the kubelet
//    is offered per resource, the labels, the inventory's modes, Allocate's
//    answers (the memory split, NVIDIA's refusals), and a time-sliced
//    container's region tied to its pod (per-container metrics);
//  - NVIDIA's README time-slicing config file taken as it is: its replica
//    count and labels, failRequestsGreaterThanOne's refusal;
//  - the file changed while a container uses a GPU: the free GPU moves, the
//    used one keeps its mode (an Event says why) and moves once it is free;
//  - a directory of NVIDIA files: the Node label nvidia.com/device-plugin.config
//    picks one, and a label change is followed;
//  - a bad configuration at start: tessera-node exits naming the key.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "base/testing.h"
#include "core/inventory_codec.h"
#include "kube/config.h"
#include "kube/typed_api.h"
#include "kubelet_standin.h"
#include "testing/node_cluster.h"
#include "testing/process.h"

namespace tessera::node {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using ::tessera::testing::CountHealthy;
using ::tessera::testing::NodeCluster;
using ::tessera::testing::WaitFor;

// Whether `pid` has exited (gone, or a zombie its parent has not reaped yet).
bool Exited(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

constexpr const char* kShared = "nvidia.com/gpu.shared";
constexpr const char* kGpu = "nvidia.com/gpu";

// NVIDIA's README, "With CUDA Time-Slicing", with failRequestsGreaterThanOne.
constexpr const char* kNvidiaTimeSlicing = R"(version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 10
)";

class SharingNodeTest : public ::testing::Test {
 protected:
  void SetUpNode(const std::string& sim_gpus) {
    cluster_ = std::make_unique<NodeCluster>(testing::NodeClusterOptions{.node_name = "share-node-1",
                                                                         .sim_gpus = sim_gpus,
                                                                         .libvgpu = TESSERA_VGPU_LIB,
                                                                         .temp_prefix = "tshr"});
    auto started = cluster_->Start();
    ASSERT_TRUE(started.ok()) << started.error().message;
    gpus_ = *started;
    kubelet_ = &cluster_->kubelet();
  }

  void TearDown() override {
    if (!cluster_) return;
    cluster_->Stop();
    if (HasFailure()) std::cerr << "tessera-node log:\n" << cluster_->NodeLog() << std::endl;
  }

  std::string Label(const std::string& key) const { return cluster_->Label(key); }

  std::string Metrics() const {
    httplib::Client client("127.0.0.1", cluster_->metrics_port());
    auto res = client.Get("/metrics");
    return res && res->status == 200 ? res->body : "";
  }

  bool EventSays(const std::string& reason, const std::string& text) const {
    return WaitFor([&] {
      for (const auto& m : cluster_->NodeEvents(reason)) {
        if (m.find(text) != std::string::npos) return true;
      }
      return false;
    });
  }

  std::unique_ptr<NodeCluster> cluster_;
  std::vector<core::Gpu> gpus_;
  testing::KubeletStandIn* kubelet_ = nullptr;
};

TEST_F(SharingNodeTest, OneNodeWithAGpuInEachMode) {
  SetUpNode("4xA100-80GB");
  ASSERT_EQ(gpus_.size(), 4u);
  ASSERT_TRUE(
      cluster_
          ->StartNode({{"--sharing",
                        "[{gpus: \"1\", mode: exclusive}, {gpus: " + gpus_[2].uuid +
                            ", mode: timeslice, replicas: 4, rename_by_default: true, memory_split: equal}, "
                            "{gpus: \"3\", mode: mps}]"},
                       {"--mps-root", cluster_->Path("mps")},
                       {"--mps-control-binary", TESSERA_SIM_MPS_CONTROL}})
          .ok());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, 60s)) << cluster_->NodeLog();

  // The vGPU plugin: four slices of GPU 0, one device for the exclusive GPU 1
  // and four for the shares of the MPS GPU 3 (each MPS share takes a slot).
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kGpu, [](const auto& d) { return CountHealthy(d) == 9; }, 30s));
  std::map<std::string, int> devices_of;
  for (const auto& d : kubelet_->devices(kGpu)) ++devices_of[d.id().substr(0, gpus_[0].uuid.size())];
  EXPECT_EQ(devices_of[gpus_[0].uuid], 4);
  EXPECT_EQ(devices_of[gpus_[1].uuid], 1);
  EXPECT_EQ(devices_of[gpus_[2].uuid], 0) << "time-sliced replicas are not vGPU devices";
  EXPECT_EQ(devices_of[gpus_[3].uuid], 4);
  // The replica plugin: four replicas of GPU 2, NVIDIA's IDs.
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kShared, [](const auto& d) { return CountHealthy(d) == 4; }, 30s));
  for (const auto& d : kubelet_->devices(kShared))
    EXPECT_EQ(d.id().rfind(gpus_[2].uuid + "::", 0), 0u) << d.id();

  // GFD's labels and tessera's.
  EXPECT_TRUE(WaitFor([&] { return Label("nvidia.com/gpu.sharing-strategy") == "time-slicing"; }))
      << cluster_->NodeLog();
  EXPECT_EQ(Label("nvidia.com/gpu.replicas"), "4");
  EXPECT_EQ(Label("nvidia.com/gpu.product"), "NVIDIA-A100-SXM4-80GB-SHARED");
  EXPECT_EQ(Label("nvidia.com/mps.capable"), "true");
  EXPECT_EQ(Label("tessera.io/gpu.sharing-modes"), "exclusive.mps.timeslice.vgpu");

  // One place says which GPU is in which mode: the inventory.
  ASSERT_TRUE(WaitFor([&] {
    auto inv = cluster_->PublishedInventory();
    return inv && inv->gpus.size() == 4;
  })) << cluster_->NodeLog();
  auto inv = cluster_->PublishedInventory();
  ASSERT_TRUE(inv.has_value());
  std::map<std::string, core::Gpu> by_uuid;
  for (const auto& gpu : inv->gpus) by_uuid[gpu.uuid] = gpu;
  EXPECT_EQ(by_uuid[gpus_[0].uuid].mode, core::SharingMode::kVgpu);
  EXPECT_EQ(by_uuid[gpus_[0].uuid].slots, 4);
  EXPECT_EQ(by_uuid[gpus_[1].uuid].mode, core::SharingMode::kExclusive);
  EXPECT_EQ(by_uuid[gpus_[1].uuid].slots, 1);
  EXPECT_EQ(by_uuid[gpus_[2].uuid].mode, core::SharingMode::kTimeslice);
  EXPECT_EQ(by_uuid[gpus_[2].uuid].replicas, 4);
  EXPECT_EQ(by_uuid[gpus_[2].uuid].slots, 0);
  // The MPS GPU, sized per request by tessera-scheduler: slots for its
  // shares, no replicas, and its control daemon running.
  EXPECT_EQ(by_uuid[gpus_[3].uuid].mode, core::SharingMode::kMps);
  EXPECT_EQ(by_uuid[gpus_[3].uuid].replicas, 0);
  EXPECT_GT(by_uuid[gpus_[3].uuid].slots, 0);
  EXPECT_TRUE(WaitFor([&] {
    return fs::exists(cluster_->Path("mps") + "/" + gpus_[3].uuid + "/pipe/nvidia-cuda-mps-control.pid");
  })) << cluster_->NodeLog();

  // A replica: its GPU, libvgpu with the equal memory split, its region.
  auto replicas = kubelet_->devices(kShared);
  v1beta1::ContainerAllocateResponse answer;
  auto status = kubelet_->AdmitContainer("ts", "pod-a", "main", kShared, {replicas[0].id()}, &answer);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(answer.envs().at("NVIDIA_VISIBLE_DEVICES"), gpus_[2].uuid);
  EXPECT_EQ(answer.envs().at("CUDA_DEVICE_MEMORY_LIMIT_0"), std::to_string(gpus_[2].memory_mib / 4) + "m");
  EXPECT_EQ(answer.envs().at("TESSERA_UNPLACED_PODS"), "whole-gpu");
  EXPECT_FALSE(cluster_->RegionHostDir(answer).empty());
  // Two replicas are allowed here (failRequestsGreaterThanOne is off): half the memory.
  v1beta1::ContainerAllocateResponse two;
  status =
      kubelet_->AdmitContainer("ts", "pod-b", "main", kShared, {replicas[1].id(), replicas[2].id()}, &two);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(two.envs().at("CUDA_DEVICE_MEMORY_LIMIT_0"), std::to_string(gpus_[2].memory_mib / 2) + "m");
  // Another resource's device is unknown to this plugin, in NVIDIA's words.
  status = kubelet_->AdmitContainer("ts", "pod-c", "main", kShared, {gpus_[0].uuid + "::0"}, nullptr);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(
      status.error_message().find("invalid allocation request for 'nvidia.com/gpu.shared': unknown device"),
      std::string::npos)
      << status.error_message();

  // The time-sliced container's region is tied to its pod like a vGPU
  // container's: a process in it is metered per container.
  if (!testing::MountNamespacesWork()) GTEST_SKIP() << "cannot create mount namespaces here";
  testing::ContainerProcess process;
  process.allocated = &answer;
  process.command_line = std::string(TESSERA_VGPU_PROBE) + " init ctx:0 alloc:1000 hold";
  process.output = cluster_->Path("a.out");
  ASSERT_GT(cluster_->StartContainer(process), 0);
  const std::string series =
      "tessera_container_memory_used_bytes{namespace=\"ts\",pod=\"pod-a\",container=\"main\"";
  EXPECT_TRUE(WaitFor([&] { return Metrics().find(series) != std::string::npos; }, 60s))
      << Metrics() << "\nprobe: " << cluster_->dir().Read("a.out");
}

TEST_F(SharingNodeTest, NvidiasConfigFileAsItIs) {
  SetUpNode("2xA100-80GB");
  cluster_->dir().Write("nvidia.yaml", kNvidiaTimeSlicing);
  ASSERT_TRUE(cluster_->StartNode({{"--nvidia-config-file", cluster_->Path("nvidia.yaml")}}).ok());
  // Every GPU time-sliced under nvidia.com/gpu: 2 × 10, NVIDIA's count.
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kGpu, [](const auto& d) { return CountHealthy(d) == 20; }, 60s))
      << cluster_->NodeLog();
  EXPECT_TRUE(WaitFor([&] { return Label("nvidia.com/gpu.replicas") == "10"; })) << cluster_->NodeLog();
  EXPECT_EQ(Label("nvidia.com/gpu.sharing-strategy"), "time-slicing");
  EXPECT_EQ(Label("nvidia.com/gpu.product"), "") << "not renamed: the product label is GFD's";

  auto devices = kubelet_->devices(kGpu);
  auto status =
      kubelet_->AdmitContainer("ts", "pod-2", "main", kGpu, {devices[0].id(), devices[1].id()}, nullptr);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error_message().find(
                "request for 'nvidia.com/gpu: 2' too large: maximum request size for shared resources is 1"),
            std::string::npos)
      << status.error_message();
  v1beta1::ContainerAllocateResponse one;
  status = kubelet_->AdmitContainer("ts", "pod-1", "main", kGpu, {devices[0].id()}, &one);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(one.envs().count("CUDA_DEVICE_MEMORY_LIMIT_0"), 0u) << "no split unless asked";
}

TEST_F(SharingNodeTest, AGpuInUseKeepsItsModeUntilItIsFree) {
  SetUpNode("2xA100-80GB");
  cluster_->dir().Write("nvidia.yaml", kNvidiaTimeSlicing);
  ASSERT_TRUE(cluster_->StartNode({{"--nvidia-config-file", cluster_->Path("nvidia.yaml")}}).ok());
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kGpu, [](const auto& d) { return CountHealthy(d) == 20; }, 60s))
      << cluster_->NodeLog();
  // A container holds a replica of GPU 0.
  auto status = kubelet_->AdmitContainer("ts", "busy", "main", kGpu, {gpus_[0].uuid + "::0"}, nullptr);
  ASSERT_TRUE(status.ok()) << status.error_message();

  // The operator now wants 4 replicas per GPU.
  std::string changed = kNvidiaTimeSlicing;
  changed.replace(changed.find("replicas: 10"), 12, "replicas: 4");
  cluster_->dir().Write("nvidia.yaml", changed);
  // GPU 1 is free and moves; GPU 0 is used and keeps its 10, said in an Event.
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kGpu, [](const auto& d) { return d.size() == 14; }, 30s))
      << cluster_->NodeLog();
  EXPECT_TRUE(EventSays("SharingModeKept", "GPU 0 stays timeslice")) << cluster_->NodeLog();

  // The container is gone: GPU 0 follows the file too.
  kubelet_->RemovePod("ts", "busy");
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kGpu, [](const auto& d) { return d.size() == 8; }, 30s))
      << cluster_->NodeLog();
  EXPECT_TRUE(EventSays("SharingModesApplied", "every GPU is in the mode it gives"));
  EXPECT_TRUE(WaitFor([&] { return Label("nvidia.com/gpu.replicas") == "4"; }));

  // A file that no longer parses changes nothing.
  cluster_->dir().Write("nvidia.yaml",
                        "version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 1}]\n");
  EXPECT_TRUE(EventSays("SharingConfigRejected", "number of replicas must be >= 2")) << cluster_->NodeLog();
  EXPECT_EQ(kubelet_->devices(kGpu).size(), 8u);
}

// nvidia_config_file a directory (NVIDIA's ConfigMap with several keys): the
// Node label nvidia.com/device-plugin.config picks the file, as NVIDIA's
// config-manager does, and a label change is followed like a file change.
TEST_F(SharingNodeTest, TheDevicePluginConfigLabelPicksTheFile) {
  cluster_ = std::make_unique<NodeCluster>(
      testing::NodeClusterOptions{.node_name = "share-node-2",
                                  .sim_gpus = "2xA100-80GB",
                                  .node_labels = {{"nvidia.com/device-plugin.config", "ten"}},
                                  .libvgpu = TESSERA_VGPU_LIB,
                                  .temp_prefix = "tshr"});
  auto started = cluster_->Start();
  ASSERT_TRUE(started.ok()) << started.error().message;
  kubelet_ = &cluster_->kubelet();
  cluster_->dir().MakeDir("configs");
  cluster_->dir().Write("configs/ten", kNvidiaTimeSlicing);
  std::string three = kNvidiaTimeSlicing;
  three.replace(three.find("replicas: 10"), 12, "replicas: 3");
  cluster_->dir().Write("configs/three", three);
  ASSERT_TRUE(cluster_->StartNode({{"--nvidia-config-file", cluster_->Path("configs")}}).ok());
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kGpu, [](const auto& d) { return d.size() == 20; }, 60s))
      << cluster_->NodeLog();

  kube::ResolveOptions resolve;
  resolve.api_server = cluster_->api().url();
  auto config = kube::ResolveConfig(resolve);
  ASSERT_TRUE(config.ok()) << config.error().message;
  auto client = kube::MakeClient(*config);
  kube::NodesApi nodes(client.get());
  ASSERT_TRUE(nodes.PatchLabels("share-node-2", {{"nvidia.com/device-plugin.config", "three"}}).ok());
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kGpu, [](const auto& d) { return d.size() == 6; }, 30s))
      << cluster_->NodeLog();
  EXPECT_TRUE(WaitFor([&] { return Label("nvidia.com/gpu.replicas") == "3"; }));

  // A label naming no file changes nothing, and says why.
  ASSERT_TRUE(nodes.PatchLabels("share-node-2", {{"nvidia.com/device-plugin.config", "absent"}}).ok());
  EXPECT_TRUE(EventSays("SharingConfigRejected", "names 'absent', which is not a file"))
      << cluster_->NodeLog();
  EXPECT_EQ(kubelet_->devices(kGpu).size(), 6u);
}

TEST_F(SharingNodeTest, BadConfigurationAtStartNamesTheKey) {
  SetUpNode("2xA100-80GB");
  struct Case {
    std::map<std::string, std::string> flags;
    const char* expect;
  };
  cluster_->dir().Write("both.yaml",
                        "sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2}]\n  mps:\n"
                        "    resources: [{name: gpu, replicas: 2}]\n");
  const std::vector<Case> cases = {
      {{{"--sharing", "[{gpus: all, mode: timeslice}]"}}, "sharing[0].replicas must be at least 1"},
      {{{"--sharing", "[{gpus: \"1\", mode: timeslice, replicas: 2}]"}}, "rename the replicas"},
      {{{"--nvidia-config-file", cluster_->Path("both.yaml")}},
       "sharing.timeSlicing and sharing.mps are both set"},
      {{{"--nvidia-config-file", cluster_->Path("missing.yaml")}}, "nvidia_config_file"},
  };
  for (const auto& c : cases) {
    ASSERT_TRUE(cluster_->StartNode(c.flags).ok());
    const pid_t pid = cluster_->node_pid();
    EXPECT_TRUE(WaitFor([&] { return cluster_->NodeLog().find(c.expect) != std::string::npos; }, 30s))
        << c.expect << "\n"
        << cluster_->NodeLog();
    EXPECT_TRUE(WaitFor([&] { return Exited(pid); }, 30s))
        << "tessera-node kept running on a bad configuration";
    cluster_->StopNode();
  }
}

}  // namespace
}  // namespace tessera::node
