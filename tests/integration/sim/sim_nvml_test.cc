// NVML against the simulated GPUs, as an ordinary NVML client: identity,
// health, topology, MIG instances with each model's real geometry, and XID
// events (injected the way `tessera sim inject-xid` does).
#include <nvml.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "sim/state.h"
#include "sim_test_util.h"

namespace {

nvmlDevice_t Handle(unsigned i) {
  nvmlDevice_t d = nullptr;
  SIM_OK(nvmlDeviceGetHandleByIndex(i, &d));
  return d;
}

void Identity() {
  unsigned count = 0;
  SIM_OK(nvmlDeviceGetCount(&count));
  SIM_CHECK_EQ(count, 4u);
  char version[80];
  SIM_OK(nvmlSystemGetDriverVersion(version, sizeof(version)));
  SIM_CHECK(std::strlen(version) > 0);
  int cuda = 0;
  SIM_OK(nvmlSystemGetCudaDriverVersion(&cuda));
  SIM_CHECK_EQ(cuda, 13000);

  nvmlDevice_t d0 = Handle(0), d3 = Handle(3);
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  SIM_OK(nvmlDeviceGetName(d0, name, sizeof(name)));
  SIM_CHECK(std::string(name) == "NVIDIA A100-SXM4-40GB");
  SIM_OK(nvmlDeviceGetName(d3, name, sizeof(name)));
  SIM_CHECK(std::string(name) == "Tesla T4");
  char tiny[4];
  SIM_CHECK_EQ(nvmlDeviceGetName(d0, tiny, sizeof(tiny)), NVML_ERROR_INSUFFICIENT_SIZE);

  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
  SIM_OK(nvmlDeviceGetUUID(d3, uuid, sizeof(uuid)));
  const std::string u = uuid;
  SIM_CHECK(u.size() == 40 && u.rfind("GPU-", 0) == 0 && u[12] == '-' && u[17] == '-' && u[22] == '-' &&
            u[27] == '-');
  nvmlDevice_t by_uuid = nullptr;
  SIM_OK(nvmlDeviceGetHandleByUUID(uuid, &by_uuid));
  SIM_CHECK(by_uuid == d3);
  SIM_CHECK_EQ(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &by_uuid),
               NVML_ERROR_NOT_FOUND);

  nvmlPciInfo_t pci;
  SIM_OK(nvmlDeviceGetPciInfo(d3, &pci));
  SIM_CHECK_EQ(pci.pciDeviceId, 0x1EB810DEu);
  nvmlDevice_t by_pci = nullptr;
  SIM_OK(nvmlDeviceGetHandleByPciBusId(pci.busId, &by_pci));
  SIM_CHECK(by_pci == d3);
  unsigned index = 9;
  SIM_OK(nvmlDeviceGetIndex(d3, &index));
  SIM_CHECK_EQ(index, 3u);
  int major = 0, minor = 0;
  SIM_OK(nvmlDeviceGetCudaComputeCapability(d3, &major, &minor));
  SIM_CHECK(major == 7 && minor == 5);
  nvmlMemory_t mem;
  SIM_OK(nvmlDeviceGetMemoryInfo(d3, &mem));
  SIM_CHECK_EQ(mem.total, 15360ull << 20);
  SIM_CHECK_EQ(mem.used, 0u);
  nvmlMemory_v2_t mem2{};
  mem2.version = 0;  // wrong version
  SIM_CHECK_EQ(nvmlDeviceGetMemoryInfo_v2(d3, &mem2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
}

void HealthAndTopology() {
  nvmlDevice_t d0 = Handle(0), d1 = Handle(1), d2 = Handle(2), d3 = Handle(3);
  unsigned v = 0;
  SIM_OK(nvmlDeviceGetTemperature(d0, NVML_TEMPERATURE_GPU, &v));
  SIM_CHECK(v >= 20 && v <= 90);
  SIM_OK(nvmlDeviceGetPowerUsage(d0, &v));
  SIM_CHECK(v > 0 && v <= 400000);
  SIM_OK(nvmlDeviceGetEnforcedPowerLimit(d1, &v));
  SIM_CHECK_EQ(v, 700000u);
  SIM_OK(nvmlDeviceGetMaxClockInfo(d1, NVML_CLOCK_SM, &v));
  SIM_CHECK_EQ(v, 1980u);
  SIM_OK(nvmlDeviceGetClockInfo(d1, NVML_CLOCK_MEM, &v));
  SIM_CHECK_EQ(v, 2619u);
  nvmlUtilization_t util;
  SIM_OK(nvmlDeviceGetUtilizationRates(d0, &util));
  SIM_CHECK_EQ(util.gpu, 0u);

  // NUMA: the YAML puts GPUs 2 and 3 on node 1.
  unsigned node = 9;
  SIM_OK(nvmlDeviceGetNumaNodeId(d2, &node));
  SIM_CHECK_EQ(node, 1u);
  unsigned long cpus[4] = {};
  SIM_OK(nvmlDeviceGetCpuAffinity(d0, 4, cpus));
  SIM_CHECK(cpus[0] != 0);

  nvmlGpuTopologyLevel_t level;
  SIM_OK(nvmlDeviceGetTopologyCommonAncestor(d0, d1, &level));
  SIM_CHECK_EQ(level, NVML_TOPOLOGY_SINGLE);
  SIM_OK(nvmlDeviceGetTopologyCommonAncestor(d0, d2, &level));
  SIM_CHECK_EQ(level, NVML_TOPOLOGY_SYSTEM);

  // NVLink between 0 and 1 only (explicit in the YAML).
  nvmlGpuP2PStatus_t p2p;
  SIM_OK(nvmlDeviceGetP2PStatus(d0, d1, NVML_P2P_CAPS_INDEX_NVLINK, &p2p));
  SIM_CHECK_EQ(p2p, NVML_P2P_STATUS_OK);
  SIM_OK(nvmlDeviceGetP2PStatus(d0, d2, NVML_P2P_CAPS_INDEX_NVLINK, &p2p));
  SIM_CHECK_EQ(p2p, NVML_P2P_STATUS_NOT_SUPPORTED);
  SIM_OK(nvmlDeviceGetP2PStatus(d0, d2, NVML_P2P_CAPS_INDEX_READ, &p2p));
  SIM_CHECK(p2p != NVML_P2P_STATUS_OK);
  nvmlEnableState_t active;
  SIM_OK(nvmlDeviceGetNvLinkState(d0, 0, &active));
  SIM_CHECK_EQ(active, NVML_FEATURE_ENABLED);
  SIM_OK(nvmlDeviceGetNvLinkState(d2, 0, &active));
  SIM_CHECK_EQ(active, NVML_FEATURE_DISABLED);
  SIM_CHECK_EQ(nvmlDeviceGetNvLinkState(d3, 0, &active), NVML_ERROR_NOT_SUPPORTED);
  nvmlPciInfo_t remote, pci1;
  SIM_OK(nvmlDeviceGetNvLinkRemotePciInfo(d0, 3, &remote));
  SIM_OK(nvmlDeviceGetPciInfo(d1, &pci1));
  SIM_CHECK(std::string(remote.busId) == pci1.busId);
}

unsigned ProfileId(nvmlDevice_t d, unsigned profile) {
  nvmlGpuInstanceProfileInfo_t info{};
  SIM_OK(nvmlDeviceGetGpuInstanceProfileInfo(d, profile, &info));
  return info.id;
}

void Mig() {
  nvmlDevice_t a100 = Handle(0), h100 = Handle(1), t4 = Handle(3);
  unsigned cur = 9, pending = 9;
  SIM_OK(nvmlDeviceGetMigMode(a100, &cur, &pending));
  SIM_CHECK_EQ(cur, 1u);  // enabled in the YAML
  SIM_CHECK_EQ(nvmlDeviceGetMigMode(t4, &cur, &pending), NVML_ERROR_NOT_SUPPORTED);

  // The A100-40GB's profiles, as in NVIDIA's MIG user guide.
  struct Expect {
    unsigned profile, id, slices, count, sms;
    unsigned long long mib;
    const char* name;
  };
  const Expect table[] = {
      {NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 7, 14, 4864, "MIG 1g.5gb"},
      {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, 1, 1, 14, 4864, "MIG 1g.5gb+me"},
      {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1, 4, 14, 9984, "MIG 1g.10gb"},
      {NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 3, 28, 9984, "MIG 2g.10gb"},
      {NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 2, 42, 20096, "MIG 3g.20gb"},
      {NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 1, 56, 20096, "MIG 4g.20gb"},
      {NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 1, 98, 40448, "MIG 7g.40gb"},
  };
  for (const Expect& e : table) {
    nvmlGpuInstanceProfileInfo_v2_t info{};
    info.version = nvmlGpuInstanceProfileInfo_v2;
    SIM_OK(nvmlDeviceGetGpuInstanceProfileInfoV(a100, e.profile, &info));
    SIM_CHECK_EQ(info.id, e.id);
    SIM_CHECK_EQ(info.sliceCount, e.slices);
    SIM_CHECK_EQ(info.instanceCount, e.count);
    SIM_CHECK_EQ(info.multiprocessorCount, e.sms);
    SIM_CHECK_EQ(info.memorySizeMB, e.mib);
    SIM_CHECK(std::string(info.name) == e.name);
  }
  nvmlGpuInstanceProfileInfo_t none{};
  SIM_CHECK_EQ(nvmlDeviceGetGpuInstanceProfileInfo(a100, NVML_GPU_INSTANCE_PROFILE_8_SLICE, &none),
               NVML_ERROR_NOT_SUPPORTED);
  // MIG mode off on the H100 until enabled.
  SIM_CHECK_EQ(nvmlDeviceGetGpuInstanceProfileInfo(h100, NVML_GPU_INSTANCE_PROFILE_1_SLICE, &none),
               NVML_ERROR_NOT_SUPPORTED);

  const unsigned p1 = ProfileId(a100, NVML_GPU_INSTANCE_PROFILE_1_SLICE);
  const unsigned p3 = ProfileId(a100, NVML_GPU_INSTANCE_PROFILE_3_SLICE);
  const unsigned p4 = ProfileId(a100, NVML_GPU_INSTANCE_PROFILE_4_SLICE);
  unsigned n = 0;
  SIM_OK(nvmlDeviceGetGpuInstancePossiblePlacements(a100, p3, nullptr, &n));
  SIM_CHECK_EQ(n, 2u);
  nvmlGpuInstancePlacement_t places[8];
  n = 8;
  SIM_OK(nvmlDeviceGetGpuInstancePossiblePlacements(a100, p3, places, &n));
  SIM_CHECK(places[0].start == 0 && places[1].start == 4 && places[1].size == 4);

  // Seven 1g.5gb instances fill the GPU; an eighth does not fit.
  SIM_OK(nvmlDeviceGetGpuInstanceRemainingCapacity(a100, p1, &n));
  SIM_CHECK_EQ(n, 7u);
  nvmlGpuInstance_t gis[8];
  for (int i = 0; i < 7; ++i) SIM_OK(nvmlDeviceCreateGpuInstance(a100, p1, &gis[i]));
  nvmlGpuInstance_t extra;
  SIM_CHECK_EQ(nvmlDeviceCreateGpuInstance(a100, p1, &extra), NVML_ERROR_INSUFFICIENT_RESOURCES);
  SIM_OK(nvmlDeviceGetGpuInstanceRemainingCapacity(a100, p3, &n));
  SIM_CHECK_EQ(n, 0u);
  n = 8;
  SIM_OK(nvmlDeviceGetGpuInstances(a100, p1, gis, &n));
  SIM_CHECK_EQ(n, 7u);
  for (unsigned i = 0; i < n; ++i) SIM_OK(nvmlGpuInstanceDestroy(gis[i]));

  // 4g.20gb + 3g.20gb use all seven compute slices.
  nvmlGpuInstance_t g4, g3;
  SIM_OK(nvmlDeviceCreateGpuInstance(a100, p4, &g4));
  SIM_OK(nvmlDeviceGetGpuInstanceRemainingCapacity(a100, p3, &n));
  SIM_CHECK_EQ(n, 1u);
  SIM_OK(nvmlDeviceCreateGpuInstance(a100, p3, &g3));
  SIM_OK(nvmlDeviceGetGpuInstanceRemainingCapacity(a100, p1, &n));
  SIM_CHECK_EQ(n, 0u);
  nvmlGpuInstanceInfo_t gi3;
  SIM_OK(nvmlGpuInstanceGetInfo(g3, &gi3));
  SIM_CHECK(gi3.device == a100 && gi3.profileId == p3 && gi3.placement.start == 4 && gi3.placement.size == 4);

  // Compute instances inside the 3g.20gb GPU instance.
  nvmlComputeInstanceProfileInfo_t cip{};
  SIM_OK(nvmlGpuInstanceGetComputeInstanceProfileInfo(g3, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
                                                      NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cip));
  SIM_CHECK(cip.sliceCount == 1 && cip.instanceCount == 3 && cip.multiprocessorCount == 14);
  SIM_CHECK_EQ(
      nvmlGpuInstanceGetComputeInstanceProfileInfo(g3, NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
                                                   NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cip),
      NVML_ERROR_NOT_SUPPORTED);
  nvmlComputeInstance_t ci_a, ci_b;
  SIM_OK(nvmlGpuInstanceCreateComputeInstance(g3, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &ci_a));
  SIM_OK(nvmlGpuInstanceCreateComputeInstance(g3, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, &ci_b));
  nvmlComputeInstance_t ci_c;
  SIM_CHECK_EQ(nvmlGpuInstanceCreateComputeInstance(g3, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &ci_c),
               NVML_ERROR_INSUFFICIENT_RESOURCES);
  nvmlComputeInstanceInfo_t cinfo;
  SIM_OK(nvmlComputeInstanceGetInfo(ci_b, &cinfo));
  SIM_CHECK(cinfo.gpuInstance == g3 && cinfo.placement.size == 2);
  SIM_CHECK_EQ(nvmlGpuInstanceDestroy(g3), NVML_ERROR_IN_USE);

  // MIG devices: one per compute instance, with their own UUID and memory.
  nvmlDevice_t mig;
  SIM_OK(nvmlDeviceGetMigDeviceHandleByIndex(a100, 0, &mig));
  unsigned is_mig = 0;
  SIM_OK(nvmlDeviceIsMigDeviceHandle(mig, &is_mig));
  SIM_CHECK_EQ(is_mig, 1u);
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
  SIM_OK(nvmlDeviceGetUUID(mig, uuid, sizeof(uuid)));
  SIM_CHECK(std::string(uuid).rfind("MIG-", 0) == 0);
  nvmlDevice_t found, parent;
  SIM_OK(nvmlDeviceGetHandleByUUID(uuid, &found));
  SIM_CHECK(found == mig);
  SIM_OK(nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, &parent));
  SIM_CHECK(parent == a100);
  nvmlMemory_t mem;
  SIM_OK(nvmlDeviceGetMemoryInfo(mig, &mem));
  SIM_CHECK_EQ(mem.total, 20096ull << 20);
  nvmlDevice_t mig2;
  SIM_OK(nvmlDeviceGetMigDeviceHandleByIndex(a100, 1, &mig2));
  SIM_CHECK_EQ(nvmlDeviceGetMigDeviceHandleByIndex(a100, 2, &mig2), NVML_ERROR_NOT_FOUND);

  simtest::DestroyMigInstances({ci_a, ci_b}, {g3, g4});

  // Enabling MIG on the idle H100; its 1g.10gb profile.
  nvmlReturn_t activation;
  SIM_OK(nvmlDeviceSetMigMode(h100, NVML_DEVICE_MIG_ENABLE, &activation));
  SIM_CHECK_EQ(activation, NVML_SUCCESS);
  nvmlGpuInstanceProfileInfo_t h1{};
  SIM_OK(nvmlDeviceGetGpuInstanceProfileInfo(h100, NVML_GPU_INSTANCE_PROFILE_1_SLICE, &h1));
  SIM_CHECK(h1.multiprocessorCount == 16 && h1.instanceCount == 7);
  SIM_OK(nvmlDeviceSetMigMode(h100, NVML_DEVICE_MIG_DISABLE, &activation));
}

void InjectXid(int gpu, uint64_t xid) {
  auto state = tessera::sim::SimState::OpenExisting(tessera::sim::SimState::DefaultDir());
  SIM_CHECK(state.ok());
  if (!state.ok()) return;
  tessera::sim::StateLock lock(**state);
  (*state)->AppendXidLocked(gpu, xid, tessera::sim::kNoInstance, tessera::sim::kNoInstance);
}

void XidEvents() {
  nvmlDevice_t d1 = Handle(1), d2 = Handle(2);
  InjectXid(1, 13);  // before registration: not delivered
  nvmlEventSet_t set;
  SIM_OK(nvmlEventSetCreate(&set));
  unsigned long long supported = 0;
  SIM_OK(nvmlDeviceGetSupportedEventTypes(d1, &supported));
  SIM_CHECK(supported & nvmlEventTypeXidCriticalError);
  SIM_OK(nvmlDeviceRegisterEvents(d1, nvmlEventTypeXidCriticalError, set));
  SIM_OK(nvmlDeviceRegisterEvents(d2, nvmlEventTypeXidCriticalError, set));
  nvmlEventData_t data{};
  SIM_CHECK_EQ(nvmlEventSetWait(set, &data, 50), NVML_ERROR_TIMEOUT);

  // Delivered while waiting (from another thread, as from another process).
  std::thread injector([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    InjectXid(2, 79);
  });
  SIM_OK(nvmlEventSetWait(set, &data, 5000));
  injector.join();
  SIM_CHECK(data.device == d2);
  SIM_CHECK_EQ(data.eventType, nvmlEventTypeXidCriticalError);
  SIM_CHECK_EQ(data.eventData, 79u);
  SIM_CHECK_EQ(data.gpuInstanceId, 0xFFFFFFFFu);

  InjectXid(1, 48);
  InjectXid(1, 63);
  SIM_OK(nvmlEventSetWait(set, &data, 1000));
  SIM_CHECK(data.device == d1 && data.eventData == 48);
  SIM_OK(nvmlEventSetWait(set, &data, 1000));
  SIM_CHECK(data.device == d1 && data.eventData == 63);
  SIM_CHECK_EQ(nvmlEventSetWait(set, &data, 20), NVML_ERROR_TIMEOUT);
  SIM_OK(nvmlEventSetFree(set));
}

}  // namespace

int main() {
  simtest::UseFreshState(nullptr, false);
  setenv("TESSERA_SIM_CONFIG", R"(
gpus:
  - model: A100-40GB
    mig: true
    numa_node: 0
  - model: H100-80GB
    numa_node: 0
  - model: A30
    numa_node: 1
  - model: T4
    numa_node: 1
nvlink:
  - [0, 1, 12]
)",
         1);
  SIM_OK(nvmlInit());
  Identity();
  HealthAndTopology();
  Mig();
  XidEvents();
  SIM_OK(nvmlShutdown());
  SIM_CHECK_EQ(nvmlDeviceGetCount(nullptr), NVML_ERROR_INVALID_ARGUMENT);
  return simtest::Finish("sim_nvml_test");
}
