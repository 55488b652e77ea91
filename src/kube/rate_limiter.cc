#include "kube/rate_limiter.h"

#include <algorithm>
#include <cmath>

namespace tessera::kube {

RateLimiter::RateLimiter(double qps, int burst, Clock* clock)
    : qps_(qps),
      burst_(std::max(1, burst)),
      clock_(clock),
      tokens_(std::max(1, burst)),
      last_(clock->Now()) {}

void RateLimiter::RefillLocked(Clock::Monotonic now) {
  if (now <= last_) return;
  const double seconds = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min<double>(burst_, tokens_ + seconds * qps_);
  last_ = now;
}

bool RateLimiter::TryAccept() {
  if (qps_ <= 0) return true;
  std::lock_guard<std::mutex> lock(mu_);
  RefillLocked(clock_->Now());
  if (tokens_ >= 1.0) {
    tokens_ -= 1.0;
    return true;
  }
  return false;
}

std::chrono::nanoseconds RateLimiter::Reserve() {
  if (qps_ <= 0) return std::chrono::nanoseconds(0);
  std::lock_guard<std::mutex> lock(mu_);
  RefillLocked(clock_->Now());
  tokens_ -= 1.0;
  if (tokens_ >= 0) return std::chrono::nanoseconds(0);
  // The deficit is paid back at qps tokens per second.
  const double wait_s = -tokens_ / qps_;
  return std::chrono::nanoseconds(static_cast<int64_t>(std::ceil(wait_s * 1e9)));
}

void RateLimiter::Wait() {
  const auto d = Reserve();
  if (d.count() > 0) clock_->SleepFor(d);
}

}  // namespace tessera::kube
