#include "sim/state.h"

#include "sim/test_support.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace tessera::sim {
namespace {

using SimStateTest = StateDirTest;

TEST_F(SimStateTest, CreatesAndReattachesWithTheSameDevices) {
  auto config = ParseGpuList("2xA100-40GB");
  ASSERT_TRUE(config.ok());
  auto a = SimState::Open(dir_, *config, true);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ((*a)->gpu_count(), 2);
  const std::string uuid = (*a)->file()->gpus[1].uuid;
  EXPECT_EQ(uuid.rfind("GPU-", 0), 0u);
  EXPECT_EQ(uuid.size(), 40u);
  auto b = SimState::Open(dir_, *ParseGpuList("1xT4"), false);  // not explicit: attach
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->gpu_count(), 2);
  EXPECT_EQ(std::string((*b)->file()->gpus[1].uuid), uuid);
}

TEST_F(SimStateTest, DifferentConfigIsRefusedWhileAProcessIsAttached) {
  auto a = SimState::Open(dir_, *ParseGpuList("2xA100-40GB"), true);
  ASSERT_TRUE(a.ok());
  {
    StateLock lock(**a);
    ASSERT_GE((*a)->ProcessSlotLocked(getpid(), true), 0);
  }
  auto b = SimState::Open(dir_, *ParseGpuList("1xT4"), true);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("different configuration"), std::string::npos);
}

TEST_F(SimStateTest, DeadProcessesAreReclaimed) {
  auto s = SimState::Open(dir_, *ParseGpuList("1xA30"), true);
  ASSERT_TRUE(s.ok());
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  {
    StateLock lock(**s);
    int slot = (*s)->ProcessSlotLocked(child, true);
    ASSERT_GE(slot, 0);
    (*s)->file()->processes[slot].used_bytes[0] = 1 << 30;
    EXPECT_EQ((*s)->UsedBytesLocked(0), 1u << 30);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  StateLock lock(**s);
  (*s)->ReclaimDeadLocked();
  EXPECT_EQ((*s)->UsedBytesLocked(0), 0u);
}

TEST_F(SimStateTest, LockHeldByADeadProcessIsRecovered) {
  auto s = SimState::Open(dir_, *ParseGpuList("1xA30"), true);
  ASSERT_TRUE(s.ok());
  pid_t child = fork();
  if (child == 0) {
    pthread_mutex_lock(&(*s)->file()->mutex);
    _exit(0);  // dies holding the lock
  }
  waitpid(child, nullptr, 0);
  StateLock lock(**s);  // does not hang
  SUCCEED();
}

TEST_F(SimStateTest, TimelineSerialisesKernelsAndAttributesBusyTime) {
  auto s = SimState::Open(dir_, *ParseGpuList("1xA30"), true);
  ASSERT_TRUE(s.ok());
  StateLock lock(**s);
  const int64_t now = MonotonicNs();
  auto [a0, a1] = (*s)->BookKernelLocked(0, 100, 0, 1000000);
  auto [b0, b1] = (*s)->BookKernelLocked(0, 200, 0, 1000000);
  auto [c0, c1] = (*s)->BookKernelLocked(0, 200, 0, 1000000);
  EXPECT_GE(a0, now);
  EXPECT_EQ(b0, a1);  // one kernel at a time
  EXPECT_EQ(c0, b1);
  auto busy = (*s)->BusyByProcessLocked(0, a0, c1);
  EXPECT_EQ(busy[100], 1000000);
  EXPECT_EQ(busy[200], 2000000);
}

// MPS clients run side by side, each on at most its share of the device, in
// the room the work booked before theirs leaves.
TEST_F(SimStateTest, SharedKernelsRunSideBySideWithinTheirShares) {
  auto s = SimState::Open(dir_, *ParseGpuList("1xA100-80GB"), true);
  ASSERT_TRUE(s.ok());
  StateLock lock(**s);
  const int64_t t = MonotonicNs() + 1000000000;  // a second ahead: "now" does not move the starts
  auto [a0, a1] = (*s)->BookSharedKernelLocked(0, 100, t, 3000000, 30);  // 3 ms of device at 30 %
  auto [b0, b1] = (*s)->BookSharedKernelLocked(0, 200, t, 7000000, 70);  // 7 ms at 70 %
  EXPECT_EQ(a0, t);
  EXPECT_EQ(b0, t);  // at the same time: together they use the whole device
  EXPECT_EQ(a1, t + 10000000);
  EXPECT_EQ(b1, t + 10000000);
  // A third client finds the device full and waits for room.
  auto [c0, c1] = (*s)->BookSharedKernelLocked(0, 300, t, 5000000, 50);
  EXPECT_EQ(c0, t + 10000000);
  EXPECT_EQ(c1, t + 20000000);
  // A client's kernels (its streams) share its share: the next one waits for
  // its first although half of the device is free.
  auto [d0, d1] = (*s)->BookSharedKernelLocked(0, 300, t + 10000000, 5000000, 50);
  EXPECT_EQ(d0, t + 20000000);
  EXPECT_EQ(d1, t + 30000000);
  auto busy = (*s)->BusyByProcessLocked(0, t, t + 10000000);
  EXPECT_EQ(busy[100], 3000000);
  EXPECT_EQ(busy[200], 7000000);
  EXPECT_EQ((*s)->BusyByProcessLocked(0, t + 10000000, t + 30000000)[300], 10000000);
  // Work booked without a share waits for all of it.
  auto [e0, e1] = (*s)->BookKernelLocked(0, 400, 0, 1000000);
  EXPECT_EQ(e0, t + 30000000);
  EXPECT_EQ(e1, t + 31000000);
}

TEST_F(SimStateTest, GpuResetAppliesThePendingMigModeUnlessTheGpuIsInUse) {
  auto s = SimState::Open(dir_, *ParseGpuList("2xA100-80GB"), true);
  ASSERT_TRUE(s.ok());
  StateLock lock(**s);
  GpuRecord& g = (*s)->file()->gpus[0];
  g.mig_mode_pending = 1;
  const int slot = (*s)->ProcessSlotLocked(getpid(), true);
  ASSERT_GE(slot, 0);
  (*s)->file()->processes[slot].contexts[0] = 1;
  (*s)->file()->processes[slot].contexts[1] = 1;
  const Status refused = (*s)->ResetGpuLocked(0, false, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find(std::to_string(getpid())), std::string::npos);
  EXPECT_EQ(g.mig_mode, 0u);
  std::string what;
  ASSERT_TRUE((*s)->ResetGpuLocked(0, true, &what).ok());
  EXPECT_EQ(g.mig_mode, 1u);
  EXPECT_NE(what.find("MIG mode now enabled"), std::string::npos);
  EXPECT_EQ((*s)->file()->processes[slot].contexts[0], 0u);  // forced: the GPU is taken from it
  EXPECT_EQ((*s)->file()->processes[slot].contexts[1], 1u);  // the other GPU is untouched
}

}  // namespace
}  // namespace tessera::sim
