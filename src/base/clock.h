// Clock: the one seam through which tessera reads time and waits, so that
// rate limiting, leader election, reservation expiry, inventory heartbeats and
// region clean-up can be tested on a fake clock without sleeping.
//
// Two time lines: a monotonic one for intervals and deadlines (rate limiter,
// renew deadline, reservation expiry) and a wall one for timestamps that leave
// the process or are compared with ones that did (Lease renewTime, inventory
// heartbeats, region records).
//
// Thread-safety: implementations must be safe to call from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace tessera {

class Clock {
 public:
  using Monotonic = std::chrono::steady_clock::time_point;
  using Wall = std::chrono::system_clock::time_point;

  virtual ~Clock() = default;
  virtual Monotonic Now() const = 0;
  virtual Wall WallNow() const = 0;
  virtual void SleepFor(std::chrono::nanoseconds d) = 0;

  // Whole seconds / milliseconds since the Unix epoch on the wall time line.
  int64_t WallUnixSeconds() const;
  int64_t WallUnixMillis() const;
};

// The real clocks; a process-wide instance is returned by RealClock::Get().
class RealClock : public Clock {
 public:
  static RealClock* Get();
  Monotonic Now() const override { return std::chrono::steady_clock::now(); }
  Wall WallNow() const override { return std::chrono::system_clock::now(); }
  void SleepFor(std::chrono::nanoseconds d) override;
};

// `clock`, or the real clock when it is null: what a constructor taking an
// optional Clock* keeps.
inline Clock* OrRealClock(Clock* clock) {
  return clock != nullptr ? clock : RealClock::Get();
}

// A clock that only moves when told; both time lines move together.
// SleepFor(d) blocks until another thread has advanced the clock by d (or
// immediately advances it itself when auto-advance is on, which suits
// single-threaded tests).
class FakeClock : public Clock {
 public:
  // Starts at a fixed, recognisable wall time: 2030-01-01T00:00:00Z.
  explicit FakeClock(bool auto_advance_on_sleep = true);
  explicit FakeClock(Wall wall_start, bool auto_advance_on_sleep = true);

  Monotonic Now() const override;
  Wall WallNow() const override;
  void SleepFor(std::chrono::nanoseconds d) override;
  void Advance(std::chrono::nanoseconds d);
  // Advances until WallNow() == t; a `t` in the past is a test's mistake
  // (asserted) and leaves the clock where it is.
  void AdvanceTo(Wall t);
  // Total time slept through SleepFor (useful to assert a limiter waited).
  std::chrono::nanoseconds TotalSlept() const;

 private:
  const bool auto_advance_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::chrono::nanoseconds elapsed_{0};  // guarded by mu_
  std::chrono::nanoseconds slept_{0};    // guarded by mu_
  const Monotonic mono_base_;
  const Wall wall_base_;
};

}  // namespace tessera
