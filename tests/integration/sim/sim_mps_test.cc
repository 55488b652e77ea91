// The simulated MPS, driven as on a real node: tessera-sim-mps-control -d
// starts the control daemon in a pipe directory; its commands are sent on the
// control program's stdin; ordinary CUDA programs with CUDA_MPS_PIPE_DIRECTORY
// become clients of the server it starts. Covered: the commands and their
// errors; NVML listing the server (not the clients) as the compute process;
// each client refused exactly past its pinned memory limit (its own, or the
// daemon's default); two saturating clients at 30 % and 70 % getting those
// shares of the device, second by second, in NVML's per-process utilisation; a
// killed daemon making new clients fail with CUDA_ERROR_MPS_CONNECTION_FAILED
// until a new daemon serves them; `tessera sim mps start|status|stop`.
#include <cuda.h>
#include <nvml.h>
#include <signal.h>
#include <sys/time.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "sim_test_util.h"

namespace {

constexpr uint64_t kMiB = 1ull << 20;
std::string control_bin, tessera_bin, pipe_dir;

using simtest::Shell;

// The control program's answers to `commands` (one per line).
std::string Control(const std::string& commands) {
  std::string out;
  SIM_CHECK_EQ(Shell("printf '" + commands + "' | " + control_bin, &out), 0);
  return out;
}

int DaemonPid() {
  std::ifstream f(pipe_dir + "/nvidia-cuda-mps-control.pid");
  int pid = 0;
  f >> pid;
  return pid;
}

unsigned long long NowUs() {
  timeval tv;
  gettimeofday(&tv, nullptr);
  return static_cast<unsigned long long>(tv.tv_sec) * 1000000ull + tv.tv_usec;
}

CUfunction Setup() {
  simtest::UseDevice(0);
  CUfunction f = simtest::SimKernel("sim_busy_mps");
  return f;
}

// Child roles. Each prints cuInit's result first.
int Client(const std::string& role) {
  const CUresult init = cuInit(0);
  std::printf("INIT %d\n", init);
  std::fflush(stdout);
  if (init != CUDA_SUCCESS) return 0;
  CUfunction f = Setup();
  char line[32];
  if (role == "fill") {
    // Up to the limit (L MiB): L - 1 MiB, then 1 MiB, then one more page.
    const uint64_t limit = std::strtoull(std::getenv("LIMIT_MIB"), nullptr, 10) * kMiB;
    CUdeviceptr a, b, c;
    const int r1 = cuMemAlloc(&a, limit - kMiB), r2 = cuMemAlloc(&b, kMiB), r3 = cuMemAlloc(&c, 1);
    size_t free_b = 0, total_b = 0;
    SIM_OK(cuMemGetInfo(&free_b, &total_b));
    std::printf("FILL %d %d %d %llu\n", r1, r2, r3, static_cast<unsigned long long>(total_b / kMiB));
  } else if (role == "saturate") {
    // 20 ms kernels, eight in flight (so a client the machine is slow to run
    // still has work queued), for 5 s of wall time.
    std::printf("READY\n");
    std::fflush(stdout);
    if (std::fgets(line, sizeof(line), stdin) == nullptr) return 2;
    CUevent done[8];
    for (CUevent& e : done) SIM_OK(cuEventCreate(&e, 0));
    uint64_t ns = 20'000'000;
    void* args[] = {&ns};
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5); ++i) {
      if (i >= 8) SIM_OK(cuEventSynchronize(done[i % 8]));
      SIM_OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr));
      SIM_OK(cuEventRecord(done[i % 8], nullptr));
    }
    std::printf("DONE\n");
  } else {  // "probe": a context and an allocation
    CUdeviceptr p;
    SIM_OK(cuMemAlloc(&p, 64 * kMiB));
    std::printf("PROBED\n");
  }
  std::fflush(stdout);
  if (std::fgets(line, sizeof(line), stdin) == nullptr) return 2;
  return simtest::Failures() == 0 ? 0 : 1;
}

// A client with `env` ("NAME=value" pairs) set.
simtest::Child SpawnClient(const std::string& role, const std::vector<std::string>& env) {
  for (const std::string& e : env)
    setenv(e.substr(0, e.find('=')).c_str(), e.substr(e.find('=') + 1).c_str(), 1);
  simtest::Child c = simtest::SpawnSelf({"client", role});
  for (const std::string& e : env) unsetenv(e.substr(0, e.find('=')).c_str());
  return c;
}

void Commands() {
  SIM_CHECK(Control("get_default_active_thread_percentage\\n") == "100.0\n");
  SIM_CHECK(Control("set_default_active_thread_percentage 30\\nget_default_active_thread_percentage\\n") ==
            "30.0\n30.0\n");
  std::string out = Control(
      "set_default_active_thread_percentage 0\\nset_default_active_thread_percentage 101\\n"
      "set_default_active_thread_percentage lots\\n");
  SIM_CHECK(out.find("'0' (a number from 1 to 100)") != std::string::npos);
  SIM_CHECK(out.find("'101' (a number from 1 to 100)") != std::string::npos);
  SIM_CHECK(out.find("'lots' (a number from 1 to 100)") != std::string::npos);
  SIM_CHECK(Control("get_default_active_thread_percentage\\n") == "30.0\n");  // unchanged by the refusals
  SIM_CHECK(Control("get_default_device_pinned_mem_limit 0\\n") == "N/A\n");
  SIM_CHECK(
      Control("set_default_device_pinned_mem_limit 0 8192M\\nget_default_device_pinned_mem_limit 0\\n") ==
      "8192M\n");
  SIM_CHECK(Control("set_default_device_pinned_mem_limit 0 2G\\nget_default_device_pinned_mem_limit 0\\n") ==
            "2048M\n");
  out = Control("set_default_device_pinned_mem_limit 1 2G\\nset_default_device_pinned_mem_limit 0 12X\\n");
  SIM_CHECK(out.find("Invalid device '1'") != std::string::npos);
  SIM_CHECK(out.find("invalid memory value '12X'") != std::string::npos);
  SIM_CHECK(Control("get_server_list\\n").empty());  // no client yet, no server
  SIM_CHECK(Control("set_default_active_thread_percentage 100\\n") == "100.0\n");
  SIM_CHECK(Control("frobnicate\\n") == "Unknown command: frobnicate\n");
}

void PinnedLimitsAndProcesses() {
  simtest::Child own = SpawnClient("fill", {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1024M", "LIMIT_MIB=1024"});
  simtest::Child dflt = SpawnClient("fill", {"LIMIT_MIB=2048"});  // the daemon's default: 2G
  SIM_CHECK(own.ReadLine() == "INIT 0");
  SIM_CHECK(dflt.ReadLine() == "INIT 0");
  // Exactly the limit fits; one more page is refused; the device's size is unchanged.
  SIM_CHECK(own.ReadLine() == "FILL 0 0 2 81920");
  SIM_CHECK(dflt.ReadLine() == "FILL 0 0 2 81920");

  const std::string server = Control("get_server_list\\n");
  const int server_pid = std::atoi(server.c_str());
  SIM_CHECK(server_pid > 0 && server == std::to_string(server_pid) + "\n");
  const std::string clients = Control("get_client_list " + std::to_string(server_pid) + "\\n");
  SIM_CHECK(clients.find(std::to_string(own.pid)) != std::string::npos &&
            clients.find(std::to_string(dflt.pid)) != std::string::npos);

  // NVML: the server is the GPU's compute process, holding its context and
  // its clients' memory; the clients are MPS processes.
  nvmlDevice_t gpu;
  SIM_OK(nvmlDeviceGetHandleByIndex(0, &gpu));
  nvmlProcessInfo_t infos[8];
  unsigned n = 8;
  SIM_OK(nvmlDeviceGetComputeRunningProcesses(gpu, &n, infos));
  SIM_CHECK(n == 1 && static_cast<int>(infos[0].pid) == server_pid);
  SIM_CHECK_EQ(infos[0].usedGpuMemory, (300 + 1024 + 2048) * kMiB);
  char name[64] = {};
  SIM_OK(nvmlSystemGetProcessName(static_cast<unsigned>(server_pid), name, sizeof(name)));
  SIM_CHECK(std::string(name) == "nvidia-cuda-mps");  // nvidia-cuda-mps-server, as comm keeps it
  n = 8;
  SIM_OK(nvmlDeviceGetMPSComputeRunningProcesses(gpu, &n, infos));
  SIM_CHECK_EQ(n, 2u);
  for (unsigned i = 0; i < n && i < 8; ++i) {
    const int pid = static_cast<int>(infos[i].pid);
    SIM_CHECK((pid == own.pid && infos[i].usedGpuMemory == 1024 * kMiB) ||
              (pid == dflt.pid && infos[i].usedGpuMemory == 2048 * kMiB));
  }
  own.Send("exit");
  dflt.Send("exit");
  SIM_CHECK_EQ(own.Wait(), 0);
  SIM_CHECK_EQ(dflt.Wait(), 0);
}

void Shares() {
  simtest::Child a = SpawnClient("saturate", {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30"});
  simtest::Child b = SpawnClient("saturate", {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70"});
  SIM_CHECK(a.ReadLine() == "INIT 0" && a.ReadLine() == "READY");
  SIM_CHECK(b.ReadLine() == "INIT 0" && b.ReadLine() == "READY");
  a.Send("go");
  b.Send("go");
  nvmlDevice_t gpu;
  SIM_OK(nvmlDeviceGetHandleByIndex(0, &gpu));
  // Three one-second windows while both saturate the device: 30 % and 70 %
  // of it each (within 3 points), the device fully used.
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  for (int second = 0; second < 3; ++second) {
    nvmlProcessUtilizationSample_t samples[8];
    unsigned n = 8;
    SIM_OK(nvmlDeviceGetProcessUtilization(gpu, samples, &n, NowUs() - 1'000'000));
    int share_a = -1, share_b = -1;
    for (unsigned i = 0; i < n && i < 8; ++i) {
      if (static_cast<int>(samples[i].pid) == a.pid) share_a = static_cast<int>(samples[i].smUtil);
      if (static_cast<int>(samples[i].pid) == b.pid) share_b = static_cast<int>(samples[i].smUtil);
    }
    std::printf("second %d: %d %% and %d %%\n", second, share_a, share_b);
    SIM_CHECK(share_a >= 27 && share_a <= 33);
    SIM_CHECK(share_b >= 67 && share_b <= 73);
    nvmlUtilization_t util;
    SIM_OK(nvmlDeviceGetUtilizationRates(gpu, &util));
    SIM_CHECK(util.gpu >= 97);
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  SIM_CHECK(a.ReadLine() == "DONE");
  SIM_CHECK(b.ReadLine() == "DONE");
  a.Send("exit");
  b.Send("exit");
  SIM_CHECK_EQ(a.Wait(), 0);
  SIM_CHECK_EQ(b.Wait(), 0);
}

void DaemonKilledAndRestarted() {
  const int daemon = DaemonPid();
  SIM_CHECK(daemon > 0);
  kill(daemon, SIGKILL);
  for (int i = 0; i < 100 && kill(daemon, 0) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // The server died with it; new clients cannot connect.
  simtest::Child lost = SpawnClient("probe", {});
  SIM_CHECK(lost.ReadLine() == "INIT " + std::to_string(CUDA_ERROR_MPS_CONNECTION_FAILED));
  SIM_CHECK_EQ(lost.Wait(), 0);
  nvmlDevice_t gpu;
  SIM_OK(nvmlDeviceGetHandleByIndex(0, &gpu));
  unsigned n = 0;
  SIM_OK(nvmlDeviceGetComputeRunningProcesses(gpu, &n, nullptr));
  SIM_CHECK_EQ(n, 0u);

  std::string out;
  SIM_CHECK_EQ(Shell(control_bin + " -d", &out), 0);
  simtest::Child served = SpawnClient("probe", {});
  SIM_CHECK(served.ReadLine() == "INIT 0");
  SIM_CHECK(served.ReadLine() == "PROBED");
  n = 4;
  nvmlProcessInfo_t infos[4];
  SIM_OK(nvmlDeviceGetMPSComputeRunningProcesses(gpu, &n, infos));
  SIM_CHECK(n == 1 && static_cast<int>(infos[0].pid) == served.pid && infos[0].usedGpuMemory == 64 * kMiB);
  served.Send("exit");
  SIM_CHECK_EQ(served.Wait(), 0);
}

void Cli() {
  std::string out;
  const std::string dir = " --pipe-dir " + pipe_dir;
  SIM_CHECK_EQ(Shell(tessera_bin + " sim mps status" + dir, &out), 0);
  SIM_CHECK(out.find("daemon " + std::to_string(DaemonPid())) != std::string::npos);
  SIM_CHECK(out.find("active thread percentage 100.0") != std::string::npos);
  SIM_CHECK_EQ(Shell(tessera_bin + " sim mps stop" + dir, &out), 0);
  SIM_CHECK_EQ(Shell(tessera_bin + " sim mps status" + dir, &out), 1);
  SIM_CHECK(out.find("no MPS control daemon") != std::string::npos);
  // One daemon per GPU, in the state directory by default.
  SIM_CHECK_EQ(Shell(tessera_bin + " sim mps start --gpu 0", &out), 0);
  const std::string gpu_dir = std::string(std::getenv("TESSERA_SIM_STATE")) + "/mps/gpu0";
  SIM_CHECK(out.find(gpu_dir) != std::string::npos);
  SIM_CHECK_EQ(Shell(tessera_bin + " sim mps start --gpu 0", &out), 1);  // already running
  SIM_CHECK_EQ(Shell("echo get_default_active_thread_percentage | CUDA_MPS_PIPE_DIRECTORY=" + gpu_dir + " " +
                         control_bin,
                     &out),
               0);
  SIM_CHECK(out == "100.0\n");
  SIM_CHECK_EQ(Shell(tessera_bin + " sim mps stop --gpu 0", &out), 0);
  SIM_CHECK_EQ(Shell(tessera_bin + " sim mps status --gpu 0", &out), 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "client") return Client(argv[2]);
  if (argc < 3) {
    std::fprintf(stderr, "usage: sim_mps_test <tessera-sim-mps-control> <tessera>\n");
    return 2;
  }
  control_bin = argv[1];
  tessera_bin = argv[2];
  simtest::UseFreshState("1xA100-80GB", false);
  pipe_dir = std::string(std::getenv("TESSERA_SIM_STATE")) + "/pipe";
  setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_dir.c_str(), 1);
  setenv("CUDA_MPS_LOG_DIRECTORY", (pipe_dir + "-log").c_str(), 1);
  std::string out;
  // Daemons left behind by a failed check do not outlive the test.
  std::atexit([] {
    for (const std::string& dir : {pipe_dir, std::string(std::getenv("TESSERA_SIM_STATE")) + "/mps/gpu0"}) {
      std::ifstream f(dir + "/nvidia-cuda-mps-control.pid");
      int pid = 0;
      if (f >> pid && pid > 0) kill(pid, SIGKILL);
    }
  });
  SIM_CHECK_EQ(Shell("echo get_server_list | " + control_bin, &out), 1);  // no daemon yet
  SIM_CHECK(out.find("Cannot find MPS control daemon process") != std::string::npos);
  SIM_CHECK_EQ(Shell(control_bin + " -d", &out), 0);
  SIM_CHECK_EQ(Shell(control_bin + " -d", &out), 1);
  SIM_CHECK(out.find("already running") != std::string::npos);
  SIM_OK(nvmlInit());
  Commands();
  PinnedLimitsAndProcesses();
  Shares();
  DaemonKilledAndRestarted();
  Cli();
  SIM_OK(nvmlShutdown());
  return simtest::Finish("sim_mps_test");
}
