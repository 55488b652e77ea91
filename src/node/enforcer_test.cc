#include "node/enforcer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

namespace tessera::node {
namespace {

using ::testing::ElementsAre;

constexpr uint64_t kMiB = 1ull << 20;

// Processes as the test declares them; kills are recorded, not performed.
class FakeInspector final : public ProcessInspector {
 public:
  std::map<uint32_t, ProcessIdentity> processes;
  std::vector<uint32_t> killed;
  std::set<uint32_t> unkillable;
  int inspections = 0;

  std::optional<ProcessIdentity> Inspect(uint32_t pid) override {
    ++inspections;
    auto it = processes.find(pid);
    if (it == processes.end()) return std::nullopt;
    return it->second;
  }
  Status Kill(const ProcessIdentity& p) override {
    if (unkillable.count(p.host_pid)) return Error{"operation not permitted"};
    killed.push_back(p.host_pid);
    return Status::Ok();
  }

  // A process of the container whose region directory has inode `ino`.
  void Add(uint32_t host_pid, ino_t ino, uint32_t container_pid,
           std::map<std::string, std::string> env = {}) {
    ProcessIdentity p;
    p.host_pid = host_pid;
    p.command = "proc" + std::to_string(host_pid);
    p.sees_region_dir = ino != 0;
    p.region_dev = 7;
    p.region_ino = ino;
    p.container_pid = container_pid;
    p.environment = std::move(env);
    processes[host_pid] = p;
  }
};

RegionDir Region(const std::string& name, ino_t ino, uint64_t limit_bytes,
                 std::vector<std::pair<uint32_t, uint64_t>> accounted = {}) {
  RegionDir r;
  r.name = name;
  r.dev = 7;
  r.ino = ino;
  host::RegionSnapshot snap;
  host::DeviceUsage d;
  d.uuid = "GPU-A";
  d.memory_limit_bytes = limit_bytes;
  snap.devices.push_back(d);
  for (auto [pid, bytes] : accounted) {
    host::ProcessUsage p;
    p.pid = pid;
    p.memory_used_bytes = {bytes};
    p.gpu_time_used_ns = {0};
    snap.processes.push_back(p);
    snap.devices[0].memory_used_bytes += bytes;
  }
  r.region = snap;
  return r;
}

host::GpuSample Gpu(std::vector<host::GpuProcess> processes) {
  host::GpuSample s;
  s.uuid = "GPU-A";
  s.processes_known = true;
  s.processes = std::move(processes);
  return s;
}

class EnforcerTest : public ::testing::Test {
 protected:
  std::vector<Violation> Run(Enforcer& enforcer, const std::vector<host::GpuSample>& gpus,
                             const std::vector<RegionDir>& regions) {
    return enforcer.Pass(AttributeGpuProcesses(gpus, regions, inspector_));
  }

  Enforcer Make(bool kill_by_default = true, uint64_t tolerance = 0, bool container_may_override = true) {
    EnforcementPolicy policy;
    policy.kill_by_default = kill_by_default;
    policy.tolerance_bytes = tolerance;
    policy.container_may_override = container_may_override;
    return Enforcer(policy, &inspector_, [this](const ContainerRef& owner, const std::string& uuid) {
      auto it = allocation_limits_.find(owner.pod_name + "/" + uuid);
      return it == allocation_limits_.end() ? std::nullopt : std::optional<uint64_t>(it->second);
    });
  }
  FakeInspector inspector_;
  std::map<std::string, uint64_t> allocation_limits_;
};

TEST_F(EnforcerTest, KillsTheProcessTheLibraryDidNotSee) {
  // Container "r1": pid 100 went through libvgpu (900 MiB accounted), pid 101
  // bypassed it with 1500 MiB. Limit 2000 MiB: 2400 in use.
  inspector_.Add(100, 11, 7);
  inspector_.Add(101, 11, 8);
  inspector_.Add(200, 0, 0);  // a host process, in no container of ours
  std::vector<RegionDir> regions = {Region("r1", 11, 2000 * kMiB, {{7, 900 * kMiB}})};
  auto enforcer = Make();
  auto violations =
      Run(enforcer, {Gpu({{100, 900 * kMiB}, {101, 1500 * kMiB}, {200, 5000 * kMiB}})}, regions);
  ASSERT_EQ(violations.size(), 1u);
  const Violation& v = violations[0];
  EXPECT_EQ(v.region, "r1");
  EXPECT_EQ(v.gpu_uuid, "GPU-A");
  EXPECT_EQ(v.used_bytes, 2400 * kMiB);
  EXPECT_EQ(v.limit_bytes, 2000 * kMiB);
  EXPECT_EQ(v.limit_source, "region");
  EXPECT_TRUE(v.kill);
  EXPECT_TRUE(v.new_episode);
  ASSERT_EQ(v.offenders.size(), 1u);
  EXPECT_EQ(v.offenders[0].process.host_pid, 101u);
  EXPECT_EQ(v.offenders[0].accounted_bytes, 0u);
  EXPECT_TRUE(v.offenders[0].killed);
  EXPECT_THAT(inspector_.killed, ElementsAre(101u));
}

TEST_F(EnforcerTest, WithinTheLimitOrTheToleranceNothingHappens) {
  inspector_.Add(100, 11, 7);
  std::vector<RegionDir> regions = {Region("r1", 11, 2000 * kMiB, {{7, 2000 * kMiB}})};
  auto enforcer = Make(true, 64 * kMiB);
  EXPECT_TRUE(Run(enforcer, {Gpu({{100, 2000 * kMiB}})}, regions).empty());
  EXPECT_TRUE(Run(enforcer, {Gpu({{100, 2060 * kMiB}})}, regions).empty());  // driver rounding
  EXPECT_EQ(Run(enforcer, {Gpu({{100, 2070 * kMiB}})}, regions).size(), 1u);
  EXPECT_THAT(inspector_.killed, ElementsAre(100u));
}

TEST_F(EnforcerTest, TheAllocationAnnotationOutranksWhatTheContainerWrote) {
  // The container's region claims 8000 MiB; the scheduler allocated 1000.
  inspector_.Add(100, 11, 7);
  std::vector<RegionDir> regions = {Region("r1", 11, 8000 * kMiB, {{7, 3000 * kMiB}})};
  regions[0].owner = ContainerRef{"ns", "pod-1", "main"};
  allocation_limits_["pod-1/GPU-A"] = 1000 * kMiB;
  auto enforcer = Make();
  auto violations = Run(enforcer, {Gpu({{100, 3000 * kMiB}})}, regions);
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_EQ(violations[0].limit_source, "allocation");
  EXPECT_EQ(violations[0].limit_bytes, 1000 * kMiB);
}

TEST_F(EnforcerTest, WithoutARegionEntryTheEnvironmentDeclaresTheLimit) {
  // Nothing in the container loaded libvgpu: no region file at all.
  inspector_.Add(100, 11, 7, {{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}});
  RegionDir bare;
  bare.name = "r1";
  bare.dev = 7;
  bare.ino = 11;
  bare.region_missing = true;
  auto enforcer = Make();
  auto violations = Run(enforcer, {Gpu({{100, 1500 * kMiB}})}, {bare});
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_EQ(violations[0].limit_source, "environment");
  EXPECT_EQ(violations[0].limit_bytes, 1024 * kMiB);

  // And with no limit known anywhere there is nothing to enforce.
  inspector_.Add(100, 11, 7);
  auto none = Make();
  EXPECT_TRUE(Run(none, {Gpu({{100, 1500 * kMiB}})}, {bare}).empty());
}

TEST_F(EnforcerTest, ActiveOomKillerOffOnlyReportsOncePerEpisode) {
  inspector_.Add(100, 11, 7, {{"ACTIVE_OOM_KILLER", "false"}});
  std::vector<RegionDir> regions = {Region("r1", 11, 1000 * kMiB)};
  auto enforcer = Make(/*kill_by_default=*/true);
  auto first = Run(enforcer, {Gpu({{100, 1500 * kMiB}})}, regions);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_FALSE(first[0].kill);
  EXPECT_TRUE(first[0].new_episode);
  ASSERT_EQ(first[0].offenders.size(), 1u);
  EXPECT_FALSE(first[0].offenders[0].killed);
  auto second = Run(enforcer, {Gpu({{100, 1500 * kMiB}})}, regions);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_FALSE(second[0].new_episode);
  EXPECT_TRUE(Run(enforcer, {Gpu({{100, 900 * kMiB}})}, regions).empty());
  EXPECT_TRUE(Run(enforcer, {Gpu({{100, 1500 * kMiB}})}, regions)[0].new_episode);
  EXPECT_TRUE(inspector_.killed.empty());

  // A node default of "report" is overridden by the container asking for kills.
  inspector_.Add(100, 11, 7, {{"ACTIVE_OOM_KILLER", "true"}});
  auto reporting_node = Make(/*kill_by_default=*/false);
  EXPECT_TRUE(Run(reporting_node, {Gpu({{100, 1500 * kMiB}})}, regions)[0].kill);
}

// active_oom_killer_fixed: what the tenant sets in its own environment no
// longer decides, either way.
TEST_F(EnforcerTest, AFixedNodePolicyIgnoresTheContainersActiveOomKiller) {
  inspector_.Add(100, 11, 7, {{"ACTIVE_OOM_KILLER", "false"}});
  std::vector<RegionDir> regions = {Region("r1", 11, 1000 * kMiB)};
  auto killing_node = Make(/*kill_by_default=*/true, 0, /*container_may_override=*/false);
  auto violations = Run(killing_node, {Gpu({{100, 1500 * kMiB}})}, regions);
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_TRUE(violations[0].kill);
  ASSERT_EQ(violations[0].offenders.size(), 1u);
  EXPECT_TRUE(violations[0].offenders[0].killed);
  EXPECT_EQ(inspector_.killed.size(), 1u);

  inspector_.Add(100, 11, 7, {{"ACTIVE_OOM_KILLER", "true"}});
  auto reporting_node = Make(/*kill_by_default=*/false, 0, /*container_may_override=*/false);
  EXPECT_FALSE(Run(reporting_node, {Gpu({{100, 1500 * kMiB}})}, regions)[0].kill);
}

TEST_F(EnforcerTest, KillsOnlyAsManyAsItTakesAndRetriesAFailedKill) {
  // Three bypassing processes of 600 MiB each against a 1000 MiB limit: two go.
  for (uint32_t pid : {100u, 101u, 102u}) inspector_.Add(pid, 11, pid);
  std::vector<RegionDir> regions = {Region("r1", 11, 1000 * kMiB)};
  inspector_.unkillable = {100};
  auto enforcer = Make();
  auto v = Run(enforcer, {Gpu({{100, 600 * kMiB}, {101, 600 * kMiB}, {102, 600 * kMiB}})}, regions);
  ASSERT_EQ(v.size(), 1u);
  ASSERT_EQ(v[0].offenders.size(), 2u);
  EXPECT_FALSE(v[0].offenders[0].killed);
  EXPECT_NE(v[0].offenders[0].kill_error.find("not permitted"), std::string::npos);
  EXPECT_THAT(inspector_.killed, ElementsAre(101u));
}

TEST_F(EnforcerTest, EachProcessIsInspectedOncePerPassAndOtherContainersAreSeparate) {
  inspector_.Add(100, 11, 7);
  inspector_.Add(300, 12, 7);  // another container; same pid inside its own namespace
  std::vector<RegionDir> regions = {Region("r1", 11, 1000 * kMiB), Region("r2", 12, 1000 * kMiB)};
  host::GpuSample second = Gpu({{100, 100 * kMiB}, {300, 900 * kMiB}});
  second.uuid = "GPU-B";
  auto enforcer = Make();
  EXPECT_TRUE(Run(enforcer, {Gpu({{100, 800 * kMiB}, {300, 800 * kMiB}}), second}, regions).empty());
  EXPECT_EQ(inspector_.inspections, 2);
}

// --- Compute (ComputePass) ------------------------------------------------

class ComputeEnforcerTest : public EnforcerTest {
 protected:
  Enforcer MakeCompute(bool kill, int tolerance = 10, int window = 3) {
    EnforcementPolicy policy;
    policy.compute_kill = kill;
    policy.compute_tolerance_percent = tolerance;
    policy.compute_window_passes = window;
    return Enforcer(policy, &inspector_, nullptr, [this](const ContainerRef& owner, const std::string& uuid) {
      auto it = cores_.find(owner.pod_name + "/" + uuid);
      return it == cores_.end() ? std::nullopt : std::optional<int>(it->second);
    });
  }
  std::vector<ComputeViolation> RunCompute(Enforcer& enforcer, const std::vector<host::GpuSample>& gpus,
                                           const std::vector<RegionDir>& regions) {
    return enforcer.ComputePass(AttributeGpuProcesses(gpus, regions, inspector_), gpus);
  }
  static host::GpuProcess Busy(uint32_t pid, int util) {
    host::GpuProcess p;
    p.pid = pid;
    p.used_bytes = 100 * kMiB;
    p.sm_util_percent = util;
    return p;
  }
  std::map<std::string, int> cores_;
};

// Pod "pod-1" has 30 % of GPU-A. Its pid 101 bypasses libvgpu (no region slot)
// and keeps 90 % busy: a violation after three passes in a row, not before,
// reported once, and with kill the bypassing process goes, not the one
// libvgpu knows.
TEST_F(ComputeEnforcerTest, ABypassingProcessOverTheQuotaForTheWindowIsKilled) {
  inspector_.Add(100, 11, 7);
  inspector_.Add(101, 11, 8);
  std::vector<RegionDir> regions = {Region("r1", 11, 0, {{7, 100 * kMiB}})};
  regions[0].owner = ContainerRef{"ns", "pod-1", "main"};
  cores_["pod-1/GPU-A"] = 30;
  auto enforcer = MakeCompute(/*kill=*/true);
  const std::vector<host::GpuSample> gpus = {Gpu({Busy(100, 5), Busy(101, 85)})};
  EXPECT_TRUE(RunCompute(enforcer, gpus, regions).empty());
  EXPECT_TRUE(RunCompute(enforcer, gpus, regions).empty());
  auto v = RunCompute(enforcer, gpus, regions);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(v[0].new_episode);
  EXPECT_EQ(v[0].passes_over, 3);
  EXPECT_EQ(v[0].used_percent, 90);
  EXPECT_EQ(v[0].quota_percent, 30);
  ASSERT_EQ(v[0].offenders.size(), 1u);
  EXPECT_EQ(v[0].offenders[0].process.host_pid, 101u);
  EXPECT_FALSE(v[0].offenders[0].in_region);
  EXPECT_THAT(inspector_.killed, ElementsAre(101u));
  // Still over at the next pass: killed again, but not a new episode.
  v = RunCompute(enforcer, gpus, regions);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_FALSE(v[0].new_episode);
}

// A pass within the quota breaks the run: the window starts again.
TEST_F(ComputeEnforcerTest, APassWithinTheQuotaStartsTheWindowAgain) {
  inspector_.Add(101, 11, 8);
  std::vector<RegionDir> regions = {Region("r1", 11, 0)};
  regions[0].owner = ContainerRef{"ns", "pod-1", "main"};
  cores_["pod-1/GPU-A"] = 30;
  auto enforcer = MakeCompute(/*kill=*/false);
  const std::vector<host::GpuSample> over = {Gpu({Busy(101, 80)})};
  const std::vector<host::GpuSample> within = {Gpu({Busy(101, 35)})};  // 30 + 10 % tolerance
  EXPECT_TRUE(RunCompute(enforcer, over, regions).empty());
  EXPECT_TRUE(RunCompute(enforcer, over, regions).empty());
  EXPECT_TRUE(RunCompute(enforcer, within, regions).empty());
  EXPECT_TRUE(RunCompute(enforcer, over, regions).empty());
  EXPECT_TRUE(RunCompute(enforcer, over, regions).empty());
  auto v = RunCompute(enforcer, over, regions);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_FALSE(v[0].kill);
  EXPECT_TRUE(inspector_.killed.empty());  // report only
}

// A container whose processes all run libvgpu, alone on the GPU, may use idle
// time (policy default): not a violation. With another tenant busy, it is.
TEST_F(ComputeEnforcerTest, IdleTimeIsFreeButNotWhileAnotherTenantWaits) {
  inspector_.Add(100, 11, 7);
  inspector_.Add(300, 0, 0);  // another tenant's process (no region of ours)
  std::vector<RegionDir> regions = {Region("r1", 11, 0, {{7, 100 * kMiB}})};
  regions[0].owner = ContainerRef{"ns", "pod-1", "main"};
  cores_["pod-1/GPU-A"] = 30;
  auto enforcer = MakeCompute(/*kill=*/true, 10, /*window=*/1);
  EXPECT_TRUE(RunCompute(enforcer, {Gpu({Busy(100, 95)})}, regions).empty());
  EXPECT_TRUE(RunCompute(enforcer, {Gpu({Busy(100, 95), Busy(300, 0)})}, regions).empty());
  auto v = RunCompute(enforcer, {Gpu({Busy(100, 80), Busy(300, 15)})}, regions);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].others_percent, 15);
  EXPECT_THAT(inspector_.killed, ElementsAre(100u));
}

// Nothing to compare with: no allocation cores (or 0 / 100), an unknown
// utilisation, or a pod not known yet (the region's quota is never used).
TEST_F(ComputeEnforcerTest, WithoutAnAllocationsCoresOrTheDriversFigureNothingIsDone) {
  inspector_.Add(101, 11, 8);
  std::vector<RegionDir> regions = {Region("r1", 11, 0)};
  auto enforcer = MakeCompute(/*kill=*/true, 10, 1);
  EXPECT_TRUE(RunCompute(enforcer, {Gpu({Busy(101, 100)})}, regions).empty());  // owner unknown
  regions[0].owner = ContainerRef{"ns", "pod-1", "main"};
  EXPECT_TRUE(RunCompute(enforcer, {Gpu({Busy(101, 100)})}, regions).empty());  // no cores
  cores_["pod-1/GPU-A"] = 100;
  EXPECT_TRUE(RunCompute(enforcer, {Gpu({Busy(101, 100)})}, regions).empty());  // the whole GPU
  cores_["pod-1/GPU-A"] = 30;
  EXPECT_TRUE(RunCompute(enforcer, {Gpu({Busy(101, -1)})}, regions).empty());  // NVML cannot say
  EXPECT_TRUE(inspector_.killed.empty());
}

// --- DRA claims' regions (claim_regions.h) ----------------------------------

ClaimLimits Claim(uint64_t memory_bytes, int cores) {
  ClaimLimits c;
  c.claim = "team/gpu-a";
  if (memory_bytes > 0) c.memory_bytes["GPU-A"] = memory_bytes;
  c.cores["GPU-A"] = cores;
  return c;
}

// A claim of 1000 MiB: its container's region says 8000 (the container can
// write it) and the process's environment 9000; the claim's limits.json holds,
// and the process that bypassed libvgpu goes.
TEST_F(EnforcerTest, AClaimsLimitsFileOutranksItsRegionAndEnvironment) {
  inspector_.Add(100, 11, 7, {{"CUDA_DEVICE_MEMORY_LIMIT", "9000m"}});
  inspector_.Add(101, 11, 8, {{"CUDA_DEVICE_MEMORY_LIMIT", "9000m"}});
  std::vector<RegionDir> regions = {Region("r1", 11, 8000 * kMiB, {{7, 500 * kMiB}})};
  regions[0].claim = Claim(1000 * kMiB, 30);
  regions[0].owner = ContainerRef{"team", "trainer", "main"};
  allocation_limits_["trainer/GPU-A"] = 7000 * kMiB;  // not a claim's source
  auto enforcer = Make();
  auto violations = Run(enforcer, {Gpu({{100, 500 * kMiB}, {101, 1500 * kMiB}})}, regions);
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_EQ(violations[0].limit_source, "claim");
  EXPECT_EQ(violations[0].limit_bytes, 1000 * kMiB);
  ASSERT_TRUE(violations[0].owner.has_value());
  EXPECT_EQ(violations[0].owner->pod_name, "trainer");
  EXPECT_THAT(inspector_.killed, ElementsAre(101u));
}

// A claim region is enforced before the kubelet names its container (no
// owner): the limit is the claim's, not anyone's annotation.
TEST_F(EnforcerTest, AClaimWithoutAnOwnerYetIsStillHeldToItsLimits) {
  inspector_.Add(101, 11, 8);
  std::vector<RegionDir> regions = {Region("r1", 11, 0)};
  regions[0].claim = Claim(1000 * kMiB, 0);
  auto enforcer = Make(/*kill_by_default=*/false);
  auto violations = Run(enforcer, {Gpu({{101, 1200 * kMiB}})}, regions);
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_EQ(violations[0].limit_source, "claim");
  EXPECT_FALSE(violations[0].owner.has_value());
  EXPECT_FALSE(violations[0].kill);
  EXPECT_TRUE(inspector_.killed.empty());  // reported only
}

// A whole-GPU claim (no memory limit in its file) or a refused limits file
// falls back as other regions do: here the region's figure.
TEST_F(EnforcerTest, AClaimWithoutAMemoryLimitFallsBackToTheRegion) {
  inspector_.Add(101, 11, 8);
  std::vector<RegionDir> regions = {Region("r1", 11, 1000 * kMiB)};
  regions[0].claim = Claim(0, 0);
  auto enforcer = Make();
  auto violations = Run(enforcer, {Gpu({{101, 1200 * kMiB}})}, regions);
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_EQ(violations[0].limit_source, "region");
}

// Compute: a claim's cores come from its limits file, not from an annotation.
TEST_F(ComputeEnforcerTest, AClaimsCoresAreItsQuota) {
  inspector_.Add(101, 11, 8);
  std::vector<RegionDir> regions = {Region("r1", 11, 0)};
  regions[0].owner = ContainerRef{"team", "trainer", "main"};
  regions[0].claim = Claim(0, 30);
  cores_["trainer/GPU-A"] = 90;  // an annotation would allow it; the claim does not
  auto enforcer = MakeCompute(/*kill=*/true, 10, 1);
  auto v = RunCompute(enforcer, {Gpu({Busy(101, 85)})}, regions);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].quota_percent, 30);
  EXPECT_THAT(inspector_.killed, ElementsAre(101u));
}

}  // namespace
}  // namespace tessera::node
