#include "runner/status_view.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/mig/geometry.h"
#include "host/region_reader.h"

namespace tessera::runner {
namespace {

using host::DeviceUsage;
using host::ReadRegion;
using host::RegionSnapshot;

std::string Mib(uint64_t bytes) {
  return std::to_string((bytes + (1 << 20) - 1) >> 20);
}

std::string ShortUuid(const std::string& uuid) {
  return uuid.size() > 12 ? uuid.substr(0, 12) : uuid;
}

// The command for a 40-column cell: the program's file name (its directory
// would use up the cell), then its arguments.
std::string Joined(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    out += out.empty() ? a.substr(a.find_last_of('/') == std::string::npos ? 0 : a.find_last_of('/') + 1)
                       : " " + a;
  }
  return out.size() > 40 ? out.substr(0, 37) + "..." : out;
}

// The usage of `uuid` in the region of `e` as `readings` saw it, if any.
const DeviceUsage* UsageOf(const RegionReadings& readings, const LedgerEntry& e, const std::string& uuid) {
  auto it = readings.regions.find(e.region_path);
  return it == readings.regions.end() ? nullptr : it->second.Find(uuid);
}

__attribute__((format(printf, 1, 2))) std::string Row(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return buf;
}

// libvgpu charges GPU time only for a quota it limits.
bool ComputeLimited(const LedgerEntry& e, const core::DeviceSlice& d) {
  return d.cores > 0 && d.cores < 100 && e.core_policy != "disable";
}

std::string Quota(const core::DeviceSlice& d) {
  return d.cores == 0 ? "none" : std::to_string(d.cores) + "%";
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The profile name of `profile_id` on `gpu`, from core/mig's tables.
std::string ProfileName(const host::MigGpuState& gpu, uint32_t profile_id) {
  auto model = core::mig::RecogniseModel({gpu.name, gpu.memory_mib, gpu.pci_device_id});
  if (model.ok()) {
    for (const auto& p : (*model)->profiles) {
      if (p.id == profile_id) return p.name;
    }
  }
  return "profile " + std::to_string(profile_id);
}

// Who holds the MIG device `instance` of `gpu`: a --mig job's id and command.
std::string HolderOf(const host::MigGpuState& gpu, const host::MigInstanceState& instance,
                     const std::vector<LedgerEntry>& entries) {
  for (const auto& e : entries) {
    if (e.mig && e.mig->parent_uuid == gpu.uuid && e.mig->start == instance.start) {
      return e.job_id + " " + Joined(e.command) +
             (IsOrphaned(e) ? " (runner gone: the next run removes it)" : "");
    }
  }
  return instance.processes > 0 ? std::to_string(instance.processes) + " process(es), not a tessera run job"
                                : "-";
}

std::string MigBlock(const host::MigGpuState& gpu, const std::vector<LedgerEntry>& entries) {
  std::string out = Row("  MIG mode on: %zu MIG device(s)\n", gpu.instances.size());
  for (const auto& i : gpu.instances) {
    const std::string used = Mib(i.memory_used_bytes) + " / " + std::to_string(i.memory_mib) + " MiB";
    out += Row("    %-10s slice %u+%u  %-40s %-20s %3u SMs  %s\n", ProfileName(gpu, i.profile_id).c_str(),
               i.start, i.size, i.mig_uuid.empty() ? "(no compute instance)" : i.mig_uuid.c_str(),
               used.c_str(), i.sm_count, HolderOf(gpu, i, entries).c_str());
  }
  return out;
}

}  // namespace

RegionReadings ReadRegions(const std::vector<LedgerEntry>& entries) {
  RegionReadings out;
  for (const auto& e : entries) {
    auto snap = ReadRegion(e.region_path);
    if (snap.ok()) out.regions[e.region_path] = std::move(snap).value();
  }
  out.taken = std::chrono::steady_clock::now();
  return out;
}

bool AnyComputeMeasured(const std::vector<LedgerEntry>& entries, const RegionReadings& readings) {
  for (const auto& e : entries) {
    for (const auto& d : e.slices.devices) {
      if (ComputeLimited(e, d) && UsageOf(readings, e, d.uuid)) return true;
    }
  }
  return false;
}

std::string RenderJobTable(const std::vector<LedgerEntry>& entries, const RegionReadings& now,
                           const RegionReadings* earlier) {
  if (entries.empty()) return "no running slices\n";
  bool spilled = false;
  for (const auto& e : entries) {
    for (const auto& d : e.slices.devices) {
      const DeviceUsage* u = UsageOf(now, e, d.uuid);
      spilled = spilled || (u && u->memory_spilled_bytes > 0);
    }
  }
  const double window = earlier ? Seconds(now.taken - earlier->taken) : 0;
  std::ostringstream out;
  out << Row("%-12s %-8s %-12s %-15s %-9s ", "JOB", "PID", "GPU", "MEMORY MiB", "PEAK MiB")
      << (spilled ? Row("%-12s ", "SPILLED MiB") : "")
      << Row("%-4s %-12s %-8s %s\n", "OOM", "COMPUTE", "POLICY", "COMMAND");
  for (const auto& e : entries) {
    for (const auto& d : e.slices.devices) {
      const DeviceUsage* u = UsageOf(now, e, d.uuid);
      const DeviceUsage* before = earlier ? UsageOf(*earlier, e, d.uuid) : nullptr;
      std::string used = "-";
      if (ComputeLimited(e, d) && u && before && window > 0 &&
          u->gpu_time_used_ns >= before->gpu_time_used_ns) {
        const double ns = static_cast<double>(u->gpu_time_used_ns - before->gpu_time_used_ns);
        used = Row("%.0f%%", 100.0 * ns / (window * 1e9));
      }
      const std::string mem = (u ? Mib(u->memory_used_bytes) : "0") + " / " + std::to_string(d.memory_mib);
      const std::string compute = used + " / " + Quota(d);
      const std::string policy = (d.cores == 0 || e.core_policy.empty()) ? "-" : e.core_policy;
      out << Row("%-12s %-8d %-12s %-15s %-9s ", e.job_id.c_str(), e.holders.empty() ? 0 : e.holders[0].pid,
                 ShortUuid(d.uuid).c_str(), mem.c_str(), (u ? Mib(u->memory_peak_bytes) : "0").c_str())
          << (spilled ? Row("%-12s ", (u ? Mib(u->memory_spilled_bytes) : "0").c_str()) : "")
          << Row("%-4s %-12s %-8s %s\n", (u ? std::to_string(u->oom_refusals) : "0").c_str(), compute.c_str(),
                 policy.c_str(), Joined(e.command).c_str());
    }
    if (e.mig) {
      // A MIG instance: its memory is the profile's, isolated by the GPU (`tessera smi` shows its use).
      const std::string mem = "- / " + std::to_string(e.mig->memory_mib);
      const std::string device = e.mig->created ? ShortUuid(e.mig->mig_uuid) : "(creating)";
      out << Row("%-12s %-8d %-12s %-15s %-9s ", e.job_id.c_str(), e.holders.empty() ? 0 : e.holders[0].pid,
                 device.c_str(), mem.c_str(), "-")
          << (spilled ? Row("%-12s ", "-") : "")
          << Row("%-4s %-12s %-8s %s%s\n", "-", ("mig " + e.mig->profile).c_str(), "-",
                 Joined(e.command).c_str(), IsOrphaned(e) ? " (runner gone)" : "");
    }
  }
  if (window > 0) {
    out << Row(
        "COMPUTE: the share of the GPU's time the job used over the last %.1f s (device time libvgpu\n"
        "charged it) / its quota; - where not measured: no quota, --core-policy disable, no CUDA use yet.\n",
        window);
  } else {
    out << "COMPUTE: used / quota; used is measured for a job with a quota (1..99 %, --core-policy not\n"
           "disable) once it has used CUDA: none here.\n";
  }
  if (spilled) out << "SPILLED: the part of MEMORY held in host memory (CUDA_OVERSUBSCRIBE).\n";
  return out.str();
}

std::string RenderGpuTable(const std::vector<core::Gpu>& gpus, const std::vector<LedgerEntry>& entries,
                           const RegionReadings& now, const std::vector<host::MigGpuState>& mig) {
  std::ostringstream out;
  for (const auto& g : gpus) {
    int64_t alloc_mib = 0;
    int alloc_cores = 0;
    uint64_t used_bytes = 0;
    std::vector<std::string> rows;
    for (const auto& e : entries) {
      for (const auto& d : e.slices.devices) {
        if (d.uuid != g.uuid) continue;
        alloc_mib += d.memory_mib;
        alloc_cores += d.cores;
        const DeviceUsage* u = UsageOf(now, e, d.uuid);
        if (u) used_bytes += u->memory_used_bytes;
        const std::string spilled = (u && u->memory_spilled_bytes > 0)
                                        ? " (" + Mib(u->memory_spilled_bytes) + " MiB spilled to host)"
                                        : "";
        const std::string cores = d.cores == 0            ? std::string("-")
                                  : e.core_policy.empty() ? std::to_string(d.cores) + "%"
                                                          : std::to_string(d.cores) + "% " + e.core_policy;
        rows.push_back(Row("    %-12s %6s / %-6lld MiB%s  cores %-12s %s", e.job_id.c_str(),
                           (u ? Mib(u->memory_used_bytes) : std::string("0")).c_str(),
                           static_cast<long long>(d.memory_mib), spilled.c_str(), cores.c_str(),
                           Joined(e.command).c_str()));
      }
    }
    out << Row("GPU %d  %s  %s%s\n", g.index, g.model.c_str(), g.uuid.c_str(),
               g.healthy ? "" : "  UNHEALTHY");
    auto state = std::find_if(mig.begin(), mig.end(), [&](const auto& m) { return m.uuid == g.uuid; });
    if (state != mig.end() && state->mig_enabled) {
      out << MigBlock(*state, entries);
      continue;
    }
    if (state != mig.end() && state->mig_pending) out << "  MIG mode on after the next GPU reset\n";
    out << Row(
        "  memory: %lld MiB total, %lld MiB allocated to slices, %s MiB used by them; cores allocated: "
        "%d%%\n",
        static_cast<long long>(g.memory_mib), static_cast<long long>(alloc_mib), Mib(used_bytes).c_str(),
        alloc_cores);
    if (rows.empty()) out << "  (no slices)\n";
    for (const auto& r : rows) out << r << "\n";
  }
  return out.str();
}

}  // namespace tessera::runner
