#include "sim/state.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace tessera::sim {
namespace {

class SimStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera-simstate-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  std::string dir_;
};

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

}  // namespace
}  // namespace tessera::sim
