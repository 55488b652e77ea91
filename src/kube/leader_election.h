// LeaderElector: one leader among candidates, coordinated through a
// coordination.k8s.io/v1 Lease (the same record client-go's LeaseLock writes,
// so tessera and kubectl agree on who leads).
//
// A candidate takes the lease when it is free (no holder) or expired (its
// renewTime + leaseDurationSeconds is in the past on the elector's Clock),
// bumping leaseTransitions when the holder changes. The leader renews every
// retry_period; if it has not renewed successfully for renew_deadline it
// steps down (on_stopped_leading) and becomes a candidate again, so a process
// that loses the lease stays ready to lead later. IsLeader() is false as soon
// as the renew deadline has passed, even while a renew request hangs.
//
// Safety margin: renew_deadline < lease_duration, so a leader stops acting
// before another candidate can consider the lease expired (given clocks that
// agree to within lease_duration - renew_deadline).
//
// Errors of the Lease API other than a lost race (409) are logged
// (base/log.h) once per outage, and the recovery too.
//
// Thread-safety: IsLeader()/Holder() from any thread; callbacks run on the
// elector's thread (or the caller of Tick()).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "base/clock.h"
#include "base/periodic_thread.h"
#include "kube/api_error.h"
#include "kube/typed_api.h"

namespace tessera::kube {

// The lease operations an elector needs; LeasesApi satisfies it through
// ApiLeaseStore, tests use an in-memory one.
class LeaseStore {
 public:
  virtual ~LeaseStore() = default;
  virtual ApiResult<LeaseRecord> Get(const std::string& ns, const std::string& name) = 0;
  virtual ApiResult<LeaseRecord> Create(const LeaseRecord& lease) = 0;
  virtual ApiResult<LeaseRecord> Update(const LeaseRecord& lease) = 0;
};

class ApiLeaseStore : public LeaseStore {
 public:
  // `timeout` bounds each request (use at most the renew deadline).
  ApiLeaseStore(Client* client, std::chrono::milliseconds timeout) : api_(client), timeout_(timeout) {}
  ApiResult<LeaseRecord> Get(const std::string& ns, const std::string& name) override {
    return api_.Get(ns, name, timeout_);
  }
  ApiResult<LeaseRecord> Create(const LeaseRecord& lease) override { return api_.Create(lease, timeout_); }
  ApiResult<LeaseRecord> Update(const LeaseRecord& lease) override { return api_.Update(lease, timeout_); }

 private:
  LeasesApi api_;
  std::chrono::milliseconds timeout_;
};

struct LeaderElectionConfig {
  std::string lease_namespace = "kube-system";
  std::string lease_name;
  std::string identity;  // unique per candidate, e.g. the pod name
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  // On Stop(), a leader clears holderIdentity so a successor need not wait.
  bool release_on_stop = true;
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;
  std::function<void(const std::string& identity)> on_new_leader;  // any change of observed holder
};

// Validates the durations (positive, renew_deadline < lease_duration,
// retry_period < renew_deadline, lease_duration >= 1 s) and names.
tessera::Status ValidateLeaderElectionConfig(const LeaderElectionConfig& config);

class LeaderElector {
 public:
  LeaderElector(LeaseStore* store, LeaderElectionConfig config, Clock* clock = nullptr);
  ~LeaderElector();  // stops
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  // Runs the election loop on a thread (waits in real time between steps).
  void Start() { thread_.Start(); }
  // Stops the loop; a leader steps down (callback) and, with release_on_stop,
  // releases the lease.
  void Stop();

  // One step of the state machine, without waiting; returns how long to wait
  // before the next step. Start() calls this in a loop; tests call it directly
  // on a FakeClock.
  std::chrono::milliseconds Tick();

  bool IsLeader() const;
  std::string Holder() const;  // last observed holder ("" when none/unknown)
  // While leading: when this leadership began, if it began by taking over a
  // Lease that already existed (another holder's, an expired or released one,
  // or one an earlier process with this identity held). nullopt when not
  // leading or when this process created the Lease. A caller that acts for
  // the leader uses it to wait out what a predecessor may still have in
  // flight (tessera-scheduler: Bindings sent before it lost the lease).
  std::optional<Clock::Monotonic> TookOverAt() const;
  const LeaderElectionConfig& config() const { return config_; }

 private:
  bool TryAcquireOrRenew();
  void SetLeading(bool leading);
  void Release();

  LeaseStore* const store_;
  const LeaderElectionConfig config_;
  Clock* const clock_;

  mutable std::mutex mu_;
  bool leading_ = false;                          // guarded by mu_
  Clock::Monotonic last_renew_{};                 // guarded by mu_
  std::string holder_;                            // guarded by mu_
  std::optional<Clock::Monotonic> took_over_at_;  // guarded by mu_
  bool created_lease_ = false;           // elector thread only: the last successful attempt created the Lease
  std::optional<LeaseRecord> observed_;  // elector thread only
  std::string lease_error_;              // elector thread only: the last attempt's API error ("" = none)
  bool lease_failing_ = false;           // elector thread only: an outage of the Lease API was logged
  PeriodicThread thread_;                // Tick, then its wait; last: stopped first
};

}  // namespace tessera::kube
