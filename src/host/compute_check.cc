#include "host/compute_check.h"

#include <algorithm>

namespace tessera::host {

ComputeJudgement JudgeComputePass(const std::vector<ComputeUser>& users, int others_percent,
                                  int quota_percent, int tolerance_percent) {
  ComputeJudgement j;
  j.others_percent = others_percent;
  for (const auto& u : users) {
    j.used_percent += u.sm_util_percent;
    if (u.sm_util_percent > 0 && !u.in_region) j.bypass = true;
  }
  j.over = j.used_percent > quota_percent + tolerance_percent && (others_percent > 0 || j.bypass);
  return j;
}

bool KilledFirst(const ComputeUser& a, const ComputeUser& b) {
  if (a.in_region != b.in_region) return !a.in_region;
  if (a.sm_util_percent != b.sm_util_percent) return a.sm_util_percent > b.sm_util_percent;
  return a.pid < b.pid;
}

std::vector<ComputeUser> ComputeOffenders(std::vector<ComputeUser> users, int quota_percent,
                                          int tolerance_percent) {
  std::erase_if(users, [](const ComputeUser& u) { return u.sm_util_percent <= 0; });
  std::sort(users.begin(), users.end(), KilledFirst);
  int used = 0;
  for (const auto& u : users) used += u.sm_util_percent;
  std::vector<ComputeUser> taken;
  for (const auto& u : users) {
    if (used <= quota_percent + tolerance_percent) break;
    used -= u.sm_util_percent;
    taken.push_back(u);
  }
  return taken;
}

}  // namespace tessera::host
