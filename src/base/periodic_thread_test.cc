#include "base/periodic_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "base/testing.h"

namespace tessera {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using testing::ReturnsOrAbort;

// Counts runs; lets a test wait for the n-th.
class Runs {
 public:
  void Add() {
    std::lock_guard lock(mu_);
    ++count_;
    cv_.notify_all();
  }
  // Waits (with a generous bound that only catches a hang) for `n` runs.
  bool WaitFor(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return count_ >= n; });
  }
  int count() const { return count_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> count_{0};  // written under mu_ (for WaitFor), read anywhere
};

TEST(PeriodicThreadTest, RunsAtOnceThenOnRunNowAndStopsWithoutWaitingForTheInterval) {
  Runs runs;
  PeriodicThread thread(hours(1), [&] { runs.Add(); });
  thread.Start();
  ASSERT_TRUE(runs.WaitFor(1));
  thread.RunNow();
  ASSERT_TRUE(runs.WaitFor(2));
  // An hour's wait ahead: Stop must end it.
  ReturnsOrAbort([&] { thread.Stop(); }, "PeriodicThread::Stop during a long wait");
  EXPECT_FALSE(thread.running());
  EXPECT_EQ(runs.count(), 2);
  thread.Stop();  // idempotent
}

TEST(PeriodicThreadTest, ABodyPacesItselfAndCanBeRestarted) {
  Runs runs;
  // Three quick runs, then an hour's pause.
  PeriodicThread thread([&] {
    runs.Add();
    return runs.count() < 3 ? milliseconds(0) : milliseconds(hours(1));
  });
  thread.Start();
  ASSERT_TRUE(runs.WaitFor(3));
  ReturnsOrAbort([&] { thread.Stop(); }, "PeriodicThread::Stop");
  EXPECT_EQ(runs.count(), 3);
  thread.Start();
  ASSERT_TRUE(runs.WaitFor(4));
  ReturnsOrAbort([&] { thread.Stop(); }, "PeriodicThread::Stop after a restart");
}

TEST(PeriodicThreadTest, StopWaitsForTheRunInProgressWhichSeesStopping) {
  std::atomic<bool> saw_stopping{false};
  Runs started;
  PeriodicThread* self = nullptr;
  PeriodicThread thread(hours(1), [&] {
    started.Add();
    while (!self->stopping()) std::this_thread::sleep_for(milliseconds(1));
    saw_stopping = true;
  });
  self = &thread;
  thread.Start();
  ASSERT_TRUE(started.WaitFor(1));
  ReturnsOrAbort([&] { thread.Stop(); }, "PeriodicThread::Stop during a run");
  EXPECT_TRUE(saw_stopping);
}

TEST(PeriodicThreadTest, StopWithoutStartIsHarmless) {
  PeriodicThread thread(milliseconds(10), [] {});
  thread.Stop();
  EXPECT_FALSE(thread.running());
}

}  // namespace
}  // namespace tessera
