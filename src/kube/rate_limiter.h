// RateLimiter: client-side token bucket (QPS + burst), like client-go's default
// limiter, so a busy controller cannot flood the API server.
//
// The bucket starts full (`burst` tokens) and refills at `qps` tokens per second
// up to `burst`. Wait() blocks (on the injected Clock) until a token is free;
// TryAccept() never blocks. qps <= 0 disables limiting.
//
// Thread-safety: all methods may be called concurrently. Waiters reserve their
// token before sleeping, so concurrent callers are served in arrival order.
#pragma once

#include <chrono>
#include <mutex>

#include "base/clock.h"

namespace tessera::kube {

class RateLimiter {
 public:
  RateLimiter(double qps, int burst, Clock* clock);

  // Takes a token if one is available now.
  bool TryAccept();
  // Reserves a token and sleeps until it is due.
  void Wait();
  // Reserves a token and returns how long the caller must wait before using it
  // (zero when a token was available). Exposed for tests and callers with their
  // own waiting.
  std::chrono::nanoseconds Reserve();

  double qps() const { return qps_; }
  int burst() const { return burst_; }

 private:
  void RefillLocked(Clock::Monotonic now);

  const double qps_;
  const int burst_;
  Clock* const clock_;
  std::mutex mu_;
  double tokens_;          // guarded by mu_; may go negative (reserved by waiters)
  Clock::Monotonic last_;  // guarded by mu_
};

}  // namespace tessera::kube
