// Per-kernel estimates of device time, learnt from measured samples.
//
// A launch is charged, when it is admitted, with the estimate of its key (a
// CUfunction or CUgraphExec, combined with the device). Some launches are
// sampled: their device time is measured (events around them, limiter.cc).
// When a sample lands, on_sample() updates the estimate and returns the
// correction for every launch of the key charged since the previous sample:
// (launches x new estimate) - what they were charged. So the budget converges
// on measured device time, not on grid size, even while an estimate is still
// being learnt (an unknown kernel is charged kUnknownEstimateNs until then).
//
// The estimate is the minimum of the last kWindow samples. An event pair
// around a kernel measures its latency, which on a shared device includes
// other tenants' work queued ahead of it; the minimum filters that out (a
// kernel's true duration is a lower bound of every sample of it). Cost: a
// kernel whose duration varies is charged near its shortest recent run.
//
// Thread-safety: find_or_add(), charge_for(), note_charged() and
// should_sample() are lock-free and may run on any thread. on_sample() must
// not run concurrently with itself (the limiter's poller holds a mutex).
// Fixed capacity, no allocation.
#pragma once

#include <atomic>
#include <cstdint>

namespace tessera::vgpu::compute {

class Estimates {
 public:
  static constexpr int kCapacity = 2048;        // distinct (kernel, device) keys per process
  static constexpr int kWindow = 8;             // samples the minimum is taken over
  static constexpr uint64_t kSampleEvery = 16;  // once known, one launch in this many is measured
  static constexpr uint64_t kUnknownEstimateNs = 1'000'000;

  struct Entry {
    std::atomic<uint64_t> key{0};
    std::atomic<uint64_t> estimate_ns{0};  // 0 = no sample yet
    std::atomic<uint64_t> launches{0};
    std::atomic<uint64_t> launches_since{0};  // since the last correction
    std::atomic<uint64_t> charged_since{0};
    std::atomic<uint32_t> sampling{0};  // a sample of this key is in flight
    uint64_t window[kWindow] = {};      // guarded by the caller of on_sample
    uint32_t window_count = 0;          // guarded by the caller of on_sample
  };

  // The entry of `key` (non-zero), created when absent; nullptr when full.
  Entry* find_or_add(uint64_t key);

  static uint64_t charge_for(const Entry& e) {
    uint64_t est = e.estimate_ns.load(std::memory_order_relaxed);
    return est != 0 ? est : kUnknownEstimateNs;
  }
  static void note_charged(Entry& e, uint64_t ns) {
    e.launches_since.fetch_add(1, std::memory_order_relaxed);
    e.charged_since.fetch_add(ns, std::memory_order_relaxed);
  }
  // Takes back a charge whose launch the driver refused.
  static void unnote_charged(Entry& e, uint64_t ns) {
    e.launches_since.fetch_sub(1, std::memory_order_relaxed);
    e.charged_since.fetch_sub(ns, std::memory_order_relaxed);
  }
  // Whether this launch should be measured: the first ones of a key until a
  // sample lands (one at a time), then one in kSampleEvery — or never again
  // when `only_until_known` (the limiter's choice once the driver's own
  // accounting is trusted, see limiter.cc). Claims the key's sampling flag
  // when it says yes; the caller clears it (sample_done()).
  static bool should_sample(Entry& e, bool only_until_known = false);
  static void sample_done(Entry& e) { e.sampling.store(0, std::memory_order_release); }

  // A measured device time for one launch of e's key. Returns the correction
  // to charge (may be negative).
  static int64_t on_sample(Entry& e, uint64_t measured_ns);

  // Forgets everything (a forked child).
  void reset();

 private:
  Entry entries_[kCapacity];
};

}  // namespace tessera::vgpu::compute
