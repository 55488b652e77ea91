// CUDA programs inside MIG instances: with CUDA_VISIBLE_DEVICES=MIG-<uuid> a
// program sees the compute instance as its device (name, memory, SMs), its
// memory is bounded by and accounted to the GPU instance (CUDA and NVML
// agree), and two instances run kernels on separate timelines.
#include <cuda.h>
#include <nvml.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "sim_test_util.h"

namespace {

constexpr uint64_t kMiB = 1ull << 20;

// Child role: use the one visible (MIG) device; report it; on "go" run
// 15 x 20 ms sim_busy kernels and report their device time; then exit.
int MigClient() {
  SIM_OK(cuInit(0));
  int count = 0;
  SIM_OK(cuDeviceGetCount(&count));
  const simtest::DeviceView view = simtest::ViewDevice(0);
  simtest::UseDevice(0);
  // Fill the instance: allocations stop at its memory, not the GPU's.
  uint64_t got = 0;
  CUdeviceptr p;
  while (cuMemAlloc(&p, 256 * kMiB) == CUDA_SUCCESS) got += 256 * kMiB;
  size_t free_b = 0, total_b = 0;
  SIM_OK(cuMemGetInfo(&free_b, &total_b));
  std::printf("DEVICE %d|%s|%llu|%d|%llu|%llu\n", count, view.name.c_str(),
              static_cast<unsigned long long>(view.total_bytes), view.sms,
              static_cast<unsigned long long>(got >> 20), static_cast<unsigned long long>(free_b >> 20));
  std::fflush(stdout);
  char line[32];
  if (std::fgets(line, sizeof(line), stdin) == nullptr) return 2;
  CUfunction f = simtest::SimKernel("sim_busy_mig");
  CUevent a, b;
  SIM_OK(cuEventCreate(&a, 0));
  SIM_OK(cuEventCreate(&b, 0));
  uint64_t ns = 20'000'000;
  void* args[] = {&ns};
  SIM_OK(cuEventRecord(a, nullptr));
  for (int i = 0; i < 15; ++i) SIM_OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr));
  SIM_OK(cuEventRecord(b, nullptr));
  SIM_OK(cuEventSynchronize(b));
  float ms = 0;
  SIM_OK(cuEventElapsedTime(&ms, a, b));
  std::printf("ELAPSED %d\n", static_cast<int>(ms));
  std::fflush(stdout);
  if (std::fgets(line, sizeof(line), stdin) == nullptr) return 2;
  return simtest::Failures() == 0 ? 0 : 1;
}

std::string Uuid(nvmlDevice_t d) {
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  SIM_OK(nvmlDeviceGetUUID(d, uuid, sizeof(uuid)));
  return uuid;
}

simtest::Child SpawnOn(const std::string& mig_uuid) {
  setenv("CUDA_VISIBLE_DEVICES", mig_uuid.c_str(), 1);
  simtest::Child c = simtest::SpawnSelf({"mig-client"});
  unsetenv("CUDA_VISIBLE_DEVICES");
  return c;
}

void MigDevices() {
  nvmlDevice_t gpu;
  SIM_OK(nvmlDeviceGetHandleByIndex(0, &gpu));
  nvmlGpuInstanceProfileInfo_t p3{}, p1{};
  SIM_OK(nvmlDeviceGetGpuInstanceProfileInfo(gpu, NVML_GPU_INSTANCE_PROFILE_3_SLICE, &p3));
  SIM_OK(nvmlDeviceGetGpuInstanceProfileInfo(gpu, NVML_GPU_INSTANCE_PROFILE_1_SLICE, &p1));
  nvmlGpuInstance_t g3, g1;
  SIM_OK(nvmlDeviceCreateGpuInstance(gpu, p3.id, &g3));
  SIM_OK(nvmlDeviceCreateGpuInstance(gpu, p1.id, &g1));
  nvmlComputeInstance_t c3, c1;
  SIM_OK(nvmlGpuInstanceCreateComputeInstance(g3, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &c3));
  SIM_OK(nvmlGpuInstanceCreateComputeInstance(g1, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &c1));
  nvmlDevice_t mig3, mig1;
  SIM_OK(nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0, &mig3));
  SIM_OK(nvmlDeviceGetMigDeviceHandleByIndex(gpu, 1, &mig1));

  simtest::Child a = SpawnOn(Uuid(mig3));
  simtest::Child b = SpawnOn(Uuid(mig1));
  const std::string da = a.ReadLine(), db = b.ReadLine();
  // count|name|total|SMs|MiB allocated|MiB free after filling
  SIM_CHECK(da.rfind("DEVICE 1|NVIDIA A100-SXM4-40GB MIG 3g.20gb|" + std::to_string(20096 * kMiB) + "|42|",
                     0) == 0);
  SIM_CHECK(
      db.rfind("DEVICE 1|NVIDIA A100-SXM4-40GB MIG 1g.5gb|" + std::to_string(4864 * kMiB) + "|14|", 0) == 0);
  // 300 MiB context + 256 MiB blocks up to the instance's memory.
  SIM_CHECK(da.find("|19712|84") != std::string::npos);
  SIM_CHECK(db.find("|4352|212") != std::string::npos);

  // NVML sees each process's memory in its instance, and on the whole GPU.
  nvmlMemory_t m3, m1, whole;
  SIM_OK(nvmlDeviceGetMemoryInfo(mig3, &m3));
  SIM_OK(nvmlDeviceGetMemoryInfo(mig1, &m1));
  SIM_OK(nvmlDeviceGetMemoryInfo(gpu, &whole));
  SIM_CHECK_EQ(m3.used, (300 + 19712) * kMiB);
  SIM_CHECK_EQ(m1.used, (300 + 4352) * kMiB);
  SIM_CHECK_EQ(whole.used, m3.used + m1.used);
  unsigned n = 4;
  nvmlProcessInfo_t infos[4];
  SIM_OK(nvmlDeviceGetComputeRunningProcesses(mig3, &n, infos));
  SIM_CHECK_EQ(n, 1u);
  nvmlGpuInstanceInfo_t gi3;
  SIM_OK(nvmlGpuInstanceGetInfo(g3, &gi3));
  SIM_CHECK(n == 1 && static_cast<int>(infos[0].pid) == a.pid && infos[0].gpuInstanceId == gi3.id);

  // Separate instances, separate compute: 300 ms of kernels each take ~300 ms
  // of device time although both run at once.
  a.Send("go");
  b.Send("go");
  const std::string ea = a.ReadLine(), eb = b.ReadLine();
  const int ma = ea.rfind("ELAPSED ", 0) == 0 ? std::stoi(ea.substr(8)) : -1;
  const int mb = eb.rfind("ELAPSED ", 0) == 0 ? std::stoi(eb.substr(8)) : -1;
  SIM_CHECK(ma >= 299 && ma < 450);
  SIM_CHECK(mb >= 299 && mb < 450);
  a.Send("exit");
  b.Send("exit");
  SIM_CHECK_EQ(a.Wait(), 0);
  SIM_CHECK_EQ(b.Wait(), 0);
  SIM_OK(nvmlDeviceGetMemoryInfo(mig3, &m3));
  SIM_CHECK_EQ(m3.used, 0u);

  simtest::DestroyMigInstances({c3, c1}, {g3, g1});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "mig-client") return MigClient();
  simtest::UseFreshState(nullptr, false);
  setenv("TESSERA_SIM_CONFIG", "gpus:\n  - model: A100-40GB\n    mig: true\n", 1);
  SIM_OK(nvmlInit());
  MigDevices();
  SIM_OK(nvmlShutdown());
  return simtest::Finish("sim_mig_test");
}
