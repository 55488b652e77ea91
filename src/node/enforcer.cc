#include "node/enforcer.h"

#include <algorithm>
#include <map>

#include "contract/container_contract.h"
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
      out.push_back(AttributedProcess{region->second, gpu.uuid, *identity, p.used_bytes});
    }
  }
  return out;
}

Enforcer::Enforcer(EnforcementPolicy policy, ProcessInspector* inspector, AllocationLimit allocation_limit)
    : policy_(policy), inspector_(inspector), allocation_limit_(std::move(allocation_limit)) {}

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
    if (v.owner && allocation_limit_) {
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
    uint64_t remaining = v.used_bytes;
    for (auto& o : candidates) {
      if (remaining <= *limit) break;
      remaining -= std::min(remaining, o.used_bytes);
      if (v.kill) {
        auto status = inspector_->Kill(o.process);
        o.killed = status.ok();
        if (!status.ok()) o.kill_error = status.error().message;
      }
      v.offenders.push_back(std::move(o));
    }
    violations.push_back(std::move(v));
  }
  violating_ = std::move(violating_now);
  return violations;
}

}  // namespace tessera::node
