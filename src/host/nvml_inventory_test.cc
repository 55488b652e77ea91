#include "host/nvml_inventory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

namespace tessera::host {
namespace {

using namespace std::chrono_literals;

// A fake NVML behind the same entry-point table the real library fills.
struct FakeGpu {
  std::string uuid;
  std::string name;
  unsigned long long memory_bytes = 0;
  unsigned cores = 0;
  int cc_major = 0, cc_minor = 0;
  unsigned numa = 0;
  bool mig = false;
  unsigned pci_bus = 0;
  std::vector<int> nvlink_peers;  // per link: peer GPU index
  std::vector<int> p2p_peers;     // PCIe P2P peers
};

struct FakeNvml {
  std::vector<FakeGpu> gpus;
  int inits = 0, shutdowns = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<nvmlEventData_t> events;  // guarded by mu
  int registered = 0;
};
FakeNvml* g_fake = nullptr;

FakeGpu* Gpu(nvmlDevice_t device) {
  return reinterpret_cast<FakeGpu*>(device);
}
nvmlDevice_t Handle(int index) {
  return reinterpret_cast<nvmlDevice_t>(&g_fake->gpus[index]);
}
int IndexOf(nvmlDevice_t device) {
  return static_cast<int>(Gpu(device) - g_fake->gpus.data());
}

nvmlReturn_t Copy(const std::string& text, char* out, unsigned length) {
  if (text.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return NVML_SUCCESS;
}

NvmlApi FakeTable(bool with_optional) {
  NvmlApi api;
  api.Init = [] { return ++g_fake->inits, NVML_SUCCESS; };
  api.Shutdown = [] { return ++g_fake->shutdowns, NVML_SUCCESS; };
  api.DeviceGetCount = [](unsigned* count) {
    return *count = static_cast<unsigned>(g_fake->gpus.size()), NVML_SUCCESS;
  };
  api.DeviceGetHandleByIndex = [](unsigned index, nvmlDevice_t* device) {
    if (index >= g_fake->gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = Handle(static_cast<int>(index));
    return NVML_SUCCESS;
  };
  api.DeviceGetUUID = [](nvmlDevice_t d, char* out, unsigned n) { return Copy(Gpu(d)->uuid, out, n); };
  api.DeviceGetName = [](nvmlDevice_t d, char* out, unsigned n) { return Copy(Gpu(d)->name, out, n); };
  api.DeviceGetMemoryInfo = [](nvmlDevice_t d, nvmlMemory_t* memory) {
    memory->total = Gpu(d)->memory_bytes;
    memory->free = memory->total;
    memory->used = 0;
    return NVML_SUCCESS;
  };
  if (!with_optional) return api;
  api.DeviceGetIndex = [](nvmlDevice_t d, unsigned* index) { return *index = IndexOf(d), NVML_SUCCESS; };
  api.DeviceGetNumGpuCores = [](nvmlDevice_t d, unsigned* cores) {
    return *cores = Gpu(d)->cores, NVML_SUCCESS;
  };
  api.DeviceGetCudaComputeCapability = [](nvmlDevice_t d, int* major, int* minor) {
    *major = Gpu(d)->cc_major;
    *minor = Gpu(d)->cc_minor;
    return NVML_SUCCESS;
  };
  api.DeviceGetNumaNodeId = [](nvmlDevice_t d, unsigned* node) { return *node = Gpu(d)->numa, NVML_SUCCESS; };
  api.DeviceGetMigMode = [](nvmlDevice_t d, unsigned* current, unsigned* pending) {
    if (!Gpu(d)->mig) return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
  };
  api.DeviceGetPciInfo = [](nvmlDevice_t d, nvmlPciInfo_t* pci) {
    *pci = nvmlPciInfo_t{};
    pci->bus = Gpu(d)->pci_bus;
    return NVML_SUCCESS;
  };
  api.DeviceGetNvLinkState = [](nvmlDevice_t d, unsigned link, nvmlEnableState_t* active) {
    if (Gpu(d)->nvlink_peers.empty()) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= 12) return NVML_ERROR_INVALID_ARGUMENT;
    *active = link < Gpu(d)->nvlink_peers.size() ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
  };
  api.DeviceGetNvLinkRemotePciInfo = [](nvmlDevice_t d, unsigned link, nvmlPciInfo_t* pci) {
    *pci = nvmlPciInfo_t{};
    pci->bus = g_fake->gpus[Gpu(d)->nvlink_peers.at(link)].pci_bus;
    return NVML_SUCCESS;
  };
  api.DeviceGetP2PStatus = [](nvmlDevice_t a, nvmlDevice_t b, nvmlGpuP2PCapsIndex_t,
                              nvmlGpuP2PStatus_t* status) {
    const auto& peers = Gpu(a)->p2p_peers;
    bool ok = std::find(peers.begin(), peers.end(), IndexOf(b)) != peers.end();
    *status = ok ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
    return NVML_SUCCESS;
  };
  api.EventSetCreate = [](nvmlEventSet_t* set) {
    *set = reinterpret_cast<nvmlEventSet_t>(g_fake);
    return NVML_SUCCESS;
  };
  api.DeviceRegisterEvents = [](nvmlDevice_t, unsigned long long types, nvmlEventSet_t) {
    if ((types & nvmlEventTypeXidCriticalError) == 0) return NVML_ERROR_INVALID_ARGUMENT;
    ++g_fake->registered;
    return NVML_SUCCESS;
  };
  api.EventSetWait = [](nvmlEventSet_t, nvmlEventData_t* data, unsigned timeout_ms) {
    std::unique_lock lock(g_fake->mu);
    if (!g_fake->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                             [] { return !g_fake->events.empty(); })) {
      return NVML_ERROR_TIMEOUT;
    }
    *data = g_fake->events.front();
    g_fake->events.pop_front();
    return NVML_SUCCESS;
  };
  api.EventSetFree = [](nvmlEventSet_t) { return NVML_SUCCESS; };
  return api;
}

class NvmlInventoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_fake = &fake_;
    FakeGpu a100{"GPU-a0", "NVIDIA A100-SXM4-80GB", 80ull << 30, 6912, 8, 0, 0, true, 0x10, {}, {}};
    fake_.gpus = {a100, a100,
                  FakeGpu{"GPU-c2", "NVIDIA A10", 24ull << 30, 9216, 8, 6, 1, false, 0x30, {}, {0}}};
    fake_.gpus[1].uuid = "GPU-b1";
    fake_.gpus[1].pci_bus = 0x20;
    fake_.gpus[0].nvlink_peers = {1, 1, 1, 1};
    fake_.gpus[1].nvlink_peers = {0, 0, 0, 0};
    fake_.gpus[0].p2p_peers = {2};
  }
  void TearDown() override { g_fake = nullptr; }

  void Inject(nvmlDevice_t device, unsigned long long xid) {
    nvmlEventData_t event{};
    event.device = device;
    event.eventType = nvmlEventTypeXidCriticalError;
    event.eventData = xid;
    {
      std::lock_guard lock(fake_.mu);
      fake_.events.push_back(event);
    }
    fake_.cv.notify_all();
  }

  FakeNvml fake_;
};

TEST_F(NvmlInventoryTest, DiscoversIdentityMemorySmsNumaMigAndLinks) {
  NvmlApi api = FakeTable(true);
  auto gpus = [&] {
    NvmlInventory inventory(api);
    return inventory.Discover();
  }();
  ASSERT_TRUE(gpus.ok()) << gpus.error().message;
  ASSERT_EQ(gpus->size(), 3u);
  EXPECT_EQ(fake_.inits, 1);
  EXPECT_EQ(fake_.shutdowns, 1);

  const core::Gpu& a = (*gpus)[0];
  EXPECT_EQ(a.uuid, "GPU-a0");
  EXPECT_EQ(a.index, 0);
  EXPECT_EQ(a.model, "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(a.memory_mib, 81920);
  EXPECT_EQ(a.sm_count, 108);  // 6912 cores / 64 per SM on compute 8.0
  EXPECT_EQ(a.numa_node, 0);
  EXPECT_TRUE(a.mig_capable);
  EXPECT_TRUE(a.healthy);
  EXPECT_THAT(a.links, ::testing::ElementsAre(core::GpuLink{"GPU-b1", core::LinkKind::kNvlink, 4},
                                              core::GpuLink{"GPU-c2", core::LinkKind::kPcie, 1}));

  const core::Gpu& c = (*gpus)[2];
  EXPECT_EQ(c.sm_count, 72);  // 9216 / 128 on compute 8.6
  EXPECT_EQ(c.numa_node, 1);
  EXPECT_FALSE(c.mig_capable);
  EXPECT_THAT(c.links, ::testing::ElementsAre(core::GpuLink{"GPU-a0", core::LinkKind::kPcie, 1}));
  EXPECT_THAT((*gpus)[1].links, ::testing::ElementsAre(core::GpuLink{"GPU-a0", core::LinkKind::kNvlink, 4}));
}

TEST_F(NvmlInventoryTest, OptionalEntryPointsMissingLeaveDefaults) {
  NvmlApi api = FakeTable(false);
  NvmlInventory inventory(api);
  auto gpus = inventory.Discover();
  ASSERT_TRUE(gpus.ok()) << gpus.error().message;
  ASSERT_EQ(gpus->size(), 3u);
  EXPECT_EQ((*gpus)[1].index, 1);
  EXPECT_EQ((*gpus)[1].sm_count, 0);
  EXPECT_EQ((*gpus)[1].numa_node, -1);
  EXPECT_FALSE((*gpus)[1].mig_capable);
  EXPECT_TRUE((*gpus)[1].links.empty());
  EXPECT_TRUE(inventory.StartHealthWatch([](auto&&...) {}).ok());  // no event API: no watch, no error
}

// Per-process SM utilisation (compute enforcement): the samples since the
// previous Sample's newest, averaged per process; a busy process missing from
// the compute list is listed with no memory; NOT_FOUND means idle; an error
// leaves the figures unknown.
std::vector<nvmlProcessUtilizationSample_t> g_util_samples;
nvmlReturn_t g_util_rc = NVML_SUCCESS;
std::vector<unsigned long long> g_util_last_seen;  // what each call passed

TEST_F(NvmlInventoryTest, ProcessUtilisationSinceTheLastSampleIsAveragedPerProcess) {
  NvmlApi api = FakeTable(false);
  api.DeviceGetComputeRunningProcesses = [](nvmlDevice_t d, unsigned* count, nvmlProcessInfo_t* infos) {
    if (IndexOf(d) != 0) return *count = 0, NVML_SUCCESS;
    if (*count < 2) return *count = 2, NVML_ERROR_INSUFFICIENT_SIZE;
    infos[0] = nvmlProcessInfo_t{};
    infos[0].pid = 100;
    infos[0].usedGpuMemory = 1 << 20;
    infos[1] = infos[0];
    infos[1].pid = 101;
    *count = 2;
    return NVML_SUCCESS;
  };
  api.DeviceGetProcessUtilization = [](nvmlDevice_t d, nvmlProcessUtilizationSample_t* out, unsigned* count,
                                       unsigned long long last_seen) {
    if (IndexOf(d) != 0) return NVML_ERROR_NOT_FOUND;
    if (out == nullptr) g_util_last_seen.push_back(last_seen);
    if (g_util_rc != NVML_SUCCESS) return g_util_rc;
    if (g_util_samples.empty()) return NVML_ERROR_NOT_FOUND;
    if (out == nullptr || *count < g_util_samples.size())
      return *count = static_cast<unsigned>(g_util_samples.size()), NVML_ERROR_INSUFFICIENT_SIZE;
    std::copy(g_util_samples.begin(), g_util_samples.end(), out);
    *count = static_cast<unsigned>(g_util_samples.size());
    return NVML_SUCCESS;
  };
  NvmlInventory inventory(api);
  ASSERT_TRUE(inventory.Discover().ok());
  auto sample = [](unsigned pid, unsigned util, unsigned long long ts) {
    nvmlProcessUtilizationSample_t s{};
    s.pid = pid;
    s.smUtil = util;
    s.timeStamp = ts;
    return s;
  };
  g_util_samples = {sample(100, 20, 1000), sample(100, 40, 2000), sample(300, 50, 1500)};
  auto first = inventory.Sample();
  ASSERT_TRUE(first.ok());
  const auto& p = (*first)[0].processes;
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].pid, 100u);
  EXPECT_EQ(p[0].sm_util_percent, 30);  // (20 + 40) / 2
  EXPECT_EQ(p[1].pid, 101u);
  EXPECT_EQ(p[1].sm_util_percent, 0);  // listed, not busy
  EXPECT_EQ(p[2].pid, 300u);           // busy, not in the compute list
  EXPECT_EQ(p[2].sm_util_percent, 50);
  EXPECT_EQ(p[2].used_bytes, 0u);

  g_util_samples.clear();  // nothing ran since
  auto second = inventory.Sample();
  ASSERT_TRUE(second.ok());
  ASSERT_EQ((*second)[0].processes.size(), 2u);
  EXPECT_EQ((*second)[0].processes[0].sm_util_percent, 0);
  g_util_rc = NVML_ERROR_UNKNOWN;
  auto third = inventory.Sample();
  g_util_rc = NVML_SUCCESS;
  ASSERT_TRUE(third.ok());
  EXPECT_EQ((*third)[0].processes[0].sm_util_percent, -1);  // unknown, not 0
  // Each call asks for what is newer than the newest sample it saw.
  EXPECT_THAT(g_util_last_seen, ::testing::ElementsAre(0u, 2000u, 2000u));
}

TEST_F(NvmlInventoryTest, CriticalXidMarksItsGpuUnhealthyAndApplicationXidsDoNot) {
  NvmlApi api = FakeTable(true);
  NvmlInventory inventory(api);
  ASSERT_TRUE(inventory.Discover().ok());

  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::tuple<std::string, bool, std::string>> reports;
  ASSERT_TRUE(inventory
                  .StartHealthWatch([&](const std::string& uuid, bool healthy, const std::string& reason) {
                    std::lock_guard lock(mu);
                    reports.emplace_back(uuid, healthy, reason);
                    cv.notify_all();
                  })
                  .ok());
  EXPECT_EQ(fake_.registered, 3);

  Inject(Handle(1), 13);  // graphics engine exception: the application's fault
  Inject(Handle(1), 79);  // fallen off the bus
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return !reports.empty(); }));
  }
  inventory.StopHealthWatch();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(std::get<0>(reports[0]), "GPU-b1");
  EXPECT_FALSE(std::get<1>(reports[0]));
  EXPECT_EQ(std::get<2>(reports[0]), "XID 79");
}

TEST(XidTest, TheCriticalSet) {
  for (unsigned long long xid : {48, 63, 64, 74, 79, 92, 94, 95}) EXPECT_TRUE(IsCriticalXid(xid)) << xid;
  for (unsigned long long xid : {13, 31, 43, 45, 68}) EXPECT_FALSE(IsCriticalXid(xid)) << xid;
}

TEST(XidTest, NvmlLibraryLoadFailsWithAClearMessage) {
  auto library = NvmlLibrary::Load("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(library.ok());
  EXPECT_NE(library.error().message.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
}

}  // namespace
}  // namespace tessera::host
