// MPS end to end through the stand-ins: the tessera-node binary on the
// simulated GPU with a GPU in mps mode (NVIDIA-style replicas), the kubelet
// stand-in admitting containers and the API-server stand-in holding the
// Node's Events. Covered: the daemon tessera-node starts with one replica's
// defaults; a replica's Allocate answer; a "container" process given that
// answer is an MPS client refused exactly past its limit; the daemon
// SIGKILLed is restarted by tessera-node (Event MpsDaemonRestarted, the
// restart metric) and new clients work; the daemon quit when the node stops.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>

#include "base/testing.h"
#include "kubelet_standin.h"
#include "testing/node_cluster.h"
#include "testing/process.h"

namespace tessera::node {
namespace {

using namespace std::chrono_literals;
using ::tessera::testing::NodeCluster;
using ::tessera::testing::WaitFor;

constexpr const char* kMps = "nvidia.com/gpu.mps";

class MpsClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<NodeCluster>(testing::NodeClusterOptions{
        .node_name = "mps-node-1", .sim_gpus = "2xA100-80GB", .temp_prefix = "tmps"});
    auto started = cluster_->Start();
    ASSERT_TRUE(started.ok()) << started.error().message;
    gpus_ = *started;
  }
  void TearDown() override {
    cluster_->Stop();
    if (HasFailure()) std::cerr << "tessera-node log:\n" << cluster_->NodeLog() << std::endl;
    // A daemon a failed check left behind does not outlive the test.
    if (const int pid = DaemonPid(); pid > 0) ::kill(pid, SIGKILL);
  }

  std::string Pipe() const { return cluster_->Path("mps/" + gpus_[1].uuid + "/pipe"); }
  int DaemonPid() const {
    std::ifstream f(Pipe() + "/nvidia-cuda-mps-control.pid");
    int pid = 0;
    f >> pid;
    return pid;
  }
  bool DaemonAlive() const { return DaemonPid() > 0 && ::kill(DaemonPid(), 0) == 0; }
  std::string Control(const std::string& command) const {
    return testing::RunShell("echo " + command + " | CUDA_MPS_PIPE_DIRECTORY=" + Pipe() + " " +
                             TESSERA_SIM_MPS_CONTROL)
        .output;
  }
  std::string Metrics() const {
    httplib::Client client("127.0.0.1", cluster_->metrics_port());
    auto res = client.Get("/metrics");
    return res && res->status == 200 ? res->body : "";
  }
  // A "container" given `answer`, its pipe directory reached by its host path
  // (the stand-in mounts only the region directory).
  std::string RunClient(const v1beta1::ContainerAllocateResponse& answer, const std::string& args,
                        const std::string& name) {
    testing::ContainerProcess process;
    process.allocated = &answer;
    process.preload_libvgpu = false;
    process.command_line = "CUDA_MPS_PIPE_DIRECTORY=" + Pipe() + " " + TESSERA_MPS_CLIENT + " " + args;
    process.output = cluster_->Path(name + ".out");
    const pid_t pid = cluster_->StartContainer(process);
    EXPECT_GT(pid, 0);
    testing::WaitStatus(pid);
    cluster_->ForgetContainer(pid);
    std::ifstream f(process.output);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }

  std::unique_ptr<NodeCluster> cluster_;
  std::vector<core::Gpu> gpus_;
};

TEST_F(MpsClusterTest, ReplicasOfAnMpsGpuTheirDaemonAndItsRestart) {
  if (!testing::MountNamespacesWork()) GTEST_SKIP() << "cannot create mount namespaces here";
  ASSERT_TRUE(cluster_
                  ->StartNode({{"--sharing", "[{gpus: \"1\", mode: mps, replicas: 4, resource: " +
                                                 std::string(kMps) + "}]"},
                               {"--mps-root", cluster_->Path("mps")},
                               {"--mps-control-binary", TESSERA_SIM_MPS_CONTROL}})
                  .ok());
  auto& kubelet = cluster_->kubelet();
  ASSERT_TRUE(kubelet.WaitForRegistrations(2, 60s)) << cluster_->NodeLog();
  ASSERT_TRUE(kubelet.WaitForDevices(
      kMps, [](const auto& d) { return d.size() == 4; }, 30s));
  // The daemon, with one replica's share as its defaults.
  ASSERT_TRUE(WaitFor([&] { return DaemonAlive(); })) << cluster_->NodeLog();
  EXPECT_EQ(Control("get_default_active_thread_percentage"), "25.0\n");
  EXPECT_EQ(Control("get_default_device_pinned_mem_limit 0"), "20480M\n");
  EXPECT_EQ(cluster_->Label("nvidia.com/mps.capable"), "true");

  v1beta1::ContainerAllocateResponse answer;
  auto status =
      kubelet.AdmitContainer("ml", "infer-0", "main", kMps, {kubelet.devices(kMps)[0].id()}, &answer);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(answer.envs().at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
  EXPECT_EQ(answer.envs().at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=20480M");
  EXPECT_EQ(answer.envs().at("CUDA_MPS_PIPE_DIRECTORY"), "/run/tessera/mps");
  EXPECT_EQ(RunClient(answer, "fill 20480", "first"), "INIT 0\nFILL 0 0 2\n");

  // Killed: tessera-node starts it again, says so, and new clients work.
  const int first = DaemonPid();
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return DaemonAlive() && DaemonPid() != first; }, 30s)) << cluster_->NodeLog();
  EXPECT_TRUE(WaitFor([&] { return !cluster_->NodeEvents("MpsDaemonRestarted").empty(); }));
  EXPECT_TRUE(WaitFor([&] {
    return Metrics().find("tessera_mps_daemon_restarts_total{gpu=\"1\",uuid=\"" + gpus_[1].uuid + "\"} 1") !=
           std::string::npos;
  }));
  EXPECT_EQ(Control("get_default_active_thread_percentage"), "25.0\n");
  v1beta1::ContainerAllocateResponse again;
  status = kubelet.AdmitContainer("ml", "infer-1", "main", kMps, {kubelet.devices(kMps)[1].id()}, &again);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(RunClient(again, "fill 20480", "second"), "INIT 0\nFILL 0 0 2\n");

  // Two replicas: refused (failRequestsGreaterThanOne, true for MPS).
  status = kubelet.AdmitContainer("ml", "infer-2", "main", kMps,
                                  {kubelet.devices(kMps)[2].id(), kubelet.devices(kMps)[3].id()}, nullptr);
  EXPECT_FALSE(status.ok());

  cluster_->StopNode();  // quits the daemon
  EXPECT_TRUE(WaitFor([&] { return !DaemonAlive(); }, 15s));
}

}  // namespace
}  // namespace tessera::node
