#include "base/clock.h"

#include <gtest/gtest.h>

#include <thread>

namespace tessera {
namespace {

using std::chrono::seconds;

TEST(FakeClockTest, BothTimeLinesMoveTogetherOnlyWhenTold) {
  FakeClock clock;
  const auto mono = clock.Now();
  const auto wall = clock.WallNow();
  EXPECT_EQ(clock.WallUnixSeconds(), 1893456000);  // 2030-01-01T00:00:00Z
  EXPECT_EQ(clock.WallUnixMillis(), 1893456000000);
  clock.Advance(seconds(5));
  EXPECT_EQ(clock.Now() - mono, seconds(5));
  EXPECT_EQ(clock.WallNow() - wall, seconds(5));
  clock.Advance(std::chrono::milliseconds(250));
  EXPECT_EQ(clock.WallUnixMillis(), 1893456005250);
}

TEST(FakeClockTest, StartsWhereToldAndAdvancesToAWallTime) {
  const Clock::Wall start = Clock::Wall{} + seconds(1700000000);
  FakeClock clock(start);
  EXPECT_EQ(clock.WallNow(), start);
  const auto mono = clock.Now();
  clock.AdvanceTo(start + seconds(121));
  EXPECT_EQ(clock.WallNow(), start + seconds(121));
  EXPECT_EQ(clock.Now() - mono, seconds(121));
}

TEST(FakeClockTest, SleepAdvancesItselfOrWaitsForAnotherThread) {
  FakeClock automatic;
  automatic.SleepFor(seconds(3));
  EXPECT_EQ(automatic.TotalSlept(), seconds(3));

  FakeClock manual(/*auto_advance_on_sleep=*/false);
  const auto before = manual.Now();
  std::thread sleeper([&] { manual.SleepFor(seconds(10)); });
  // The sleeper returns only once the clock has moved 10 s.
  while (manual.TotalSlept() == seconds(0)) std::this_thread::yield();
  manual.Advance(seconds(4));
  manual.Advance(seconds(6));
  sleeper.join();
  EXPECT_EQ(manual.Now() - before, seconds(10));
}

TEST(ClockTest, OrRealClockFillsInTheRealOne) {
  FakeClock fake;
  EXPECT_EQ(OrRealClock(&fake), &fake);
  EXPECT_EQ(OrRealClock(nullptr), RealClock::Get());
}

}  // namespace
}  // namespace tessera
