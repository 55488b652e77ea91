#include "runner/run_job.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "base/testing.h"

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

// The refusal speaks of the job, its slices and its flags: none of the
// Kubernetes wording (pods, containers, vGPUs) the core engine's own messages use.
void ExpectJobWording(const std::string& refusal) {
  for (const char* k8s : {"pod", "container", "vGPU"}) {
    EXPECT_EQ(refusal.find(k8s), std::string::npos) << "'" << k8s << "' in: " << refusal;
  }
}

class RunJobTest : public ::testing::Test {
 protected:
  // The refusal of `req` on TwoGpus(), checked to be one (no slice, nothing
  // recorded) and worded for a job, not a pod.
  static std::string Refusal(SliceLedger& ledger, const SliceRequest& req, const std::string& job) {
    auto r = ReserveSlice(ledger, TwoGpus(), req, {job});
    EXPECT_TRUE(r.ok()) << r.error().message;
    if (!r.ok()) return "";
    EXPECT_FALSE(r->slice) << "a slice was reserved";
    ExpectJobWording(r->refusal);
    return r->refusal;
  }

  ::tessera::testing::TempDir tmp_{"tessera-runjob-test"};
  const std::string dir_ = tmp_.path();
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
  const std::string refusal = Refusal(ledger, big, "c");
  EXPECT_NE(refusal.find("does not fit"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("GPU-00000000"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("GPU-00000001"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("(#1, NVIDIA A100-SXM4-80GB): not enough memory: 6000 MiB asked, 2000 MiB free"),
            std::string::npos)
      << refusal;
  EXPECT_EQ(ledger.List()->size(), 2u);
}

TEST_F(RunJobTest, RefusalNamesTheGpuTypeFlag) {
  SliceLedger ledger(dir_);
  SliceRequest req;
  req.gpu_types = {"H100", "L4"};
  EXPECT_EQ(Refusal(ledger, req, "a"),
            "the slice does not fit on this machine:\n"
            "  GPU-00000000-0000-0000-0000-000000000000 (#0, NVIDIA A100-SXM4-80GB): model does not match "
            "--gpu-type H100 or L4\n"
            "  GPU-00000001-0000-0000-0000-000000000000 (#1, NVIDIA A100-SXM4-80GB): model does not match "
            "--gpu-type H100 or L4");
}

TEST_F(RunJobTest, RefusalOfSeveralSlicesSaysHowManyGpusCanTakeOne) {
  SliceLedger ledger(dir_);
  SliceRequest three;
  three.gpus = 3;
  EXPECT_EQ(Refusal(ledger, three, "c"),
            "the job's 3 slices do not fit on this machine: they need 3 different GPUs, and it has 2");

  SliceRequest exclusive;
  exclusive.cores = 100;
  exclusive.memory_mib = 1000;
  ASSERT_TRUE(ReserveSlice(ledger, TwoGpus(), exclusive, {"a"})->slice);
  SliceRequest two;
  two.gpus = 2;
  two.memory_mib = 1000;
  two.cores = 30;
  EXPECT_EQ(Refusal(ledger, two, "b"),
            "the job's 2 slices do not fit on this machine: they need 2 different GPUs, and 1 of its 2 can "
            "take one:\n"
            "  GPU-00000000-0000-0000-0000-000000000000 (#0, NVIDIA A100-SXM4-80GB): held by another job "
            "alone (--gpucores 100)");

  SliceRequest alone;
  alone.cores = 100;
  alone.policy = "spread";
  ASSERT_TRUE(ReserveSlice(ledger, TwoGpus(), SliceRequest{}, {"d"})->slice);  // GPU 1 in use too
  const std::string busy = Refusal(ledger, alone, "e");
  EXPECT_NE(busy.find("(#1, NVIDIA A100-SXM4-80GB): in use by 1 other slice(s); --gpucores 100 needs "
                      "the GPU to itself"),
            std::string::npos)
      << busy;
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
  Refusal(ledger, exclusive, "c");
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
