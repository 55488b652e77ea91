#include "runner/job_watch.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "base/files.h"
#include "base/testing.h"

namespace tessera::runner {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr const char* kGpu = "GPU-11111111-2222-3333-4444-555555555555";

TEST(ChooseOffenders, NoneWithinTheSliceAndItsTolerance) {
  EXPECT_TRUE(
      ChooseOffenders({{1, 900 * kMiB, 900 * kMiB}, {2, 150 * kMiB, 0}}, 1000 * kMiB, 64 * kMiB).empty());
  EXPECT_TRUE(ChooseOffenders({{1, 5000 * kMiB, 0}}, 0, 0).empty());  // no limit
}

TEST(ChooseOffenders, WhatLibvgpuDidNotSeeGoesFirstUntilTheRestFits) {
  auto out =
      ChooseOffenders({{10, 900 * kMiB, 900 * kMiB}, {11, 300 * kMiB, 0}, {12, 400 * kMiB, 400 * kMiB}},
                      1000 * kMiB, 64 * kMiB);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].pid, 11u);  // all of it unaccounted
  EXPECT_EQ(out[1].pid, 10u);  // then the largest
}

TEST(Descendants, TheWholeTreeBelowTheRootAndNothingElse) {
  const std::map<uint32_t, uint32_t> parents{{100, 1}, {200, 100}, {201, 100}, {300, 200}, {400, 1}};
  EXPECT_EQ(Descendants(100, parents), (std::set<uint32_t>{200, 201, 300}));
  EXPECT_TRUE(Descendants(400, parents).empty());
}

TEST(ReadParents, ReadsProcIncludingOurselves) {
  auto parents = ReadParents();
  ASSERT_TRUE(parents.count(static_cast<uint32_t>(::getpid())));
  EXPECT_EQ(parents.at(static_cast<uint32_t>(::getpid())), static_cast<uint32_t>(::getppid()));
}

class JobWatchTest : public ::testing::Test {
 protected:
  JobWatchOptions Options() {
    JobWatchOptions o;
    o.limits_path = tmp_.Path("limits.json");
    o.limits_text = "{\"version\":1}";
    o.region_path = tmp_.Path("vgpu.region");  // absent: nothing accounted
    o.memory_limits[kGpu] = 1000 * kMiB;
    o.root_pid = static_cast<uint32_t>(::getppid());  // the test runner's parent: we are its descendant
    return o;
  }
  host::StaticInventory gpus_{{}};
  ::tessera::testing::TempDir tmp_{"tessera-job-watch"};
  std::vector<std::string> lines_;
  std::vector<uint32_t> killed_;
};

TEST_F(JobWatchTest, RestoresTheLimitsFileAndKillsAProcessOfTheJobOverTheSlice) {
  const uint32_t me = static_cast<uint32_t>(::getpid());
  host::GpuSample sample;
  sample.uuid = kGpu;
  sample.processes_known = true;
  sample.processes = {{me, 3000 * kMiB}, {1, 5000 * kMiB}};  // pid 1 is no descendant: not the job's
  gpus_.SetSamples({sample});
  tmp_.Write("limits.json", "{\"version\":1,\"memoryMiB\":80000}");
  JobWatch watch(
      Options(), &gpus_, [&](const std::string& l) { lines_.push_back(l); },
      [&](uint32_t pid) {
        killed_.push_back(pid);
        return true;
      });
  watch.PassOnce();
  EXPECT_EQ(*files::Read(tmp_.Path("limits.json")), "{\"version\":1}");
  struct stat st {};
  ASSERT_EQ(::stat(tmp_.Path("limits.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0444u);
  EXPECT_EQ(killed_, std::vector<uint32_t>{me});
  EXPECT_EQ(watch.kills(), 1u);
  EXPECT_EQ(watch.restores(), 1u);
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_NE(lines_[0].find("was changed; restored"), std::string::npos) << lines_[0];
  EXPECT_NE(lines_[1].find("the job uses 3000 MiB on GPU " + std::string(kGpu) +
                           ", over its slice of 1000 MiB: "
                           "killed process " +
                           std::to_string(me)),
            std::string::npos)
      << lines_[1];

  // Within the slice, with the file intact: nothing to do.
  sample.processes = {{me, 900 * kMiB}};
  gpus_.SetSamples({sample});
  watch.PassOnce();
  EXPECT_EQ(killed_.size(), 1u);
  EXPECT_EQ(lines_.size(), 2u);
  EXPECT_EQ(watch.passes(), 2u);
}

// The compute side: a job over its cores while another tenant is busy (or
// with a process libvgpu does not know) for the window's passes is cut back.
TEST_F(JobWatchTest, KillsWhatKeepsTheJobOverItsCoresForTheWindow) {
  const uint32_t me = static_cast<uint32_t>(::getpid());
  host::GpuSample sample;
  sample.uuid = kGpu;
  sample.processes_known = true;
  JobWatchOptions options = Options();
  options.memory_limits.clear();
  options.core_quotas[kGpu] = 30;
  tmp_.Write("limits.json", "{\"version\":1}");
  ::chmod(tmp_.Path("limits.json").c_str(), 0444);
  JobWatch watch(
      options, &gpus_, [&](const std::string& l) { lines_.push_back(l); },
      [&](uint32_t pid) {
        killed_.push_back(pid);
        return true;
      });
  // Within the quota and its tolerance: nothing, however long. (Whether a
  // lone tenant inside libvgpu may use idle time is host/compute_check's
  // rule, tested there; this job has no region, so libvgpu knows none of
  // its processes.)
  sample.processes = {{me, 100 * kMiB, 38}, {1, 100 * kMiB, 60}};
  gpus_.SetSamples({sample});
  for (int i = 0; i < 5; ++i) watch.PassOnce();
  EXPECT_TRUE(killed_.empty());
  // Over, beside a busy tenant (pid 1 is not the job's): two passes are
  // noise, the third is a violation. A pass within the quota starts the
  // count again.
  sample.processes = {{me, 100 * kMiB, 70}, {1, 100 * kMiB, 30}};
  gpus_.SetSamples({sample});
  watch.PassOnce();
  watch.PassOnce();
  EXPECT_TRUE(killed_.empty());
  sample.processes = {{me, 100 * kMiB, 30}, {1, 100 * kMiB, 70}};
  gpus_.SetSamples({sample});
  watch.PassOnce();
  sample.processes = {{me, 100 * kMiB, 70}, {1, 100 * kMiB, 30}};
  gpus_.SetSamples({sample});
  watch.PassOnce();
  watch.PassOnce();
  EXPECT_TRUE(killed_.empty());
  watch.PassOnce();
  EXPECT_EQ(killed_, std::vector<uint32_t>{me});
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_NE(lines_[0].find("the job uses 70 % of GPU " + std::string(kGpu) +
                           "'s SMs (others 30 %), over its 30 % for 3 passes: killed process " +
                           std::to_string(me) + " using 70 %, which libvgpu does not know"),
            std::string::npos)
      << lines_[0];
  // Without a quota (0 or 100): never.
  options.core_quotas[kGpu] = 100;
  JobWatch unlimited(
      options, &gpus_, [](const std::string&) {},
      [&](uint32_t pid) {
        killed_.push_back(pid);
        return true;
      });
  for (int i = 0; i < 5; ++i) unlimited.PassOnce();
  EXPECT_EQ(killed_.size(), 1u);
}

}  // namespace
}  // namespace tessera::runner
