#include "runner/status_view.h"

#include <cstdarg>
#include <cstdio>
#include <map>
#include <sstream>

#include "node/region_reader.h"

namespace tessera::runner {
namespace {

using node::DeviceUsage;
using node::ReadRegion;
using node::RegionSnapshot;

std::string Mib(uint64_t bytes) {
  return std::to_string((bytes + (1 << 20) - 1) >> 20);
}

std::string ShortUuid(const std::string& uuid) {
  return uuid.size() > 12 ? uuid.substr(0, 12) : uuid;
}

std::string Joined(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + a;
  return out.size() > 40 ? out.substr(0, 37) + "..." : out;
}

// The usage of `uuid` in a job's region, if it has one yet.
const DeviceUsage* UsageOf(const Result<RegionSnapshot>& snap, const std::string& uuid) {
  return snap.ok() ? snap->Find(uuid) : nullptr;
}

__attribute__((format(printf, 1, 2))) std::string Row(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return buf;
}

}  // namespace

std::string RenderJobTable(const std::vector<LedgerEntry>& entries) {
  if (entries.empty()) return "no running slices\n";
  std::ostringstream out;
  out << Row("%-12s %-8s %-12s %-17s %-9s %-4s %-6s %-9s %s\n", "JOB", "PID", "GPU", "MEMORY MiB", "PEAK MiB",
             "OOM", "CORES", "GPU-TIME", "COMMAND");
  for (const auto& e : entries) {
    auto snap = ReadRegion(e.region_path);
    for (const auto& d : e.slices.devices) {
      const DeviceUsage* u = UsageOf(snap, d.uuid);
      std::string mem = (u ? Mib(u->memory_used_bytes) : "0") + " / " + std::to_string(d.memory_mib);
      std::string peak = u ? Mib(u->memory_peak_bytes) : "0";
      std::string oom = u ? std::to_string(u->oom_refusals) : "0";
      std::string cores = d.cores == 0 ? "-" : std::to_string(d.cores) + "%";
      std::string gpu_time = u ? Row("%.1fs", static_cast<double>(u->gpu_time_used_ns) / 1e9) : "-";
      out << Row("%-12s %-8d %-12s %-17s %-9s %-4s %-6s %-9s %s\n", e.job_id.c_str(),
                 e.holders.empty() ? 0 : e.holders[0].pid, ShortUuid(d.uuid).c_str(), mem.c_str(),
                 peak.c_str(), oom.c_str(), cores.c_str(), gpu_time.c_str(), Joined(e.command).c_str());
    }
  }
  return out.str();
}

std::string RenderGpuTable(const std::vector<core::Gpu>& gpus, const std::vector<LedgerEntry>& entries) {
  std::ostringstream out;
  for (const auto& g : gpus) {
    int64_t alloc_mib = 0;
    int alloc_cores = 0;
    uint64_t used_bytes = 0;
    std::vector<std::string> rows;
    for (const auto& e : entries) {
      auto snap = ReadRegion(e.region_path);
      for (const auto& d : e.slices.devices) {
        if (d.uuid != g.uuid) continue;
        alloc_mib += d.memory_mib;
        alloc_cores += d.cores;
        const DeviceUsage* u = UsageOf(snap, d.uuid);
        if (u) used_bytes += u->memory_used_bytes;
        rows.push_back(Row("    %-12s %6s / %-6lld MiB  cores %-4s %s", e.job_id.c_str(),
                           (u ? Mib(u->memory_used_bytes) : std::string("0")).c_str(),
                           static_cast<long long>(d.memory_mib),
                           (d.cores == 0 ? std::string("-") : std::to_string(d.cores) + "%").c_str(),
                           Joined(e.command).c_str()));
      }
    }
    out << Row("GPU %d  %s  %s%s\n", g.index, g.model.c_str(), g.uuid.c_str(),
               g.healthy ? "" : "  UNHEALTHY");
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
