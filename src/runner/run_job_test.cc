#include "runner/run_job.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

namespace tessera::runner {
namespace {

namespace fs = std::filesystem;

std::vector<core::Gpu> TwoGpus() {
  std::vector<core::Gpu> gpus(2);
  for (int i = 0; i < 2; ++i) {
    gpus[i].uuid = "GPU-0000000" + std::to_string(i) + "-0000-0000-0000-000000000000";
    gpus[i].index = i;
    gpus[i].model = "NVIDIA A100-SXM4-80GB";
    gpus[i].memory_mib = 8000;
    gpus[i].slots = 10;
  }
  return gpus;
}

class RunJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera-runjob-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(RunJobTest, ReservesAndRecordsTheSlice) {
  SliceLedger ledger(dir_);
  SliceRequest req;
  req.memory_mib = 3000;
  req.cores = 30;
  auto r = ReserveSlice(ledger, TwoGpus(), req, {"./train"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->slice) << r->refusal;
  const auto& devices = r->slice->entry.slices.devices;
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].memory_mib, 3000);
  EXPECT_EQ(devices[0].cores, 30);
  EXPECT_EQ(r->slice->allocation.containers.at(0).container, "job");
  auto listed = ledger.List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].command, std::vector<std::string>{"./train"});
}

TEST_F(RunJobTest, BinpackFillsOneGpuBeforeTheOther) {
  SliceLedger ledger(dir_);
  SliceRequest req;
  req.memory_mib = 3000;
  auto a = ReserveSlice(ledger, TwoGpus(), req, {"a"});
  auto b = ReserveSlice(ledger, TwoGpus(), req, {"b"});
  ASSERT_TRUE(a.ok() && a->slice && b.ok() && b->slice);
  EXPECT_EQ(a->slice->entry.slices.devices[0].uuid, b->slice->entry.slices.devices[0].uuid);
  req.policy = "spread";
  auto c = ReserveSlice(ledger, TwoGpus(), req, {"c"});
  ASSERT_TRUE(c.ok() && c->slice);
  EXPECT_NE(c->slice->entry.slices.devices[0].uuid, a->slice->entry.slices.devices[0].uuid);
}

TEST_F(RunJobTest, RefusalSaysWhichGpuLacksWhatAndRecordsNothing) {
  SliceLedger ledger(dir_);
  SliceRequest big;
  big.memory_mib = 6000;
  ASSERT_TRUE(ReserveSlice(ledger, TwoGpus(), big, {"a"})->slice);
  ASSERT_TRUE(ReserveSlice(ledger, TwoGpus(), big, {"b"})->slice);
  auto r = ReserveSlice(ledger, TwoGpus(), big, {"c"});
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->slice);
  EXPECT_NE(r->refusal.find("does not fit"), std::string::npos) << r->refusal;
  EXPECT_NE(r->refusal.find("GPU-00000000"), std::string::npos) << r->refusal;
  EXPECT_NE(r->refusal.find("GPU-00000001"), std::string::npos) << r->refusal;
  EXPECT_NE(r->refusal.find("memory"), std::string::npos) << r->refusal;
  EXPECT_EQ(ledger.List()->size(), 2u);
}

TEST_F(RunJobTest, ExclusiveRequestNeedsAnIdleGpu) {
  SliceLedger ledger(dir_);
  SliceRequest small;
  small.memory_mib = 1000;
  SliceRequest spread = small;
  spread.policy = "spread";
  ASSERT_TRUE(ReserveSlice(ledger, TwoGpus(), small, {"a"})->slice);
  ASSERT_TRUE(ReserveSlice(ledger, TwoGpus(), spread, {"b"})->slice);  // now both GPUs are in use
  SliceRequest exclusive;
  exclusive.cores = 100;
  auto r = ReserveSlice(ledger, TwoGpus(), exclusive, {"c"});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->slice);
}

// Processes that hold their reservation (stay alive) racing for 2 x 8000 MiB
// in 2000 MiB slices: exactly 8 of 12 get one, and no GPU is overcommitted.
TEST_F(RunJobTest, ConcurrentReservationsNeverOvercommit) {
  constexpr int kProcs = 12;
  int release[2];
  ASSERT_EQ(pipe(release), 0);
  std::vector<pid_t> kids;
  std::vector<int> results;
  for (int i = 0; i < kProcs; ++i) {
    int res[2];
    ASSERT_EQ(pipe(res), 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(release[1]);
      close(res[0]);
      SliceLedger ledger(dir_);
      SliceRequest req;
      req.memory_mib = 2000;
      auto r = ReserveSlice(ledger, TwoGpus(), req, {"job"});
      char c = (r.ok() && r->slice) ? 'y' : 'n';
      (void)!write(res[1], &c, 1);
      char buf;
      (void)!read(release[0], &buf, 1);  // hold the slice until the parent has checked
      _exit(0);
    }
    close(res[1]);
    kids.push_back(pid);
    results.push_back(res[0]);
  }
  int winners = 0;
  for (int fd : results) {
    char c = 0;
    ASSERT_EQ(read(fd, &c, 1), 1);
    winners += c == 'y';
    close(fd);
  }
  EXPECT_EQ(winners, 8);
  SliceLedger ledger(dir_);
  auto entries = ledger.List();
  ASSERT_TRUE(entries.ok());
  std::map<std::string, int64_t> per_gpu;
  for (const auto& e : *entries) per_gpu[e.slices.devices[0].uuid] += e.slices.devices[0].memory_mib;
  for (const auto& [uuid, mib] : per_gpu) EXPECT_LE(mib, 8000) << uuid;
  close(release[1]);
  for (pid_t k : kids) waitpid(k, nullptr, 0);
  // Every holder is gone now: the whole capacity is free again.
  EXPECT_EQ(ledger.List()->size(), 0u);
}

}  // namespace
}  // namespace tessera::runner
