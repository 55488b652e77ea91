#include "vgpu/compute/reconciler.h"

namespace tessera::vgpu::compute {

void Reconciler::multiply_scale(double factor) {
  uint32_t cur = scale_milli_.load(std::memory_order_relaxed);
  uint32_t next;
  do {
    double scale = static_cast<double>(cur) * factor;
    if (scale < kMinScaleMilli) scale = kMinScaleMilli;
    if (scale > kMaxScaleMilli) scale = kMaxScaleMilli;
    next = static_cast<uint32_t>(scale + 0.5);
  } while (!scale_milli_.compare_exchange_weak(cur, next, std::memory_order_relaxed));
}

int64_t Reconciler::reconcile(uint64_t charged_total, uint64_t measured_ns) {
  const int64_t measured = static_cast<int64_t>(measured_ns);
  const int64_t charged = static_cast<int64_t>(charged_total - last_charged_);
  const int64_t correction = measured - charged;
  last_charged_ = charged_total + static_cast<uint64_t>(correction);
  if (charged > static_cast<int64_t>(kMinChargeForScaleNs)) {
    // Damped: halfway towards the ratio each interval, within the bounds.
    double ratio = static_cast<double>(measured) / static_cast<double>(charged);
    multiply_scale((1.0 + ratio) / 2.0);
  }
  return correction;
}

}  // namespace tessera::vgpu::compute
