#include "vgpu/compute/controller.h"

#include <cstring>

namespace tessera::vgpu::compute {
namespace {

constexpr uint64_t kMaxRefillElapsedNs = 10'000'000'000;  // keeps elapsed x rate far from overflow

}  // namespace

Policy parse_policy(const char* text) {
  if (text == nullptr) return Policy::kDefault;
  if (strcmp(text, "force") == 0) return Policy::kForce;
  if (strcmp(text, "disable") == 0) return Policy::kDisable;
  return Policy::kDefault;
}

uint64_t burst_for_quota(uint32_t quota_percent) {
  uint64_t burst = static_cast<uint64_t>(quota_percent) * 300'000;  // q % of 30 ms
  return burst < 1'000'000 ? 1'000'000 : burst;
}

void Controller::bind(DeviceEntry* entry, Policy policy, bool low_priority, uint64_t now,
                      uint32_t quota_percent) {
  entry_ = entry;
  policy_ = policy;
  low_priority_ = low_priority;
  quota_percent_ = quota_percent;
  if (quota_percent_ == 0 || quota_percent_ > 100) quota_percent_ = 100;
  rate_permille_.store(quota_percent_ * 10, std::memory_order_relaxed);
  // First process of the container: start with a full burst. The CAS on the
  // burst field elects one initialiser among processes starting together.
  uint64_t burst = burst_for_quota(quota_percent_);
  uint64_t expected = 0;
  if (entry->budget_burst_ns.compare_exchange_strong(expected, burst, std::memory_order_acq_rel)) {
    entry->budget_ns.store(static_cast<int64_t>(burst), std::memory_order_relaxed);
    entry->budget_refill_at_ns.store(now, std::memory_order_release);
  }
}

unsigned Controller::verify(uint64_t now) {
  if (entry_ == nullptr) return 0;
  unsigned repaired = 0;
  if (entry_->core_quota_percent.load(std::memory_order_relaxed) != quota_percent_) {
    entry_->core_quota_percent.store(quota_percent_, std::memory_order_relaxed);
    repaired |= kRepairedQuota;
  }
  const uint64_t burst = burst_for_quota(quota_percent_);
  if (entry_->budget_burst_ns.load(std::memory_order_relaxed) != burst) {
    entry_->budget_burst_ns.store(burst, std::memory_order_relaxed);
    repaired |= kRepairedBurst;
  }
  const int64_t ceiling = static_cast<int64_t>(burst) * kBudgetCeilingBursts;
  int64_t b = entry_->budget_ns.load(std::memory_order_relaxed);
  while (b > ceiling) {
    if (entry_->budget_ns.compare_exchange_weak(b, static_cast<int64_t>(burst), std::memory_order_acq_rel)) {
      repaired |= kRepairedBudget;
      break;
    }
  }
  // A mark in the future stops refills (the tenant only holds itself back,
  // but its honest siblings too); one far in the past is harmless: a refill
  // adds at most up to the burst.
  uint64_t mark = entry_->budget_refill_at_ns.load(std::memory_order_relaxed);
  if (mark > now + kMaxRefillElapsedNs &&
      entry_->budget_refill_at_ns.compare_exchange_strong(mark, now, std::memory_order_acq_rel))
    repaired |= kRepairedRefillMark;
  return repaired;
}

int64_t Controller::wake_target() const {
  int64_t quarter = static_cast<int64_t>(entry_->budget_burst_ns.load(std::memory_order_relaxed) / 4);
  return quarter < static_cast<int64_t>(kMaxWakeTargetNs) ? quarter : static_cast<int64_t>(kMaxWakeTargetNs);
}

void Controller::refill(uint64_t now) {
  uint64_t last = entry_->budget_refill_at_ns.load(std::memory_order_acquire);
  if (now <= last || now - last < kMinRefillStepNs) return;
  // Whoever moves the refill mark from `last` to `now` adds that interval's
  // tokens; everyone else sees the CAS fail and adds nothing.
  if (!entry_->budget_refill_at_ns.compare_exchange_strong(last, now, std::memory_order_acq_rel)) return;
  uint64_t elapsed = now - last;
  if (elapsed > kMaxRefillElapsedNs) elapsed = kMaxRefillElapsedNs;
  int64_t add = static_cast<int64_t>(elapsed * rate_permille_.load(std::memory_order_relaxed) / 1000);
  int64_t burst = static_cast<int64_t>(entry_->budget_burst_ns.load(std::memory_order_relaxed));
  // The refill never takes the budget above the burst (nor do refunds,
  // charge()); a budget above it (written from outside) is left to verify().
  int64_t b = entry_->budget_ns.load(std::memory_order_relaxed);
  int64_t next;
  do {
    int64_t cap = b > burst ? b : burst;
    next = b + add > cap ? cap : b + add;
  } while (!entry_->budget_ns.compare_exchange_weak(b, next, std::memory_order_acq_rel));
}

void Controller::charge(int64_t delta_ns) {
  if (entry_ == nullptr || delta_ns == 0) return;
  if (delta_ns > 0) {
    entry_->budget_ns.fetch_sub(delta_ns, std::memory_order_acq_rel);
  } else {
    // A refund (the work used less than it was charged) gives back what the
    // over-charge held the container from, but takes the budget no higher
    // than the burst, as a refill would: a budget above one burst is then
    // never the limiter's doing (verify()). A refund the container could not
    // have missed — its budget was full — is not turned into a surplus it
    // could burst with later.
    const int64_t burst = static_cast<int64_t>(entry_->budget_burst_ns.load(std::memory_order_relaxed));
    int64_t b = entry_->budget_ns.load(std::memory_order_relaxed);
    int64_t next;
    do {
      next = b - delta_ns;
      if (next > burst) next = b > burst ? b : burst;
    } while (!entry_->budget_ns.compare_exchange_weak(b, next, std::memory_order_acq_rel));
  }
  // gpu_time_used_ns is the measured total: corrections move it too (never below 0).
  uint64_t used = entry_->gpu_time_used_ns.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    next = delta_ns >= 0
               ? used + static_cast<uint64_t>(delta_ns)
               : (used > static_cast<uint64_t>(-delta_ns) ? used - static_cast<uint64_t>(-delta_ns) : 0);
  } while (!entry_->gpu_time_used_ns.compare_exchange_weak(used, next, std::memory_order_relaxed));
}

void Controller::charge_bounded(uint64_t cost_ns) {
  charge(static_cast<int64_t>(cost_ns));
  int64_t floor = -static_cast<int64_t>(entry_->budget_burst_ns.load(std::memory_order_relaxed));
  int64_t b = entry_->budget_ns.load(std::memory_order_relaxed);
  while (b < floor && !entry_->budget_ns.compare_exchange_weak(b, floor, std::memory_order_acq_rel)) {
  }
}

bool Controller::lone(const Neighbours& n) const {
  // Unknown neighbours: hold the quota (the safe side for the others).
  return policy_ == Policy::kDefault && n.known && n.others == 0;
}

void Controller::update_rate(const Neighbours& n) {
  uint32_t rate = quota_percent_ * 10;
  if (low_priority_ && n.known && n.others > 0) {
    uint32_t left = n.others_percent >= 100 ? 0 : (100 - n.others_percent) * 10;
    if (n.others_percent + n.own_percent >= 95) left = left > 100 ? left - 100 : 0;  // headroom to grow into
    if (left < rate) rate = left;
    if (rate < kMinRatePermille) rate = kMinRatePermille;
  }
  rate_permille_.store(rate, std::memory_order_relaxed);
}

uint64_t Controller::admit(Environment& env, uint64_t cost_ns) {
  uint64_t now = env.now_ns();
  // A low-priority tenant may be held below its quota by the device being
  // full, never exhausting its budget: it re-reads its neighbours on the way.
  if (low_priority_ && now >= next_rate_check_ns_.load(std::memory_order_relaxed)) {
    next_rate_check_ns_.store(now + kRateCheckNs, std::memory_order_relaxed);
    update_rate(env.neighbours(now));
  }
  refill(now);
  // Nobody queued: admit on a positive budget. With a queue, join it, so a
  // thread arriving now cannot overtake the ones already asleep.
  if (entry_->launch_ticket_next.load(std::memory_order_acquire) ==
      entry_->launch_ticket_serving.load(std::memory_order_acquire)) {
    if (entry_->budget_ns.load(std::memory_order_acquire) > 0) {
      charge(static_cast<int64_t>(cost_ns));
      return 0;
    }
    if (policy_ == Policy::kDefault && now < lone_until_ns_.load(std::memory_order_relaxed)) {
      charge_bounded(cost_ns);
      return 0;
    }
  }
  return admit_slow(env, cost_ns, now);
}

uint64_t Controller::admit_slow(Environment& env, uint64_t cost_ns, uint64_t now) {
  const uint64_t start = now;
  bool slept = false;
  const uint64_t ticket = entry_->launch_ticket_next.fetch_add(1, std::memory_order_acq_rel);
  uint64_t last_seen = entry_->launch_ticket_serving.load(std::memory_order_acquire);
  uint64_t last_change = now;
  for (;;) {
    uint64_t serving = entry_->launch_ticket_serving.load(std::memory_order_acquire);
    if (serving > ticket) {
      // Our turn was skipped (we looked stalled): go, without releasing.
      charge(static_cast<int64_t>(cost_ns));
      break;
    }
    if (serving == ticket) {
      Neighbours n = env.neighbours(now);
      update_rate(n);
      refill(now);
      // Once it has had to sleep, the head waits for wake_target() rather than
      // for the first positive nanosecond: fewer, longer sleeps, so a host
      // that wakes up late costs the container less (the refill accrues
      // during any oversleep, up to the burst).
      int64_t need = slept ? wake_target() : 1;
      bool go = entry_->budget_ns.load(std::memory_order_acquire) >= need;
      if (!go && lone(n)) {
        lone_until_ns_.store(now + kLoneHoldNs, std::memory_order_relaxed);
        go = true;
      }
      if (go) {
        if (lone(n))
          charge_bounded(cost_ns);
        else
          charge(static_cast<int64_t>(cost_ns));
        uint64_t expected = ticket;
        entry_->launch_ticket_serving.compare_exchange_strong(expected, ticket + 1,
                                                              std::memory_order_acq_rel);
        if (entry_->launch_ticket_next.load(std::memory_order_acquire) > ticket + 1)
          env.wake_turns(entry_->launch_ticket_serving);
        break;
      }
      // Sleep until the refill makes the budget positive (bounded, so that a
      // change of neighbours or a correction is seen soon).
      int64_t deficit = wake_target() - entry_->budget_ns.load(std::memory_order_acquire);
      if (deficit < 1) deficit = 1;
      uint32_t rate = rate_permille_.load(std::memory_order_relaxed);
      uint64_t wait = static_cast<uint64_t>(deficit) * 1000 / (rate ? rate : 1) + kMinRefillStepNs;
      if (wait > kMaxSleepNs) wait = kMaxSleepNs;
      env.sleep_until_ns(now + wait);
      slept = true;
      env.idle_work();
      now = env.now_ns();
      last_change = now;
      continue;
    }
    if (serving != last_seen) {
      last_seen = serving;
      last_change = now;
    } else if (now - last_change > kStallNs) {
      // The head has not moved for kStallNs: it died or is stopped. Skip it.
      uint64_t expected = serving;
      if (entry_->launch_ticket_serving.compare_exchange_strong(expected, serving + 1,
                                                                std::memory_order_acq_rel))
        env.wake_turns(entry_->launch_ticket_serving);
      last_change = now;
      continue;
    }
    env.wait_for_turn(entry_->launch_ticket_serving, serving, kMaxSleepNs);
    env.idle_work();
    now = env.now_ns();
  }
  uint64_t waited = now - start;
  if (waited > 0) entry_->throttled_ns.fetch_add(waited, std::memory_order_relaxed);
  return waited;
}

}  // namespace tessera::vgpu::compute
