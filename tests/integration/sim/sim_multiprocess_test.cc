// Several processes share the simulated GPUs: each sees the others' memory in
// cuMemGetInfo and NVML, and a process killed with SIGKILL gives its memory
// back. Run as an ordinary client; the second process is this program again.
#include <cuda.h>
#include <nvml.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "sim_test_util.h"

namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kContext = 300 * kMiB;

// Child role: allocate `mib` on GPU 0, report, and hold it until told to exit.
int HoldMemory(uint64_t mib) {
  SIM_OK(cuInit(0));
  CUdevice d;
  SIM_OK(cuDeviceGet(&d, 0));
  CUcontext ctx = nullptr;
  if (cuDevicePrimaryCtxRetain(&ctx, d) != CUDA_SUCCESS) {
    std::printf("NO-CONTEXT\n");  // out of memory for the context itself
    return 3;
  }
  SIM_OK(cuCtxSetCurrent(ctx));
  CUdeviceptr p;
  SIM_OK(cuMemAlloc(&p, mib * kMiB));
  // Touch a little of it: memory is real (and lazily backed).
  SIM_OK(cuMemsetD8(p, 1, 4096));
  std::printf("READY %d\n", getpid());
  std::fflush(stdout);
  char line[64];
  if (std::fgets(line, sizeof(line), stdin) == nullptr) return 0;
  SIM_OK(cuMemFree(p));
  return simtest::Failures() == 0 ? 0 : 1;
}

uint64_t UsedByPid(nvmlDevice_t dev, int pid) {
  unsigned count = 16;
  nvmlProcessInfo_t infos[16];
  SIM_OK(nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, infos));
  for (unsigned i = 0; i < count; ++i) {
    if (static_cast<int>(infos[i].pid) == pid) return infos[i].usedGpuMemory;
  }
  return 0;
}

size_t FreeBytes() {
  size_t free_b = 0, total_b = 0;
  SIM_OK(cuMemGetInfo(&free_b, &total_b));
  return free_b;
}

void SharedCapacity() {
  simtest::UseDevice(0);
  size_t total = 0, free0 = 0;
  SIM_OK(cuMemGetInfo(&free0, &total));
  SIM_CHECK_EQ(total - free0, kContext);
  CUdeviceptr mine;
  SIM_OK(cuMemAlloc(&mine, 1024 * kMiB));

  simtest::Child child = simtest::SpawnSelf({"hold", "2048"});
  const std::string ready = child.ReadLine();
  SIM_CHECK(ready.rfind("READY ", 0) == 0);
  const int child_pid = child.pid;

  // CUDA: this process sees the child's context and allocation.
  SIM_CHECK_EQ(total - FreeBytes(), 2 * kContext + 3072 * kMiB);

  // NVML: the same numbers, and both processes listed with their usage.
  nvmlDevice_t dev;
  SIM_OK(nvmlDeviceGetHandleByIndex(0, &dev));
  nvmlMemory_t mem;
  SIM_OK(nvmlDeviceGetMemoryInfo(dev, &mem));
  SIM_CHECK_EQ(mem.total, total);
  SIM_CHECK_EQ(mem.used, 2 * kContext + 3072 * kMiB);
  SIM_CHECK_EQ(mem.free, mem.total - mem.used);
  nvmlMemory_v2_t mem2{};
  mem2.version = nvmlMemory_v2;
  SIM_OK(nvmlDeviceGetMemoryInfo_v2(dev, &mem2));
  SIM_CHECK_EQ(mem2.used, mem.used);
  SIM_CHECK_EQ(UsedByPid(dev, getpid()), kContext + 1024 * kMiB);
  SIM_CHECK_EQ(UsedByPid(dev, child_pid), kContext + 2048 * kMiB);
  unsigned count = 0;
  SIM_CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
  SIM_CHECK_EQ(count, 2u);
  nvmlDevice_t other;
  SIM_OK(nvmlDeviceGetHandleByIndex(1, &other));
  count = 0;
  SIM_OK(nvmlDeviceGetComputeRunningProcesses_v3(other, &count, nullptr));
  SIM_CHECK_EQ(count, 0u);

  // A clean exit returns the child's memory.
  child.Send("exit");
  SIM_CHECK_EQ(child.Wait(), 0);
  SIM_CHECK_EQ(total - FreeBytes(), kContext + 1024 * kMiB);

  // SIGKILL: the driver reclaims a dead process's contexts and memory.
  simtest::Child victim = simtest::SpawnSelf({"hold", "4096"});
  SIM_CHECK(victim.ReadLine().rfind("READY ", 0) == 0);
  SIM_CHECK_EQ(total - FreeBytes(), 2 * kContext + 5120 * kMiB);
  kill(victim.pid, SIGKILL);
  // Not yet reaped (a zombie) is already dead to the driver; allow a moment for the kill.
  bool returned = false;
  for (int i = 0; i < 200 && !returned; ++i) {
    returned = total - FreeBytes() == kContext + 1024 * kMiB;
    if (!returned) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  SIM_CHECK(returned);
  SIM_OK(nvmlDeviceGetMemoryInfo(dev, &mem));
  SIM_CHECK_EQ(mem.used, kContext + 1024 * kMiB);
  SIM_CHECK_EQ(UsedByPid(dev, victim.pid), 0u);
  SIM_CHECK_EQ(victim.Wait(), 128 + SIGKILL);

  // Capacity is shared: another process can now use what the dead one held,
  // and cannot exceed what is left.
  CUdeviceptr big;
  const size_t free_now = FreeBytes();
  SIM_OK(cuMemAlloc(&big, free_now));
  simtest::Child late = simtest::SpawnSelf({"hold", "1"});
  // Its context does not fit: initialisation of its allocation fails, it reports nothing.
  SIM_CHECK(late.ReadLine() == "NO-CONTEXT");
  SIM_CHECK_EQ(late.Wait(), 3);
  SIM_OK(cuMemFree(big));
  SIM_OK(cuMemFree(mine));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "hold") return HoldMemory(std::stoull(argv[2]));
  simtest::UseFreshState("2xA100-40GB", false);
  SIM_OK(cuInit(0));
  SIM_OK(nvmlInit());
  SharedCapacity();
  SIM_OK(nvmlShutdown());
  return simtest::Finish("sim_multiprocess_test");
}
