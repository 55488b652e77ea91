#include "vgpu/region.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/testing.h"
#include "vgpu/host_pid.h"

namespace tessera::vgpu {
namespace {

constexpr const char* kUuid = "GPU-11111111-2222-3333-4444-555555555555";
constexpr uint64_t kMiB = 1ull << 20;

class RegionTest : public ::testing::Test {
 protected:
  void open(SharedRegion& r) {
    char err[256] = {};
    ASSERT_TRUE(r.open_file(path_.c_str(), err, sizeof(err))) << err;
  }
  // Opens the region from a forked child, as another process of the container.
  bool open_in_child(SharedRegion& c) {
    char err[256];
    return c.open_file(path_.c_str(), err, sizeof(err));
  }
  // A child process that reserves `bytes` on device 0, then writes one byte
  // to `ready_fd` and waits to be killed.
  pid_t spawn_holder(uint64_t bytes, int ready_fd) {
    pid_t pid = fork();
    if (pid == 0) {
      SharedRegion c;
      if (!open_in_child(c) || !c.reserve(0, bytes).ok) _exit(2);
      char b = 1;
      if (write(ready_fd, &b, 1) != 1) _exit(3);
      pause();
      _exit(0);
    }
    return pid;
  }
  std::string open_error() {
    SharedRegion r;
    char err[256] = {};
    EXPECT_FALSE(r.open_file(path_.c_str(), err, sizeof(err)));
    return err;
  }
  void write_file(const void* data, size_t n) {
    std::string mk = "mkdir -p '" + dir_ + "/sub/dir'";
    ASSERT_EQ(system(mk.c_str()), 0);
    int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, data, n), static_cast<ssize_t>(n));
    close(fd);
  }

  ::tessera::testing::TempDir tmp_{"tessera-region-test"};
  const std::string dir_ = tmp_.path();
  const std::string path_ = dir_ + "/sub/dir/vgpu.region";  // parent directories are created
};

TEST_F(RegionTest, CreatesValidRegionAndReopensIt) {
  {
    SharedRegion r;
    open(r);
    EXPECT_EQ(validate_region_header(r.raw()->header, sizeof(Region)), nullptr);
    EXPECT_EQ(r.find_or_add_device(kUuid, 100 * kMiB), 0);
  }
  SharedRegion again;
  open(again);
  uint64_t limit = 0;
  EXPECT_EQ(again.find_or_add_device(kUuid, 999, &limit), 0);
  EXPECT_EQ(limit, 100 * kMiB);  // the first process's limit stands
}

TEST_F(RegionTest, ReserveRespectsLimitAndReleaseReturns) {
  SharedRegion r;
  open(r);
  int d = r.find_or_add_device(kUuid, 100 * kMiB);
  ASSERT_TRUE(r.reserve(d, 60 * kMiB).ok);
  ReserveOutcome refused = r.reserve(d, 41 * kMiB);
  EXPECT_FALSE(refused.ok);
  EXPECT_EQ(refused.used, 60 * kMiB);
  EXPECT_EQ(refused.limit, 100 * kMiB);
  EXPECT_EQ(r.memory_used(d), 60 * kMiB);
  ASSERT_TRUE(r.reserve(d, 40 * kMiB).ok);
  EXPECT_EQ(r.memory_used(d), 100 * kMiB);
  EXPECT_FALSE(r.reserve(d, 1).ok);
  r.release(d, 100 * kMiB);
  EXPECT_EQ(r.memory_used(d), 0u);
  r.release(d, 5);  // more than held: never underflows
  EXPECT_EQ(r.memory_used(d), 0u);
  EXPECT_EQ(r.raw()->devices[d].memory_peak.load(), 100 * kMiB);
  EXPECT_EQ(r.raw()->devices[d].oom_refusals.load(), 2u);
}

// A process of the container writing the file directly (docs/security.md):
// each change is found before the next decision, put right and reported.
TEST_F(RegionTest, ChangesFromOutsideAreRepairedBeforeTheNextReservation) {
  SharedRegion r;
  open(r);
  int d = r.find_or_add_device(kUuid, 100 * kMiB);
  r.set_authoritative_limit(d, 100 * kMiB);
  ASSERT_TRUE(r.reserve(d, 90 * kMiB).ok);
  DeviceEntry& e = r.raw()->devices[d];
  ProcessSlot& mine = r.raw()->processes[r.slot_index()];

  e.memory_limit.store(80ull << 30);
  e.memory_used.store(0);
  ReserveOutcome out = r.reserve(d, 20 * kMiB);
  EXPECT_FALSE(out.ok);
  EXPECT_EQ(out.repaired, kRepairedLimit | kRepairedSum);
  EXPECT_EQ(out.limit, 100 * kMiB);
  EXPECT_EQ(out.used, 90 * kMiB);
  EXPECT_EQ(e.memory_limit.load(), 100 * kMiB);
  EXPECT_EQ(r.memory_limit(d), 100 * kMiB);

  mine.memory_used[d].store(0);
  e.memory_used.store(0);
  EXPECT_EQ(r.verify(d), kRepairedOwnSlot | kRepairedSum);
  EXPECT_EQ(mine.memory_used[d].load(), 90 * kMiB);
  EXPECT_EQ(e.memory_used.load(), 90 * kMiB);
  EXPECT_EQ(r.verify(d), 0u);  // nothing left to repair

  // The process's own record also decides what a release gives back.
  mine.memory_used[d].store(0);
  r.release(d, 50 * kMiB);
  EXPECT_EQ(r.process_memory_used(d), 40 * kMiB);
  EXPECT_EQ(mine.memory_used[d].load(), 40 * kMiB);
  EXPECT_EQ(r.verify(d), 0u);
  EXPECT_EQ(e.memory_used.load(), 40 * kMiB);
}

// A slot freed from outside (state cleared, usage zeroed): its owner takes it
// back with its records at its next check.
TEST_F(RegionTest, AnOwnSlotFreedFromOutsideIsTakenBack) {
  SharedRegion r;
  open(r);
  int d = r.find_or_add_device(kUuid, 100 * kMiB);
  ASSERT_TRUE(r.reserve(d, 70 * kMiB).ok);
  ProcessSlot& mine = r.raw()->processes[r.slot_index()];
  mine.state.store(kSlotFree);
  mine.memory_used[d].store(0);
  r.raw()->devices[d].memory_used.store(0);
  EXPECT_EQ(r.verify(d), kRepairedOwnSlot | kRepairedSum);
  EXPECT_EQ(mine.state.load(), kSlotActive);
  EXPECT_EQ(mine.pid, static_cast<uint32_t>(getpid()));
  EXPECT_EQ(r.memory_used(d), 70 * kMiB);
  EXPECT_FALSE(r.reserve(d, 31 * kMiB).ok);
}

// Another process's record lowered from outside: the sum, the larger figure,
// stands, and the doubt is reported.
TEST_F(RegionTest, LoweredRecordsOfOtherProcessesLeaveTheSumStanding) {
  SharedRegion r;
  open(r);
  int d = r.find_or_add_device(kUuid, 200 * kMiB);
  ASSERT_TRUE(r.reserve(d, 90 * kMiB).ok);
  Region* raw = r.raw();
  ProcessSlot& other = raw->processes[r.slot_index() + 1];  // as another live process would hold it
  other.state.store(kSlotActive);
  other.memory_used[d].store(30 * kMiB);
  raw->devices[d].memory_used.fetch_add(30 * kMiB);
  raw->header.change_seq.fetch_add(1);
  EXPECT_EQ(r.verify(d), 0u);

  other.memory_used[d].store(0);
  raw->header.change_seq.fetch_add(1);
  EXPECT_EQ(r.verify(d), kRepairedSum);
  EXPECT_EQ(r.memory_used(d), 120 * kMiB);
  EXPECT_FALSE(r.reserve(d, 81 * kMiB).ok);
  other.state.store(kSlotFree);
}

// Without an authoritative limit the region's limit is what holds (a reader
// such as the node agent, or the first process of a container).
TEST_F(RegionTest, WithoutAnAuthoritativeLimitTheRegionsLimitHolds) {
  SharedRegion r;
  open(r);
  int d = r.find_or_add_device(kUuid, 100 * kMiB);
  r.raw()->devices[d].memory_limit.store(200 * kMiB);
  EXPECT_EQ(r.verify(d), 0u);
  EXPECT_EQ(r.memory_limit(d), 200 * kMiB);
  r.set_authoritative_limit(d, 50 * kMiB, /*apply=*/true);
  EXPECT_EQ(r.raw()->devices[d].memory_limit.load(), 50 * kMiB);
  EXPECT_EQ(r.verify(d), 0u);  // applied, not a repair
}

TEST_F(RegionTest, HugeRequestDoesNotOverflow) {
  SharedRegion r;
  open(r);
  int d = r.find_or_add_device(kUuid, 100 * kMiB);
  ASSERT_TRUE(r.reserve(d, 10).ok);
  EXPECT_FALSE(r.reserve(d, ~0ull - 5).ok);
  EXPECT_EQ(r.memory_used(d), 10u);
}

TEST_F(RegionTest, UnlimitedDeviceAcceptsAnything) {
  SharedRegion r;
  open(r);
  int d = r.find_or_add_device(kUuid, 0);
  EXPECT_TRUE(r.reserve(d, 1ull << 50).ok);
  EXPECT_EQ(r.memory_used(d), 1ull << 50);
}

TEST_F(RegionTest, ThreadsRacingNeverPassTheLimit) {
  SharedRegion r;
  open(r);
  int d = r.find_or_add_device(kUuid, 1000 * kMiB);
  std::atomic<uint64_t> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        if (r.reserve(d, 7 * kMiB).ok) granted += 7 * kMiB;
        EXPECT_LE(r.memory_used(d), 1000 * kMiB);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(granted.load(), r.memory_used(d));
  EXPECT_EQ(granted.load(), 1000 * kMiB / (7 * kMiB) * 7 * kMiB);  // filled up to the last whole request
}

TEST_F(RegionTest, ProcessesRacingEndExactlyAtTheLimit) {
  {
    SharedRegion r;
    open(r);
    ASSERT_EQ(r.find_or_add_device(kUuid, 640 * kMiB), 0);
  }
  std::vector<pid_t> kids;
  for (int p = 0; p < 8; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      SharedRegion r;
      if (!open_in_child(r)) _exit(2);
      int granted = 0;
      for (int i = 0; i < 100; ++i) granted += r.reserve(0, kMiB).ok ? 1 : 0;
      // Keep the reservation: exit code reports how many MiB we hold.
      pause();
      _exit(granted);
    }
    kids.push_back(pid);
  }
  SharedRegion r;
  open(r);
  // Wait until all children are done reserving (each holds what it got).
  for (int spins = 0; spins < 2000; ++spins) {
    uint64_t held = 0;
    for (uint32_t i = 0; i < kRegionMaxProcesses; ++i) held += r.raw()->processes[i].memory_used[0].load();
    if (held == 640 * kMiB) break;
    usleep(5000);
  }
  EXPECT_EQ(r.memory_used(0), 640 * kMiB);
  // Kill -9 them all: a live process then gets everything back.
  for (pid_t pid : kids) kill(pid, SIGKILL);
  for (pid_t pid : kids) waitpid(pid, nullptr, 0);
  EXPECT_TRUE(r.reserve(0, 640 * kMiB).ok);
  EXPECT_EQ(r.memory_used(0), 640 * kMiB);
}

TEST_F(RegionTest, KilledProcessIsReclaimedButLiveOneIsNot) {
  SharedRegion r;
  open(r);
  int d = r.find_or_add_device(kUuid, 100 * kMiB);
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t live = spawn_holder(30 * kMiB, pipefd[1]);
  pid_t doomed = spawn_holder(50 * kMiB, pipefd[1]);
  char b;
  ASSERT_EQ(read(pipefd[0], &b, 1), 1);
  ASSERT_EQ(read(pipefd[0], &b, 1), 1);
  EXPECT_EQ(r.memory_used(d), 80 * kMiB);
  EXPECT_EQ(r.reclaim_dead(), 0);  // both alive
  kill(doomed, SIGKILL);
  waitpid(doomed, nullptr, 0);
  EXPECT_EQ(r.reclaim_dead(), 1);
  EXPECT_EQ(r.memory_used(d), 30 * kMiB);
  EXPECT_TRUE(r.reserve(d, 70 * kMiB).ok);
  EXPECT_FALSE(r.reserve(d, 1).ok);
  kill(live, SIGKILL);
  waitpid(live, nullptr, 0);
  close(pipefd[0]);
  close(pipefd[1]);
}

TEST_F(RegionTest, HostPidIsSetInTheHostNamespaceWrittenByTheAgentOtherwiseAndClearedOnReclaim) {
  SharedRegion r;
  open(r);
  ASSERT_TRUE(r.claim_slot());
  const ProcessSlot& mine = r.raw()->processes[r.slot_index()];
  // The tests run in the initial pid namespace or in a container: libvgpu
  // knows its host pid only in the former.
  uint32_t expected = in_initial_pid_namespace() ? static_cast<uint32_t>(getpid()) : 0u;
  EXPECT_EQ(mine.host_pid.load(), expected);
  EXPECT_EQ(r.own_driver_pid(), static_cast<uint32_t>(getpid()));  // known or not: getpid() either way here
  EXPECT_EQ(r.slot_for_driver_pid(static_cast<uint32_t>(getpid())), r.slot_index());

  // Another process of the container, whose host pid the node agent writes.
  int ready[2], go[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(go), 0);
  pid_t child = fork();
  if (child == 0) {
    SharedRegion c;
    char b = 1;
    if (!open_in_child(c) || !c.claim_slot()) _exit(2);
    ProcessSlot& s = c.raw()->processes[c.slot_index()];
    s.host_pid.store(0);  // as in a container, whatever this test's namespace
    if (write(ready[1], &b, 1) != 1) _exit(3);
    if (read(go[0], &b, 1) != 1) _exit(4);
    // The agent's value is what the process itself now reports to NVML matching.
    _exit(c.own_driver_pid() == 777777u ? 0 : 5);
  }
  char b;
  ASSERT_EQ(read(ready[0], &b, 1), 1);
  int slot = -1;
  for (uint32_t i = 0; i < kRegionMaxProcesses; ++i)
    if (r.raw()->processes[i].state.load() == kSlotActive &&
        r.raw()->processes[i].pid == static_cast<uint32_t>(child))
      slot = static_cast<int>(i);
  ASSERT_GE(slot, 0);
  ProcessSlot& theirs = r.raw()->processes[slot];
  EXPECT_EQ(r.slot_driver_pid(static_cast<uint32_t>(slot)),
            static_cast<uint32_t>(child));  // fallback: its pid
  // The node agent's write: compare-exchange from 0 at the generation it resolved.
  uint64_t generation = theirs.generation;
  uint64_t zero = 0;
  ASSERT_TRUE(theirs.host_pid.compare_exchange_strong(zero, 777777));
  ASSERT_EQ(theirs.generation, generation);
  EXPECT_EQ(r.slot_driver_pid(static_cast<uint32_t>(slot)), 777777u);
  EXPECT_EQ(r.slot_for_driver_pid(777777), slot);
  EXPECT_EQ(r.slot_for_driver_pid(static_cast<uint32_t>(child)),
            -1);  // no longer matched by its container pid
  ASSERT_EQ(write(go[1], &b, 1), 1);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(r.reclaim_dead(), 1);
  EXPECT_EQ(theirs.host_pid.load(), 0u);  // a freed slot forgets it
  EXPECT_EQ(r.slot_for_driver_pid(777777), -1);
  for (int fd : {ready[0], ready[1], go[0], go[1]}) close(fd);
}

TEST_F(RegionTest, ManyDeadProcessesAreAllReclaimedAtOnce) {
  {
    SharedRegion r;
    open(r);
    ASSERT_EQ(r.find_or_add_device(kUuid, 0), 0);
  }
  constexpr int kDead = 100;  // more than one reclaim batch
  for (int p = 0; p < kDead; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      SharedRegion c;
      _exit(open_in_child(c) && c.reserve(0, kMiB).ok ? 0 : 2);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  SharedRegion r;
  open(r);
  EXPECT_EQ(r.memory_used(0), kDead * kMiB);
  EXPECT_EQ(r.reclaim_dead(), kDead);
  EXPECT_EQ(r.memory_used(0), 0u);
}

TEST_F(RegionTest, LockHolderDyingLeavesRecoverableLockAndCorrectSums) {
  SharedRegion r;
  open(r);
  int d = r.find_or_add_device(kUuid, 100 * kMiB);
  ASSERT_TRUE(r.reserve(d, 10 * kMiB).ok);
  pid_t pid = fork();
  if (pid == 0) {
    SharedRegion c;
    if (!open_in_child(c) || !c.reserve(0, 20 * kMiB).ok) _exit(2);
    // Die inside the critical section after a half-done update.
    pthread_mutex_lock(reinterpret_cast<pthread_mutex_t*>(c.raw()->header.lock));
    c.raw()->devices[0].memory_used.store(12345);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // The next locker repairs the sum from the slots (the dead child's 20 MiB are
  // still in its slot until reclaimed), then reclaim returns them.
  EXPECT_TRUE(r.reserve(d, 1 * kMiB).ok);
  EXPECT_EQ(r.memory_used(d), 31 * kMiB);
  EXPECT_EQ(r.reclaim_dead(), 1);
  EXPECT_EQ(r.memory_used(d), 11 * kMiB);
}

TEST_F(RegionTest, ForkedChildGetsItsOwnSlot) {
  SharedRegion r;
  open(r);
  int d = r.find_or_add_device(kUuid, 100 * kMiB);
  ASSERT_TRUE(r.reserve(d, 40 * kMiB).ok);
  int parent_slot = r.slot_index();
  pid_t pid = fork();
  if (pid == 0) {
    r.after_fork_child();
    if (!r.reserve(d, 10 * kMiB).ok) _exit(2);
    if (r.slot_index() == parent_slot) _exit(3);
    if (r.process_memory_used(d) != 10 * kMiB) _exit(4);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The child is gone; the parent's own slot (still locked by us) must survive.
  EXPECT_EQ(r.reclaim_dead(), 1);
  EXPECT_EQ(r.memory_used(d), 40 * kMiB);
  EXPECT_EQ(r.process_memory_used(d), 40 * kMiB);
}

TEST_F(RegionTest, ReaderDoesNotCreate) {
  SharedRegion reader;
  char err[256] = {};
  EXPECT_FALSE(reader.open_file(path_.c_str(), err, sizeof(err), /*create=*/false));
  EXPECT_NE(std::string(err).find("cannot open"), std::string::npos) << err;
  EXPECT_NE(access((dir_ + "/sub").c_str(), F_OK), 0);  // not even the directory
  write_file("", 0);
  EXPECT_FALSE(reader.open_file(path_.c_str(), err, sizeof(err), false));
  EXPECT_NE(std::string(err).find("not initialised"), std::string::npos) << err;
  {
    SharedRegion writer;
    open(writer);
    ASSERT_TRUE(writer.reserve(writer.find_or_add_device(kUuid, 0), 5).ok);
  }
  ASSERT_TRUE(reader.open_file(path_.c_str(), err, sizeof(err), false)) << err;
  EXPECT_EQ(reader.raw()->devices[0].memory_used.load(), 5u);
}

TEST_F(RegionTest, ForeignFileIsRefused) {
  std::string junk(sizeof(Region), 'x');
  write_file(junk.data(), junk.size());
  std::string err = open_error();
  EXPECT_NE(err.find("bad magic"), std::string::npos) << err;
}

TEST_F(RegionTest, WrongSizeIsRefused) {
  write_file("hello", 5);
  std::string err = open_error();
  EXPECT_NE(err.find("size"), std::string::npos) << err;
}

TEST_F(RegionTest, OtherVersionIsRefused) {
  {
    SharedRegion r;
    open(r);
    r.raw()->header.version = kRegionVersion + 1;
  }
  std::string err = open_error();
  EXPECT_NE(err.find("version"), std::string::npos) << err;
}

TEST_F(RegionTest, CorruptDeviceEntryIsRefused) {
  {
    SharedRegion r;
    open(r);
    memset(r.raw()->devices[3].uuid, 'A', kRegionUuidBytes);
  }
  std::string err = open_error();
  EXPECT_NE(err.find("corrupt"), std::string::npos) << err;
}

TEST_F(RegionTest, CreatorThatDiedBeforeFinishingIsRedone) {
  std::string zeros(sizeof(Region), '\0');
  write_file(zeros.data(), zeros.size());
  SharedRegion r;
  open(r);
  EXPECT_EQ(validate_region_header(r.raw()->header, sizeof(Region)), nullptr);
}

TEST(PrivateRegion, EnforcesLimitsWithoutAFile) {
  SharedRegion r;
  char err[256];
  ASSERT_TRUE(r.open_private(err, sizeof(err))) << err;
  EXPECT_TRUE(r.is_private());
  int d = r.find_or_add_device(kUuid, 10);
  EXPECT_TRUE(r.reserve(d, 10).ok);
  EXPECT_FALSE(r.reserve(d, 1).ok);
  EXPECT_EQ(r.reclaim_dead(), 0);
}

}  // namespace
}  // namespace tessera::vgpu
