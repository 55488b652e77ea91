// MIG end to end: the tessera-node binary on the simulated GPU, with the
// API-server stand-in (the Node, its nvidia.com/mig.config label, the state
// label and Events) and the kubelet stand-in (one device plugin per resource,
// PodResources). Layouts come from a mig-parted file:
//  - mixed on an A100-80GB: seven nvidia.com/mig-1g.10gb devices, an eighth
//    container gets none; a container's process sees exactly its instance
//    (memory, SMs) and nothing else; the GPU outside MIG keeps vGPU slices;
//  - a layout change while an instance is in use leaves it, reports it, and
//    completes once the pod is gone;
//  - an A100 with MIG off: pending (reset required) until `tessera sim reset`;
//  - single: MIG devices as nvidia.com/gpu;
//  - a label naming no configuration: failed, nothing applied;
//  - XIDs: one of a MIG device takes that device out, a GPU-wide one all of
//    the GPU's, and the GPU outside MIG stays healthy.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "base/testing.h"
#include "core/inventory_codec.h"
#include "host/nvml_api.h"
#include "host/nvml_mig.h"
#include "kube/config.h"
#include "kube/typed_api.h"
#include "kubelet_standin.h"
#include "testing/node_cluster.h"
#include "testing/process.h"

namespace tessera::node {
namespace {

using namespace std::chrono_literals;
using tessera::testing::KubeletStandIn;

constexpr const char* kNode = "mig-node-1";
constexpr const char* kSmall = "nvidia.com/mig-1g.10gb";
constexpr const char* kHalf = "nvidia.com/mig-3g.40gb";

constexpr const char* kLayout = R"(version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
  all-3g.40gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
)";

using ::tessera::testing::CountHealthy;
using ::tessera::testing::NodeCluster;
using ::tessera::testing::WaitFor;

class MigNodeTest : public ::testing::Test {
 protected:
  // `sim_config`: TESSERA_SIM_CONFIG; `label`: the Node's nvidia.com/mig.config ("" = none).
  void SetUpNode(const std::string& sim_config, const std::string& label) {
    testing::NodeClusterOptions options{.node_name = kNode, .sim_config = sim_config, .temp_prefix = "tmig"};
    if (!label.empty()) options.node_labels = {{"nvidia.com/mig.config", label}};
    cluster_ = std::make_unique<NodeCluster>(options);
    auto started = cluster_->Start();
    ASSERT_TRUE(started.ok()) << started.error().message;
    cluster_->dir().Write("layout.yaml", kLayout);
    kubelet_ = &cluster_->kubelet();
  }

  void TearDown() override {
    if (!cluster_) return;
    cluster_->Stop();
    if (HasFailure()) std::cerr << "tessera-node log:\n" << NodeLog() << std::endl;
  }

  void StartNode(std::map<std::string, std::string> overrides = {}) {
    std::map<std::string, std::string> flags = {{"--metrics-port", "0"},
                                                {"--mig-layout-file", cluster_->Path("layout.yaml")},
                                                {"--mig-strategy", "mixed"},
                                                {"--mig-gpus", "0"},
                                                {"--mig-retry-seconds", "1"}};
    for (const auto& [flag, value] : overrides) flags[flag] = value;
    ASSERT_TRUE(cluster_->StartNode(flags).ok());
  }

  std::string NodeLog() const { return cluster_->NodeLog(); }

  std::string Label(const std::string& key) const { return cluster_->Label(key); }

  // The node's inventory annotation, decoded; nullopt while absent or invalid.
  std::optional<core::NodeInventory> Inventory() const { return cluster_->PublishedInventory(); }

  // As an operator does: a merge patch of the Node's labels.
  void SetConfigLabel(const std::string& value) {
    kube::ResolveOptions resolve;
    resolve.api_server = cluster_->api().url();
    auto config = kube::ResolveConfig(resolve);
    ASSERT_TRUE(config.ok()) << config.error().message;
    auto client = kube::MakeClient(*config);
    kube::NodesApi nodes(client.get());
    ASSERT_TRUE(nodes.PatchLabels(kNode, {{"nvidia.com/mig.config", value}}).ok());
  }

  std::vector<std::string> NodeEvents(const std::string& reason) const {
    return cluster_->NodeEvents(reason);
  }

  bool EventSays(const std::string& reason, const std::string& text) const {
    return WaitFor([&] {
      for (const auto& m : NodeEvents(reason)) {
        if (m.find(text) != std::string::npos) return true;
      }
      return false;
    });
  }

  // Runs mig_probe as a container given `env` (its Allocate answer) would:
  // on the simulated GPU, with only those variables.
  std::string Probe(const std::map<std::string, std::string>& env, int alloc_mib = 0) const {
    std::string command =
        "env -i TESSERA_SIM_STATE=" + cluster_->sim().state_dir + " LD_LIBRARY_PATH=" + TESSERA_SIM_LIB_DIR;
    for (const auto& [k, v] : env) command += " " + k + "=" + v;
    command += std::string(" ") + TESSERA_MIG_PROBE + " " + std::to_string(alloc_mib);
    return testing::RunShell(command).output;
  }

  std::unique_ptr<NodeCluster> cluster_;
  KubeletStandIn* kubelet_ = nullptr;  // the cluster's
};

constexpr const char* kA100WithMigAndAnL4 = "gpus:\n  - model: A100-80GB\n    mig: true\n  - model: L4\n";

TEST_F(MigNodeTest, MixedLayoutGivesSevenSmallDevicesAndNoEighth) {
  SetUpNode(kA100WithMigAndAnL4, "all-1g.10gb");
  StartNode();
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kSmall, [](const auto& d) { return CountHealthy(d) == 7; }, 60s))
      << NodeLog();
  EXPECT_TRUE(WaitFor([&] { return Label("nvidia.com/mig.config.state") == "success"; }));
  EXPECT_TRUE(EventSays("MigConfigApplied", "configuration 'all-1g.10gb': success"));
  EXPECT_TRUE(WaitFor([&] { return Label("nvidia.com/mig-1g.10gb.count") == "7"; }));
  EXPECT_EQ(Label("nvidia.com/mig.strategy"), "mixed");
  EXPECT_EQ(Label("nvidia.com/mig-1g.10gb.memory"), "9728");
  EXPECT_EQ(Label("nvidia.com/mig-1g.10gb.multiprocessors"), "14");
  // The L4, outside MIG, keeps its vGPU slices under the vGPU plugin.
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& d) { return d.size() == 4; }, 30s));

  // Seven containers take the seven devices.
  auto devices = kubelet_->devices(kSmall);
  std::vector<v1beta1::ContainerAllocateResponse> answers(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    auto status = kubelet_->AdmitContainer("ml", "pod-" + std::to_string(i), "main", kSmall,
                                           {devices[i].id()}, &answers[i]);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(answers[i].envs().at("NVIDIA_VISIBLE_DEVICES"), devices[i].id());
  }
  // An eighth has nothing left: every device this resource has is held.
  for (const auto& d : kubelet_->devices(kSmall)) {
    auto status = kubelet_->AdmitContainer("ml", "pod-8", "main", kSmall, {d.id()}, nullptr);
    EXPECT_FALSE(status.ok());
  }
  EXPECT_EQ(kubelet_->devices(kSmall).size(), 7u);
  // The inventory lists the A100 in MIG mode with its seven devices and who
  // holds each (so the scheduler places no vGPU slice there), the L4 as before.
  EXPECT_TRUE(WaitFor([&] {
    auto inv = Inventory();
    if (!inv || inv->gpus.size() != 2 || inv->gpus[0].mig_devices.size() != 7) return false;
    return std::all_of(inv->gpus[0].mig_devices.begin(), inv->gpus[0].mig_devices.end(),
                       [](const core::MigDevice& d) { return d.used_by.rfind("ml/pod-", 0) == 0; });
  })) << NodeLog();
  if (auto inv = Inventory(); inv && inv->gpus.size() == 2) {
    EXPECT_EQ(inv->gpus[0].mode, core::SharingMode::kMigStatic);
    EXPECT_EQ(inv->gpus[0].slots, 0);
    EXPECT_EQ(inv->gpus[0].mig_devices[0].profile, "1g.10gb");
    EXPECT_EQ(inv->gpus[0].mig_devices[0].memory_mib, 9728);
    EXPECT_EQ(inv->gpus[1].mode, core::SharingMode::kVgpu);
    EXPECT_GT(inv->gpus[1].slots, 0);
  }
  // A device this node does not have is refused by the plugin itself.
  auto bogus = kubelet_->AdmitContainer("ml", "pod-9", "main", kSmall, {"MIG-no-such-device"}, nullptr);
  EXPECT_FALSE(bogus.ok());
  EXPECT_NE(bogus.error_message().find("not a MIG device of this node"), std::string::npos);

  // A container's process sees exactly its instance: one device with the
  // instance's memory and SMs, and allocations past it fail.
  std::map<std::string, std::string> env(answers[0].envs().begin(), answers[0].envs().end());
  std::string seen = Probe(env, 9000);
  EXPECT_NE(seen.find("1|NVIDIA A100-SXM4-80GB MIG 1g.10gb|9728|14"), std::string::npos) << seen;
  EXPECT_NE(seen.find("ALLOC 9000 OK"), std::string::npos) << seen;
  EXPECT_NE(Probe(env, 9800).find("ALLOC 9800 FAILED"), std::string::npos);
}

TEST_F(MigNodeTest, LayoutChangeLeavesAnInstanceInUseAndCompletesLater) {
  SetUpNode(kA100WithMigAndAnL4, "all-1g.10gb");
  StartNode();
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kSmall, [](const auto& d) { return CountHealthy(d) == 7; }, 60s))
      << NodeLog();
  const std::string held = kubelet_->devices(kSmall).front().id();
  ASSERT_TRUE(kubelet_->AdmitContainer("ml", "busy", "main", kSmall, {held}, nullptr).ok());

  SetConfigLabel("all-3g.40gb");
  ASSERT_TRUE(EventSays("MigConfigPending", "in use by a container and left in place")) << NodeLog();
  EXPECT_EQ(Label("nvidia.com/mig.config.state"), "pending");
  // The held device is still advertised; the six free ones are gone.
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kSmall, [](const auto& d) { return d.size() == 1; }, 30s));
  EXPECT_EQ(kubelet_->devices(kSmall).front().id(), held);

  // The pod goes: the layout completes without anyone touching the label.
  kubelet_->RemovePod("ml", "busy");
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kHalf, [](const auto& d) { return CountHealthy(d) == 2; }, 60s))
      << NodeLog();
  EXPECT_TRUE(WaitFor([&] { return Label("nvidia.com/mig.config.state") == "success"; }));
  EXPECT_TRUE(kubelet_->WaitForDevices(
      kSmall, [](const auto& d) { return d.empty(); }, 30s));
  EXPECT_TRUE(WaitFor([&] { return Label("nvidia.com/mig-1g.10gb.count").empty(); }));
  EXPECT_EQ(Label("nvidia.com/mig-3g.40gb.count"), "2");
}

TEST_F(MigNodeTest, AmpereModeChangeIsPendingUntilReset) {
  SetUpNode("gpus:\n  - model: A100-80GB\n", "all-3g.40gb");
  StartNode({{"--mig-gpus", "all"}});
  ASSERT_TRUE(EventSays("MigConfigPending", "pending until the GPU is reset")) << NodeLog();
  EXPECT_EQ(Label("nvidia.com/mig.config.state"), "pending");
  std::this_thread::sleep_for(2s);  // several retries: still one Event, nothing advertised
  EXPECT_EQ(NodeEvents("MigConfigPending").size(), 1u);
  EXPECT_TRUE(kubelet_->devices(kHalf).empty());

  const auto reset = cluster_->RunCli("sim reset --gpu 0");
  ASSERT_EQ(reset.exit_code, 0) << reset.output;
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kHalf, [](const auto& d) { return CountHealthy(d) == 2; }, 60s))
      << NodeLog();
  EXPECT_TRUE(WaitFor([&] { return Label("nvidia.com/mig.config.state") == "success"; }));
}

TEST_F(MigNodeTest, SingleStrategyAdvertisesMigDevicesAsGpus) {
  SetUpNode("gpus:\n  - model: A100-80GB\n    mig: true\n", "all-3g.40gb");
  StartNode({{"--mig-strategy", "single"}, {"--mig-gpus", "all"}});
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& d) { return CountHealthy(d) == 2; }, 60s))
      << NodeLog();
  for (const auto& d : kubelet_->devices("nvidia.com/gpu")) EXPECT_EQ(d.id().rfind("MIG-", 0), 0u);
  EXPECT_TRUE(WaitFor([&] { return Label("nvidia.com/mig.strategy") == "single"; }));
  EXPECT_EQ(Label("nvidia.com/gpu.product"), "A100-SXM4-80GB-MIG-3g.40gb");
  EXPECT_EQ(Label("nvidia.com/gpu.count"), "2");
  EXPECT_EQ(Label("nvidia.com/gpu.memory"), "40192");

  v1beta1::ContainerAllocateResponse answer;
  const std::string id = kubelet_->devices("nvidia.com/gpu").front().id();
  ASSERT_TRUE(kubelet_->AdmitContainer("ml", "single", "main", "nvidia.com/gpu", {id}, &answer).ok());
  std::map<std::string, std::string> env(answer.envs().begin(), answer.envs().end());
  std::string seen = Probe(env);
  EXPECT_NE(seen.find("1|NVIDIA A100-SXM4-80GB MIG 3g.40gb|40192|42"), std::string::npos) << seen;
}

TEST_F(MigNodeTest, LabelNamingNoConfigurationFailsAndAppliesNothing) {
  SetUpNode(kA100WithMigAndAnL4, "no-such-layout");
  StartNode();
  ASSERT_TRUE(EventSays("MigConfigFailed", "no-such-layout")) << NodeLog();
  EXPECT_EQ(Label("nvidia.com/mig.config.state"), "failed");
  // The message lists the configurations the file has.
  EXPECT_TRUE(EventSays("MigConfigFailed", "all-1g.10gb"));
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(kubelet_->devices(kSmall).empty());
}

TEST_F(MigNodeTest, XidsReachTheAffectedMigDevices) {
  SetUpNode(kA100WithMigAndAnL4, "all-1g.10gb");
  StartNode();
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kSmall, [](const auto& d) { return CountHealthy(d) == 7; }, 60s))
      << NodeLog();
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& d) { return CountHealthy(d) == 4; }, 30s));
  const std::string victim = kubelet_->devices(kSmall).front().id();

  // Its GPU and compute instance, as NVML tells them.
  auto library = host::NvmlLibrary::Load(TESSERA_SIM_NVML);
  ASSERT_TRUE(library.ok()) << library.error().message;
  auto driver = host::NvmlMigDriver::Load((*library)->api(), TESSERA_SIM_NVML);
  ASSERT_TRUE(driver.ok()) << driver.error().message;
  auto gpus = (*driver)->List();
  ASSERT_TRUE(gpus.ok()) << gpus.error().message;
  const host::MigInstanceState* instance = nullptr;
  for (const auto& i : gpus->at(0).instances) {
    if (i.mig_uuid == victim) instance = &i;
  }
  ASSERT_NE(instance, nullptr);
  auto inject = [&](const std::string& extra) {
    const auto injected = cluster_->RunCli("sim inject-xid --gpu 0 --xid 79" + extra);
    ASSERT_EQ(injected.exit_code, 0) << injected.output;
  };
  inject(" --gpu-instance " + std::to_string(instance->gpu_instance_id) + " --compute-instance " +
         std::to_string(instance->compute_instance_id));
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kSmall, [](const auto& d) { return CountHealthy(d) == 6; }, 30s))
      << NodeLog();
  for (const auto& d : kubelet_->devices(kSmall)) EXPECT_EQ(d.health() == "Healthy", d.id() != victim);

  inject("");  // GPU-wide
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kSmall, [](const auto& d) { return CountHealthy(d) == 0; }, 30s))
      << NodeLog();
  EXPECT_EQ(CountHealthy(kubelet_->devices("nvidia.com/gpu")), 4u);
}

}  // namespace
}  // namespace tessera::node
