#include "node/regions_in_flight.h"

namespace tessera::node {

RegionsInFlight::RegionsInFlight(Clock* clock) : clock_(OrRealClock(clock)) {}

RegionsInFlight::Request::~Request() {
  if (registry_ != nullptr && !regions_.empty()) registry_->Ended(regions_);
}

void RegionsInFlight::Request::Add(const std::string& region) {
  if (registry_ == nullptr) return;
  registry_->Began(region);
  regions_.push_back(region);
}

void RegionsInFlight::Began(const std::string& region) {
  std::lock_guard<std::mutex> lock(mu_);
  regions_[region] = Clock::Monotonic{};
}

void RegionsInFlight::Ended(const std::vector<std::string>& regions) {
  const Clock::Monotonic now = clock_->Now();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& region : regions) regions_[region] = now;
}

bool RegionsInFlight::Protects(const std::string& region, int64_t grace_seconds) {
  const Clock::Monotonic now = clock_->Now();
  const auto grace = std::chrono::seconds(grace_seconds);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = regions_.begin(); it != regions_.end();) {
    const bool running = it->second == Clock::Monotonic{};
    if (!running && now - it->second >= grace) {
      it = regions_.erase(it);
    } else {
      ++it;
    }
  }
  return regions_.count(region) > 0;
}

}  // namespace tessera::node
