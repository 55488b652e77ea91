// The GPUs' shared timelines (state.h): kernels are booked when they are
// launched, first come, first served. A process's kernel occupies the whole
// GPU (or its MIG instance) for its duration, after everything booked before
// it. MPS clients run concurrently instead, each on at most its active-thread
// share of the device, in the room that the work booked before theirs leaves.
// Every booking is a BusyInterval in the GPU's ring; what a process used is
// read back from there, weighted by the share it ran on.
#include <algorithm>
#include <vector>

#include "sim/state.h"

namespace tessera::sim {
namespace {

// Appends [start, end) of `pid` at `share` to the GPU's ring, extending the
// last interval when it is the same process's, back to back.
void AppendInterval(GpuRecord& g, int pid, uint32_t gi_id, int64_t start, int64_t end, uint32_t share) {
  if (g.interval_count > 0) {
    BusyInterval& last = g.intervals[(g.interval_count - 1) % kMaxIntervals];
    if (last.pid == pid && last.gpu_instance == gi_id && last.share_percent == share &&
        last.end_ns == start) {
      last.end_ns = end;
      return;
    }
  }
  BusyInterval& slot = g.intervals[g.interval_count % kMaxIntervals];
  slot = BusyInterval{pid, gi_id, start, end, share, 0};
  ++g.interval_count;
}

// The whole-GPU intervals (not in a MIG instance) that end after `t`.
std::vector<BusyInterval> BookedAfter(const GpuRecord& g, int64_t t) {
  std::vector<BusyInterval> out;
  const uint64_t n = std::min<uint64_t>(g.interval_count, kMaxIntervals);
  for (uint64_t k = 0; k < n; ++k) {
    const BusyInterval& iv = g.intervals[(g.interval_count - 1 - k) % kMaxIntervals];
    if (iv.gpu_instance == 0 && iv.end_ns > t) out.push_back(iv);
  }
  return out;
}

}  // namespace

std::pair<int64_t, int64_t> SimState::BookKernelLocked(int gpu, int pid, int64_t earliest_ns,
                                                       int64_t duration_ns, int gi_slot) {
  GpuRecord& g = file_->gpus[gpu];
  uint32_t gi_id = 0;
  int64_t* busy_until = &g.busy_until_ns;
  if (gi_slot >= 0 && gi_slot < kMaxGpuInstances && g.gis[gi_slot].in_use) {
    gi_id = g.gis[gi_slot].id;
    busy_until = &g.gis[gi_slot].busy_until_ns;
  }
  const int64_t start = std::max({MonotonicNs(), earliest_ns, *busy_until});
  const int64_t end = start + std::max<int64_t>(duration_ns, 1);
  *busy_until = end;
  AppendInterval(g, pid, gi_id, start, end, 100);
  return {start, end};
}

std::pair<int64_t, int64_t> SimState::BookSharedKernelLocked(int gpu, int pid, int64_t earliest_ns,
                                                             int64_t work_ns, uint32_t share_percent) {
  GpuRecord& g = file_->gpus[gpu];
  const int64_t share = std::clamp<int64_t>(share_percent, 1, 100);
  int64_t t = std::max(MonotonicNs(), earliest_ns);
  const std::vector<BusyInterval> booked = BookedAfter(g, t);
  // Work left, in ns of the whole device scaled by 100 (ns x percent).
  int64_t left = std::max<int64_t>(work_ns, 1) * 100;
  int64_t start = -1;
  while (left > 0) {
    // The share of the device booked at t (and the client's own part of it:
    // all its streams together stay within its share), and when that changes.
    int64_t used = 0, own = 0, next = INT64_MAX;
    for (const BusyInterval& iv : booked) {
      if (iv.start_ns <= t && t < iv.end_ns) {
        used += iv.share_percent;
        if (iv.pid == pid) own += iv.share_percent;
        next = std::min(next, iv.end_ns);
      } else if (iv.start_ns > t) {
        next = std::min(next, iv.start_ns);
      }
    }
    const int64_t rate = std::min(share - own, 100 - used);
    if (rate <= 0) {
      t = next;  // the device is full until then (never INT64_MAX: every booking ends)
      continue;
    }
    if (start < 0) start = t;
    const int64_t need = (left + rate - 1) / rate;  // ns at this rate
    const int64_t until = next == INT64_MAX ? t + need : std::min(next, t + need);
    AppendInterval(g, pid, 0, t, until, static_cast<uint32_t>(rate));
    left -= (until - t) * rate;
    t = until;
  }
  // Work booked later without a share waits for this (the whole-GPU timeline).
  g.busy_until_ns = std::max(g.busy_until_ns, t);
  return {start, t};
}

std::map<int, int64_t> SimState::BusyByProcessLocked(int gpu, int64_t from_ns, int64_t to_ns,
                                                     uint32_t gi_id) const {
  std::map<int, int64_t> busy;
  const GpuRecord& g = file_->gpus[gpu];
  const uint64_t n = std::min<uint64_t>(g.interval_count, kMaxIntervals);
  // Intervals of one timeline are in time order, but MIG instances' timelines
  // (and MPS clients') interleave: look at the whole ring.
  for (uint64_t k = 0; k < n; ++k) {
    const BusyInterval& iv = g.intervals[(g.interval_count - 1 - k) % kMaxIntervals];
    if (gi_id != 0 && iv.gpu_instance != gi_id) continue;
    const int64_t a = std::max(iv.start_ns, from_ns), b = std::min(iv.end_ns, to_ns);
    if (b > a) busy[iv.pid] += (b - a) * iv.share_percent / 100;
  }
  return busy;
}

}  // namespace tessera::sim
