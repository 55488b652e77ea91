// Rng: the trace benchmark's pseudo-random numbers, so that a seed means the
// same workload on every machine and compiler (std:: distributions are not
// specified bit-for-bit).
//
// Generator: xoshiro256** (Blackman & Vigna), state filled by splitmix64 from
// the seed. Bounded draws reject the biased low range (no modulo bias).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/policy.h"

namespace tessera::trace {

class Rng : public core::UniformDraw {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t x = seed;
    for (uint64_t& s : state_) {
      x += 0x9e3779b97f4a7c15ULL;
      uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      s = z ^ (z >> 31);
    }
  }

  uint64_t Next() {
    const uint64_t result = Rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = Rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, n): values below 2^64 mod n are rejected so that every
  // residue has the same number of preimages.
  uint64_t Below(uint64_t n) override {
    const uint64_t threshold = (0 - n) % n;
    for (;;) {
      uint64_t r = Next();
      if (r >= threshold) return r % n;
    }
  }

  // Fisher–Yates: position i swaps with a uniform position in [0, i].
  template <typename T>
  void Shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) {
      size_t j = Below(i);
      std::swap(v[i - 1], v[j]);
    }
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t state_[4];
};

}  // namespace tessera::trace
