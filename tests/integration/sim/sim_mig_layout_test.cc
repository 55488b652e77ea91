// What a node agent applying MIG layouts meets on the simulated GPUs, as an
// ordinary NVML/CUDA client: MIG mode pending until a GPU reset on an A100 and
// immediate on an H100; GPU instances at explicit placements on an A100-80GB
// (seven 1g.10gb; 3g.40gb + 4g.40gb; overlaps refused); compute instances at
// placements and the MIG devices they form; destroying an instance a process
// uses is refused; a program given one MIG device through
// NVIDIA_VISIBLE_DEVICES sees exactly that device in CUDA and NVML; without a
// selection CUDA offers a MIG-mode GPU only as a MIG device; XID events carry
// the instance ids of the MIG device they hit.
#include <cuda.h>
#include <nvml.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "sim/state.h"
#include "sim_test_util.h"

namespace {

constexpr uint64_t kMiB = 1ull << 20;
// A100-80GB GPU instance profile ids (nvidia-smi mig -lgip).
constexpr unsigned k1g10gb = 19, k3g40gb = 9, k4g40gb = 5;

nvmlDevice_t Handle(unsigned i) {
  nvmlDevice_t d = nullptr;
  SIM_OK(nvmlDeviceGetHandleByIndex(i, &d));
  return d;
}

std::string Uuid(nvmlDevice_t d) {
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  SIM_OK(nvmlDeviceGetUUID(d, uuid, sizeof(uuid)));
  return uuid;
}

tessera::Status ResetGpu(int gpu, bool force) {
  auto state = tessera::sim::SimState::OpenExisting(tessera::sim::SimState::DefaultDir());
  if (!state.ok()) return state.error();
  tessera::sim::StateLock lock(**state);
  return (*state)->ResetGpuLocked(gpu, force, nullptr);
}

void InjectXid(int gpu, uint64_t xid, uint32_t gi, uint32_t ci) {
  auto state = tessera::sim::SimState::OpenExisting(tessera::sim::SimState::DefaultDir());
  SIM_CHECK(state.ok());
  if (!state.ok()) return;
  tessera::sim::StateLock lock(**state);
  (*state)->AppendXidLocked(gpu, xid, gi, ci);
}

// Child role: a CUDA program. Prints what CUDA and NVML show it, then holds a
// context and 1 GiB on device 0 until told to exit.
int Program() {
  SIM_OK(cuInit(0));
  int count = 0;
  SIM_OK(cuDeviceGetCount(&count));
  std::string devices;
  for (int i = 0; i < count; ++i) {
    const simtest::DeviceView view = simtest::ViewDevice(i);
    devices +=
        "|" + view.name + "/" + std::to_string(view.total_bytes / kMiB) + "/" + std::to_string(view.sms);
  }
  std::printf("CUDA %d%s\n", count, devices.c_str());
  SIM_OK(nvmlInit());
  unsigned n = 0;
  SIM_OK(nvmlDeviceGetCount(&n));
  nvmlMemory_t mem{};
  SIM_OK(nvmlDeviceGetMemoryInfo(Handle(0), &mem));
  nvmlDevice_t mig = nullptr, other = nullptr;
  const nvmlReturn_t first = nvmlDeviceGetMigDeviceHandleByIndex(Handle(0), 0, &mig);
  const nvmlReturn_t second = nvmlDeviceGetMigDeviceHandleByIndex(Handle(0), 1, &other);
  std::printf("NVML %u|%llu|%d|%d|%s\n", n, static_cast<unsigned long long>(mem.total / kMiB), first, second,
              first == NVML_SUCCESS ? Uuid(mig).c_str() : "-");
  std::fflush(stdout);
  simtest::UseDevice(0);
  CUdeviceptr p;
  SIM_OK(cuMemAlloc(&p, 1024 * kMiB));
  std::printf("HOLDING\n");
  std::fflush(stdout);
  char line[32];
  if (std::fgets(line, sizeof(line), stdin) == nullptr) return 2;
  SIM_OK(nvmlShutdown());
  return simtest::Failures() == 0 ? 0 : 1;
}

// Runs Program() with NVIDIA_VISIBLE_DEVICES=`visible` (unset when empty).
simtest::Child SpawnProgram(const std::string& visible) {
  if (!visible.empty()) setenv("NVIDIA_VISIBLE_DEVICES", visible.c_str(), 1);
  simtest::Child c = simtest::SpawnSelf({"program"});
  unsetenv("NVIDIA_VISIBLE_DEVICES");
  return c;
}

void MigModeChanges() {
  nvmlDevice_t a100 = Handle(0), h100 = Handle(1);
  unsigned cur = 9, pending = 9;
  nvmlReturn_t activation = NVML_ERROR_UNKNOWN;

  // Ampere: accepted, pending until the GPU is reset.
  SIM_OK(nvmlDeviceSetMigMode(a100, NVML_DEVICE_MIG_ENABLE, &activation));
  SIM_CHECK_EQ(activation, NVML_ERROR_RESET_REQUIRED);
  SIM_OK(nvmlDeviceGetMigMode(a100, &cur, &pending));
  SIM_CHECK(cur == NVML_DEVICE_MIG_DISABLE && pending == NVML_DEVICE_MIG_ENABLE);
  nvmlGpuInstance_t gi;
  SIM_CHECK_EQ(nvmlDeviceCreateGpuInstance(a100, k1g10gb, &gi), NVML_ERROR_NOT_SUPPORTED);

  // The reset is refused while a process uses the GPU, and done after it exits.
  simtest::Child user = SpawnProgram("");
  user.ReadLine();
  user.ReadLine();
  SIM_CHECK(user.ReadLine() == "HOLDING");
  const tessera::Status refused = ResetGpu(0, false);
  SIM_CHECK(!refused.ok() && refused.error().message.find(std::to_string(user.pid)) != std::string::npos);
  SIM_OK(nvmlDeviceGetMigMode(a100, &cur, &pending));
  SIM_CHECK(cur == NVML_DEVICE_MIG_DISABLE && pending == NVML_DEVICE_MIG_ENABLE);
  user.Send("exit");
  SIM_CHECK_EQ(user.Wait(), 0);
  SIM_CHECK(ResetGpu(0, false).ok());
  SIM_OK(nvmlDeviceGetMigMode(a100, &cur, &pending));
  SIM_CHECK(cur == NVML_DEVICE_MIG_ENABLE && pending == NVML_DEVICE_MIG_ENABLE);
  unsigned max_devices = 0;
  SIM_OK(nvmlDeviceGetMaxMigDeviceCount(a100, &max_devices));
  SIM_CHECK_EQ(max_devices, 7u);

  // Hopper: at once; and while MIG is off it has no MIG devices.
  SIM_OK(nvmlDeviceGetMaxMigDeviceCount(h100, &max_devices));
  SIM_CHECK_EQ(max_devices, 0u);
  SIM_OK(nvmlDeviceSetMigMode(h100, NVML_DEVICE_MIG_ENABLE, &activation));
  SIM_CHECK_EQ(activation, NVML_SUCCESS);
  SIM_OK(nvmlDeviceGetMigMode(h100, &cur, &pending));
  SIM_CHECK(cur == NVML_DEVICE_MIG_ENABLE && pending == NVML_DEVICE_MIG_ENABLE);
  SIM_OK(nvmlDeviceSetMigMode(h100, NVML_DEVICE_MIG_DISABLE, &activation));
  SIM_OK(nvmlDeviceGetMigMode(h100, &cur, &pending));
  SIM_CHECK(cur == NVML_DEVICE_MIG_DISABLE && pending == NVML_DEVICE_MIG_DISABLE);
}

nvmlGpuInstance_t CreateAt(nvmlDevice_t gpu, unsigned profile, unsigned start, unsigned size) {
  const nvmlGpuInstancePlacement_t placement{start, size};
  nvmlGpuInstance_t gi = nullptr;
  SIM_OK(nvmlDeviceCreateGpuInstanceWithPlacement(gpu, profile, &placement, &gi));
  return gi;
}

void Placements() {
  nvmlDevice_t a100 = Handle(0);
  // Profile figures by id, in both versioned layouts.
  nvmlGpuInstanceProfileInfo_v2_t v2{};
  v2.version = nvmlGpuInstanceProfileInfo_v2;
  SIM_OK(nvmlDeviceGetGpuInstanceProfileInfoByIdV(a100, k3g40gb, &v2));
  SIM_CHECK(std::string(v2.name) == "MIG 3g.40gb" && v2.memorySizeMB == 40192 &&
            v2.multiprocessorCount == 42 && v2.sliceCount == 3 && v2.instanceCount == 2);
  nvmlGpuInstanceProfileInfo_v3_t v3{};
  v3.version = nvmlGpuInstanceProfileInfo_v3;
  SIM_OK(nvmlDeviceGetGpuInstanceProfileInfoByIdV(a100, k1g10gb,
                                                  reinterpret_cast<nvmlGpuInstanceProfileInfo_v2_t*>(&v3)));
  SIM_CHECK(std::string(v3.name) == "MIG 1g.10gb" && v3.id == k1g10gb && v3.memorySizeMB == 9728 &&
            v3.capabilities == 0 && v3.version == nvmlGpuInstanceProfileInfo_v3);
  SIM_OK(nvmlDeviceGetGpuInstanceProfileInfoV(a100, NVML_GPU_INSTANCE_PROFILE_4_SLICE,
                                              reinterpret_cast<nvmlGpuInstanceProfileInfo_v2_t*>(&v3)));
  SIM_CHECK(v3.id == k4g40gb && v3.multiprocessorCount == 56);
  v2.version = 7;
  SIM_CHECK_EQ(nvmlDeviceGetGpuInstanceProfileInfoByIdV(a100, k3g40gb, &v2),
               NVML_ERROR_ARGUMENT_VERSION_MISMATCH);

  // Seven 1g.10gb, each at its own memory slice; an eighth has nowhere to go.
  nvmlGpuInstancePlacement_t places[8];
  unsigned n = 8;
  SIM_OK(nvmlDeviceGetGpuInstancePossiblePlacements_v2(a100, k1g10gb, places, &n));
  SIM_CHECK_EQ(n, 7u);
  nvmlGpuInstance_t small[7];
  for (unsigned i = 0; i < 7 && i < n; ++i) {
    SIM_CHECK(places[i].start == i && places[i].size == 1);
    small[i] = CreateAt(a100, k1g10gb, places[i].start, places[i].size);
  }
  nvmlGpuInstance_t gi;
  const nvmlGpuInstancePlacement_t at3{3, 1};
  SIM_CHECK_EQ(nvmlDeviceCreateGpuInstanceWithPlacement(a100, k1g10gb, &at3, &gi),
               NVML_ERROR_INSUFFICIENT_RESOURCES);
  SIM_CHECK_EQ(nvmlDeviceCreateGpuInstance(a100, k1g10gb, &gi), NVML_ERROR_INSUFFICIENT_RESOURCES);
  unsigned left = 9;
  SIM_OK(nvmlDeviceGetGpuInstanceRemainingCapacity(a100, k1g10gb, &left));
  SIM_CHECK_EQ(left, 0u);
  nvmlGpuInstanceInfo_t info;
  SIM_OK(nvmlGpuInstanceGetInfo(small[5], &info));
  SIM_CHECK(info.placement.start == 5 && info.placement.size == 1 && info.profileId == k1g10gb);
  for (nvmlGpuInstance_t g : small) SIM_OK(nvmlGpuInstanceDestroy(g));

  // 3g.40gb at slices 4-7 and 4g.40gb at 0-3 fill the GPU; what overlaps them
  // is refused; a start that is not one of the profile's placements is invalid.
  const nvmlGpuInstancePlacement_t at1{1, 4};
  SIM_CHECK_EQ(nvmlDeviceCreateGpuInstanceWithPlacement(a100, k3g40gb, &at1, &gi),
               NVML_ERROR_INVALID_ARGUMENT);
  nvmlGpuInstance_t g3 = CreateAt(a100, k3g40gb, 4, 4);
  nvmlGpuInstance_t g4 = CreateAt(a100, k4g40gb, 0, 4);
  const nvmlGpuInstancePlacement_t at0{0, 1}, at0x4{0, 4};
  SIM_CHECK_EQ(nvmlDeviceCreateGpuInstanceWithPlacement(a100, k1g10gb, &at0, &gi),
               NVML_ERROR_INSUFFICIENT_RESOURCES);
  SIM_CHECK_EQ(nvmlDeviceCreateGpuInstanceWithPlacement(a100, k3g40gb, &at0x4, &gi),
               NVML_ERROR_INSUFFICIENT_RESOURCES);
  SIM_OK(nvmlGpuInstanceGetInfo(g3, &info));
  SIM_CHECK(info.placement.start == 4 && info.placement.size == 4 && info.profileId == k3g40gb);

  // A compute instance over each whole GPU instance, at its placement.
  nvmlComputeInstancePlacement_t cplaces[8];
  n = 8;
  SIM_OK(nvmlGpuInstanceGetComputeInstancePossiblePlacements(g3, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
                                                             cplaces, &n));
  SIM_CHECK(n == 1 && cplaces[0].start == 0 && cplaces[0].size == 3);
  n = 8;
  SIM_OK(nvmlGpuInstanceGetComputeInstancePossiblePlacements(g3, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
                                                             cplaces, &n));
  SIM_CHECK_EQ(n, 3u);
  nvmlComputeInstance_t c3, c4;
  const nvmlComputeInstancePlacement_t whole3{0, 3}, whole4{0, 4};
  SIM_OK(nvmlGpuInstanceCreateComputeInstanceWithPlacement(g3, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &whole3,
                                                           &c3));
  SIM_OK(nvmlGpuInstanceCreateComputeInstanceWithPlacement(g4, NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, &whole4,
                                                           &c4));
  nvmlComputeInstance_t extra;
  SIM_CHECK_EQ(nvmlGpuInstanceCreateComputeInstanceWithPlacement(g3, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
                                                                 &whole3, &extra),
               NVML_ERROR_INSUFFICIENT_RESOURCES);
  nvmlComputeInstanceProfileInfo_v3_t cv3{};
  cv3.version = nvmlComputeInstanceProfileInfo_v3;
  SIM_OK(nvmlGpuInstanceGetComputeInstanceProfileInfoV(
      g3, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
      reinterpret_cast<nvmlComputeInstanceProfileInfo_v2_t*>(&cv3)));
  SIM_CHECK(std::string(cv3.name) == "MIG 3g.40gb" && cv3.multiprocessorCount == 42 && cv3.capabilities == 0);

  // The compute instance's info names its MIG device: UUID, parent, ids.
  nvmlComputeInstanceInfo_t ci{};
  SIM_OK(nvmlComputeInstanceGetInfo(c3, &ci));
  const std::string mig_uuid = Uuid(ci.device);
  SIM_CHECK(mig_uuid.rfind("MIG-", 0) == 0);
  unsigned is_mig = 0, gi_id = 0, ci_id = 0;
  SIM_OK(nvmlDeviceIsMigDeviceHandle(ci.device, &is_mig));
  SIM_OK(nvmlDeviceGetGpuInstanceId(ci.device, &gi_id));
  SIM_OK(nvmlDeviceGetComputeInstanceId(ci.device, &ci_id));
  SIM_OK(nvmlGpuInstanceGetInfo(g3, &info));
  SIM_CHECK(is_mig == 1 && gi_id == info.id && ci_id == ci.id);
  nvmlDevice_t parent = nullptr;
  SIM_OK(nvmlDeviceGetDeviceHandleFromMigDeviceHandle(ci.device, &parent));
  SIM_CHECK(parent == a100);
  nvmlMemory_t mem;
  SIM_OK(nvmlDeviceGetMemoryInfo(ci.device, &mem));
  SIM_CHECK_EQ(mem.total, 40192 * kMiB);
  nvmlDevice_t by_uuid = nullptr;
  SIM_OK(nvmlDeviceGetHandleByUUID(mig_uuid.c_str(), &by_uuid));
  SIM_CHECK(by_uuid == ci.device);

  // A program given the 3g.40gb MIG device sees exactly it, in CUDA and NVML.
  simtest::Child prog = SpawnProgram(mig_uuid);
  SIM_CHECK(prog.ReadLine() == "CUDA 1|NVIDIA A100-SXM4-80GB MIG 3g.40gb/40192/42");
  SIM_CHECK(prog.ReadLine() == "NVML 1|40192|0|6|" + mig_uuid);  // 6: NVML_ERROR_NOT_FOUND
  SIM_CHECK(prog.ReadLine() == "HOLDING");

  // While it runs, its instance cannot be destroyed; NVML shows it in there.
  unsigned count = 4;
  nvmlProcessInfo_t procs[4];
  SIM_OK(nvmlDeviceGetComputeRunningProcesses(ci.device, &count, procs));
  SIM_CHECK(count == 1 && static_cast<int>(procs[0].pid) == prog.pid && procs[0].gpuInstanceId == info.id &&
            procs[0].computeInstanceId == ci.id && procs[0].usedGpuMemory == (300 + 1024) * kMiB);
  SIM_CHECK_EQ(nvmlComputeInstanceDestroy(c3), NVML_ERROR_IN_USE);
  SIM_CHECK_EQ(nvmlGpuInstanceDestroy(g3), NVML_ERROR_IN_USE);
  SIM_OK(nvmlComputeInstanceDestroy(c4));  // the other one is free
  SIM_OK(nvmlGpuInstanceDestroy(g4));

  // XIDs on a MIG GPU reach the parent's event set with the instance ids of
  // the MIG device they hit, or none (0xFFFFFFFF) for the whole GPU.
  nvmlEventSet_t set;
  SIM_OK(nvmlEventSetCreate(&set));
  SIM_OK(nvmlDeviceRegisterEvents(a100, nvmlEventTypeXidCriticalError, set));
  InjectXid(0, 43, info.id, ci.id);
  InjectXid(0, 79, tessera::sim::kNoInstance, tessera::sim::kNoInstance);
  nvmlEventData_t data{};
  SIM_OK(nvmlEventSetWait(set, &data, 2000));
  SIM_CHECK(data.device == a100 && data.eventData == 43 && data.gpuInstanceId == info.id &&
            data.computeInstanceId == ci.id);
  SIM_OK(nvmlEventSetWait(set, &data, 2000));
  SIM_CHECK(data.device == a100 && data.eventData == 79 && data.gpuInstanceId == 0xFFFFFFFFu &&
            data.computeInstanceId == 0xFFFFFFFFu);
  SIM_OK(nvmlEventSetFree(set));

  prog.Send("exit");
  SIM_CHECK_EQ(prog.Wait(), 0);
  simtest::DestroyMigInstances({c3}, {g3});
}

// Without a selection, a GPU in MIG mode reaches CUDA only as a MIG device
// (one in all), while NVML lists both GPUs.
void DefaultEnumeration() {
  nvmlDevice_t a100 = Handle(0);
  nvmlGpuInstance_t g1 = CreateAt(a100, k1g10gb, 6, 1), g2 = CreateAt(a100, k1g10gb, 5, 1);
  nvmlComputeInstance_t c1, c2;
  SIM_OK(nvmlGpuInstanceCreateComputeInstance(g1, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &c1));
  SIM_OK(nvmlGpuInstanceCreateComputeInstance(g2, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &c2));
  simtest::Child prog = SpawnProgram("");
  SIM_CHECK(prog.ReadLine() ==
            "CUDA 2|NVIDIA A100-SXM4-80GB MIG 1g.10gb/9728/14|NVIDIA H100 80GB HBM3/81559/132");
  const std::string nvml = prog.ReadLine();
  SIM_CHECK(nvml.rfind("NVML 2|81920|0|0|MIG-", 0) == 0);
  SIM_CHECK(prog.ReadLine() == "HOLDING");
  prog.Send("exit");
  SIM_CHECK_EQ(prog.Wait(), 0);
  simtest::DestroyMigInstances({c1, c2}, {g1, g2});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "program") return Program();
  simtest::UseFreshState("1xA100-80GB,1xH100-80GB", false);
  SIM_OK(nvmlInit());
  MigModeChanges();
  Placements();
  DefaultEnumeration();
  SIM_OK(nvmlShutdown());
  return simtest::Finish("sim_mig_layout_test");
}
