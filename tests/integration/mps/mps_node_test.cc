// tessera-node's MPS half on the simulated GPU: MpsDaemons running the
// simulated nvidia-cuda-mps-control (tessera-sim-mps-control) per GPU, the
// client variables tessera gives containers (mps_container.h), and
// `tessera run --mps`. Measured from the simulator's per-process busy time
// (NVML's per-process utilisation), never from wall-clock asserts.
#include <cuda.h>
#include <gtest/gtest.h>
#include <nvml.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "base/testing.h"
#include "node/mps/mps_container.h"
#include "node/mps/mps_daemons.h"
#include "node/mps/mps_node.h"
#include "node/sharing/gpu_modes.h"
#include "node/sharing/nvidia_config.h"
#include "node/sharing/replica_service.h"
#include "node/sharing/timeslice_setup.h"
#include "testing/process.h"

namespace tessera::node::mps {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// A client program with pipes to its stdin and stdout.
struct Client {
  pid_t pid = -1;
  FILE* out = nullptr;
  FILE* in = nullptr;

  static Client Start(const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
    int to_child[2], from_child[2];
    EXPECT_EQ(::pipe(to_child), 0);
    EXPECT_EQ(::pipe(from_child), 0);
    std::vector<std::string> argv_strings{TESSERA_MPS_CLIENT};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_strings) argv.push_back(a.data());
    argv.push_back(nullptr);
    Client c;
    c.pid = ::fork();
    if (c.pid == 0) {
      for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
      ::dup2(to_child[0], 0);
      ::dup2(from_child[1], 1);
      for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(fd);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    c.in = ::fdopen(to_child[1], "w");
    c.out = ::fdopen(from_child[0], "r");
    return c;
  }
  std::string ReadLine() {
    char buf[256];
    if (out == nullptr || std::fgets(buf, sizeof(buf), out) == nullptr) return "";
    std::string s = buf;
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void Send(const std::string& line) {
    std::fprintf(in, "%s\n", line.c_str());
    std::fflush(in);
  }
  int Wait() {
    if (in != nullptr) std::fclose(in);
    in = nullptr;
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (out != nullptr) std::fclose(out);
    out = nullptr;
    return testing::ExitCode(status);
  }
};

unsigned long long NowUs() {
  timeval tv;
  gettimeofday(&tv, nullptr);
  return static_cast<unsigned long long>(tv.tv_sec) * 1000000ull + tv.tv_usec;
}

class MpsOnSimulatedGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    state_ = new tessera::testing::TempDir("tessera-mps-it");
    ::setenv("TESSERA_SIM_STATE", (state_->path() + "/sim").c_str(), 1);
    ::setenv("TESSERA_SIM_GPUS", "1xA100-80GB", 1);
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &gpu_), NVML_SUCCESS);
    char uuid[96] = {};
    ASSERT_EQ(nvmlDeviceGetUUID(gpu_, uuid, sizeof(uuid)), NVML_SUCCESS);
    uuid_ = uuid;
  }
  static void TearDownTestSuite() {
    nvmlShutdown();
    delete state_;
  }

  void SetUp() override {
    // Short: the daemon's socket path (<root>/<uuid>/pipe/control) must fit a sockaddr_un.
    static int test = 0;
    root_ = state_->path() + "/m" + std::to_string(test++);
    MpsDaemonsOptions options;
    options.root = root_;
    daemons_ = std::make_unique<MpsDaemons>(
        options, SystemControlProgram(TESSERA_SIM_MPS_CONTROL, std::chrono::seconds(10)));
  }
  void TearDown() override {
    daemons_->StopAll();
    // A daemon a failed check left behind does not outlive the test.
    std::ifstream f(PipeDirectoryOf(root_, uuid_) + "/nvidia-cuda-mps-control.pid");
    int pid = 0;
    if (f >> pid && pid > 0) ::kill(pid, SIGKILL);
  }

  MpsGpu Gpu(int percentage, int64_t pinned_mib) const {
    MpsGpu gpu;
    gpu.uuid = uuid_;
    gpu.memory_mib = 81920;
    gpu.default_active_thread_percentage = percentage;
    gpu.default_pinned_memory_mib = pinned_mib;
    return gpu;
  }
  std::string Pipe() const { return PipeDirectoryOf(root_, uuid_); }
  // What the control program answers to `commands` for this GPU's daemon.
  std::string Control(const std::string& commands) const {
    auto r = testing::RunShell("printf '" + commands + "' | CUDA_MPS_PIPE_DIRECTORY=" + Pipe() + " " +
                               TESSERA_SIM_MPS_CONTROL);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  }
  // A container's environment for a share of the GPU: the pipe directory
  // (host path: the test is not in a container) and the client variables.
  std::map<std::string, std::string> ClientOf(int percentage, int64_t memory_mib) const {
    auto env = ClientEnv(0, percentage, memory_mib, 81920);
    EXPECT_TRUE(env.ok());
    auto edits = PipeDirectoryEdits(*daemons_, uuid_);
    EXPECT_TRUE(edits.ok()) << edits.error().message;
    env->emplace("CUDA_MPS_PIPE_DIRECTORY", edits->mounts.at(0).host_path);
    return *env;
  }
  int DaemonPid() const {
    std::ifstream f(Pipe() + "/nvidia-cuda-mps-control.pid");
    int pid = 0;
    f >> pid;
    return pid;
  }

  static tessera::testing::TempDir* state_;
  static nvmlDevice_t gpu_;
  static std::string uuid_;
  std::string root_;
  std::unique_ptr<MpsDaemons> daemons_;
};
tessera::testing::TempDir* MpsOnSimulatedGpu::state_ = nullptr;
nvmlDevice_t MpsOnSimulatedGpu::gpu_ = nullptr;
std::string MpsOnSimulatedGpu::uuid_;

TEST_F(MpsOnSimulatedGpu, TheDaemonRunsWithNvidiasEqualSplitAsItsDefaults) {
  auto split = EqualSplit(uuid_, 0, 81920, 4);
  ASSERT_TRUE(split.ok());
  ASSERT_TRUE(daemons_->Apply({*split}).ok());
  EXPECT_EQ(Control("get_default_active_thread_percentage\\n"), "25.0\n");
  EXPECT_EQ(Control("get_default_device_pinned_mem_limit 0\\n"), "20480M\n");
  EXPECT_TRUE(daemons_->Ready(uuid_));

  // A client with no variables of its own gets the defaults: refused exactly past 20480 MiB.
  Client client = Client::Start({"fill", "20480"}, {{"CUDA_MPS_PIPE_DIRECTORY", Pipe()}});
  EXPECT_EQ(client.ReadLine(), "INIT 0");
  EXPECT_EQ(client.ReadLine(), "FILL 0 0 " + std::to_string(CUDA_ERROR_OUT_OF_MEMORY));
  EXPECT_EQ(client.Wait(), 0);
  // NVML lists the MPS server as the GPU's compute process.
  unsigned n = 4;
  nvmlProcessInfo_t infos[4];
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses(gpu_, &n, infos), NVML_SUCCESS);
  ASSERT_EQ(n, 1u);
  char name[64] = {};
  ASSERT_EQ(nvmlSystemGetProcessName(infos[0].pid, name, sizeof(name)), NVML_SUCCESS);
  EXPECT_STREQ(name, "nvidia-cuda-mps");
}

TEST_F(MpsOnSimulatedGpu, ClientsAt30And70PercentGetThoseSharesAndTheirMemory) {
  ASSERT_TRUE(daemons_->Apply({Gpu(100, 0)}).ok());
  // Each refused exactly past its own pinned limit.
  Client small = Client::Start({"fill", "1024"}, ClientOf(30, 1024));
  Client large = Client::Start({"fill", "2048"}, ClientOf(70, 2048));
  EXPECT_EQ(small.ReadLine(), "INIT 0");
  EXPECT_EQ(large.ReadLine(), "INIT 0");
  EXPECT_EQ(small.ReadLine(), "FILL 0 0 " + std::to_string(CUDA_ERROR_OUT_OF_MEMORY));
  EXPECT_EQ(large.ReadLine(), "FILL 0 0 " + std::to_string(CUDA_ERROR_OUT_OF_MEMORY));
  EXPECT_EQ(small.Wait(), 0);
  EXPECT_EQ(large.Wait(), 0);

  Client a = Client::Start({"busy", "5"}, ClientOf(30, 1024));
  Client b = Client::Start({"busy", "5"}, ClientOf(70, 2048));
  ASSERT_EQ(a.ReadLine(), "INIT 0");
  ASSERT_EQ(b.ReadLine(), "INIT 0");
  ASSERT_EQ(a.ReadLine(), "READY");
  ASSERT_EQ(b.ReadLine(), "READY");
  a.Send("go");
  b.Send("go");
  // Three one-second windows of the simulator's per-process busy time while
  // both keep work queued (the first 1.3 s let both start).
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  for (int second = 0; second < 3; ++second) {
    nvmlProcessUtilizationSample_t samples[8];
    unsigned n = 8;
    ASSERT_EQ(nvmlDeviceGetProcessUtilization(gpu_, samples, &n, NowUs() - 1'000'000), NVML_SUCCESS);
    int share_a = -1, share_b = -1;
    for (unsigned i = 0; i < n && i < 8; ++i) {
      if (static_cast<pid_t>(samples[i].pid) == a.pid) share_a = static_cast<int>(samples[i].smUtil);
      if (static_cast<pid_t>(samples[i].pid) == b.pid) share_b = static_cast<int>(samples[i].smUtil);
    }
    std::printf("second %d: %d %% and %d %%\n", second, share_a, share_b);
    EXPECT_NEAR(share_a, 30, 3) << "second " << second;
    EXPECT_NEAR(share_b, 70, 3) << "second " << second;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  EXPECT_EQ(a.ReadLine(), "DONE");
  EXPECT_EQ(b.ReadLine(), "DONE");
  EXPECT_EQ(a.Wait(), 0);
  EXPECT_EQ(b.Wait(), 0);
}

TEST_F(MpsOnSimulatedGpu, ADaemonKilledMidRunIsRestartedAndNewClientsWork) {
  ASSERT_TRUE(daemons_->Apply({Gpu(50, 4096)}).ok());
  Client running = Client::Start({"busy", "30"}, ClientOf(50, 1024));
  ASSERT_EQ(running.ReadLine(), "INIT 0");
  ASSERT_EQ(running.ReadLine(), "READY");
  running.Send("go");
  const int first = DaemonPid();
  ASSERT_GT(first, 0);
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  // Its server went with it: the running client fails as CUDA reports it.
  EXPECT_EQ(running.ReadLine(), "FAILED " + std::to_string(CUDA_ERROR_MPS_CLIENT_TERMINATED));
  EXPECT_EQ(running.Wait(), 0);
  // Until the monitor's next pass, new clients cannot connect; Allocate says why.
  for (int i = 0; i < 200 && ::kill(first, 0) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  Client lost = Client::Start({"fill", "64"}, {{"CUDA_MPS_PIPE_DIRECTORY", Pipe()}});
  EXPECT_EQ(lost.ReadLine(), "INIT " + std::to_string(CUDA_ERROR_MPS_CONNECTION_FAILED));
  EXPECT_EQ(lost.Wait(), 0);

  daemons_->Check();  // the monitor's pass
  const int second = DaemonPid();
  EXPECT_GT(second, 0);
  EXPECT_NE(second, first);
  ASSERT_EQ(daemons_->Daemons().size(), 1u);
  EXPECT_EQ(daemons_->Daemons()[0].restarts, 1);
  EXPECT_NE(daemons_->Metrics().find("tessera_mps_daemon_restarts_total{gpu=\"0\",uuid=\"" + uuid_ + "\"} 1"),
            std::string::npos);
  // The new daemon has the defaults again, and new clients work.
  EXPECT_EQ(Control("get_default_active_thread_percentage\\n"), "50.0\n");
  EXPECT_EQ(Control("get_default_device_pinned_mem_limit 0\\n"), "4096M\n");
  Client fresh = Client::Start({"fill", "1024"}, ClientOf(50, 1024));
  EXPECT_EQ(fresh.ReadLine(), "INIT 0");
  EXPECT_EQ(fresh.ReadLine(), "FILL 0 0 " + std::to_string(CUDA_ERROR_OUT_OF_MEMORY));
  EXPECT_EQ(fresh.Wait(), 0);
}

TEST_F(MpsOnSimulatedGpu, BadInputIsRefusedAndTheRunningDaemonKeepsItsDefaults) {
  ASSERT_TRUE(daemons_->Apply({Gpu(40, 0)}).ok());
  const int pid = DaemonPid();
  EXPECT_NE(daemons_->Apply({Gpu(0, 0)}).error().message.find("not between 1 and 100"), std::string::npos);
  EXPECT_NE(daemons_->Apply({Gpu(101, 0)}).error().message.find("not between 1 and 100"), std::string::npos);
  EXPECT_NE(daemons_->Apply({Gpu(40, 81921)}).error().message.find("more than the GPU's 81920 MiB"),
            std::string::npos);
  EXPECT_EQ(DaemonPid(), pid);
  EXPECT_EQ(Control("get_default_active_thread_percentage\\n"), "40.0\n");
  EXPECT_EQ(Control("get_default_device_pinned_mem_limit 0\\n"), "N/A\n");
  EXPECT_FALSE(ClientEnv(0, 101, 0, 81920).ok());
  EXPECT_FALSE(ClientEnv(0, 30, 81921, 81920).ok());
}

// NVIDIA's README MPS config taken as it is (10 replicas): the modes, MpsNode's
// daemon with one replica's defaults, and the replica plugin's answer for one
// replica (sharing's ShareOf/AllocateShare with the mps hook) make a client
// that gets 10 % and exactly 8192 MiB.
TEST_F(MpsOnSimulatedGpu, NvidiasReadmeMpsConfigGivesEachReplicaATenth) {
  const std::string file = root_ + "-nvidia.yaml";
  std::ofstream(file) << "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
                         "      replicas: 10\n";
  NodeConfig config;
  config.nvidia_config_file = file;
  config.mps_root = root_;
  config.mps_control_binary = TESSERA_SIM_MPS_CONTROL;
  config.region_host_dir = root_ + "-regions";
  config.libvgpu_host_path =
      root_ + "-libvgpu.so";  // the libvgpu edits need the file; the client runs without it
  config.ld_so_preload = false;
  std::ofstream(config.libvgpu_host_path) << "not an ELF";
  core::Gpu gpu;
  gpu.uuid = uuid_;
  gpu.model = "NVIDIA A100-SXM4-80GB";
  gpu.memory_mib = 81920;
  const std::vector<core::Gpu> discovered{gpu};
  auto nvidia = sharing::ReadNvidiaConfigFile(file);
  ASSERT_TRUE(nvidia.ok()) << nvidia.error().message;
  auto modes = sharing::AssignModes(config, discovered, &*nvidia);
  ASSERT_TRUE(modes.ok()) << modes.error().message;
  ASSERT_EQ(modes->gpus.size(), 1u);
  EXPECT_EQ(modes->gpus[0].mode, core::SharingMode::kMps);
  EXPECT_EQ(modes->gpus[0].replicas, 10);

  int regions = 0;
  auto new_region = [&regions] { return "region-" + std::to_string(++regions); };
  MpsNode node(config, nullptr, new_region);
  node.Start(*modes, discovered);
  EXPECT_EQ(Control("get_default_active_thread_percentage\\n"), "10.0\n");
  EXPECT_EQ(Control("get_default_device_pinned_mem_limit 0\\n"), "8192M\n");

  const std::vector<sharing::ReplicaGpu> replicas{{gpu, modes->gpus[0]}};
  const sharing::ContainerSetups setups{
      {core::SharingMode::kMps,
       MpsContainerSetup(&node.daemons(), sharing::TimesliceContainerSetup(config, new_region))}};
  v1beta1::ContainerAllocateRequest one;
  one.add_devices_ids(uuid_ + "::3");
  auto share = sharing::ShareOf(replicas, "nvidia.com/gpu", one);
  ASSERT_TRUE(share.ok()) << share.error().message;
  auto answer = sharing::AllocateShare(*share, setups);
  ASSERT_TRUE(answer.ok()) << answer.error().message;
  const auto& envs = answer->envs();
  EXPECT_EQ(envs.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "10");
  EXPECT_EQ(envs.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=8192M");
  EXPECT_EQ(envs.at("CUDA_MPS_PIPE_DIRECTORY"), "/run/tessera/mps");
  EXPECT_EQ(envs.at("NVIDIA_VISIBLE_DEVICES"), uuid_);
  EXPECT_EQ(envs.at("LD_PRELOAD"), config.libvgpu_container_path);  // libvgpu too (metrics, the memory again)
  std::string pipe_host;
  for (const auto& m : answer->mounts()) {
    if (m.container_path() == "/run/tessera/mps") pipe_host = m.host_path();
  }
  EXPECT_EQ(pipe_host, Pipe());

  // The container's client, run here with the host path of its pipe directory.
  Client client = Client::Start(
      {"fill", "8192"}, {{"CUDA_MPS_PIPE_DIRECTORY", pipe_host},
                         {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", envs.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")},
                         {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", envs.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")}});
  EXPECT_EQ(client.ReadLine(), "INIT 0");
  EXPECT_EQ(client.ReadLine(), "FILL 0 0 " + std::to_string(CUDA_ERROR_OUT_OF_MEMORY));
  EXPECT_EQ(client.Wait(), 0);

  // Two replicas: NVIDIA's failRequestsGreaterThanOne (true for MPS) refuses them.
  v1beta1::ContainerAllocateRequest two;
  two.add_devices_ids(uuid_ + "::3");
  two.add_devices_ids(uuid_ + "::4");
  auto refused = sharing::ShareOf(replicas, "nvidia.com/gpu", two);
  EXPECT_FALSE(refused.ok());
  node.Stop();
  EXPECT_EQ(DaemonPid() > 0 && ::kill(DaemonPid(), 0) == 0, false);
}

// `tessera run --mps` on a simulated GPU of its own (a state of its own).
class RunMps : public ::testing::Test {
 protected:
  testing::ShellOutcome Run(const std::string& args) const {
    return testing::RunShell("TESSERA_SIM_STATE=" + dir_.path() + "/sim TESSERA_RUN_STATE=" + dir_.path() +
                             "/run TESSERA_SIM_GPUS= " + TESSERA_BIN + " " + args);
  }
  void TearDown() override { (void)Run("sim mps stop --gpu 0"); }
  tessera::testing::TempDir dir_{"tessera-run-mps"};
};

TEST_F(RunMps, TheJobIsAClientWithItsSlicesLimits) {
  auto run = Run("run --sim 1xA100-80GB --mps --gpumem 1024 --gpucores 30 -- " +
                 std::string(TESSERA_MPS_CLIENT) + " fill 1024");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("INIT 0\nFILL 0 0 " + std::to_string(CUDA_ERROR_OUT_OF_MEMORY)),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("started the MPS control daemon"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("1024 MiB pinned, 30% active threads"), std::string::npos) << run.output;
  // The daemon stays for the next job, which reuses it.
  auto status = Run("sim mps status --gpu 0");
  EXPECT_EQ(status.exit_code, 0) << status.output;
  auto again =
      Run("run --sim 1xA100-80GB --mps --gpumem 2048 -- " + std::string(TESSERA_MPS_CLIENT) + " fill 2048");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("reusing the MPS control daemon"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("FILL 0 0 " + std::to_string(CUDA_ERROR_OUT_OF_MEMORY)), std::string::npos);
}

TEST_F(RunMps, BadInputIsRefusedWithTheReason) {
  const std::string job = " -- " + std::string(TESSERA_MPS_CLIENT) + " fill 1";
  auto pct = Run("run --sim 1xH100-80GB --mps --gpucores 101" + job);
  EXPECT_EQ(pct.exit_code, 2);
  EXPECT_NE(pct.output.find("--gpucores: must be 0..100"), std::string::npos) << pct.output;
  auto memory = Run("run --sim 1xH100-80GB --mps --gpumem 90000" + job);
  EXPECT_EQ(memory.exit_code, 2);
  EXPECT_NE(memory.output.find("not enough memory: 90000 MiB asked"), std::string::npos) << memory.output;
  auto two = Run("run --sim 2xH100-80GB --mps --gpus 2" + job);
  EXPECT_EQ(two.exit_code, 2);
  EXPECT_NE(two.output.find("--mps runs on one GPU"), std::string::npos) << two.output;
  auto mig = Run("run --sim 1xH100-80GB --mps --mig 1g.10gb" + job);
  EXPECT_EQ(mig.exit_code, 2);
  EXPECT_NE(mig.output.find("MPS on MIG devices is not supported"), std::string::npos) << mig.output;
  // A GPU in MIG mode offers no MPS slice (an H100 switches at once; the state is
  // the one the memory check above made).
  ASSERT_EQ(Run("sim mig --gpu 0 on").exit_code, 0);
  auto on_mig = Run("run --sim 1xH100-80GB --mps --gpumem 1024" + job);
  EXPECT_EQ(on_mig.exit_code, 2) << on_mig.output;
  EXPECT_NE(on_mig.output.find("MIG"), std::string::npos) << on_mig.output;
  EXPECT_EQ(on_mig.output.find("started the MPS control daemon"), std::string::npos) << on_mig.output;
}

}  // namespace
}  // namespace tessera::node::mps
