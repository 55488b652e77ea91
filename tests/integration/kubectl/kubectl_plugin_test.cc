// `kubectl tessera ...` as a user runs it: the real kubectl client finds
// kubectl-tessera on PATH and runs it with its arguments and environment; the
// plugin reads the API-server stand-in named by the kubeconfig. Skipped when
// kubectl is not installed (scripts/install-deps.sh installs it).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "apiserver/fake_apiserver.h"
#include "core/allocation_codec.h"
#include "core/inventory_codec.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

constexpr const char* kGpu0 = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd";
constexpr const char* kGpu1 = "GPU-11111111-aaaa-bbbb-cccc-dddddddddddd";

struct CommandRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool HaveKubectl() {
  return std::system("command -v kubectl >/dev/null 2>&1") == 0;
}

class KubectlPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveKubectl())
      GTEST_SKIP() << "no kubectl on PATH (Debian package kubectl; scripts/install-deps.sh)";
    char pattern[] = "/tmp/tkp-XXXXXX";
    dir_ = ::mkdtemp(pattern);
    fs::create_directories(dir_ + "/bin");
    fs::create_symlink(TESSERA_KUBECTL_PLUGIN, dir_ + "/bin/kubectl-tessera");
    testing::FakeApiServerOptions options;
    options.keep_alive_seconds = 1;
    api_ = std::make_unique<testing::FakeApiServer>(options);
    ASSERT_TRUE(api_->Start().ok());
    WriteKubeconfig(api_->url(), "ml");
  }

  void TearDown() override {
    if (api_) api_->Stop();
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Contexts "live" (current, namespace `ns`) and "dead" (a port nothing listens on).
  void WriteKubeconfig(const std::string& server, const std::string& ns) {
    std::ofstream out(dir_ + "/kubeconfig");
    out << "apiVersion: v1\nkind: Config\ncurrent-context: live\n"
        << "clusters:\n"
        << "- name: live\n  cluster: {server: \"" << server << "\"}\n"
        << "- name: dead\n  cluster: {server: \"http://127.0.0.1:1\"}\n"
        << "users:\n- name: u\n  user: {}\n"
        << "contexts:\n"
        << "- name: live\n  context: {cluster: live, user: u, namespace: " << ns << "}\n"
        << "- name: dead\n  context: {cluster: dead, user: u}\n";
  }

  // `kubectl <args>` with the plugin on PATH and KUBECONFIG set.
  CommandRun Kubectl(const std::string& args) {
    const std::string command = "env PATH=" + dir_ + "/bin:$PATH KUBECONFIG=" + dir_ +
                                "/kubeconfig kubectl " + args + " >" + dir_ + "/out 2>" + dir_ + "/err";
    CommandRun run;
    const int status = std::system(command.c_str());
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    run.out = ReadFile(dir_ + "/out");
    run.err = ReadFile(dir_ + "/err");
    return run;
  }

  void AddGpuNode(const std::string& name) {
    core::NodeInventory inventory;
    inventory.node = name;
    inventory.heartbeat = "2030-01-01T00:00:00Z";
    for (int i = 0; i < 2; ++i) {
      core::Gpu gpu;
      gpu.uuid = i == 0 ? kGpu0 : kGpu1;
      gpu.index = i;
      gpu.model = "NVIDIA A100-PCIE-40GB";
      gpu.memory_mib = 40000;
      gpu.slots = 4;
      inventory.gpus.push_back(gpu);
    }
    AddNode(name, *core::EncodeInventory(inventory));
  }

  void AddNode(const std::string& name, const std::string& inventory) {
    Json node = {{"metadata", {{"name", name}}}};
    if (!inventory.empty())
      node["metadata"]["annotations"][std::string(core::kInventoryAnnotation)] = inventory;
    ASSERT_TRUE(api_->CreateObject("nodes", node).ok());
  }

  Json GpuPod(const std::string& ns, const std::string& name, int64_t memory_mib) {
    Json limits = {{"nvidia.com/gpu", "1"},
                   {"nvidia.com/gpumem", std::to_string(memory_mib)},
                   {"nvidia.com/gpucores", "25"}};
    Json container = {{"name", "main"}, {"image", "cuda"}, {"resources", {{"limits", limits}}}};
    return {{"metadata", {{"name", name}, {"namespace", ns}}},
            {"spec", {{"schedulerName", "tessera-scheduler"}, {"containers", Json::array({container})}}}};
  }

  void AddPlacedPod(const std::string& ns, const std::string& name, const std::string& node,
                    const std::string& uuid, int64_t memory_mib) {
    Json pod = GpuPod(ns, name, memory_mib);
    core::PodAllocation allocation{node, {{"main", {{uuid, memory_mib, 25}}}}};
    pod["metadata"]["annotations"][std::string(core::kAllocationAnnotation)] =
        *core::EncodeAllocation(allocation);
    pod["spec"]["nodeName"] = node;
    ASSERT_TRUE(api_->CreateObject("pods", pod).ok());
  }

  std::string dir_;
  std::unique_ptr<testing::FakeApiServer> api_;
};

TEST_F(KubectlPluginTest, TopNodesThroughKubectlShowsAllocationAndInventoryState) {
  AddGpuNode("gpu-1");
  AddNode("cpu-1", "");
  AddNode("broken", "{\"version\": 1, \"node\": \"broken\"");
  AddPlacedPod("ml", "train", "gpu-1", kGpu0, 10000);
  AddPlacedPod("ml", "serve", "gpu-1", kGpu1, 30000);

  CommandRun run = Kubectl("tessera top nodes");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("NAME"));
  EXPECT_THAT(run.out,
              HasSubstr("gpu-1   2/2   40000Mi/80000Mi  50%      50/200  25%     2/8    -    2     ok"))
      << run.out;
  EXPECT_THAT(run.out, HasSubstr("cpu-1"));
  EXPECT_THAT(run.out, HasSubstr("none"));
  EXPECT_THAT(run.out, HasSubstr("corrupt: "));

  run = Kubectl("tessera top gpus");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out,
              HasSubstr(std::string(kGpu1) + "  NVIDIA A100-PCIE-40GB  healthy  vgpu  30000Mi/40000Mi  75%"))
      << run.out;
}

TEST_F(KubectlPluginTest, TopPodsHonoursTheContextNamespaceAndAllNamespaces) {
  AddGpuNode("gpu-1");
  AddPlacedPod("ml", "train", "gpu-1", kGpu0, 10000);
  ASSERT_TRUE(api_->CreateObject("pods", GpuPod("ml", "waiting", 1000)).ok());
  AddPlacedPod("research", "other", "gpu-1", kGpu1, 1000);

  CommandRun run = Kubectl("tessera top pods");  // the context's namespace: ml
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("train"));
  EXPECT_THAT(run.out, HasSubstr("pending"));
  EXPECT_THAT(run.out, Not(HasSubstr("other")));

  run = Kubectl("tessera top pods -n research");
  EXPECT_THAT(run.out, HasSubstr("other"));
  EXPECT_THAT(run.out, Not(HasSubstr("train")));

  run = Kubectl("tessera top pods -A");
  EXPECT_THAT(run.out, HasSubstr("other"));
  EXPECT_THAT(run.out, HasSubstr("train"));
}

TEST_F(KubectlPluginTest, DescribePodSaysWhereAndWhyOrWhyNot) {
  AddGpuNode("gpu-1");
  AddPlacedPod("ml", "train", "gpu-1", kGpu0, 10000);
  ASSERT_TRUE(api_->CreateObject("pods", GpuPod("ml", "huge", 60000)).ok());
  Json event = {{"metadata", {{"name", "huge.1"}, {"namespace", "ml"}}},
                {"involvedObject", {{"kind", "Pod"}, {"name", "huge"}, {"namespace", "ml"}}},
                {"type", "Warning"},
                {"reason", "FailedScheduling"},
                {"message", "0/1 nodes are available"}};
  ASSERT_TRUE(api_->CreateObject("events", event).ok());

  CommandRun run = Kubectl("tessera describe pod train");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("Node:         gpu-1"));
  EXPECT_THAT(run.out, HasSubstr(std::string("main       0    ") + kGpu0)) << run.out;
  EXPECT_THAT(run.out, HasSubstr("tessera-scheduler chose node gpu-1"));

  run = Kubectl("tessera describe pod huge -n ml");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("Why pending:"));
  EXPECT_THAT(run.out, HasSubstr("not enough memory")) << run.out;
  EXPECT_THAT(run.out, HasSubstr("FailedScheduling"));

  run = Kubectl("tessera describe pod missing");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("pods \"missing\" not found in namespace ml"));
}

TEST_F(KubectlPluginTest, CorruptAnnotationsAreShownAsSuch) {
  AddGpuNode("gpu-1");
  Json pod = GpuPod("ml", "mangled", 1000);
  pod["metadata"]["annotations"][std::string(core::kAllocationAnnotation)] = "{\"version\": 7}";
  pod["spec"]["nodeName"] = "gpu-1";
  ASSERT_TRUE(api_->CreateObject("pods", pod).ok());
  CommandRun run = Kubectl("tessera top pods");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("corrupt: tessera.io/allocation"));
  run = Kubectl("tessera describe pod mangled");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("Allocation:   CORRUPT"));
}

TEST_F(KubectlPluginTest, ADeadApiServerIsAClearErrorAndAFailure) {
  CommandRun run = Kubectl("tessera --context dead top nodes");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("cannot list nodes from http://127.0.0.1:1"));
  EXPECT_TRUE(run.out.empty()) << run.out;

  api_->Stop();
  run = Kubectl("tessera top nodes");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("cannot list nodes from " + api_->url()));
}

TEST_F(KubectlPluginTest, BadUsageAndHelp) {
  CommandRun run = Kubectl("tessera top volumes");
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  run = Kubectl("tessera --help");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("kubectl tessera describe pod train -n ml"));
  EXPECT_THAT(run.out, HasSubstr("INVENTORY (top nodes)"));
  // kubectl itself lists the plugin.
  run = Kubectl("plugin list");
  EXPECT_THAT(run.out, HasSubstr("kubectl-tessera"));
}

}  // namespace
}  // namespace tessera
