#include "kube/leader_election.h"

#include "base/log.h"

namespace tessera::kube {

tessera::Status ValidateLeaderElectionConfig(const LeaderElectionConfig& c) {
  if (c.lease_name.empty()) return tessera::Error{"leader election: lease name is empty"};
  if (c.lease_namespace.empty()) return tessera::Error{"leader election: lease namespace is empty"};
  if (c.identity.empty()) return tessera::Error{"leader election: identity is empty"};
  if (c.lease_duration < std::chrono::seconds(1)) {
    return tessera::Error{
        "leader election: lease duration must be at least 1s (the Lease stores whole seconds)"};
  }
  if (c.retry_period.count() <= 0) return tessera::Error{"leader election: retry period must be positive"};
  if (c.renew_deadline >= c.lease_duration) {
    return tessera::Error{"leader election: renew deadline must be shorter than the lease duration"};
  }
  if (c.retry_period >= c.renew_deadline) {
    return tessera::Error{"leader election: retry period must be shorter than the renew deadline"};
  }
  return tessera::Status::Ok();
}

LeaderElector::LeaderElector(LeaseStore* store, LeaderElectionConfig config, Clock* clock)
    : store_(store),
      config_(std::move(config)),
      clock_(OrRealClock(clock)),
      thread_([this] { return Tick(); }) {}

LeaderElector::~LeaderElector() {
  Stop();
}

void LeaderElector::Stop() {
  thread_.Stop();
  bool was_leading;
  {
    std::lock_guard<std::mutex> lock(mu_);
    was_leading = leading_;
  }
  if (was_leading) {
    if (config_.release_on_stop) Release();
    SetLeading(false);
  }
}

bool LeaderElector::IsLeader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leading_ && clock_->Now() - last_renew_ < config_.renew_deadline;
}

std::string LeaderElector::Holder() const {
  std::lock_guard<std::mutex> lock(mu_);
  return holder_;
}

std::optional<Clock::Monotonic> LeaderElector::TookOverAt() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!leading_) return std::nullopt;
  return took_over_at_;
}

void LeaderElector::SetLeading(bool leading) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (leading_ == leading) return;
    leading_ = leading;
    took_over_at_.reset();
    if (leading && !created_lease_) took_over_at_ = clock_->Now();
  }
  if (leading && config_.on_started_leading) config_.on_started_leading();
  if (!leading && config_.on_stopped_leading) config_.on_stopped_leading();
}

std::chrono::milliseconds LeaderElector::Tick() {
  // The renewal counts from before the request: a slow answer must not
  // stretch the leader's view of how long its lease is good for.
  const auto attempted = clock_->Now();
  lease_error_.clear();
  const bool ok = TryAcquireOrRenew();
  const auto now = clock_->Now();
  const std::string lease = config_.lease_namespace + "/" + config_.lease_name;
  if (!lease_error_.empty() && !lease_failing_) {
    log::Warn("cannot read or write the leader Lease; retrying", {{"lease", lease}, {"error", lease_error_}});
  } else if (lease_error_.empty() && lease_failing_) {
    log::Info("the leader Lease answers again", {{"lease", lease}});
  }
  lease_failing_ = !lease_error_.empty();
  bool leading;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ok) last_renew_ = attempted;
    leading = leading_;
  }
  if (ok) {
    SetLeading(true);
  } else if (leading) {
    std::chrono::nanoseconds since;
    {
      std::lock_guard<std::mutex> lock(mu_);
      since = now - last_renew_;
    }
    // Keep retrying until the deadline; after it, step down.
    if (since >= config_.renew_deadline) SetLeading(false);
  }
  return config_.retry_period;
}

bool LeaderElector::TryAcquireOrRenew() {
  const auto now = clock_->WallNow();
  LeaseRecord desired;
  desired.namespace_ = config_.lease_namespace;
  desired.name = config_.lease_name;
  desired.holder_identity = config_.identity;
  desired.lease_duration_seconds =
      static_cast<int>(std::chrono::duration_cast<std::chrono::seconds>(config_.lease_duration).count());
  desired.acquire_time = now;
  desired.renew_time = now;

  // A lost race (409) is the election working; anything else is an outage.
  auto failed = [this](const ApiError& e) {
    if (!e.IsConflict()) lease_error_ = e.message;
    return false;
  };
  auto current = store_->Get(config_.lease_namespace, config_.lease_name);
  if (!current.ok()) {
    if (!current.error().IsNotFound()) return failed(current.error());
    auto created = store_->Create(desired);
    if (!created.ok()) return failed(created.error());
    observed_ = *created;
    created_lease_ = true;
    std::lock_guard<std::mutex> lock(mu_);
    holder_ = config_.identity;
    return true;
  }
  const LeaseRecord& old = *current;
  if (old.holder_identity != holder_ && config_.on_new_leader) config_.on_new_leader(old.holder_identity);
  {
    std::lock_guard<std::mutex> lock(mu_);
    holder_ = old.holder_identity;
  }
  observed_ = old;
  const bool mine = old.holder_identity == config_.identity;
  if (!mine && !old.holder_identity.empty()) {
    const auto duration = std::chrono::seconds(old.lease_duration_seconds);
    const bool expired = !old.renew_time || *old.renew_time + duration <= now;
    if (!expired) return false;
  }
  desired.resource_version = old.resource_version;
  if (mine) {
    desired.acquire_time = old.acquire_time ? old.acquire_time : std::optional<Clock::Wall>(now);
    desired.lease_transitions = old.lease_transitions;
  } else {
    desired.lease_transitions = old.lease_transitions + 1;
  }
  auto updated = store_->Update(desired);
  if (!updated.ok()) return failed(updated.error());  // a conflict means someone else moved first
  observed_ = *updated;
  created_lease_ = false;
  std::lock_guard<std::mutex> lock(mu_);
  holder_ = config_.identity;
  return true;
}

void LeaderElector::Release() {
  if (!observed_ || observed_->holder_identity != config_.identity) return;
  LeaseRecord released = *observed_;
  released.holder_identity.clear();
  released.lease_duration_seconds = 1;
  released.renew_time = clock_->WallNow();
  auto r = store_->Update(released);
  if (r.ok()) {
    observed_ = *r;
    std::lock_guard<std::mutex> lock(mu_);
    holder_.clear();
  }
}

}  // namespace tessera::kube
