#include "vgpu/compute/estimator.h"

namespace tessera::vgpu::compute {

Estimates::Entry* Estimates::find_or_add(uint64_t key) {
  if (key == 0) return nullptr;
  uint64_t h = key * 0x9E3779B97F4A7C15ull;
  for (int probe = 0; probe < kCapacity; ++probe) {
    Entry& e = entries_[(h + static_cast<uint64_t>(probe)) % kCapacity];
    uint64_t k = e.key.load(std::memory_order_acquire);
    if (k == key) return &e;
    if (k == 0) {
      if (e.key.compare_exchange_strong(k, key, std::memory_order_acq_rel)) return &e;
      if (k == key) return &e;
    }
  }
  return nullptr;
}

bool Estimates::should_sample(Entry& e, bool only_until_known) {
  uint64_t n = e.launches.fetch_add(1, std::memory_order_relaxed);
  if (only_until_known && e.estimate_ns.load(std::memory_order_relaxed) != 0) return false;
  // One launch in each block of kSampleEvery, at a position that varies from
  // block to block (a hash of the block's number): a fixed position would
  // alias with an application's own period — a tenant launching batches of 4
  // and synchronising would always be sampled at the first kernel of a
  // batch, the one that queues behind a neighbour's work, and every sample
  // would be contended.
  const uint64_t block = n / kSampleEvery;
  const uint64_t position = ((block + 1) * 0x9E3779B97F4A7C15ull >> 32) % kSampleEvery;
  bool want = e.estimate_ns.load(std::memory_order_relaxed) == 0 || n % kSampleEvery == position;
  if (!want) return false;
  uint32_t expected = 0;
  return e.sampling.compare_exchange_strong(expected, 1, std::memory_order_acq_rel);
}

int64_t Estimates::on_sample(Entry& e, uint64_t measured_ns) {
  if (measured_ns == 0) measured_ns = 1;
  e.window[e.window_count % kWindow] = measured_ns;
  e.window_count += 1;
  uint32_t n = e.window_count < kWindow ? e.window_count : kWindow;
  uint64_t est = e.window[0];
  for (uint32_t i = 1; i < n; ++i)
    if (e.window[i] < est) est = e.window[i];
  e.estimate_ns.store(est, std::memory_order_relaxed);
  uint64_t launches = e.launches_since.exchange(0, std::memory_order_relaxed);
  uint64_t charged = e.charged_since.exchange(0, std::memory_order_relaxed);
  return static_cast<int64_t>(launches * est) - static_cast<int64_t>(charged);
}

void Estimates::reset() {
  for (Entry& e : entries_) {
    e.key.store(0, std::memory_order_relaxed);
    e.estimate_ns.store(0, std::memory_order_relaxed);
    e.launches.store(0, std::memory_order_relaxed);
    e.launches_since.store(0, std::memory_order_relaxed);
    e.charged_since.store(0, std::memory_order_relaxed);
    e.sampling.store(0, std::memory_order_relaxed);
    e.window_count = 0;
  }
}

}  // namespace tessera::vgpu::compute
