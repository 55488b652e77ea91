// The compute-time controller of libvgpu (issue 5): one budget of GPU time per
// container and device, living in the container's shared region
// (DeviceEntry::budget_*), so every process of the container draws on it.
//
// The budget is a token bucket measured in nanoseconds of device time:
//  - refilled at quota x wall time (quota as an effective rate in 1/1000 of the
//    device, see rate_permille()), capped at a bounded burst
//    (budget_burst_ns, burst_for_quota());
//  - charged, at launch, with the estimated device time of the work, and
//    corrected (charge(), possibly negative) when the work's real device time
//    has been measured — so what the container pays converges on what it used;
//  - a launch is admitted while the budget is positive; otherwise it waits,
//    sleeping (clock_nanosleep / futex, never spinning), in FIFO order through
//    the ticket pair launch_ticket_next / launch_ticket_serving. Only the head
//    of the queue waits for budget; the others wait for their turn.
//
// Deadlock freedom: waiting depends only on wall time (the refill) and on the
// head of the queue, never on GPU progress or on a lock of the application. No
// lock is held while waiting. A queue head that dies or stops (a process
// killed while waiting) is skipped after kStallNs by the next waiter.
//
// Policies (GPU_CORE_UTILIZATION_POLICY): force holds the quota always;
// disable never limits (the caller does not construct a controller);
// default holds the quota while other tenants use the device and lets a lone
// tenant use idle time (Neighbours, from Environment::neighbours()).
//
// Priority: a low-priority container (CUDA_TASK_PRIORITY >= 1) lowers its own
// rate to what the other tenants leave of the device, min(quota, 100 % -
// their measured share), while they are active; a high-priority one (0, the
// default) never yields. While the device is full (others + own >= 95 %) the
// low one also leaves 10 pp of headroom, so that a high tenant held back by the
// full device can grow into it. So when a high and a low tenant contend for
// more than the device has, the high one gets its quota first.
//
// Thread-safety: every method may be called from any thread of any process
// sharing the region. The controller itself holds only process-local caches.
// Nothing here allocates or throws.
#pragma once

#include <atomic>
#include <cstdint>

#include "vgpu/region_layout.h"

namespace tessera::vgpu::compute {

enum class Policy { kDefault, kForce, kDisable };

// Parses GPU_CORE_UTILIZATION_POLICY's value ("force", "disable", anything
// else: default). Config already normalised it to lower case.
Policy parse_policy(const char* text);

// What is known of the other tenants of a device.
struct Neighbours {
  bool known = false;           // false: NVML absent or failing — treated as "others present"
  uint32_t others = 0;          // processes outside this container that used the device recently
  uint32_t others_percent = 0;  // their summed share of the device over the window
  uint32_t own_percent = 0;     // this container's share over the same window
};

// The seam to the outside world: time, sleeping, the wait queue's futex, and
// the neighbour monitor. The real one is in limiter.cc; tests use a simulated
// clock in which sleeping advances time.
class Environment {
 public:
  virtual ~Environment() = default;
  virtual uint64_t now_ns() = 0;  // CLOCK_MONOTONIC (shared by the container's processes)
  virtual void sleep_until_ns(uint64_t deadline) = 0;
  // Sleeps until `serving` changes from `seen` or `timeout_ns` passes.
  virtual void wait_for_turn(std::atomic<uint64_t>& serving, uint64_t seen, uint64_t timeout_ns) = 0;
  virtual void wake_turns(std::atomic<uint64_t>& serving) = 0;
  virtual Neighbours neighbours(uint64_t now) = 0;
  // Called between sleeps of a waiter (the limiter polls completed samples
  // here, so corrections land while launches wait).
  virtual void idle_work() {}
};

// Burst bound: q % of 30 ms of device time (3 ms at q = 10, 27 ms at q = 90),
// at least 1 ms. A burst beyond the quota (after idling, or after the host
// stalled the application) therefore adds at most 2.7 pp to a 1-s window.
uint64_t burst_for_quota(uint32_t quota_percent);

class Controller {
 public:
  static constexpr uint64_t kMaxSleepNs = 20'000'000;      // a waiter re-checks at least this often
  static constexpr uint64_t kStallNs = 3'000'000'000;      // a queue head silent this long is skipped
  static constexpr uint64_t kLoneHoldNs = 200'000'000;     // a "lone tenant" verdict holds this long
  static constexpr uint64_t kMinRefillStepNs = 20'000;     // refills coarser than this save atomics
  static constexpr uint32_t kMinRatePermille = 10;         // a yielding tenant keeps 1 % of the device
  static constexpr uint64_t kRateCheckNs = 100'000'000;    // a low-priority tenant re-reads its neighbours
  static constexpr uint64_t kMaxWakeTargetNs = 2'000'000;  // see wake_target()

  Controller() = default;

  // Binds to a region device entry, holding it to `quota_percent` (in
  // (0, 100): the process's own authority, Runtime::authoritative_cores, not
  // the region's field, which the container can write), and initialises the
  // container's budget when no process has yet.
  void bind(DeviceEntry* entry, Policy policy, bool low_priority, uint64_t now, uint32_t quota_percent);

  // What verify() found changed from outside libvgpu and put back (bits).
  static constexpr unsigned kRepairedQuota = 1;       // core_quota_percent
  static constexpr unsigned kRepairedBurst = 2;       // budget_burst_ns
  static constexpr unsigned kRepairedBudget = 4;      // budget_ns above any figure the limiter leaves
  static constexpr unsigned kRepairedRefillMark = 8;  // budget_refill_at_ns in the future
  // Checks the entry's compute fields against what this process knows they
  // must be and restores them (a process of the container can write the
  // region: a larger quota, burst or budget would lift its limit). A few
  // relaxed loads when nothing changed. The budget's ceiling is
  // kBudgetCeilingBursts bursts: neither refills nor refunds (charge()) take
  // it above one, so anything higher was written from outside.
  static constexpr int64_t kBudgetCeilingBursts = 1;
  unsigned verify(uint64_t now);
  uint32_t quota_percent() const { return quota_percent_; }
  bool bound() const { return entry_ != nullptr; }
  DeviceEntry* entry() const { return entry_; }

  // Admits work estimated at `cost_ns` of device time: returns at once while
  // the budget is positive, else waits (sleeping) for its FIFO turn and for
  // the budget. Charges `cost_ns`. Returns the wall time spent waiting (also
  // added to the region's throttled_ns).
  uint64_t admit(Environment& env, uint64_t cost_ns);

  // Adds a measured correction: positive = the work used more than charged.
  // A refund (negative) takes the budget no higher than the burst.
  void charge(int64_t delta_ns);

  // The rate (1/1000 of the device) the budget refills at for this process.
  uint32_t rate_permille() const { return rate_permille_.load(std::memory_order_relaxed); }

  // Visible for tests.
  void refill(uint64_t now);
  int64_t budget_ns() const { return entry_->budget_ns.load(std::memory_order_relaxed); }

 private:
  uint64_t admit_slow(Environment& env, uint64_t cost_ns, uint64_t now);
  void update_rate(const Neighbours& n);
  bool lone(const Neighbours& n) const;
  void charge_bounded(uint64_t cost_ns);  // charge, but keep the debt within one burst
  int64_t wake_target() const;  // budget a sleeping head waits for: burst / 4, at most kMaxWakeTargetNs

  DeviceEntry* entry_ = nullptr;
  Policy policy_ = Policy::kForce;
  bool low_priority_ = false;
  uint32_t quota_percent_ = 100;
  std::atomic<uint32_t> rate_permille_{1000};
  std::atomic<uint64_t> lone_until_ns_{0};       // default policy: bursting allowed until then
  std::atomic<uint64_t> next_rate_check_ns_{0};  // low priority: when to look at the neighbours again
};

}  // namespace tessera::vgpu::compute
