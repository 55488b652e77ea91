// Reconciliation of one process's charges on one device with the device time
// the driver accounted to it (NVML per-process utilisation).
//
// Launches are charged estimates (estimator.h) at launch. The estimates come
// from event pairs, which measure a kernel's latency: on a shared device that
// includes other tenants' work queued ahead of it. When every sample is
// contended (tenants in lock-step) the estimates over-charge. So every
// kIntervalNs the limiter reads what the driver counted for this process over
// the interval since the previous reading, and the reconciler
//  - returns the correction to charge to the budget: measured - charged in the
//    interval (the cumulative charge then equals the cumulative measurement at
//    every reading);
//  - moves a per-device scale applied to launch estimates towards measured /
//    charged, so the next interval's charges are closer: halfway while the
//    ratio is within 1/2..2 (damping the noise of one reading: a whole percent
//    of the interval, kernels charged at launch but not run yet), all the way
//    beyond (a first estimate measured behind a neighbour's queue can be many
//    times the kernel's duration; halving the error per reading would
//    over-charge the tenant for half a second). The scale stays within
//    1/1000..20.
// Once the readings are trusted the estimates stay as first measured
// (limiter.cc), so the scale is what carries their bias.
// The NVML query and the decision whether the driver's figures can be trusted
// (our pid listed) stay in limiter.cc; this is the arithmetic, pure so that the
// unit model (controller_test.cc) runs the same code.
//
// Thread-safety: reconcile() and skip() must not run concurrently (the limiter
// holds a per-device mutex around them); scale() may be read by any
// thread at any time. No allocation.
#pragma once

#include <atomic>
#include <cstdint>

namespace tessera::vgpu::compute {

class Reconciler {
 public:
  static constexpr uint64_t kIntervalNs = 100'000'000;
  static constexpr uint64_t kMinChargeForScaleNs = 2'000'000;  // below this a ratio says nothing
  static constexpr uint32_t kScaleOne = 1'000'000;             // the scale's unit: parts per million
  static constexpr uint32_t kMinScale = 1'000;                 // 1/1000
  static constexpr uint32_t kMaxScale = 20'000'000;            // 20

  // A reading that cannot be used (the first, a failed query, our pid not
  // listed yet): the next interval starts at `charged_total`.
  void skip(uint64_t charged_total) { last_charged_ = charged_total; }

  // The driver accounted `measured_ns` to this process since the previous
  // reading, when this process's cumulative charge was the one given to the
  // previous skip() or reconcile(); it is `charged_total` now. Returns the
  // correction to charge (positive: the process used more than it paid).
  int64_t reconcile(uint64_t charged_total, uint64_t measured_ns);

  // The scale, in millionths: launch charges are estimate x scale() / kScaleOne.
  uint32_t scale() const { return scale_.load(std::memory_order_relaxed); }
  uint64_t scaled(uint64_t estimate_ns) const { return estimate_ns * scale() / kScaleOne; }

 private:
  void multiply_scale(double factor);

  uint64_t last_charged_ = 0;  // cumulative charge at the previous reading, corrections included
  std::atomic<uint32_t> scale_{kScaleOne};
};

}  // namespace tessera::vgpu::compute
