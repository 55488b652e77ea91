// Clock: the seam through which src/kube reads time and waits, so rate limiting
// and leader election can be tested on a fake clock without sleeping.
//
// Two time lines: a monotonic one for intervals (rate limiter, renew deadline)
// and a wall one for timestamps written to the API server (Lease renewTime).
//
// Thread-safety: implementations must be safe to call from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace tessera::kube {

class Clock {
 public:
  using Monotonic = std::chrono::steady_clock::time_point;
  using Wall = std::chrono::system_clock::time_point;

  virtual ~Clock() = default;
  virtual Monotonic Now() const = 0;
  virtual Wall WallNow() const = 0;
  virtual void SleepFor(std::chrono::nanoseconds d) = 0;
};

// The real clocks; a process-wide instance is returned by RealClock::Get().
class RealClock : public Clock {
 public:
  static RealClock* Get();
  Monotonic Now() const override { return std::chrono::steady_clock::now(); }
  Wall WallNow() const override { return std::chrono::system_clock::now(); }
  void SleepFor(std::chrono::nanoseconds d) override;
};

// A clock that only moves when told. SleepFor(d) blocks until another thread has
// advanced the clock by d (or immediately advances it itself when auto-advance
// is on, which suits single-threaded tests).
class FakeClock : public Clock {
 public:
  explicit FakeClock(bool auto_advance_on_sleep = true);
  Monotonic Now() const override;
  Wall WallNow() const override;
  void SleepFor(std::chrono::nanoseconds d) override;
  void Advance(std::chrono::nanoseconds d);
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

}  // namespace tessera::kube
