// One line for a set of latency samples in milliseconds ("p50 …, p99 …,
// max …"), as scheduler_bench and scale_bench print them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace tessera::bench {

inline std::string LatencySummary(std::vector<double> samples) {
  if (samples.empty()) return "no samples";
  std::sort(samples.begin(), samples.end());
  auto pct = [&](double q) { return samples[std::min(samples.size() - 1, size_t(q * samples.size()))]; };
  char buf[128];
  std::snprintf(buf, sizeof(buf), "p50 %.2f ms, p99 %.2f ms, max %.2f ms", pct(0.50), pct(0.99),
                samples.back());
  return buf;
}

}  // namespace tessera::bench
