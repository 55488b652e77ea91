#include "node/enforcer.h"

#include <algorithm>
#include <map>

#include "contract/container_contract.h"
#include "host/compute_check.h"
#include "vgpu/config.h"

namespace tessera::node {
namespace {

struct Member {
  const ProcessIdentity* process = nullptr;
  uint64_t used_bytes = 0;
};

struct Group {
  const RegionDir* region = nullptr;
  std::string gpu_uuid;
  std::vector<Member> members;
};

const char* LookupIn(void* context, const char* name) {
  const auto* environment = static_cast<const std::map<std::string, std::string>*>(context);
  auto it = environment->find(name);
  return it == environment->end() ? nullptr : it->second.c_str();
}

// What the process's environment declares for the GPU, with libvgpu's own
// reading of it (HAMi per-index limits name container ordinals, which the
// agent cannot map: only the all-device and per-UUID forms apply here).
std::optional<uint64_t> EnvironmentLimit(const ProcessIdentity& process, const std::string& gpu_uuid) {
  if (process.environment.empty()) return std::nullopt;
  vgpu::Config config =
      vgpu::load_config(LookupIn, const_cast<std::map<std::string, std::string>*>(&process.environment));
  const uint64_t limit = config.memory_limit_for(gpu_uuid.c_str(), -1);
  if (limit == 0) return std::nullopt;
  return limit;
}

std::optional<bool> OomKillerSetting(const ProcessIdentity& process) {
  auto it = process.environment.find(contract::kOomKillerEnv);
  if (it == process.environment.end()) return std::nullopt;
  return vgpu::parse_bool(it->second.c_str());
}

uint64_t AccountedFor(const RegionDir& region, const std::string& gpu_uuid, uint32_t container_pid) {
  if (!region.region) return 0;
  const auto& devices = region.region->devices;
  for (size_t d = 0; d < devices.size(); ++d) {
    if (devices[d].uuid != gpu_uuid) continue;
    for (const auto& p : region.region->processes) {
      if (p.pid == container_pid && d < p.memory_used_bytes.size()) return p.memory_used_bytes[d];
    }
  }
  return 0;
}

// Whether the region has a live process slot for the container pid: libvgpu
// runs in that process.
bool InRegion(const RegionDir& region, uint32_t container_pid) {
  if (!region.region) return false;
  for (const auto& p : region.region->processes)
    if (p.pid == container_pid) return true;
  return false;
}

// A DRA claim's cores on a GPU, from its limits.json (claim_regions.h).
std::optional<int> ClaimCores(const ClaimLimits& claim, const std::string& gpu_uuid) {
  auto it = claim.cores.find(gpu_uuid);
  if (it == claim.cores.end()) return std::nullopt;
  return it->second;
}

// Takes the `candidates` (best first) as offenders until what is left of
// `used` (their `amount`s taken off) is within `allowed`, killing each one
// taken when `kill`: the same rule for memory and for compute.
template <typename OffenderT, typename Amount>
std::vector<OffenderT> TakeOffenders(std::vector<OffenderT>& candidates, Amount OffenderT::*amount,
                                     Amount used, Amount allowed, bool kill, ProcessInspector& inspector) {
  std::vector<OffenderT> taken;
  for (auto& o : candidates) {
    if (used <= allowed) break;
    used -= std::min(used, o.*amount);
    if (kill) {
      auto status = inspector.Kill(o.process);
      o.killed = status.ok();
      if (!status.ok()) o.kill_error = status.error().message;
    }
    taken.push_back(std::move(o));
  }
  return taken;
}

}  // namespace

std::vector<AttributedProcess> AttributeGpuProcesses(const std::vector<host::GpuSample>& gpus,
                                                     const std::vector<RegionDir>& regions,
                                                     ProcessInspector& inspector) {
  std::map<std::pair<dev_t, ino_t>, const RegionDir*> by_identity;
  for (const auto& r : regions) by_identity[{r.dev, r.ino}] = &r;
  std::map<uint32_t, std::optional<ProcessIdentity>> inspected;
  std::vector<AttributedProcess> out;
  for (const auto& gpu : gpus) {
    if (!gpu.processes_known) continue;
    for (const auto& p : gpu.processes) {
      auto [it, fresh] = inspected.try_emplace(p.pid);
      if (fresh) it->second = inspector.Inspect(p.pid);
      const auto& identity = it->second;
      if (!identity || !identity->sees_region_dir) continue;
      auto region = by_identity.find({identity->region_dev, identity->region_ino});
      if (region == by_identity.end()) continue;  // not a container of this node's tessera
      out.push_back(AttributedProcess{region->second, gpu.uuid, *identity, p.used_bytes, p.sm_util_percent});
    }
  }
  return out;
}

Enforcer::Enforcer(EnforcementPolicy policy, ProcessInspector* inspector, AllocationLimit allocation_limit,
                   AllocationCores allocation_cores)
    : policy_(policy),
      inspector_(inspector),
      allocation_limit_(std::move(allocation_limit)),
      allocation_cores_(std::move(allocation_cores)) {}

std::vector<Violation> Enforcer::Pass(const std::vector<AttributedProcess>& processes) {
  std::map<std::pair<std::string, std::string>, Group> groups;  // (region, gpu)
  for (const auto& p : processes) {
    Group& group = groups[{p.region->name, p.gpu_uuid}];
    group.region = p.region;
    group.gpu_uuid = p.gpu_uuid;
    group.members.push_back(Member{&p.process, p.used_bytes});
  }

  std::vector<Violation> violations;
  std::set<std::pair<std::string, std::string>> violating_now;
  for (auto& [key, group] : groups) {
    Violation v;
    v.region = group.region->name;
    v.owner = group.region->owner;
    v.gpu_uuid = group.gpu_uuid;
    for (const auto& m : group.members) v.used_bytes += m.used_bytes;

    std::optional<uint64_t> limit;
    if (const auto& claim = group.region->claim) {  // a DRA claim's: its read-only limits.json
      if (auto it = claim->memory_bytes.find(v.gpu_uuid); it != claim->memory_bytes.end() && it->second > 0) {
        limit = it->second;
        v.limit_source = "claim";
      }
    }
    if (!limit && v.owner && allocation_limit_) {
      limit = allocation_limit_(*v.owner, v.gpu_uuid);
      if (limit) v.limit_source = "allocation";
    }
    if (!limit && group.region->region) {
      if (const host::DeviceUsage* d = group.region->region->Find(v.gpu_uuid);
          d && d->memory_limit_bytes > 0) {
        limit = d->memory_limit_bytes;
        v.limit_source = "region";
      }
    }
    for (size_t i = 0; !limit && i < group.members.size(); ++i) {
      limit = EnvironmentLimit(*group.members[i].process, v.gpu_uuid);
      if (limit) v.limit_source = "environment";
    }
    if (!limit || v.used_bytes <= *limit + policy_.tolerance_bytes) continue;
    v.limit_bytes = *limit;
    violating_now.insert(key);
    v.new_episode = violating_.count(key) == 0;

    v.kill = policy_.kill_by_default;
    if (policy_.container_may_override) {
      for (const auto& m : group.members) {
        if (auto setting = OomKillerSetting(*m.process)) {
          v.kill = *setting;
          break;
        }
      }
    }

    std::vector<Offender> candidates;
    for (const auto& m : group.members) {
      Offender o;
      o.process = *m.process;
      o.used_bytes = m.used_bytes;
      o.accounted_bytes = AccountedFor(*group.region, v.gpu_uuid, m.process->container_pid);
      candidates.push_back(std::move(o));
    }
    auto unaccounted = [](const Offender& o) {
      return o.used_bytes > o.accounted_bytes ? o.used_bytes - o.accounted_bytes : 0;
    };
    std::sort(candidates.begin(), candidates.end(), [&](const Offender& a, const Offender& b) {
      if (unaccounted(a) != unaccounted(b)) return unaccounted(a) > unaccounted(b);
      if (a.used_bytes != b.used_bytes) return a.used_bytes > b.used_bytes;
      return a.process.host_pid < b.process.host_pid;
    });
    v.offenders = TakeOffenders(candidates, &Offender::used_bytes, v.used_bytes, *limit, v.kill, *inspector_);
    violations.push_back(std::move(v));
  }
  violating_ = std::move(violating_now);
  return violations;
}

std::vector<ComputeViolation> Enforcer::ComputePass(const std::vector<AttributedProcess>& processes,
                                                    const std::vector<host::GpuSample>& gpus) {
  std::vector<ComputeViolation> violations;
  if (!allocation_cores_) return violations;
  std::map<std::pair<std::string, std::string>, std::vector<const AttributedProcess*>> groups;
  for (const auto& p : processes) groups[{p.region->name, p.gpu_uuid}].push_back(&p);
  std::map<std::string, const host::GpuSample*> gpu_by_uuid;
  for (const auto& g : gpus) gpu_by_uuid[g.uuid] = &g;

  std::map<std::pair<std::string, std::string>, int> over_now;
  for (const auto& [key, members] : groups) {
    const RegionDir& region = *members.front()->region;
    if (!region.owner) continue;
    const std::optional<int> quota =
        region.claim ? ClaimCores(*region.claim, key.second) : allocation_cores_(*region.owner, key.second);
    if (!quota || *quota <= 0 || *quota >= 100) continue;  // no compute limit
    ComputeViolation v;
    v.region = region.name;
    v.owner = region.owner;
    v.gpu_uuid = key.second;
    v.quota_percent = *quota;
    std::set<uint32_t> own_pids;
    std::vector<host::ComputeUser> users;
    for (const auto* m : members) {
      own_pids.insert(m->process.host_pid);
      if (m->sm_util_percent < 0) continue;
      users.push_back({m->process.host_pid, m->sm_util_percent, InRegion(region, m->process.container_pid)});
    }
    if (users.empty()) continue;  // the driver gave no figure
    int others = 0;
    if (auto g = gpu_by_uuid.find(key.second); g != gpu_by_uuid.end()) {
      for (const auto& p : g->second->processes)
        if (own_pids.count(p.pid) == 0 && p.sm_util_percent > 0) others += p.sm_util_percent;
    }
    const host::ComputeJudgement judged =
        host::JudgeComputePass(users, others, *quota, policy_.compute_tolerance_percent);
    v.used_percent = judged.used_percent;
    v.others_percent = judged.others_percent;
    if (!judged.over) continue;  // within the quota, or idle time used by libvgpu's own rules
    auto previous = compute_over_.find(key);
    v.passes_over = (previous == compute_over_.end() ? 0 : previous->second) + 1;
    over_now[key] = v.passes_over;
    if (v.passes_over < policy_.compute_window_passes) continue;
    v.new_episode = v.passes_over == policy_.compute_window_passes;
    v.kill = policy_.compute_kill;

    std::vector<ComputeOffender> candidates;
    for (const auto* m : members) {
      if (m->sm_util_percent <= 0) continue;
      ComputeOffender o;
      o.process = m->process;
      o.sm_util_percent = m->sm_util_percent;
      o.in_region = InRegion(region, m->process.container_pid);
      candidates.push_back(std::move(o));
    }
    std::sort(candidates.begin(), candidates.end(), [](const ComputeOffender& a, const ComputeOffender& b) {
      return host::KilledFirst({a.process.host_pid, a.sm_util_percent, a.in_region},
                               {b.process.host_pid, b.sm_util_percent, b.in_region});
    });
    v.offenders = TakeOffenders(candidates, &ComputeOffender::sm_util_percent, v.used_percent,
                                *quota + policy_.compute_tolerance_percent, v.kill, *inspector_);
    violations.push_back(std::move(v));
  }
  compute_over_ = std::move(over_now);
  return violations;
}

}  // namespace tessera::node
