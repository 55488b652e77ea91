#include "base/clock.h"

#include <cassert>
#include <thread>

namespace tessera {

int64_t Clock::WallUnixSeconds() const {
  return std::chrono::duration_cast<std::chrono::seconds>(WallNow().time_since_epoch()).count();
}

int64_t Clock::WallUnixMillis() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(WallNow().time_since_epoch()).count();
}

RealClock* RealClock::Get() {
  static RealClock clock;
  return &clock;
}

void RealClock::SleepFor(std::chrono::nanoseconds d) {
  if (d.count() > 0) std::this_thread::sleep_for(d);
}

FakeClock::FakeClock(bool auto_advance_on_sleep)
    : FakeClock(Wall{} + std::chrono::seconds(1893456000), auto_advance_on_sleep) {}

FakeClock::FakeClock(Wall wall_start, bool auto_advance_on_sleep)
    : auto_advance_(auto_advance_on_sleep),
      mono_base_(std::chrono::steady_clock::time_point{} + std::chrono::hours(1000)),
      wall_base_(wall_start) {}

Clock::Monotonic FakeClock::Now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mono_base_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(elapsed_);
}

Clock::Wall FakeClock::WallNow() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wall_base_ + std::chrono::duration_cast<std::chrono::system_clock::duration>(elapsed_);
}

void FakeClock::SleepFor(std::chrono::nanoseconds d) {
  if (d.count() <= 0) return;
  std::unique_lock<std::mutex> lock(mu_);
  slept_ += d;
  if (auto_advance_) {
    elapsed_ += d;
    cv_.notify_all();
    return;
  }
  const auto until = elapsed_ + d;
  cv_.wait(lock, [&] { return elapsed_ >= until; });
}

void FakeClock::Advance(std::chrono::nanoseconds d) {
  std::lock_guard<std::mutex> lock(mu_);
  elapsed_ += d;
  cv_.notify_all();
}

void FakeClock::AdvanceTo(Wall t) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto target = std::chrono::duration_cast<std::chrono::nanoseconds>(t - wall_base_);
  assert(target >= elapsed_ && "FakeClock::AdvanceTo: the clock does not go back");
  if (target < elapsed_) return;
  elapsed_ = target;
  cv_.notify_all();
}

std::chrono::nanoseconds FakeClock::TotalSlept() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slept_;
}

}  // namespace tessera
