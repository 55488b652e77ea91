#include "vgpu/compute/reconciler.h"

namespace tessera::vgpu::compute {

void Reconciler::multiply_scale(double factor) {
  uint32_t cur = scale_.load(std::memory_order_relaxed);
  uint32_t next;
  do {
    double scale = static_cast<double>(cur) * factor;
    if (scale < kMinScale) scale = kMinScale;
    if (scale > kMaxScale) scale = kMaxScale;
    next = static_cast<uint32_t>(scale + 0.5);
  } while (!scale_.compare_exchange_weak(cur, next, std::memory_order_relaxed));
}

int64_t Reconciler::reconcile(uint64_t charged_total, uint64_t measured_ns) {
  const int64_t measured = static_cast<int64_t>(measured_ns);
  const int64_t charged = static_cast<int64_t>(charged_total - last_charged_);
  const int64_t correction = measured - charged;
  last_charged_ = charged_total + static_cast<uint64_t>(correction);
  if (charged > static_cast<int64_t>(kMinChargeForScaleNs)) {
    // Damped (halfway) near 1, where a reading's noise is of the order of
    // the error; undamped when far off (see the header).
    double ratio = static_cast<double>(measured) / static_cast<double>(charged);
    multiply_scale(ratio >= 0.5 && ratio <= 2.0 ? (1.0 + ratio) / 2.0 : ratio);
  }
  return correction;
}

}  // namespace tessera::vgpu::compute
