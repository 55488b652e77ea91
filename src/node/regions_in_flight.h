// RegionsInFlight: the region directories whose Allocate is still running or
// answered the kubelet only a moment ago, so that the monitor's clean-up
// (RegionCatalog::CleanUp) leaves them alone whatever their record's age.
//
// Why: a region's record is dated when Allocate starts, and the clean-up
// removes an unowned region once its record is older than the grace period.
// An Allocate slower than the grace (a loaded host, a short grace in tests)
// would have its region removed before the kubelet even has the answer that
// names it, and the container would start with a mount of nothing. With this
// registry the grace counts from the answer instead: a region is protected
// from the moment Allocate names it until `grace` after its request ended.
//
// In memory only: after a restart no Allocate of the old process is running,
// and the records' dates are what the clean-up goes by.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/clock.h"

namespace tessera::node {

class RegionsInFlight {
 public:
  explicit RegionsInFlight(Clock* clock = nullptr);

  // One kubelet Allocate request: Add each region as it is named (before its
  // record is written); all of them end when the request is destroyed,
  // answered or failed.
  class Request {
   public:
    explicit Request(RegionsInFlight* registry) : registry_(registry) {}
    ~Request();
    Request(const Request&) = delete;
    Request& operator=(const Request&) = delete;
    void Add(const std::string& region);

   private:
    RegionsInFlight* const registry_;  // may be null: nothing is tracked
    std::vector<std::string> regions_;
  };

  // True while `region`'s Allocate runs and for `grace_seconds` after it
  // ended. Forgets regions that ended longer ago than that.
  bool Protects(const std::string& region, int64_t grace_seconds);

 private:
  void Began(const std::string& region);
  void Ended(const std::vector<std::string>& regions);

  Clock* const clock_;
  std::mutex mu_;
  // Region -> when its request ended; Clock::Monotonic{} while it runs.
  std::map<std::string, Clock::Monotonic> regions_;  // guarded by mu_
};

}  // namespace tessera::node
