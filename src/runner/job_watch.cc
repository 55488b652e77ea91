#include "runner/job_watch.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "base/files.h"
#include "contract/container_contract.h"
#include "core/allocation_codec.h"
#include "host/compute_check.h"
#include "host/nvml_api.h"
#include "host/nvml_inventory.h"
#include "host/region_reader.h"

namespace tessera::runner {
namespace {

std::string Mib(uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

bool SendKill(uint32_t pid) {
  return ::kill(static_cast<pid_t>(pid), SIGKILL) == 0;
}

}  // namespace

std::vector<JobProcessUsage> ChooseOffenders(std::vector<JobProcessUsage> processes, uint64_t limit_bytes,
                                             uint64_t tolerance_bytes) {
  uint64_t total = 0;
  for (const auto& p : processes) total += p.used_bytes;
  if (limit_bytes == 0 || total <= limit_bytes + tolerance_bytes) return {};
  auto unaccounted = [](const JobProcessUsage& p) {
    return p.used_bytes > p.accounted_bytes ? p.used_bytes - p.accounted_bytes : 0;
  };
  std::sort(processes.begin(), processes.end(), [&](const JobProcessUsage& a, const JobProcessUsage& b) {
    if (unaccounted(a) != unaccounted(b)) return unaccounted(a) > unaccounted(b);
    if (a.used_bytes != b.used_bytes) return a.used_bytes > b.used_bytes;
    return a.pid < b.pid;
  });
  std::vector<JobProcessUsage> out;
  for (const auto& p : processes) {
    if (total <= limit_bytes) break;
    total -= std::min(total, p.used_bytes);
    out.push_back(p);
  }
  return out;
}

std::set<uint32_t> Descendants(uint32_t root, const std::map<uint32_t, uint32_t>& parent_of) {
  std::map<uint32_t, std::vector<uint32_t>> children;
  for (const auto& [pid, parent] : parent_of) children[parent].push_back(pid);
  std::set<uint32_t> out;
  std::vector<uint32_t> todo{root};
  while (!todo.empty()) {
    const uint32_t p = todo.back();
    todo.pop_back();
    for (uint32_t c : children[p]) {
      if (c != root && out.insert(c).second) todo.push_back(c);
    }
  }
  return out;
}

std::map<uint32_t, uint32_t> ReadParents(const std::string& proc) {
  std::map<uint32_t, uint32_t> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(proc, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(it->path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), {});
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    unsigned ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %u", &state, &ppid) != 2) continue;
    out[static_cast<uint32_t>(std::stoul(name))] = ppid;
  }
  return out;
}

JobWatch::JobWatch(JobWatchOptions options, host::InventorySource* gpus, Report report, Killer kill)
    : options_(std::move(options)),
      gpus_(gpus),
      report_(std::move(report)),
      kill_(kill ? std::move(kill) : Killer(&SendKill)),
      thread_(options_.interval, [this] { PassOnce(); }) {}

JobWatch::~JobWatch() {
  Stop();
}

void JobWatch::RestoreLimitsFile() {
  if (options_.limits_path.empty()) return;
  struct stat st {};
  auto text = files::Read(options_.limits_path);
  const bool intact = text.ok() && *text == options_.limits_text &&
                      ::stat(options_.limits_path.c_str(), &st) == 0 && (st.st_mode & 0777) == 0444;
  if (intact) return;
  if (auto s = files::ReplaceAtomically(options_.limits_path, options_.limits_text); !s.ok()) {
    report_("cannot restore the job's limits file " + options_.limits_path + ": " + s.error().message);
    return;
  }
  ::chmod(options_.limits_path.c_str(), 0444);
  ++restores_;
  report_("the job's limits file " + options_.limits_path + " was changed; restored");
}

void JobWatch::PassOnce() {
  RestoreLimitsFile();
  auto samples = gpus_ != nullptr ? gpus_->Sample() : Result<std::vector<host::GpuSample>>(Error{"no NVML"});
  if (samples.ok()) {
    const std::set<uint32_t> job = Descendants(options_.root_pid, ReadParents(options_.proc_root));
    auto region = host::ReadRegion(options_.region_path);
    std::set<uint32_t> in_region;  // pids libvgpu knows (the job shares our pid namespace)
    if (region.ok()) {
      for (const auto& slot : region->processes) in_region.insert(slot.pid);
    }
    for (const auto& gpu : *samples) {
      if (gpu.processes_known) CheckCompute(gpu, job, in_region);
      auto limit = options_.memory_limits.find(gpu.uuid);
      if (limit == options_.memory_limits.end() || limit->second == 0 || !gpu.processes_known) continue;
      std::vector<JobProcessUsage> mine;
      for (const auto& p : gpu.processes) {
        if (job.count(p.pid) == 0) continue;
        JobProcessUsage u{p.pid, p.used_bytes, 0};
        if (region.ok()) {
          // libvgpu names a job's process by its pid (the job shares our pid namespace).
          for (size_t d = 0; d < region->devices.size(); ++d) {
            if (region->devices[d].uuid != gpu.uuid) continue;
            for (const auto& slot : region->processes)
              if (slot.pid == p.pid && d < slot.memory_used_bytes.size())
                u.accounted_bytes = slot.memory_used_bytes[d];
          }
        }
        mine.push_back(u);
      }
      uint64_t used = 0;
      for (const auto& u : mine) used += u.used_bytes;
      for (const auto& o : ChooseOffenders(mine, limit->second, options_.tolerance_bytes)) {
        const bool killed = kill_(o.pid);
        if (killed) ++kills_;
        report_("the job uses " + Mib(used) + " on GPU " + gpu.uuid + ", over its slice of " +
                Mib(limit->second) + ": " + (killed ? "killed" : "could not kill") + " process " +
                std::to_string(o.pid) + " holding " + Mib(o.used_bytes) + ", " + Mib(o.accounted_bytes) +
                " of it seen by libvgpu");
      }
    }
  }
  ++passes_;
}

void JobWatch::CheckCompute(const host::GpuSample& gpu, const std::set<uint32_t>& job,
                            const std::set<uint32_t>& in_region) {
  auto quota = options_.core_quotas.find(gpu.uuid);
  if (quota == options_.core_quotas.end() || quota->second <= 0 || quota->second >= 100) return;
  std::vector<host::ComputeUser> users;
  int others = 0;
  for (const auto& p : gpu.processes) {
    if (p.sm_util_percent < 0) continue;
    if (job.count(p.pid) == 0) {
      others += p.sm_util_percent;
    } else {
      users.push_back({p.pid, p.sm_util_percent, in_region.count(p.pid) > 0});
    }
  }
  const int tolerance = options_.compute_tolerance_percent;
  const host::ComputeJudgement judged = host::JudgeComputePass(users, others, quota->second, tolerance);
  if (!judged.over) {
    compute_over_.erase(gpu.uuid);
    return;
  }
  const int passes = ++compute_over_[gpu.uuid];
  if (passes < options_.compute_window_passes) return;
  for (const auto& o : host::ComputeOffenders(users, quota->second, tolerance)) {
    const bool killed = kill_(o.pid);
    if (killed) ++kills_;
    report_("the job uses " + std::to_string(judged.used_percent) + " % of GPU " + gpu.uuid +
            "'s SMs (others " + std::to_string(judged.others_percent) + " %), over its " +
            std::to_string(quota->second) + " % for " + std::to_string(passes) + " passes: " +
            (killed ? "killed" : "could not kill") + " process " + std::to_string(o.pid) + " using " +
            std::to_string(o.sm_util_percent) + " %" + (o.in_region ? "" : ", which libvgpu does not know"));
  }
  compute_over_.erase(gpu.uuid);  // a new window for what is left
}

std::unique_ptr<RunningJobWatch> StartJobWatch(const ReservedSlice& slice, const LocalGpus& local) {
  auto running = std::make_unique<RunningJobWatch>();
  auto report = [](const std::string& line) { std::cerr << "tessera run: " << line << "\n"; };
  // Processes the job detaches (double fork) are re-parented to us, so they
  // stay descendants of the supervisor.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  auto library = host::NvmlLibrary::Load(local.nvml_library);
  if (library.ok()) {
    const host::NvmlApi& api = (*library)->api();
    auto inventory = std::make_unique<host::NvmlInventory>(api, std::move(library).value());
    if (inventory->Discover().ok()) running->gpus = std::move(inventory);
  }
  if (!running->gpus) report("cannot read the GPUs' processes (NVML); only the limits file is watched");
  JobWatchOptions options;
  options.limits_path =
      (std::filesystem::path(slice.entry.region_path).parent_path() / contract::kLimitsFileName).string();
  auto text = core::EncodeAllocation(slice.allocation);
  options.limits_text = text.ok() ? *text : "";
  options.region_path = slice.entry.region_path;
  for (const auto& d : slice.entry.slices.devices) {
    options.memory_limits[d.uuid] = uint64_t(d.memory_mib) << 20;
    options.core_quotas[d.uuid] = d.cores;
  }
  options.root_pid = static_cast<uint32_t>(::getpid());
  running->watch = std::make_unique<JobWatch>(options, running->gpus.get(), report);
  running->watch->Start();
  return running;
}

}  // namespace tessera::runner
