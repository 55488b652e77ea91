#include "scheduler/workload_learner.h"

#include <algorithm>

namespace tessera::scheduler {

WorkloadLearner::WorkloadLearner() : WorkloadLearner(core::FragmentationPolicy::Options{}) {}

WorkloadLearner::WorkloadLearner(core::FragmentationPolicy::Options options, size_t max_remembered)
    : max_remembered_(std::max<size_t>(max_remembered, 1)),
      learning_(options),
      published_(std::make_shared<const core::FragmentationPolicy>(learning_)) {}

WorkloadLearner::Observation WorkloadLearner::ObserveLocked(std::string_view uid,
                                                            const core::PodRequest& pod) {
  Observation o;
  if (seen_.find(uid) != seen_.end()) return o;  // a retry, or filter then prioritize
  if (seen_.size() >= max_remembered_) {
    auto oldest = seen_order_.begin();
    seen_.erase(seen_.find(oldest->second));
    seen_order_.erase(oldest);
    ++evicted_;
  }
  const uint64_t order = next_seen_++;
  auto it = seen_.emplace(std::string(uid), order).first;
  seen_order_.emplace(order, std::string_view(it->first));
  const uint64_t before = learning_.epoch();
  learning_.Observe(pod);
  ++counted_;
  o.counted = 1;
  o.relearned = learning_.epoch() != before;
  return o;
}

void WorkloadLearner::PublishLocked() {
  // A copy of the whole policy (its counts come along; a few hundred shapes
  // at most), once per relearn.
  auto copy = std::make_shared<const core::FragmentationPolicy>(learning_);
  std::lock_guard lock(published_mu_);
  published_.swap(copy);
  // The previous policy is freed when its last request lets go of it (or
  // here, after the lock, when none holds it).
}

WorkloadLearner::Observation WorkloadLearner::Observe(std::string_view uid, const core::PodRequest& pod) {
  std::lock_guard lock(mu_);
  Observation o = ObserveLocked(uid, pod);
  if (o.relearned) PublishLocked();
  return o;
}

WorkloadLearner::Observation WorkloadLearner::ObserveAll(std::span<const Arrival> arrivals) {
  std::lock_guard lock(mu_);
  Observation all;
  for (const Arrival& a : arrivals) {
    Observation o = ObserveLocked(a.uid, a.pod);
    all.counted += o.counted;
    all.relearned = all.relearned || o.relearned;
  }
  if (all.relearned) PublishLocked();
  return all;
}

void WorkloadLearner::Forget(std::string_view uid) {
  std::lock_guard lock(mu_);
  if (auto it = seen_.find(uid); it != seen_.end()) {
    seen_order_.erase(it->second);
    seen_.erase(it);
  }
}

std::shared_ptr<const core::FragmentationPolicy> WorkloadLearner::Current() const {
  std::lock_guard lock(published_mu_);
  return published_;
}

WorkloadLearner::Stats WorkloadLearner::stats() const {
  Stats s;
  {
    std::lock_guard lock(mu_);
    s.counted = counted_;
    s.remembered = seen_.size();
    s.evicted = evicted_;
  }
  auto current = Current();
  s.epoch = current->epoch();
  s.mix_shapes = current->mix().size();
  return s;
}

}  // namespace tessera::scheduler
