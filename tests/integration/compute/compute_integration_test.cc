// Compute isolation end to end: compute_probe (a saturating driver-API program)
// runs against the simulated GPU with libvgpu.so preloaded, as a container's
// processes would, and the tests assert the share of the device it achieved
// and what the container's region recorded.
//
// Tolerances are wide (about ±10 percentage points): these tests run on a
// loaded two-core machine. The tight figures are the benchmark's
// (bench/compute, docs/benchmarks.md).
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/testing.h"
#include "testing/process.h"
#include "testing/sim_gpu.h"
#include "vgpu/region_layout.h"

namespace {

using tessera::testing::Env;

struct Result {
  int exit_code = -1;
  double share = -1;
  std::vector<double> windows;  // MODE batch: the share of each second
  std::string out, err;
};

struct RegionSnapshot {
  bool ok = false;
  uint32_t quota = 0;
  uint64_t used_ns = 0, throttled_ns = 0;
  uint32_t priority = 0;
};

class ComputeTest : public ::testing::Test {
 protected:
  std::string region(const std::string& container) const { return dir_ + "/" + container + "/vgpu.region"; }

  // Starts compute_probe in `container` (its own region) with `extra` env.
  // With `wrapper`, runs wrapper[0] with the rest of `wrapper`, then the
  // probe's path and `args`, as arguments.
  pid_t start(const std::string& container, const Env& extra, const std::vector<std::string>& args,
              bool preload = true, const std::vector<std::string>& wrapper = {}) {
    std::vector<std::string> argv = wrapper;
    argv.push_back(TESSERA_COMPUTE_PROBE);
    argv.insert(argv.end(), args.begin(), args.end());
    tessera::testing::Command c = tessera::testing::ContainerCommand(sim_, std::move(argv), region(container),
                                                                     preload ? TESSERA_VGPU_LIB : "");
    for (const auto& [k, v] : extra) c.env[k] = v;
    const int n = counter_++;
    c.stdout_path = dir_ + "/out" + std::to_string(n);
    c.stderr_path = dir_ + "/err" + std::to_string(n);
    const pid_t pid = tessera::testing::Spawn(c);
    outputs_[pid] = {c.stdout_path, c.stderr_path};
    return pid;
  }

  Result finish(pid_t pid) {
    Result r;
    const int status = tessera::testing::WaitStatus(pid);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = tessera::testing::ReadFileOrEmpty(outputs_[pid].first);
    r.err = tessera::testing::ReadFileOrEmpty(outputs_[pid].second);
    std::istringstream in(r.out);
    std::string word;
    if (in >> word && word == "share") in >> r.share;
    if (in >> word && word == "windows")
      for (double w; in >> w;) r.windows.push_back(w);
    return r;
  }

  Result run(const std::string& container, const Env& extra, const std::vector<std::string>& args) {
    return finish(start(container, extra, args));
  }

  RegionSnapshot read_region(const std::string& container) {
    RegionSnapshot s;
    int fd = open(region(container).c_str(), O_RDONLY);
    if (fd < 0) return s;
    struct stat st {};
    fstat(fd, &st);
    if (static_cast<size_t>(st.st_size) != sizeof(tessera::vgpu::Region)) {
      close(fd);
      return s;
    }
    void* p = mmap(nullptr, sizeof(tessera::vgpu::Region), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return s;
    const auto* r = static_cast<const tessera::vgpu::Region*>(p);
    if (tessera::vgpu::validate_region_header(r->header, static_cast<uint64_t>(st.st_size)) == nullptr) {
      const auto& d = r->devices[0];  // the probe uses container device 0
      s.ok = true;
      s.quota = d.core_quota_percent.load();
      s.used_ns = d.gpu_time_used_ns.load();
      s.throttled_ns = d.throttled_ns.load();
      s.priority = d.priority.load();
    }
    munmap(p, sizeof(tessera::vgpu::Region));
    return s;
  }

  tessera::testing::TempDir tmp_{"tessera-compute-it"};
  const std::string dir_ = tmp_.path();
  const tessera::testing::SimGpu sim_{
      .gpus = "2xA100-80GB", .state_dir = dir_ + "/sim", .lib_dir = TESSERA_SIM_LIB_DIR};
  int counter_ = 0;
  std::map<pid_t, std::pair<std::string, std::string>> outputs_;
};

// 2 ms kernels, three rounds of two in flight: 12 ms of queued work, so a host
// that wakes up late on a loaded machine still keeps the device saturated.
const std::vector<std::string> kSaturate = {"kernel", "2000", "0.5", "1.5"};

TEST_F(ComputeTest, ForceHoldsAThirtyPercentQuota) {
  Result r = run("c", {{"CUDA_DEVICE_SM_LIMIT", "30"}, {"GPU_CORE_UTILIZATION_POLICY", "force"}}, kSaturate);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NEAR(r.share, 30.0, 10.0) << r.out;
  RegionSnapshot s = read_region("c");
  ASSERT_TRUE(s.ok);
  EXPECT_EQ(s.quota, 30u);
  EXPECT_GT(s.throttled_ns, 500'000'000u);  // it waited most of the time
  // The region's measured GPU time matches what the probe's kernels took
  // (2 s of run at ~30 %: ~600 ms), within the tolerance of the run.
  EXPECT_GT(s.used_ns, 350'000'000u);
  EXPECT_LT(s.used_ns, 900'000'000u);
}

TEST_F(ComputeTest, QuotaFromTheAllocationHoldsToo) {
  // TESSERA_ALLOCATION names the device by UUID; the sim derives UUIDs from its
  // configuration, so learn it from an unlimited run's region first.
  Result first = run("probe", {}, {"kernel", "100", "0", "0.05"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  int fd = open(region("probe").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  tessera::vgpu::DeviceEntry entry{};
  ASSERT_EQ(pread(fd, &entry, sizeof(entry), offsetof(tessera::vgpu::Region, devices)),
            static_cast<ssize_t>(sizeof(entry)));
  close(fd);
  std::string uuid = entry.uuid;
  ASSERT_FALSE(uuid.empty());
  std::string alloc = R"({"version":1,"node":"n","containers":[{"name":"main","devices":[{"uuid":")" + uuid +
                      R"(","memoryMiB":4096,"cores":50}]}]})";
  Result r = run("c", {{"TESSERA_ALLOCATION", alloc}, {"GPU_CORE_UTILIZATION_POLICY", "force"}}, kSaturate);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NEAR(r.share, 50.0, 10.0) << r.out << r.err;
  EXPECT_EQ(read_region("c").quota, 50u);
}

TEST_F(ComputeTest, EveryLaunchPathIsHeld) {
  for (const char* mode : {"ex", "coop", "ptsz"}) {
    Result r = run(std::string("c-") + mode,
                   {{"CUDA_DEVICE_SM_LIMIT", "30"}, {"GPU_CORE_UTILIZATION_POLICY", "force"}},
                   {mode, "2000", "0.5", "1"});
    ASSERT_EQ(r.exit_code, 0) << mode << ": " << r.err;
    EXPECT_NEAR(r.share, 30.0, 10.0) << mode << ": " << r.out;
  }
}

TEST_F(ComputeTest, GraphLaunchesAreChargedWithTheirKernelsTime) {
  Result r = run("c", {{"CUDA_DEVICE_SM_LIMIT", "30"}, {"GPU_CORE_UTILIZATION_POLICY", "force"}},
                 {"graph", "2000", "0.5", "1.5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NEAR(r.share, 30.0, 10.0) << r.out;
  RegionSnapshot s = read_region("c");
  EXPECT_GT(s.used_ns, 350'000'000u);
}

TEST_F(ComputeTest, DisableNeverLimits) {
  Result r =
      run("c", {{"CUDA_DEVICE_SM_LIMIT", "30"}, {"GPU_CORE_UTILIZATION_POLICY", "disable"}}, kSaturate);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_region("c").throttled_ns, 0u);  // never waited
  EXPECT_GT(r.share, 55.0) << r.out;             // far above the 30 % it would have been held to
}

TEST_F(ComputeTest, NoQuotaRunsUnthrottled) {
  Result r = run("c", {{"GPU_CORE_UTILIZATION_POLICY", "force"}}, kSaturate);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  RegionSnapshot s = read_region("c");
  EXPECT_EQ(s.throttled_ns, 0u);
  EXPECT_GT(r.share, 55.0) << r.out;
  EXPECT_EQ(s.used_ns, 0u);  // nothing charged: the limiter is not on the path
  Result hundred = run("d", {{"CUDA_DEVICE_SM_LIMIT", "100"}}, kSaturate);
  EXPECT_EQ(read_region("d").throttled_ns, 0u);
  EXPECT_GT(hundred.share, 55.0) << hundred.out;
}

TEST_F(ComputeTest, DefaultPolicyLetsALoneTenantUseIdleTime) {
  Result r = run("c", {{"CUDA_DEVICE_SM_LIMIT", "30"}}, kSaturate);  // policy unset = default
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(r.share, 55.0) << r.out;  // well above its 30 % quota
}

TEST_F(ComputeTest, DefaultPolicyHoldsTheQuotaNextToAnotherTenant) {
  pid_t other = start("other", {{"CUDA_DEVICE_SM_LIMIT", "40"}, {"GPU_CORE_UTILIZATION_POLICY", "force"}},
                      {"kernel", "2000", "0", "3"});
  pid_t mine = start("c", {{"CUDA_DEVICE_SM_LIMIT", "30"}}, {"kernel", "2000", "1", "1.5"});
  Result r = finish(mine);
  Result o = finish(other);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NEAR(r.share, 30.0, 10.0) << r.out;
}

TEST_F(ComputeTest, TwoTenantsWithDifferentQuotas) {
  pid_t a = start("a", {{"CUDA_DEVICE_SM_LIMIT", "20"}, {"GPU_CORE_UTILIZATION_POLICY", "force"}}, kSaturate);
  pid_t b = start("b", {{"CUDA_DEVICE_SM_LIMIT", "60"}, {"GPU_CORE_UTILIZATION_POLICY", "force"}}, kSaturate);
  Result ra = finish(a), rb = finish(b);
  ASSERT_EQ(ra.exit_code, 0) << ra.err;
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_NEAR(ra.share, 20.0, 10.0) << ra.out;
  EXPECT_NEAR(rb.share, 60.0, 10.0) << rb.out;
}

// Issue 19 item 4: latency-bound tenants (four 1 ms kernels, then wait for
// them) whose quotas fill the device, a pair and a triple. Shares are the
// simulator's device time (event-timed kernel intervals on its timeline), per
// second after a one-second warm-up. Before the fix the 30 % tenants got
// 23-30 % (their kernels were charged as if they ran with the neighbour's
// queue ahead of them) and the largest tenant was held back 13-30 % of the
// time while the device idled (docs/benchmarks.md, "Shares between tenants").
TEST_F(ComputeTest, LatencyBoundTenantsWithQuotasFillingTheDeviceGetThem) {
  const std::vector<std::string> args = {"batch", "1000", "1", "3"};
  for (const std::vector<int>& quotas : {std::vector<int>{30, 70}, std::vector<int>{10, 30, 60}}) {
    std::string group;
    for (int q : quotas) group += "-" + std::to_string(q);
    SCOPED_TRACE("quotas" + group);
    std::vector<pid_t> pids;
    for (int q : quotas)
      pids.push_back(start(
          "t" + group + "-" + std::to_string(q),
          {{"CUDA_DEVICE_SM_LIMIT", std::to_string(q)}, {"GPU_CORE_UTILIZATION_POLICY", "force"}}, args));
    std::vector<Result> results;
    for (pid_t pid : pids) results.push_back(finish(pid));
    for (const Result& r : results) {
      ASSERT_EQ(r.exit_code, 0) << r.err;
      ASSERT_EQ(r.windows.size(), 3u) << r.out;
    }
    // Every tenant but the largest: the benchmark holds ±0.5 pp per second at
    // load 11-13. Here ±1 pp on the mean and ±2 pp per second: a host that
    // does not run a tenant for longer than burst / quota (30 ms) loses what
    // accrues beyond the burst — 20 ms is 2 pp of a second — and this test
    // may share two cores with a parallel build.
    for (size_t i = 0; i + 1 < quotas.size(); ++i) {
      EXPECT_NEAR(results[i].share, quotas[i], 1.0) << results[i].out;
      for (double w : results[i].windows) EXPECT_NEAR(w, quotas[i], 2.0) << results[i].out;
    }
    // The largest is below its quota only by the device's idle time at its
    // own synchronisations (the host wakes it late; the others' kernels,
    // capped by their quotas, cannot cover them all): the limiter must not
    // hold it back as well. It may wait when a neighbour's host stalls and
    // leaves it room beyond its quota: then it reaches its quota, and the
    // wait is the limiter doing its job (a CI run saw 247 ms of waiting with
    // a share of 59.96 % of 60). Short of its quota by more than half a
    // point, it may have waited at most 5 % of the 4-s run.
    const int largest = quotas.back();
    const Result& rl = results.back();
    RegionSnapshot l = read_region("t" + group + "-" + std::to_string(largest));
    ASSERT_TRUE(l.ok);
    if (rl.share < largest - 0.5) {
      EXPECT_LT(l.throttled_ns, 200'000'000u) << rl.out;
    }
    EXPECT_GT(rl.share, largest - 10.0) << rl.out;  // host-bound, loosely: within 1 pp at load 11-13
    EXPECT_LT(rl.share, largest + 2.0) << rl.out;   // and not above its quota
  }
}

TEST_F(ComputeTest, HighPriorityGetsItsQuotaFirst) {
  // 70 + 70 oversubscribes the device; the low-priority tenant yields.
  const std::vector<std::string> args = {"kernel", "2000", "1.5", "2"};
  pid_t high = start(
      "high",
      {{"CUDA_DEVICE_SM_LIMIT", "70"}, {"GPU_CORE_UTILIZATION_POLICY", "force"}, {"CUDA_TASK_PRIORITY", "0"}},
      args);
  pid_t low = start(
      "low",
      {{"CUDA_DEVICE_SM_LIMIT", "70"}, {"GPU_CORE_UTILIZATION_POLICY", "force"}, {"CUDA_TASK_PRIORITY", "1"}},
      args);
  Result rh = finish(high), rl = finish(low);
  ASSERT_EQ(rh.exit_code, 0) << rh.err;
  ASSERT_EQ(rl.exit_code, 0) << rl.err;
  EXPECT_NEAR(rh.share, 70.0, 10.0) << rh.out << rl.out;
  EXPECT_LT(rl.share, 35.0) << rl.out;
  EXPECT_EQ(read_region("high").priority, 1u);
  EXPECT_EQ(read_region("low").priority, 0u);
}

TEST_F(ComputeTest, TwoProcessesOfOneContainerShareOneBudget) {
  Env env = {{"CUDA_DEVICE_SM_LIMIT", "40"}, {"GPU_CORE_UTILIZATION_POLICY", "force"}};
  pid_t a = start("c", env, kSaturate);
  pid_t b = start("c", env, kSaturate);
  Result ra = finish(a), rb = finish(b);
  ASSERT_EQ(ra.exit_code, 0) << ra.err;
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_NEAR(ra.share + rb.share, 40.0, 10.0) << ra.out << rb.out;
  EXPECT_GT(ra.share, 8.0);
  EXPECT_GT(rb.share, 8.0);
}

// A container's process in its own pid namespace with its own /proc, as in a
// pod: NVML (the simulator, pointed at a bind mount of the host's /proc with
// TESSERA_SIM_PROC, see docs/sim.md) reports it by its host pid, which the
// process cannot know. `default` then cannot tell its own work from another
// tenant's and holds the quota, until the node agent writes the host pid into
// the region (ProcessSlot::host_pid, docs/region.md) — played here by the test.
TEST_F(ComputeTest, DefaultPolicyInAPidNamespaceKnowsItIsAloneOnceItsHostPidIsKnown) {
  if (geteuid() != 0) GTEST_SKIP() << "pid namespaces need root here";
  for (bool agent : {false, true}) {
    SCOPED_TRACE(agent ? "host pid written by the agent" : "host pid unknown");
    std::string container = agent ? "with-agent" : "without-agent";
    std::string host_proc = dir_ + "/hostproc-" + container;
    ASSERT_EQ(mkdir(host_proc.c_str(), 0755), 0);
    pid_t pid = start(container, {{"CUDA_DEVICE_SM_LIMIT", "30"}, {"TESSERA_SIM_PROC", host_proc}},
                      {"kernel", "2000", "1", "1.5"}, true,
                      {"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                       "mount --bind /proc \"$TESSERA_SIM_PROC\" && exec unshare --pid --fork --kill-child "
                       "--mount-proc \"$@\"",
                       "sh"});
    if (agent) {
      // The node agent: the probe is the inner unshare's child (host pid); its
      // slot is the active one whose pid is 1 (its pid inside the namespace).
      bool written = false;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!written && std::chrono::steady_clock::now() < deadline) {
        std::ifstream children("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
        long host = 0;
        int fd = open(region(container).c_str(), O_RDWR);
        if ((children >> host) && host > 1 && fd >= 0) {
          void* p = mmap(nullptr, sizeof(tessera::vgpu::Region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
          struct stat st {};
          fstat(fd, &st);
          if (p != MAP_FAILED && static_cast<size_t>(st.st_size) == sizeof(tessera::vgpu::Region)) {
            auto* r = static_cast<tessera::vgpu::Region*>(p);
            for (auto& slot : r->processes) {
              if (slot.state.load() != tessera::vgpu::kSlotActive || slot.pid != 1) continue;
              uint64_t zero = 0;
              written = slot.host_pid.compare_exchange_strong(zero, static_cast<uint64_t>(host));
            }
          }
          if (p != MAP_FAILED) munmap(p, sizeof(tessera::vgpu::Region));
        }
        if (fd >= 0) close(fd);
        if (!written) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      EXPECT_TRUE(written);
    }
    Result r = finish(pid);
    if (r.exit_code != 0 && r.out.empty()) GTEST_SKIP() << "no pid namespace here: " << r.err;
    ASSERT_EQ(r.exit_code, 0) << r.err;
    if (agent) {
      EXPECT_GT(r.share, 55.0) << r.out;  // alone: bursts into idle time
    } else {
      EXPECT_NEAR(r.share, 30.0, 10.0) << r.out;  // its own pid looks like another tenant's
    }
  }
}

}  // namespace
