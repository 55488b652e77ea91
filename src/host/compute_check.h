// The compute rule of tessera's enforcement of last resort, shared by
// tessera-node (node/enforcer.h, per container) and `tessera run`'s
// supervisor (runner/job_watch.h, per job): libvgpu's launch limiter holds a
// quota only for the launches it sees, the driver's per-process SM
// utilisation (NVML) sees every kernel.
//
// One pass, one container (or job) on one GPU: it is over when its processes'
// SM utilisation exceeds quota + tolerance and either another tenant used the
// GPU in that pass (under the `default` policy a lone tenant may use idle
// time: that harms nobody) or one of its busy processes runs without libvgpu.
// A window of such passes in a row makes a violation (one sample is noise:
// kernels queued before a throttle, NVML's own averaging). Offenders are taken
// in kill order — processes libvgpu does not know first, then the busiest,
// then the lowest pid — until the rest is within quota + tolerance.
//
// Pure; thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::host {

struct ComputeUser {
  uint32_t pid = 0;
  int sm_util_percent = 0;  // this pass, the driver's figure (>= 0)
  bool in_region = false;   // libvgpu knows it (a live process slot of the region)
};

struct ComputeJudgement {
  int used_percent = 0;    // the container's (job's) processes together
  int others_percent = 0;  // the GPU's other processes
  bool bypass = false;     // a busy process of it is not in its region
  bool over = false;       // this pass counts towards the window
};

// `others_percent`: what the GPU's other processes used this pass.
ComputeJudgement JudgeComputePass(const std::vector<ComputeUser>& users, int others_percent,
                                  int quota_percent, int tolerance_percent);

// Whether `a` is killed before `b`.
bool KilledFirst(const ComputeUser& a, const ComputeUser& b);

// The busy `users` to take, in kill order, until the rest is within
// quota + tolerance (none when it already is).
std::vector<ComputeUser> ComputeOffenders(std::vector<ComputeUser> users, int quota_percent,
                                          int tolerance_percent);

}  // namespace tessera::host
