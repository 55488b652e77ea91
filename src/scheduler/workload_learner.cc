#include "scheduler/workload_learner.h"

#include <algorithm>

namespace tessera::scheduler {

namespace {

// The published policy: core's `tessera` scoring over the mix learned here,
// named by the learner's epoch (scores are cached per epoch).
class LearnedPolicy final : public core::FragmentationPolicy {
 public:
  LearnedPolicy(Options options, core::WorkloadMix mix, uint64_t epoch)
      : core::FragmentationPolicy(options, std::move(mix)), epoch_(epoch) {}
  uint64_t epoch() const override { return epoch_; }

 private:
  const uint64_t epoch_;
};

}  // namespace

WorkloadLearner::WorkloadLearner() : WorkloadLearner(core::FragmentationPolicy::Options{}) {}

WorkloadLearner::WorkloadLearner(core::FragmentationPolicy::Options options, size_t max_remembered,
                                 size_t max_shapes)
    : options_(options),
      max_remembered_(std::max<size_t>(max_remembered, 1)),
      max_shapes_(std::max<size_t>(max_shapes, 1)),
      published_(std::make_shared<const LearnedPolicy>(options, core::WorkloadMix{}, 0)) {}

void WorkloadLearner::CountLocked(const core::TaskShape& shape) {
  ++total_;
  if (auto it = shapes_.find(shape); it != shapes_.end()) {
    ++it->second;
    return;
  }
  int64_t count = 1;
  if (shapes_.size() >= max_shapes_) {
    // The rarest shape held (the first in shape order among equals) makes
    // room; the newcomer takes its count over.
    auto rarest = shapes_.begin();
    for (auto it = shapes_.begin(); it != shapes_.end(); ++it) {
      if (it->second < rarest->second) rarest = it;
    }
    count += rarest->second;  // so the counts still add up to total_
    shapes_.erase(rarest);
    ++shapes_replaced_;
  }
  shapes_.emplace(shape, count);
}

WorkloadLearner::Observation WorkloadLearner::ObserveLocked(std::string_view uid,
                                                            const core::TaskShape& shape) {
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
  CountLocked(shape);
  ++counted_;
  o.counted = 1;
  // core::FragmentationPolicy's schedule: at the first pod, then every
  // relearn_every pods.
  if (total_ >= next_relearn_) {
    ++epoch_;
    const int64_t step = options_.relearn_every > 0 ? options_.relearn_every : total_ < 512 ? total_ : 512;
    next_relearn_ = total_ + step;
    // The mix of this moment (ObserveAll publishes the last one learned).
    core::MixCounter counter;
    for (const auto& [held, count] : shapes_) counter.Add(held, count);
    learned_mix_ = counter.Typical(options_.coverage);
    o.relearned = true;
  }
  return o;
}

void WorkloadLearner::PublishLocked() {
  std::shared_ptr<const core::FragmentationPolicy> policy =
      std::make_shared<const LearnedPolicy>(options_, learned_mix_, epoch_);
  std::lock_guard lock(published_mu_);
  published_.swap(policy);
  // The previous policy is freed when its last request lets go of it (or
  // here, after the lock, when none holds it).
}

WorkloadLearner::Observation WorkloadLearner::Observe(std::string_view uid, const core::PodRequest& pod) {
  std::lock_guard lock(mu_);
  Observation o = ObserveLocked(uid, core::ShapeOf(pod));
  if (o.relearned) PublishLocked();
  return o;
}

WorkloadLearner::Observation WorkloadLearner::ObserveAll(std::span<const Arrival> arrivals) {
  std::lock_guard lock(mu_);
  Observation all;
  for (const Arrival& a : arrivals) {
    Observation o = ObserveLocked(a.uid, core::ShapeOf(a.pod));
    all.counted += o.counted;
    all.relearned = all.relearned || o.relearned;
  }
  if (all.relearned) PublishLocked();
  return all;
}

WorkloadLearner::Observation WorkloadLearner::ObserveAllShapes(std::span<const ShapedArrival> arrivals) {
  std::lock_guard lock(mu_);
  Observation all;
  for (const ShapedArrival& a : arrivals) {
    Observation o = ObserveLocked(a.uid, a.shape);
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
    s.shapes = shapes_.size();
    s.shapes_replaced = shapes_replaced_;
  }
  auto current = Current();
  s.epoch = current->epoch();
  s.mix_shapes = current->mix().size();
  return s;
}

}  // namespace tessera::scheduler
