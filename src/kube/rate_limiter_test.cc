#include "kube/rate_limiter.h"

#include <gtest/gtest.h>

namespace tessera::kube {
namespace {

using std::chrono::milliseconds;

TEST(RateLimiterTest, BurstIsAvailableAtOnceThenRefillsAtQps) {
  FakeClock clock;
  RateLimiter limiter(/*qps=*/10, /*burst=*/3, &clock);
  EXPECT_TRUE(limiter.TryAccept());
  EXPECT_TRUE(limiter.TryAccept());
  EXPECT_TRUE(limiter.TryAccept());
  EXPECT_FALSE(limiter.TryAccept());
  clock.Advance(milliseconds(99));
  EXPECT_FALSE(limiter.TryAccept());
  clock.Advance(milliseconds(1));  // 100 ms at 10 QPS = one token
  EXPECT_TRUE(limiter.TryAccept());
  EXPECT_FALSE(limiter.TryAccept());
}

TEST(RateLimiterTest, RefillNeverExceedsBurst) {
  FakeClock clock;
  RateLimiter limiter(100, 2, &clock);
  clock.Advance(std::chrono::seconds(60));
  EXPECT_TRUE(limiter.TryAccept());
  EXPECT_TRUE(limiter.TryAccept());
  EXPECT_FALSE(limiter.TryAccept());
}

TEST(RateLimiterTest, WaitSleepsOnTheClockForTheDeficit) {
  FakeClock clock;  // auto-advances on sleep
  RateLimiter limiter(5, 1, &clock);
  limiter.Wait();  // the burst token: no sleep
  EXPECT_EQ(clock.TotalSlept().count(), 0);
  limiter.Wait();  // next token due in 200 ms
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(clock.TotalSlept()).count(), 200);
  limiter.Wait();
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(clock.TotalSlept()).count(), 400);
}

TEST(RateLimiterTest, ConcurrentReservationsQueueInOrder) {
  FakeClock clock;
  RateLimiter limiter(10, 1, &clock);
  EXPECT_EQ(limiter.Reserve().count(), 0);
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(limiter.Reserve()).count(), 100);
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(limiter.Reserve()).count(), 200);
  clock.Advance(milliseconds(200));
  // The two reservations were paid back; the bucket is empty, not full.
  EXPECT_FALSE(limiter.TryAccept());
  clock.Advance(milliseconds(100));
  EXPECT_TRUE(limiter.TryAccept());
}

TEST(RateLimiterTest, ZeroQpsDisablesLimiting) {
  FakeClock clock;
  RateLimiter limiter(0, 1, &clock);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(limiter.TryAccept());
}

}  // namespace
}  // namespace tessera::kube
