#include "runner/status_view.h"

#include <gtest/gtest.h>

#include <sstream>

namespace tessera::runner {
namespace {

using std::chrono::milliseconds;

constexpr const char* kGpu = "GPU-68430baa-eae5-c521-553c-693ab2d9fa8a";

LedgerEntry Job(const std::string& id, int64_t mib, int cores, const std::string& policy) {
  LedgerEntry e;
  e.job_id = id;
  e.command = {"train", "--epochs", "3"};
  e.holders = {{4242, 1}};
  e.slices.container = "job";
  e.slices.devices = {{kGpu, mib, cores}};
  e.region_path = "/regions/" + id;
  e.core_policy = policy;
  return e;
}

host::DeviceUsage Usage(uint64_t used_mib, uint64_t gpu_time_ns) {
  host::DeviceUsage u;
  u.uuid = kGpu;
  u.memory_used_bytes = used_mib << 20;
  u.memory_peak_bytes = (used_mib + 100) << 20;
  u.gpu_time_used_ns = gpu_time_ns;
  return u;
}

void Put(RegionReadings& r, const LedgerEntry& e, const host::DeviceUsage& u) {
  r.regions[e.region_path].devices.push_back(u);
}

// The row of `job` in a rendered table, split into whitespace-separated words.
std::vector<std::string> RowOf(const std::string& table, const std::string& job) {
  std::istringstream lines(table);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(job, 0) != 0) continue;
    std::istringstream words(line);
    std::vector<std::string> out;
    std::string w;
    while (words >> w) out.push_back(w);
    return out;
  }
  return {};
}

TEST(RunnerStatusView, NoJobsSaySo) {
  EXPECT_EQ(RenderJobTable({}, RegionReadings{}, nullptr), "no running slices\n");
}

TEST(RunnerStatusView, ComputeUsedIsTheShareOfTheWindowNextToTheQuota) {
  const LedgerEntry forced = Job("job-forced", 2000, 30, "force");
  const LedgerEntry unlimited = Job("job-free", 1000, 0, "default");
  RegionReadings earlier, now;
  earlier.taken = std::chrono::steady_clock::time_point(milliseconds(10'000));
  now.taken = earlier.taken + milliseconds(500);
  Put(earlier, forced, Usage(1500, 4'000'000'000));
  Put(now, forced, Usage(1800, 4'150'000'000));  // 150 ms of GPU time in 500 ms
  Put(earlier, unlimited, Usage(10, 0));
  Put(now, unlimited, Usage(10, 0));
  EXPECT_TRUE(AnyComputeMeasured({forced, unlimited}, earlier));
  EXPECT_FALSE(AnyComputeMeasured({unlimited}, earlier));

  const std::string table = RenderJobTable({forced, unlimited}, now, &earlier);
  EXPECT_EQ(RowOf(table, "job-forced"),
            (std::vector<std::string>{"job-forced", "4242", "GPU-68430baa", "1800", "/", "2000", "1900", "0",
                                      "30%", "/", "30%", "force", "train", "--epochs", "3"}))
      << table;
  // No quota: nothing is measured (libvgpu charges no GPU time then).
  EXPECT_EQ(RowOf(table, "job-free"),
            (std::vector<std::string>{"job-free", "4242", "GPU-68430baa", "10", "/", "1000", "110", "0", "-",
                                      "/", "none", "-", "train", "--epochs", "3"}))
      << table;
  EXPECT_NE(table.find("over the last 0.5 s"), std::string::npos) << table;
  EXPECT_EQ(table.find("SPILLED"), std::string::npos) << table;  // nobody spilled
}

TEST(RunnerStatusView, ComputeIsNotMeasuredUnderDisableNorWithoutTwoReadings) {
  const LedgerEntry disabled = Job("job-disabled", 2000, 30, "disable");
  const LedgerEntry fresh = Job("job-fresh", 2000, 40, "force");  // region appeared only in `now`
  RegionReadings earlier, now;
  now.taken = earlier.taken + milliseconds(500);
  Put(earlier, disabled, Usage(100, 0));
  Put(now, disabled, Usage(100, 0));
  Put(now, fresh, Usage(300, 50'000'000));
  EXPECT_FALSE(AnyComputeMeasured({disabled}, earlier));

  const std::string table = RenderJobTable({disabled, fresh}, now, &earlier);
  auto d = RowOf(table, "job-disabled");
  ASSERT_GE(d.size(), 12u) << table;
  EXPECT_EQ(std::vector<std::string>(d.begin() + 8, d.begin() + 12),
            (std::vector<std::string>{"-", "/", "30%", "disable"}));
  auto f = RowOf(table, "job-fresh");
  ASSERT_GE(f.size(), 12u) << table;
  EXPECT_EQ(std::vector<std::string>(f.begin() + 8, f.begin() + 12),
            (std::vector<std::string>{"-", "/", "40%", "force"}));

  // One reading only (ps found nothing to measure): '-' everywhere.
  const std::string single = RenderJobTable({fresh}, now, nullptr);
  EXPECT_EQ(RowOf(single, "job-fresh")[8], "-") << single;
}

TEST(RunnerStatusView, AJobThatHasNotUsedCudaShowsZerosAndItsLimits) {
  const LedgerEntry job = Job("job-idle", 3000, 25, "default");
  const std::string table = RenderJobTable({job}, RegionReadings{}, nullptr);
  EXPECT_EQ(RowOf(table, "job-idle"),
            (std::vector<std::string>{"job-idle", "4242", "GPU-68430baa", "0", "/", "3000", "0", "0", "-",
                                      "/", "25%", "default", "train", "--epochs", "3"}))
      << table;
}

TEST(RunnerStatusView, SpilledMemoryGetsAColumnWhenSomeJobSpilled) {
  const LedgerEntry spilling = Job("job-spill", 4000, 0, "default");
  const LedgerEntry other = Job("job-other", 1000, 0, "default");
  RegionReadings now;
  host::DeviceUsage u = Usage(3000, 0);
  u.memory_spilled_bytes = uint64_t{1200} << 20;
  Put(now, spilling, u);
  Put(now, other, Usage(200, 0));
  const std::string table = RenderJobTable({spilling, other}, now, nullptr);
  EXPECT_NE(table.find("SPILLED MiB"), std::string::npos) << table;
  auto s = RowOf(table, "job-spill");
  ASSERT_GE(s.size(), 9u) << table;
  EXPECT_EQ(s[3] + s[4] + s[5], "3000/4000");
  EXPECT_EQ(s[7], "1200") << table;  // after PEAK
  EXPECT_EQ(RowOf(table, "job-other")[7], "0") << table;

  std::vector<core::Gpu> gpus(1);
  gpus[0].uuid = kGpu;
  gpus[0].model = "NVIDIA A100-SXM4-80GB";
  gpus[0].memory_mib = 81920;
  const std::string smi = RenderGpuTable(gpus, {spilling, other}, now);
  EXPECT_NE(smi.find("3000 / 4000   MiB (1200 MiB spilled to host)"), std::string::npos) << smi;
  EXPECT_NE(smi.find("5000 MiB allocated to slices, 3200 MiB used by them"), std::string::npos) << smi;
}

LedgerEntry MigJob(const std::string& id, uint32_t start, const std::string& mig_uuid) {
  LedgerEntry e;
  e.job_id = id;
  e.command = {"/opt/bin/infer", "--batch", "8"};
  e.holders = {SelfProcessId()};
  e.slices.container = "job";
  MigInstanceRecord m;
  m.parent_uuid = kGpu;
  m.profile = "1g.10gb";
  m.profile_id = 19;
  m.start = start;
  m.size = 1;
  m.created = true;
  m.mig_uuid = mig_uuid;
  m.memory_mib = 9728;
  m.sm_count = 14;
  e.mig = m;
  return e;
}

TEST(RunnerStatusView, SmiListsMigDevicesUnderTheirGpuWithTheJobHoldingThem) {
  core::Gpu gpu;
  gpu.uuid = kGpu;
  gpu.model = "NVIDIA A100-SXM4-80GB";
  gpu.memory_mib = 81920;
  host::MigGpuState state;
  state.uuid = kGpu;
  state.name = "NVIDIA A100-SXM4-80GB";
  state.memory_mib = 81920;
  state.mig_capable = state.mig_enabled = true;
  host::MigInstanceState held;
  held.profile_id = 19;
  held.start = 6;
  held.size = 1;
  held.mig_uuid = "MIG-11111111-2222-3333-4444-555555555555";
  held.memory_mib = 9728;
  held.memory_used_bytes = 1000ull << 20;
  held.sm_count = 14;
  host::MigInstanceState other = held;
  other.profile_id = 9;  // 3g.40gb
  other.start = 0;
  other.size = 4;
  other.mig_uuid = "MIG-99999999-2222-3333-4444-555555555555";
  other.memory_mib = 40192;
  other.memory_used_bytes = 0;
  other.sm_count = 42;
  other.processes = 2;
  state.instances = {other, held};
  const LedgerEntry job = MigJob("job-mig", 6, held.mig_uuid);

  const std::string smi = RenderGpuTable({gpu}, {job}, RegionReadings{}, {state});
  EXPECT_NE(smi.find("  MIG mode on: 2 MIG device(s)\n"), std::string::npos) << smi;
  EXPECT_EQ(smi.find("allocated to slices"), std::string::npos) << smi;
  std::vector<std::string> row = RowOf(smi.substr(smi.find("1g.10gb")), "1g.10gb");
  ASSERT_GE(row.size(), 11u) << smi;
  EXPECT_EQ(row[2], "6+1");
  EXPECT_EQ(row[3], held.mig_uuid);
  EXPECT_EQ(row[4] + row[5] + row[6], "1000/9728");
  EXPECT_EQ(row[8], "14");
  EXPECT_EQ(row[10], "job-mig");
  EXPECT_EQ(row[11], "infer");
  EXPECT_NE(smi.find("3g.40gb"), std::string::npos) << smi;
  EXPECT_NE(smi.find("2 process(es), not a tessera run job"), std::string::npos) << smi;

  // Without MIG mode (or MIG listed) the GPU shows its slices as before.
  EXPECT_NE(RenderGpuTable({gpu}, {}, RegionReadings{}).find("(no slices)"), std::string::npos);
}

TEST(RunnerStatusView, PsShowsAMigJobWithItsDeviceAndAnOrphanAsSuch) {
  LedgerEntry job = MigJob("job-mig", 6, "MIG-11111111-2222-3333-4444-555555555555");
  LedgerEntry orphan = MigJob("job-gone", 5, "MIG-77777777-2222-3333-4444-555555555555");
  orphan.holders = {{orphan.holders[0].pid, orphan.holders[0].start_ticks + 1}};
  const std::string table = RenderJobTable({job, orphan}, RegionReadings{}, nullptr);
  const std::vector<std::string> row = RowOf(table, "job-mig");
  ASSERT_GE(row.size(), 10u) << table;
  EXPECT_EQ(row[2], "MIG-11111111");
  EXPECT_EQ(row[3] + row[4] + row[5], "-/9728");
  EXPECT_EQ(row[8] + " " + row[9], "mig 1g.10gb");
  EXPECT_EQ(table.find("job-mig") != std::string::npos && RowOf(table, "job-mig").back() == "8", true)
      << table;
  EXPECT_EQ(RowOf(table, "job-gone").back(), "gone)") << table;
}

}  // namespace
}  // namespace tessera::runner
