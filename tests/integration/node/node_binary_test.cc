// The tessera-node binary as a DaemonSet would run it: configuration errors at
// start, and a full run against the simulated GPUs (libnvidia-ml.so.1 from
// src/sim) with the kubelet stand-in on the other end of the socket.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/testing.h"

#include "host/nvml_api.h"
#include "host/nvml_inventory.h"
#include "kubelet_standin.h"
#include "testing/process.h"
#include "testing/sim_gpu.h"

namespace tessera::node {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::KubeletStandIn;

constexpr auto kWait = 30s;

using ::tessera::testing::RunShell;

class NodeBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_.MakeDir("dp");
    tmp_.Write("lib/libvgpu.so", "stand-in for libvgpu");
  }
  void TearDown() override { ::tessera::testing::KillAndWait(child_, SIGKILL); }

  // Starts tessera-node against the simulated GPUs; output goes to a log file.
  void StartNode(std::vector<std::string> extra_args) {
    std::vector<std::string> args = {TESSERA_NODE_BINARY, "--plugin-dir", root_ + "/dp",
                                     "--libvgpu-host-path", root_ + "/lib/libvgpu.so", "--region-host-dir",
                                     root_ + "/regions", "--kubelet-poll-ms", "50", "--nvml-library",
                                     TESSERA_SIM_NVML,
                                     // No API server, PodResources or metrics here:
                                     // tests/integration/node/node_cluster_test.cc has them.
                                     "--kubernetes=false", "--pod-resources-socket", "", "--metrics-port=0"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    const std::string log = root_ + "/node.log";
    child_ = ::tessera::testing::SpawnOnSimGpu(sim_, {.argv = args, .stdout_path = log, .stderr_path = log});
    ASSERT_GE(child_, 0);
  }

  std::string Log() const { return tmp_.Read("node.log"); }

  ::tessera::testing::TempDir tmp_{"tn"};  // short: unix socket paths are limited
  const std::string root_ = tmp_.path();
  const ::tessera::testing::SimGpu sim_{.gpus = "2xA100-80GB", .state_dir = root_ + "/sim"};
  pid_t child_ = -1;
};

TEST_F(NodeBinaryTest, BadConfigurationStopsAtStartWithExitCode2) {
  auto outcome = RunShell(std::string(TESSERA_NODE_BINARY) + " --split-count 0");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("split_count must be between 1 and 1024"), std::string::npos)
      << outcome.output;

  std::ofstream(root_ + "/bad.yaml") << "memory_scaling: lots\n";
  outcome = RunShell(std::string(TESSERA_NODE_BINARY) + " --config " + root_ + "/bad.yaml");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("'memory_scaling' must be a number"), std::string::npos) << outcome.output;

  // Talking to the API server needs this node's name.
  outcome = RunShell("env -u NODE_NAME " + std::string(TESSERA_NODE_BINARY));
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("node_name is empty: set NODE_NAME"), std::string::npos) << outcome.output;

  // No API configuration at all is a start-up failure that says what to do.
  outcome = RunShell("env -u KUBERNETES_SERVICE_HOST -u KUBECONFIG HOME=" + root_ + " " +
                     std::string(TESSERA_NODE_BINARY) + " --node-name n1");
  EXPECT_EQ(outcome.exit_code, 1) << outcome.output;
  EXPECT_NE(outcome.output.find("no Kubernetes API configuration"), std::string::npos) << outcome.output;

  outcome = RunShell(std::string(TESSERA_NODE_BINARY) + " --help");
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_NE(outcome.output.find("--memory-scaling"), std::string::npos);
}

TEST_F(NodeBinaryTest, MissingNvmlIsAClearStartupFailure) {
  auto outcome =
      RunShell(std::string(TESSERA_NODE_BINARY) + " --plugin-dir " + root_ + "/dp --libvgpu-host-path " +
               root_ + "/lib/libvgpu.so --nvml-library /nonexistent/libnvidia-ml.so.1 --kubernetes=false");
  EXPECT_EQ(outcome.exit_code, 1) << outcome.output;
  EXPECT_NE(outcome.output.find("cannot load NVML '/nonexistent/libnvidia-ml.so.1'"), std::string::npos)
      << outcome.output;
}

TEST_F(NodeBinaryTest, DiscoversTheSimulatedGpus) {
  sim_.Export();
  auto library = host::NvmlLibrary::Load(TESSERA_SIM_NVML);
  ASSERT_TRUE(library.ok()) << library.error().message;
  const host::NvmlApi& api = (*library)->api();
  auto gpus = [&] {
    host::NvmlInventory inventory(api);
    return inventory.Discover();
  }();
  ASSERT_TRUE(gpus.ok()) << gpus.error().message;
  ASSERT_EQ(gpus->size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const core::Gpu& gpu = (*gpus)[i];
    EXPECT_EQ(gpu.index, i);
    EXPECT_TRUE(gpu.uuid.starts_with("GPU-")) << gpu.uuid;
    EXPECT_EQ(gpu.model, "NVIDIA A100-SXM4-80GB");
    EXPECT_EQ(gpu.memory_mib, 81920);
    EXPECT_EQ(gpu.sm_count, 108);
    EXPECT_TRUE(gpu.healthy);
    EXPECT_TRUE(gpu.mig_capable);
    EXPECT_GE(gpu.numa_node, 0);
    // The two simulated A100s reach each other (NVLink or PCIe P2P).
    const std::string& peer = (*gpus)[1 - i].uuid;
    EXPECT_TRUE(std::any_of(gpu.links.begin(), gpu.links.end(), [&](const auto& l) {
      return l.peer_uuid == peer;
    })) << gpu.uuid;
  }
  EXPECT_NE((*gpus)[0].uuid, (*gpus)[1].uuid);
}

TEST_F(NodeBinaryTest, ServesTheKubeletFromSimulatedGpusAndStopsCleanlyOnSigterm) {
  KubeletStandIn kubelet(root_ + "/dp");
  ASSERT_TRUE(kubelet.Start());
  StartNode({"--split-count", "4"});

  ASSERT_TRUE(kubelet.WaitForRegistrations(1, kWait)) << Log();
  EXPECT_TRUE(kubelet.registrations().front().plugin_was_serving);
  ASSERT_TRUE(kubelet.WaitForDevices([](const auto& d) { return d.size() == 8; }, kWait)) << Log();

  // Allocate works from the binary (the preload file was written at start).
  v1beta1::AllocateRequest request;
  request.add_container_requests()->add_devices_ids(kubelet.devices().front().id());
  v1beta1::AllocateResponse response;
  grpc::Status status = kubelet.Allocate(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << Log();
  EXPECT_EQ(response.container_responses(0).mounts(1).host_path(), root_ + "/lib/ld.so.preload");

  // A kubelet restart is followed by a new registration.
  ASSERT_TRUE(kubelet.Restart());
  ASSERT_TRUE(kubelet.WaitForRegistrations(2, kWait)) << Log();
  EXPECT_TRUE(kubelet.registrations().back().plugin_was_serving);

  ASSERT_EQ(::kill(child_, SIGTERM), 0);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child_, &wstatus, 0), child_);
  child_ = -1;
  ASSERT_TRUE(WIFEXITED(wstatus)) << Log();
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << Log();
  EXPECT_FALSE(fs::exists(root_ + "/dp/tessera-nvidia.com-gpu.sock"))
      << "the plugin socket is removed on exit";
}

// Injects an XID through the simulator's CLI; false when this build's sim
// cannot (no `tessera sim inject-xid` yet, or no NVML event API).
bool InjectXid(const std::string& state_dir, int gpu, int xid, std::string& why) {
  auto library = host::NvmlLibrary::Load(TESSERA_SIM_NVML);
  if (!library.ok() || (*library)->api().EventSetWait == nullptr) {
    why = "the simulated NVML has no event API (nvmlEventSetWait_v2) yet";
    return false;
  }
  auto outcome = RunShell("TESSERA_SIM_STATE=" + state_dir + " " + TESSERA_CLI_BINARY +
                          " sim inject-xid --gpu " + std::to_string(gpu) + " --xid " + std::to_string(xid));
  if (outcome.exit_code != 0) {
    why = "`tessera sim inject-xid` failed or does not exist yet: " + outcome.output;
    return false;
  }
  return true;
}

TEST_F(NodeBinaryTest, AnXidInjectedIntoTheSimulatorMarksThatGpusDevicesUnhealthy) {
  KubeletStandIn kubelet(root_ + "/dp");
  ASSERT_TRUE(kubelet.Start());
  StartNode({"--split-count", "2"});
  ASSERT_TRUE(kubelet.WaitForDevices([](const auto& d) { return d.size() == 4; }, kWait)) << Log();
  const std::string gpu1 = kubelet.devices()[2].id().substr(0, kubelet.devices()[2].id().find("::"));

  std::string why;
  if (!InjectXid(root_ + "/sim", 1, 79, why)) GTEST_SKIP() << why;
  ASSERT_TRUE(kubelet.WaitForDevices(
      [&](const auto& devices) {
        for (const auto& d : devices) {
          bool on_gpu1 = d.id().starts_with(gpu1);
          if (d.health() != (on_gpu1 ? "Unhealthy" : "Healthy")) return false;
        }
        return true;
      },
      kWait))
      << Log();
}

}  // namespace
}  // namespace tessera::node
