// The controller on a simulated clock: deterministic, no sleeping, no GPU.
//
// SimGpu models what the simulated driver does: one FIFO timeline per device
// shared by every tenant; each tenant keeps `depth` kernels in flight (by
// default one: it launches a kernel, waits for it, and launches the next),
// always wanting more (saturating). Each tenant is its own container (its own
// DeviceEntry, as its own region). When a tenant's controller sleeps, the
// other tenants run up to that time first, so the interleaving is causal.
//
// The host is modelled too, for the tests of what a loaded machine does to a
// tenant: every sleep (the controller's, or the tenant's own wait for its
// oldest kernel) ends `wake_latency_ns` (plus a pseudo-random part below
// `wake_jitter_ns`) after its deadline, and the host may not run the tenant at
// all for `stall_ns` at the start of every `stall_every_ns` (a machine busy
// with other work).
//
// A tenant may instead work in batches (`batch`): launch that many kernels,
// wait for all of them, and again — the training-step shape whose
// synchronisation gaps only a neighbour's queued work can fill.
//
// By default a launch is charged its exact duration. With `measured_charges`
// a tenant is charged as limiter.cc charges it: the kernel's estimate
// (Estimates: 1 ms until sampled, then the minimum of the recent samples)
// times the reconciler's scale; sampled launches are measured as the
// simulator's event pair measures them (from the start event, which completes
// when the tenant's stream is ready, to the kernel's end: a kernel queued
// behind a neighbour's work is measured with that work); their corrections
// are read at later launches and while waiting; and every 100 ms the
// Reconciler compares the charges with what the simulator's NVML reports for
// the tenant (its busy time in the interval, rounded to a whole percent).
#include "vgpu/compute/controller.h"

#include <gtest/gtest.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "vgpu/compute/estimator.h"
#include "vgpu/compute/neighbours.h"
#include "vgpu/compute/reconciler.h"

namespace tessera::vgpu::compute {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kSec = 1'000'000'000;

struct Interval {
  uint64_t start, end;
};

struct SimGpu;

struct Tenant;

class SimEnv : public Environment {
 public:
  SimEnv(SimGpu* gpu, Tenant* self) : gpu_(gpu), self_(self) {}
  uint64_t now_ns() override;
  void sleep_until_ns(uint64_t deadline) override;
  void wait_for_turn(std::atomic<uint64_t>&, uint64_t, uint64_t timeout_ns) override {
    sleep_until_ns(now_ns() + timeout_ns);
  }
  void wake_turns(std::atomic<uint64_t>&) override {}
  Neighbours neighbours(uint64_t now) override;
  void idle_work() override;
  bool neighbours_known = true;

 private:
  SimGpu* gpu_;
  Tenant* self_;
};

struct Tenant {
  DeviceEntry entry{};
  Controller controller;
  std::unique_ptr<SimEnv> env;
  uint64_t kernel_ns = kMs;
  uint64_t now = 0;  // the tenant's own time
  bool in_admit = false;
  bool saturating = true;
  bool limited = true;  // false: launches without asking the controller (the host's ceiling)
  uint64_t stop_at = ~0ull;
  size_t depth = 1;                // kernels kept in flight
  std::deque<uint64_t> in_flight;  // their end times
  size_t batch = 0;                // > 0: launch `batch` kernels, wait for all, again
  size_t launched_in_batch = 0;
  uint64_t wake_latency_ns = 0;  // a sleep ends this long after its deadline
  uint64_t wake_jitter_ns = 0;   // plus a pseudo-random part below this
  uint64_t jitter_state = 1;     // the jitter's generator
  uint64_t stall_every_ns = 0;   // host stalls: the tenant does not run during
  uint64_t stall_ns = 0;         // [k * stall_every_ns, k * stall_every_ns + stall_ns)
  std::vector<Interval> ran;
  int repairs = 0;  // verify() found the entry changed: never, unless a test writes it

  // Measured charges (see the top of the file), as limiter.cc keeps them.
  bool measured_charges = false;
  std::unique_ptr<Estimates> estimates;
  Estimates::Entry* kernel_estimate = nullptr;
  Reconciler reconciler;
  uint64_t charged_total = 0;  // ProcessSlot::gpu_time_used_ns
  bool nvml_sees_me = false;
  bool have_reading = false;
  uint64_t last_reading = 0;
  uint64_t next_reconcile = 0;
  uint64_t last_poll = 0;
  bool sample_pending = false;
  uint64_t sample_start = 0, sample_end = 0;  // the event pair's times

  // When the host runs the tenant again, at `t` or after.
  uint64_t host_runs_at(uint64_t t) const {
    if (stall_every_ns == 0 || t % stall_every_ns >= stall_ns) return t;
    return t - t % stall_every_ns + stall_ns;
  }
  // When a sleep until `deadline` started at `now` ends.
  uint64_t woken(uint64_t deadline) {
    uint64_t latency = wake_latency_ns;
    if (wake_jitter_ns > 0) {
      jitter_state = jitter_state * 6364136223846793005ull + 1442695040888963407ull;
      latency += (jitter_state >> 33) % wake_jitter_ns;
    }
    return host_runs_at((deadline > now ? deadline : now) + latency);
  }

  void charge_process(int64_t delta) {
    if (delta < 0 && static_cast<uint64_t>(-delta) > charged_total)
      charged_total = 0;
    else
      charged_total += static_cast<uint64_t>(delta);
  }
  // limiter.cc's poll_samples(): a completed sample corrects the charges
  // (unless the driver's accounting is trusted, which corrects the totals).
  void poll_samples(bool force) {
    if (!sample_pending || sample_end > now || (!force && now - last_poll < 200'000)) return;
    last_poll = now;
    int64_t correction = Estimates::on_sample(*kernel_estimate, sample_end - sample_start);
    Estimates::sample_done(*kernel_estimate);
    sample_pending = false;
    if (!nvml_sees_me) {
      controller.charge(correction);
      charge_process(correction);
    }
  }
  // limiter.cc's reconcile(), with the simulator's NVML: this tenant's busy
  // time since the previous reading, as a whole percent of the interval.
  void reconcile() {
    if (now < next_reconcile) return;
    next_reconcile = now + Reconciler::kIntervalNs;
    uint64_t since = last_reading;
    bool first = !have_reading;
    have_reading = true;
    last_reading = now;
    if (first || now <= since) {
      reconciler.skip(charged_total);
      return;
    }
    uint64_t window = now - since, busy = busy_between(since, now);
    if (busy > 0) nvml_sees_me = true;
    if (!nvml_sees_me) {
      reconciler.skip(charged_total);
      return;
    }
    uint64_t percent = (busy * 100 + window / 2) / window;
    if (percent > 100) percent = 100;
    int64_t correction = reconciler.reconcile(charged_total, percent * window / 100);
    controller.charge(correction);
    charge_process(correction);
  }

  uint64_t busy_between(uint64_t from, uint64_t to) const {
    uint64_t sum = 0;
    for (auto it = ran.rbegin(); it != ran.rend() && it->end > from; ++it) {  // time-ordered
      uint64_t s = it->start > from ? it->start : from, e = it->end < to ? it->end : to;
      if (e > s) sum += e - s;
    }
    return sum;
  }
};

struct SimGpu {
  uint64_t busy_until = 0;
  std::vector<std::unique_ptr<Tenant>> tenants;

  Tenant& add(uint32_t quota, Policy policy, bool low_priority = false, uint64_t kernel_ns = kMs) {
    auto t = std::make_unique<Tenant>();
    t->entry.core_quota_percent.store(quota);
    t->kernel_ns = kernel_ns;
    t->env = std::make_unique<SimEnv>(this, t.get());
    t->controller.bind(&t->entry, policy, low_priority, 0, t->entry.core_quota_percent.load());
    tenants.push_back(std::move(t));
    return *tenants.back();
  }

  // A tenant charged as limiter.cc charges (see the top of the file).
  Tenant& add_measured(uint32_t quota, uint64_t kernel_ns = kMs) {
    Tenant& t = add(quota, Policy::kForce, false, kernel_ns);
    t.measured_charges = true;
    t.estimates = std::make_unique<Estimates>();
    t.estimates->reset();
    t.kernel_estimate = t.estimates->find_or_add(0x5eed);
    return t;
  }

  // One step of tenant t: wait for its oldest kernel when `depth` are in
  // flight, else launch the next.
  void step(Tenant& t) {
    t.now = t.host_runs_at(t.now);
    if (t.batch > 0 ? t.launched_in_batch == t.batch : t.in_flight.size() >= t.depth) {
      // Wait for the oldest kernel, or for the whole batch (its newest).
      uint64_t end = t.batch > 0 ? t.in_flight.back() : t.in_flight.front();
      if (t.batch > 0) {
        t.in_flight.clear();
        t.launched_in_batch = 0;
      } else {
        t.in_flight.pop_front();
      }
      if (end > t.now) t.now = t.woken(end);
      return;
    }
    uint64_t cost = t.kernel_ns;
    bool sampled = false;
    if (t.limited) {
      if (t.measured_charges) {
        t.poll_samples(false);
        t.reconcile();
        cost = t.reconciler.scaled(Estimates::charge_for(*t.kernel_estimate));
      }
      t.repairs += t.controller.verify(t.now) != 0;  // as before_launch() does
      t.in_admit = true;
      t.controller.admit(*t.env, cost);
      t.in_admit = false;
      if (t.measured_charges) {
        t.charge_process(static_cast<int64_t>(cost));
        Estimates::note_charged(*t.kernel_estimate, cost);
        sampled = Estimates::should_sample(*t.kernel_estimate, t.nvml_sees_me);
      }
    }
    // The start event completes when the stream's earlier work is done.
    uint64_t stream_ready = t.ran.empty() ? 0 : t.ran.back().end;
    uint64_t start = t.now > busy_until ? t.now : busy_until;
    uint64_t end = start + t.kernel_ns;
    busy_until = end;
    t.ran.push_back({start, end});
    t.in_flight.push_back(end);
    if (t.batch > 0) ++t.launched_in_batch;
    if (sampled) {
      t.sample_pending = true;
      t.sample_start = t.now > stream_ready ? t.now : stream_ready;
      t.sample_end = end;
    }
  }

  // Runs every tenant not inside admit() until its time reaches `until`.
  void run_until(uint64_t until) {
    for (;;) {
      Tenant* next = nullptr;
      for (auto& t : tenants) {
        if (t->in_admit || !t->saturating || t->now >= until || t->now >= t->stop_at) continue;
        if (next == nullptr || t->now < next->now) next = t.get();
      }
      if (next == nullptr) return;
      step(*next);
    }
  }

  double share(const Tenant& t, uint64_t from, uint64_t to) const {
    return 100.0 * static_cast<double>(t.busy_between(from, to)) / static_cast<double>(to - from);
  }
};

uint64_t SimEnv::now_ns() {
  return self_->now;
}

void SimEnv::sleep_until_ns(uint64_t deadline) {
  uint64_t wake = self_->woken(deadline);
  gpu_->run_until(wake);
  self_->now = wake;
}

void SimEnv::idle_work() {
  if (!self_->measured_charges) return;
  self_->poll_samples(true);
  self_->reconcile();
}

Neighbours SimEnv::neighbours(uint64_t now) {
  if (!neighbours_known) return Neighbours{};
  std::vector<ProcessShare> shares;
  uint32_t pid = 1, mine = 0;
  uint64_t from = now > kSec ? now - kSec : 0;
  for (auto& t : gpu_->tenants) {
    if (t.get() == self_) mine = pid;
    uint64_t busy = t->busy_between(from, now);
    if (busy > 0 && now > from)
      shares.push_back({pid, static_cast<uint32_t>((busy * 100 + (now - from) / 2) / (now - from))});
    ++pid;
  }
  return summarise_neighbours(shares.data(), static_cast<int>(shares.size()), &mine, 1);
}

TEST(ControllerTest, OneTenantGetsItsQuotaInEverySecond) {
  for (uint32_t q : {10u, 30u, 50u, 70u, 90u}) {
    for (uint64_t kernel : {uint64_t{100000}, kMs, 10 * kMs}) {
      SimGpu gpu;
      Tenant& t = gpu.add(q, Policy::kForce, false, kernel);
      gpu.run_until(6 * kSec);
      for (uint64_t w = 1; w < 5; ++w) {
        double s = gpu.share(t, w * kSec, (w + 1) * kSec);
        EXPECT_NEAR(s, q, 2.0) << "quota " << q << " kernel " << kernel << " window " << w;
      }
    }
  }
}

// A host too slow for the quota: 0.1 ms kernels, three in flight (0.3 ms of
// work), and a host that wakes the tenant 0.3 ms after each deadline, when
// only 0.2 ms of its work is left queued. The device idles for the rest,
// limiter or not: this tenant cannot use more than 75 % of the device. Under a 90 % quota the
// limiter never makes it wait (its budget never runs out), so it gets exactly
// what the host lets it have; under 50 % it gets 50 %.
TEST(ControllerTest, AHostTooSlowForTheQuotaIsNotSlowedFurther) {
  auto run = [](uint32_t quota, bool limited) {
    SimGpu gpu;
    Tenant& t = gpu.add(quota, Policy::kForce, false, 100'000);
    t.limited = limited;
    t.depth = 3;
    t.wake_latency_ns = 300'000;
    gpu.run_until(6 * kSec);
    std::vector<double> shares;
    for (uint64_t w = 1; w < 5; ++w) shares.push_back(gpu.share(t, w * kSec, (w + 1) * kSec));
    return std::pair{shares, t.entry.throttled_ns.load()};
  };
  std::vector<double> ceiling = run(90, false).first;
  auto [at90, waited90] = run(90, true);
  auto [at50, waited50] = run(50, true);
  for (size_t w = 0; w < ceiling.size(); ++w) {
    EXPECT_NEAR(ceiling[w], 75.0, 0.5) << "window " << w + 1;
    EXPECT_NEAR(at90[w], ceiling[w], 0.1) << "window " << w + 1;
    EXPECT_NEAR(at50[w], 50.0, 1.0) << "window " << w + 1;
  }
  EXPECT_EQ(waited90, 0u);
  EXPECT_GT(waited50, 0u);
}

// The same short kernels and slow host, but a tenant that keeps 10 ms of work
// in flight (a saturating one: the host's late wake-ups no longer idle the
// device). Every quota, 90 % included, holds in every second.
TEST(ControllerTest, ShortKernelsHoldHighQuotasWhenTheTenantSaturates) {
  for (uint32_t q : {10u, 30u, 50u, 70u, 90u}) {
    SimGpu gpu;
    Tenant& t = gpu.add(q, Policy::kForce, false, 100'000);
    t.depth = 100;
    t.wake_latency_ns = 300'000;
    gpu.run_until(6 * kSec);
    for (uint64_t w = 1; w < 5; ++w)
      EXPECT_NEAR(gpu.share(t, w * kSec, (w + 1) * kSec), q, 1.0) << "quota " << q << " window " << w;
  }
}

// Host stalls: the host does not run the tenant for 15 ms in every 100 ms. A
// tenant keeping 10 ms in flight still gets 95 % unlimited. Under a quota the
// budget that accrues during a stall (at most one burst: 13.5 ms of 27 at 90 %)
// is spent as soon as the host runs the tenant again, so the quota holds in
// every second.
TEST(ControllerTest, HostStallsShorterThanTheBurstAreMadeUp) {
  for (uint32_t q : {50u, 70u, 90u}) {
    SimGpu gpu;
    Tenant& t = gpu.add(q, Policy::kForce, false, 100'000);
    t.depth = 100;
    t.wake_latency_ns = 100'000;
    t.stall_every_ns = 100 * kMs;
    t.stall_ns = 15 * kMs;
    gpu.run_until(6 * kSec);
    for (uint64_t w = 1; w < 5; ++w)
      EXPECT_NEAR(gpu.share(t, w * kSec, (w + 1) * kSec), q, 1.0) << "quota " << q << " window " << w;
  }
}

// The price of the burst bound: a stall longer than burst / quota loses what
// accrues beyond the burst, however much the tenant wanted to run. At 50 %
// (burst 15 ms), a 200 ms stall every second banks 15 ms of the 100 ms its
// quota accrued meanwhile: each second gives 500 - 85 = 415 ms, 41.5 %.
TEST(ControllerTest, HostStallsLongerThanTheBurstLoseTheExcess) {
  SimGpu gpu;
  Tenant& t = gpu.add(50, Policy::kForce, false, 100'000);
  t.depth = 100;
  t.stall_every_ns = kSec;
  t.stall_ns = 200 * kMs;
  gpu.run_until(6 * kSec);
  const double accrued_ms = 200 * 0.5, burst_ms = static_cast<double>(burst_for_quota(50)) / kMs;
  const double expected = 50.0 - (accrued_ms - burst_ms) / 10;  // percent of a second
  for (uint64_t w = 1; w < 5; ++w)
    EXPECT_NEAR(gpu.share(t, w * kSec, (w + 1) * kSec), expected, 0.5) << "window " << w;
}

// A fully subscribed device (10 % + 90 %) leaves no headroom to make up lost
// time: device time the host's stalls leave idle is gone for good. What keeps
// it busy is the work the tenants have queued: a tenant held at its quota on a
// full device still keeps the 10 ms it wants in flight (its kernels wait
// behind the other's), so stalls of 8 ms every 70-100 ms cost neither tenant
// anything. (Stalls longer than the queue do: the benchmark's 10/90 row shows
// such a window.)
TEST(ControllerTest, FullySubscribedTenantsRideThroughStallsShorterThanTheirQueue) {
  SimGpu gpu;
  Tenant& small = gpu.add(10, Policy::kForce);
  Tenant& large = gpu.add(90, Policy::kForce);
  for (Tenant* t : {&small, &large}) {
    t->depth = 10;
    t->wake_latency_ns = 300'000;
    t->stall_ns = 8 * kMs;
  }
  small.stall_every_ns = 70 * kMs;
  large.stall_every_ns = 100 * kMs;
  gpu.run_until(6 * kSec);
  for (uint64_t w = 1; w < 5; ++w) {
    EXPECT_NEAR(gpu.share(small, w * kSec, (w + 1) * kSec), 10.0, 0.5) << "window " << w;
    EXPECT_NEAR(gpu.share(large, w * kSec, (w + 1) * kSec), 90.0, 0.5) << "window " << w;
  }
}

TEST(ControllerTest, KernelsLongerThanTheBurstAreRepaidAsDebt) {
  SimGpu gpu;
  Tenant& t = gpu.add(10, Policy::kForce, false, 50 * kMs);
  gpu.run_until(21 * kSec);
  EXPECT_NEAR(gpu.share(t, 1 * kSec, 21 * kSec), 10.0, 1.0);
  EXPECT_GT(t.entry.throttled_ns.load(), 10 * kSec);
}

// A controller bound with Policy::kForce to a fresh device entry (no
// neighbours, time 0).
class BoundControllerTest : public ::testing::Test {
 protected:
  void Bind(unsigned quota_percent) {
    e.core_quota_percent.store(quota_percent);
    c.bind(&e, Policy::kForce, false, 0, e.core_quota_percent.load());
  }
  DeviceEntry e{};
  Controller c;
};

TEST_F(BoundControllerTest, BudgetNeverExceedsTheBurstAfterIdling) {
  Bind(30);
  EXPECT_EQ(e.budget_burst_ns.load(), burst_for_quota(30));
  c.refill(100 * kSec);  // a long idle time
  EXPECT_EQ(c.budget_ns(), static_cast<int64_t>(burst_for_quota(30)));
  // After idling, a saturating tenant gets at most quota + one burst in the first second.
  SimGpu gpu;
  Tenant& t = gpu.add(30, Policy::kForce);
  gpu.run_until(kSec);
  EXPECT_LE(t.busy_between(0, kSec), 300 * kMs + burst_for_quota(30) + kMs);
}

TEST_F(BoundControllerTest, CorrectionsMoveBudgetAndUsedTime) {
  Bind(50);
  int64_t b0 = c.budget_ns();
  c.charge(5 * kMs);
  EXPECT_EQ(c.budget_ns(), b0 - static_cast<int64_t>(5 * kMs));
  EXPECT_EQ(e.gpu_time_used_ns.load(), 5 * kMs);
  c.charge(-2 * static_cast<int64_t>(kMs));  // measured less than charged: refund
  EXPECT_EQ(c.budget_ns(), b0 - static_cast<int64_t>(3 * kMs));
  EXPECT_EQ(e.gpu_time_used_ns.load(), 3 * kMs);
  c.charge(-100 * static_cast<int64_t>(kMs));
  EXPECT_EQ(e.gpu_time_used_ns.load(), 0u);  // never below zero
  // A refund takes the budget no higher than the burst, as a refill would.
  EXPECT_EQ(c.budget_ns(), static_cast<int64_t>(burst_for_quota(50)));
  EXPECT_EQ(c.verify(0), 0u);  // so verify() never mistakes one for tampering
}

TEST(ControllerTest, TwoTenantsWithDifferentQuotasEachGetTheirs) {
  for (auto [a, b] : {std::pair{10u, 90u}, std::pair{30u, 70u}, std::pair{20u, 50u}}) {
    SimGpu gpu;
    Tenant& ta = gpu.add(a, Policy::kForce);
    Tenant& tb = gpu.add(b, Policy::kForce);
    gpu.run_until(6 * kSec);
    EXPECT_NEAR(gpu.share(ta, kSec, 6 * kSec), a, 2.0);
    EXPECT_NEAR(gpu.share(tb, kSec, 6 * kSec), b, 2.0);
  }
}

TEST(ControllerTest, FourTenantsOfAQuarterEach) {
  SimGpu gpu;
  for (int i = 0; i < 4; ++i) gpu.add(25, Policy::kForce);
  gpu.run_until(6 * kSec);
  for (auto& t : gpu.tenants) EXPECT_NEAR(gpu.share(*t, kSec, 6 * kSec), 25.0, 2.0);
}

// Issue 19 item 4: tenants whose quotas add up to the whole device, each
// charged as limiter.cc charges (estimates, samples, the driver's readings),
// on a host that wakes each 60-110 µs late (this machine's clock_nanosleep
// when quiet). Every window of every tenant is checked, 1-s windows 1..6.
struct Group {
  std::vector<uint32_t> quotas;
  size_t batch = 0;  // 0: saturating (10 kernels in flight)
};

// Runs a group; `unlimited` (an index, or -1) launches without a limiter
// beside the others: what the host lets that tenant have.
std::vector<std::vector<double>> RunGroup(const Group& g, int unlimited = -1) {
  SimGpu gpu;
  for (size_t i = 0; i < g.quotas.size(); ++i) {
    Tenant& t = gpu.add_measured(g.quotas[i]);
    t.limited = static_cast<int>(i) != unlimited;
    t.batch = g.batch;
    t.depth = g.batch > 0 ? 1 : 10;
    t.wake_latency_ns = 60'000;
    t.wake_jitter_ns = 50'000;
    t.jitter_state = 7 + i;
  }
  gpu.run_until(8 * kSec);
  std::vector<std::vector<double>> shares(g.quotas.size());
  for (size_t i = 0; i < g.quotas.size(); ++i) {
    for (uint64_t w = 1; w < 7; ++w)
      shares[i].push_back(gpu.share(*gpu.tenants[i], w * kSec, (w + 1) * kSec));
    EXPECT_EQ(gpu.tenants[i]->repairs, 0) << "an honest tenant's budget looked rewritten";
  }
  return shares;
}

// Saturating tenants keep the device full, so each gets its quota. ±1 pp is
// the target; asserted: ±0.75 (the model's worst window is 0.6 off).
// What moves a window: one 1 ms kernel is 0.1 pp; each reading rounds to a
// whole percent of 100 ms (up to 0.5 ms) and counts kernels charged but not
// run yet as refunds, which the next reading takes back — a few ms of budget
// that can fall on either side of a second's boundary.
TEST(ControllerTest, SaturatingTenantsWithMeasuredChargesHoldTheirQuotasInEverySecond) {
  for (const Group& g : {Group{{10, 90}}, Group{{30, 70}}, Group{{20, 30, 50}}, Group{{10, 30, 60}},
                         Group{{25, 25, 25, 25}}}) {
    auto shares = RunGroup(g);
    for (size_t i = 0; i < g.quotas.size(); ++i)
      for (size_t w = 0; w < shares[i].size(); ++w)
        EXPECT_NEAR(shares[i][w], g.quotas[i], 0.75)
            << "tenant " << i << " of " << g.quotas.size() << " at " << g.quotas[i] << " %, window " << w + 1;
  }
}

// Latency-bound tenants: four 1 ms kernels, then wait for them. The device
// idles at a synchronisation unless another tenant has a kernel queued, and
// the others' kernels are capped by their quotas: the largest tenant cannot
// have more than the host leaves it (measured here by running it without a
// limiter beside the same limited neighbours). Each smaller tenant gets its
// quota; the largest min(quota, that ceiling). Before issue 19 the 30 % tenant
// of 30/70 got 27-29 % here (every sample of its kernels was measured behind
// its neighbour's queue), and the 70 % one was held back while the device
// idled.
TEST(ControllerTest, LatencyBoundTenantsGetTheirQuotasAsFarAsTheHostAllows) {
  for (const Group& g :
       {Group{{10, 90}, 4}, Group{{30, 70}, 4}, Group{{20, 30, 50}, 4}, Group{{10, 30, 60}, 4}}) {
    const size_t largest = g.quotas.size() - 1;
    auto shares = RunGroup(g);
    auto ceiling = RunGroup(g, static_cast<int>(largest))[largest];
    for (size_t w = 0; w < ceiling.size(); ++w) {
      for (size_t i = 0; i < largest; ++i)
        EXPECT_NEAR(shares[i][w], g.quotas[i], 0.5)
            << "tenant " << i << " at " << g.quotas[i] << " %, window " << w + 1;
      const double allowed = std::min<double>(g.quotas[largest], ceiling[w]);
      EXPECT_NEAR(shares[largest][w], allowed, 0.5)
          << "largest at " << g.quotas[largest] << " %, window " << w + 1 << ", host ceiling " << ceiling[w];
    }
  }
}

TEST(ControllerTest, DefaultPolicyLetsALoneTenantUseIdleTime) {
  SimGpu gpu;
  Tenant& t = gpu.add(30, Policy::kDefault);
  gpu.run_until(4 * kSec);
  EXPECT_GT(gpu.share(t, kSec, 4 * kSec), 95.0);
  // A debt is never more than one burst while bursting.
  EXPECT_GE(t.controller.budget_ns(), -static_cast<int64_t>(burst_for_quota(30)) - static_cast<int64_t>(kMs));
}

TEST(ControllerTest, DefaultPolicyHoldsTheQuotaWhileAnotherTenantRuns) {
  SimGpu gpu;
  Tenant& t = gpu.add(30, Policy::kDefault);
  Tenant& other = gpu.add(50, Policy::kForce);
  other.stop_at = 5 * kSec;  // then leaves the device to t
  gpu.run_until(10 * kSec);
  EXPECT_NEAR(gpu.share(t, kSec, 5 * kSec), 30.0, 3.0);
  EXPECT_GT(gpu.share(t, 7 * kSec, 10 * kSec), 95.0);  // alone again: bursts
}

TEST(ControllerTest, DefaultPolicyHoldsTheQuotaWhenNeighboursAreUnknown) {
  SimGpu gpu;
  Tenant& t = gpu.add(30, Policy::kDefault);
  t.env->neighbours_known = false;
  gpu.run_until(4 * kSec);
  EXPECT_NEAR(gpu.share(t, kSec, 4 * kSec), 30.0, 2.0);
}

TEST(ControllerTest, ForceHoldsTheQuotaForALoneTenant) {
  SimGpu gpu;
  Tenant& t = gpu.add(30, Policy::kForce);
  gpu.run_until(4 * kSec);
  EXPECT_NEAR(gpu.share(t, kSec, 4 * kSec), 30.0, 2.0);
}

TEST(ControllerTest, HighPriorityGetsItsQuotaFirstWhenTheDeviceIsOversubscribed) {
  // 60 + 60 > 100: without priority both get about half.
  {
    SimGpu gpu;
    Tenant& a = gpu.add(60, Policy::kForce);
    Tenant& b = gpu.add(60, Policy::kForce);
    gpu.run_until(6 * kSec);
    EXPECT_NEAR(gpu.share(a, 2 * kSec, 6 * kSec), 50.0, 5.0);
    EXPECT_NEAR(gpu.share(b, 2 * kSec, 6 * kSec), 50.0, 5.0);
  }
  for (int low_first = 0; low_first < 2; ++low_first) {
    SimGpu gpu;
    Tenant* high;
    Tenant* low;
    if (low_first) {
      low = &gpu.add(60, Policy::kForce, true);
      high = &gpu.add(60, Policy::kForce, false);
    } else {
      high = &gpu.add(60, Policy::kForce, false);
      low = &gpu.add(60, Policy::kForce, true);
    }
    gpu.run_until(8 * kSec);
    EXPECT_NEAR(gpu.share(*high, 3 * kSec, 8 * kSec), 60.0, 4.0);
    // The low one gets what is left, less the headroom it keeps free while
    // the device is full (it oscillates between 30 and 40 %).
    EXPECT_NEAR(gpu.share(*low, 3 * kSec, 8 * kSec), 33.0, 6.0);
    EXPECT_LT(low->controller.rate_permille(), 600u);
  }
}

TEST(ControllerTest, LowPriorityAloneKeepsItsQuota) {
  SimGpu gpu;
  Tenant& t = gpu.add(40, Policy::kForce, true);
  gpu.run_until(4 * kSec);
  EXPECT_NEAR(gpu.share(t, kSec, 4 * kSec), 40.0, 2.0);
}

// A scripted environment: the "others" ahead in the queue release their turns
// in order whenever the waiter sleeps.
class QueueEnv : public Environment {
 public:
  uint64_t now = 0;
  bool others_release = true;
  std::vector<uint64_t> released;
  uint64_t now_ns() override { return now; }
  void sleep_until_ns(uint64_t d) override { now = d > now ? d : now; }
  void wait_for_turn(std::atomic<uint64_t>& serving, uint64_t seen, uint64_t timeout) override {
    now += timeout;
    if (others_release) {
      released.push_back(seen);
      serving.store(seen + 1);
    }
  }
  void wake_turns(std::atomic<uint64_t>&) override { ++wakes; }
  Neighbours neighbours(uint64_t) override { return Neighbours{true, 1, 50}; }
  int wakes = 0;
};

TEST_F(BoundControllerTest, WaitersAreReleasedInFifoOrder) {
  Bind(50);
  ASSERT_GT(c.budget_ns(), 0);
  // Tickets 0..2 are held by earlier waiters; ours will be 3. Although the
  // budget is positive, a newcomer must queue behind them.
  e.launch_ticket_next.store(3);
  e.launch_ticket_serving.store(0);
  QueueEnv env;
  env.now = 1;
  c.admit(env, kMs);
  EXPECT_EQ(env.released, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(e.launch_ticket_serving.load(), 4u);  // we released our turn
  EXPECT_EQ(e.launch_ticket_next.load(), 4u);
  EXPECT_GT(e.throttled_ns.load(), 0u);
}

TEST_F(BoundControllerTest, HeadWaitsForBudgetThenWakesTheNext) {
  Bind(10);
  e.budget_ns.store(-10 * static_cast<int64_t>(kMs));  // 10 ms of debt: 100 ms at 10 %
  e.launch_ticket_next.store(0);
  e.launch_ticket_serving.store(0);
  QueueEnv env;
  env.now = 1;
  // Someone queues behind us while we wait: simulate by bumping next first.
  uint64_t waited = c.admit(env, kMs);
  EXPECT_GE(waited, 100 * kMs);
  EXPECT_LT(waited, 130 * kMs);
  EXPECT_EQ(e.launch_ticket_serving.load(), 1u);
}

TEST_F(BoundControllerTest, AStalledQueueHeadIsSkipped) {
  Bind(50);
  e.launch_ticket_next.store(1);  // ticket 0 belongs to a process that died waiting
  e.launch_ticket_serving.store(0);
  QueueEnv env;
  env.others_release = false;
  env.now = 1;
  uint64_t waited = c.admit(env, kMs);
  EXPECT_GE(waited, Controller::kStallNs);
  EXPECT_EQ(e.launch_ticket_serving.load(), 2u);
}

TEST(EstimatesTest, UnknownKernelsAreChargedADefaultAndCorrectedToTheMeasurement) {
  static Estimates est;  // large: not on the stack
  est.reset();
  Estimates::Entry* e = est.find_or_add(0x1234);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(est.find_or_add(0x1234), e);
  EXPECT_TRUE(Estimates::should_sample(*e));
  EXPECT_FALSE(Estimates::should_sample(*e));  // one sample in flight at a time
  for (int i = 0; i < 10; ++i) Estimates::note_charged(*e, Estimates::charge_for(*e));
  // Ten launches charged 1 ms each; they really take 0.1 ms.
  int64_t correction = Estimates::on_sample(*e, 100'000);
  EXPECT_EQ(correction, 10 * 100'000 - 10 * static_cast<int64_t>(kMs));
  Estimates::sample_done(*e);
  EXPECT_EQ(Estimates::charge_for(*e), 100'000u);
}

TEST(EstimatesTest, TheMinimumFiltersOutNeighboursQueuedAhead) {
  static Estimates est;
  est.reset();
  Estimates::Entry* e = est.find_or_add(7);
  Estimates::on_sample(*e, 1'000'000);
  Estimates::on_sample(*e, 3'500'000);  // waited behind another tenant's kernels
  EXPECT_EQ(Estimates::charge_for(*e), 1'000'000u);
  for (int i = 0; i < Estimates::kWindow; ++i) Estimates::on_sample(*e, 2'000'000);  // the kernel got longer
  EXPECT_EQ(Estimates::charge_for(*e), 2'000'000u);
}

TEST(EstimatesTest, SamplesOneLaunchInSixteenOnceKnown) {
  static Estimates est;
  est.reset();
  Estimates::Entry* e = est.find_or_add(99);
  ASSERT_TRUE(Estimates::should_sample(*e));
  Estimates::on_sample(*e, 5000);
  Estimates::sample_done(*e);
  int sampled = 0;
  for (int i = 0; i < 160; ++i) {
    if (Estimates::should_sample(*e)) {
      ++sampled;
      Estimates::sample_done(*e);
    }
  }
  EXPECT_EQ(sampled, 10);
}

// An application launching in batches of 4 (or any period) must not always
// be sampled at the same place in its batch: the first kernel of a batch is
// the one queued behind a neighbour's work.
TEST(EstimatesTest, SampledLaunchesAreSpreadOverEveryPositionOfABatch) {
  static Estimates est;
  est.reset();
  Estimates::Entry* e = est.find_or_add(4);
  ASSERT_TRUE(Estimates::should_sample(*e));  // launch 0: unknown
  Estimates::on_sample(*e, kMs);
  Estimates::sample_done(*e);
  int at_position[4] = {};
  int sampled = 0;
  for (int launch = 1; launch < 16 * 64; ++launch) {
    if (!Estimates::should_sample(*e)) continue;
    Estimates::sample_done(*e);
    if (launch < 16) continue;  // block 0 held the first sample
    ++sampled;
    ++at_position[launch % 4];
  }
  EXPECT_EQ(sampled, 63);  // still one in each block of 16
  for (int p = 0; p < 4; ++p) EXPECT_GE(at_position[p], 8) << "position " << p;
}

// Once the driver's readings are trusted, a known estimate is kept: only
// unknown kernels are sampled.
TEST(EstimatesTest, OnlyUnknownKernelsAreSampledWhenAskedTo) {
  static Estimates est;
  est.reset();
  Estimates::Entry* e = est.find_or_add(5);
  EXPECT_TRUE(Estimates::should_sample(*e, true));
  Estimates::on_sample(*e, kMs);
  Estimates::sample_done(*e);
  for (int i = 0; i < 64; ++i) EXPECT_FALSE(Estimates::should_sample(*e, true)) << i;
}

TEST(ReconcilerTest, ChargesTheDifferenceAndMovesTheScaleHalfway) {
  Reconciler r;
  r.skip(10 * kMs);  // the first reading
  // 20 ms charged since, the driver counted 10: refund 10, scale halfway to 0.5.
  EXPECT_EQ(r.reconcile(30 * kMs, 10 * kMs), -10 * static_cast<int64_t>(kMs));
  EXPECT_EQ(r.scale(), 750'000u);
  // The correction counts as charged: 5 ms more charged, 5 measured.
  EXPECT_EQ(r.reconcile(25 * kMs, 5 * kMs), 0);
  EXPECT_EQ(r.scale(), 750'000u);
  // Too little charged to say anything about the scale.
  EXPECT_EQ(r.reconcile(26 * kMs, 0), -static_cast<int64_t>(kMs));
  EXPECT_EQ(r.scale(), 750'000u);
}

// A first estimate measured behind three neighbours' queues (20 times the
// kernel): the scale goes all the way to the ratio at once, and may go far
// below the old floor of 1/20, so the estimate's bias is absorbed.
TEST(ReconcilerTest, AFarOffRatioIsTakenWholeWithinItsBounds) {
  Reconciler r;
  r.skip(0);
  EXPECT_EQ(r.reconcile(40 * kMs, 1 * kMs), -39 * static_cast<int64_t>(kMs));
  EXPECT_EQ(r.scale(), 25'000u);  // 1/40
  EXPECT_EQ(r.scaled(40 * kMs), kMs);
  r.reconcile(kMs + 10 * kMs, 10 * kMs / 500);  // 10 ms charged since, 1/500 of it run: the floor, 1/1000
  EXPECT_EQ(r.scale(), Reconciler::kMinScale);
  Reconciler up;
  up.skip(0);
  up.reconcile(10 * kMs, 1000 * kMs);  // 100 times: at the ceiling of 20
  EXPECT_EQ(up.scale(), Reconciler::kMaxScale);
}

TEST(NeighboursTest, OwnProcessesAreNotNeighbours) {
  ProcessShare s[] = {{10, 30}, {11, 20}, {42, 45}};
  uint32_t own[] = {10, 11};
  Neighbours n = summarise_neighbours(s, 3, own, 2);
  EXPECT_TRUE(n.known);
  EXPECT_EQ(n.others, 1u);
  EXPECT_EQ(n.others_percent, 45u);
  n = summarise_neighbours(s, 2, own, 2);
  EXPECT_EQ(n.others, 0u);
}

TEST(PolicyTest, Parses) {
  EXPECT_EQ(parse_policy("force"), Policy::kForce);
  EXPECT_EQ(parse_policy("disable"), Policy::kDisable);
  EXPECT_EQ(parse_policy("default"), Policy::kDefault);
  EXPECT_EQ(parse_policy(nullptr), Policy::kDefault);
}

}  // namespace
}  // namespace tessera::vgpu::compute

namespace tessera::vgpu::compute {
namespace {

// Real time, real sleeping, a real futex: eight threads contend for one
// budget. Asserts what holds whatever the machine's load: every launch is
// admitted (no deadlock, no lost wake-up), every admitted launch is charged,
// and over-quota demand waited. (Shares are the benchmark's business.)
class ThreadedEnv : public Environment {
 public:
  uint64_t now_ns() override {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * kSec + static_cast<uint64_t>(ts.tv_nsec);
  }
  void sleep_until_ns(uint64_t d) override {
    timespec ts{static_cast<time_t>(d / kSec), static_cast<long>(d % kSec)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
  }
  void wait_for_turn(std::atomic<uint64_t>& serving, uint64_t seen, uint64_t timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::nanoseconds(timeout), [&] { return serving.load() != seen; });
  }
  void wake_turns(std::atomic<uint64_t>&) override {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  Neighbours neighbours(uint64_t) override { return Neighbours{true, 1, 50}; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

TEST(ControllerThreadsTest, ManyThreadsShareOneBudgetWithoutDeadlock) {
  DeviceEntry e{};
  e.core_quota_percent.store(50);
  Controller c;
  ThreadedEnv env;
  c.bind(&e, Policy::kForce, false, env.now_ns(), e.core_quota_percent.load());
  constexpr int kThreads = 8, kLaunches = 20;
  constexpr uint64_t kCost = 2 * kMs;  // 320 ms of device time at 50 %: about 0.6 s of wall time
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kLaunches; ++i) {
        c.admit(env, kCost);
        admitted.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(admitted.load(), kThreads * kLaunches);
  EXPECT_EQ(e.gpu_time_used_ns.load(), kThreads * kLaunches * kCost);
  EXPECT_EQ(e.launch_ticket_next.load(), e.launch_ticket_serving.load());  // queue drained
  EXPECT_GT(e.throttled_ns.load(), 0u);
}

// A process of the container rewrites the entry's compute fields (issue 19):
// verify() puts back what the bound process knows, and says what it found.
TEST(ControllerVerifyTest, RewrittenQuotaBurstBudgetAndRefillMarkAreRestored) {
  DeviceEntry e{};
  e.core_quota_percent.store(30);
  Controller c;
  c.bind(&e, Policy::kForce, false, 1000, 30);
  EXPECT_EQ(c.verify(1000), 0u);  // nothing changed: nothing repaired
  const uint64_t burst = burst_for_quota(30);
  e.core_quota_percent.store(100);
  e.budget_burst_ns.store(1ull << 50);
  e.budget_ns.store(INT64_C(1) << 50);
  e.budget_refill_at_ns.store(UINT64_MAX / 2);
  const unsigned repaired = c.verify(1000);
  EXPECT_EQ(repaired, Controller::kRepairedQuota | Controller::kRepairedBurst | Controller::kRepairedBudget |
                          Controller::kRepairedRefillMark);
  EXPECT_EQ(e.core_quota_percent.load(), 30u);
  EXPECT_EQ(e.budget_burst_ns.load(), burst);
  EXPECT_EQ(e.budget_ns.load(), static_cast<int64_t>(burst));
  EXPECT_EQ(e.budget_refill_at_ns.load(), 1000u);
  EXPECT_EQ(c.quota_percent(), 30u);
  // A region quota lowered to 0 ("unlimited") is the same lift.
  e.core_quota_percent.store(0);
  EXPECT_EQ(c.verify(1000), Controller::kRepairedQuota);
  // A full budget is the limiter's own doing and kept; a nanosecond more is
  // not (neither refills nor refunds go above the burst).
  e.budget_ns.store(static_cast<int64_t>(burst) * Controller::kBudgetCeilingBursts);
  EXPECT_EQ(c.verify(1000), 0u);
  e.budget_ns.store(static_cast<int64_t>(burst) * Controller::kBudgetCeilingBursts + 1);
  EXPECT_EQ(c.verify(1000), Controller::kRepairedBudget);
}

// The process's quota, not the region's, is what bind() holds.
TEST(ControllerVerifyTest, BindTakesTheProcesssQuotaNotTheRegions) {
  DeviceEntry e{};
  e.core_quota_percent.store(100);  // rewritten before this process bound
  Controller c;
  c.bind(&e, Policy::kForce, false, 0, 25);
  EXPECT_EQ(c.quota_percent(), 25u);
  EXPECT_EQ(c.rate_permille(), 250u);
  EXPECT_EQ(c.verify(0), Controller::kRepairedQuota);
  EXPECT_EQ(e.core_quota_percent.load(), 25u);
}

}  // namespace
}  // namespace tessera::vgpu::compute
