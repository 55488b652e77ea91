#include "node/mps/mps_daemons.h"

#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>
#include <thread>

#include "base/files.h"
#include "base/log.h"
#include "base/prometheus_text.h"

namespace tessera::node::mps {
namespace {

std::string GpuName(const MpsGpu& gpu) {
  return "GPU " + std::to_string(gpu.index) + " (" + gpu.uuid + ")";
}

// The first line of a control program's answer, without surrounding blanks.
std::string FirstLine(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  const auto begin = line.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  const auto end = line.find_last_not_of(" \t\r");
  return line.substr(begin, end - begin + 1);
}

// "8192M", "8G", "8589934592" as MiB; -1 when it is none of those.
int64_t ParseMiB(const std::string& text) {
  if (text.empty()) return -1;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || value < 0) return -1;
  const std::string unit = end;
  if (unit == "M" || unit == "MB") return value;
  if (unit == "G" || unit == "GB") return value * 1024;
  if (unit == "T" || unit == "TB") return value * 1024 * 1024;
  if (unit.empty()) return value / (1024 * 1024);
  return -1;
}

Status CheckGpu(const MpsGpu& gpu) {
  if (gpu.uuid.empty()) return Error{"an MPS GPU needs its UUID"};
  if (gpu.default_active_thread_percentage < 1 || gpu.default_active_thread_percentage > 100) {
    return Error{GpuName(gpu) + ": active thread percentage " +
                 std::to_string(gpu.default_active_thread_percentage) + " is not between 1 and 100"};
  }
  if (gpu.default_pinned_memory_mib < 0 || gpu.default_pinned_memory_mib > gpu.memory_mib) {
    return Error{GpuName(gpu) + ": pinned memory limit " + std::to_string(gpu.default_pinned_memory_mib) +
                 " MiB is more than the GPU's " + std::to_string(gpu.memory_mib) + " MiB"};
  }
  return Status::Ok();
}

}  // namespace

Result<MpsGpu> EqualSplit(std::string uuid, int index, int64_t memory_mib, int replicas) {
  if (replicas < 1) {
    return Error{"MPS replicas must be at least 1, got " + std::to_string(replicas)};
  }
  if (replicas > 100) {
    return Error{"MPS replicas must be at most 100 (a client's share is at least 1 % of the GPU), got " +
                 std::to_string(replicas)};
  }
  MpsGpu gpu;
  gpu.uuid = std::move(uuid);
  gpu.index = index;
  gpu.memory_mib = memory_mib;
  gpu.default_active_thread_percentage = 100 / replicas;
  gpu.default_pinned_memory_mib = memory_mib / replicas;
  return gpu;
}

std::string PipeDirectoryOf(const std::string& root, const std::string& uuid) {
  return files::Join(files::Join(root, uuid), "pipe");
}
std::string LogDirectoryOf(const std::string& root, const std::string& uuid) {
  return files::Join(files::Join(root, uuid), "log");
}

MpsDaemons::MpsDaemons(MpsDaemonsOptions options, std::unique_ptr<ControlProgram> program,
                       MpsEventSink on_event)
    : options_(std::move(options)), program_(std::move(program)), on_event_(std::move(on_event)) {}

MpsDaemons::~MpsDaemons() {
  if (checker_) checker_->Stop();
}

void MpsDaemons::StartChecking(std::chrono::milliseconds interval) {
  if (checker_) return;
  checker_ = std::make_unique<PeriodicThread>(interval, [this] { Check(); });
  checker_->Start();
}

std::map<std::string, std::string> MpsDaemons::EnvOf(const MpsGpu& gpu) const {
  return {{"CUDA_MPS_PIPE_DIRECTORY", PipeDirectoryOf(options_.root, gpu.uuid)},
          {"CUDA_MPS_LOG_DIRECTORY", LogDirectoryOf(options_.root, gpu.uuid)},
          {"CUDA_VISIBLE_DEVICES", gpu.uuid}};
}

void MpsDaemons::Report(const std::string& type, const std::string& reason, const std::string& message) {
  if (type == "Warning") {
    log::Warn(message, {{"reason", reason}});
  } else {
    log::Info(message, {{"reason", reason}});
  }
  if (on_event_) on_event_(type, reason, message);
}

Status MpsDaemons::ConfigureLocked(Daemon& daemon) {
  const MpsGpu& gpu = daemon.gpu;
  const auto env = EnvOf(gpu);
  const std::string percentage = std::to_string(gpu.default_active_thread_percentage);
  std::string commands = "set_default_active_thread_percentage " + percentage + "\n";
  // Device 0: the daemon sees only this GPU (CUDA_VISIBLE_DEVICES), and limits
  // are given by index, never by UUID.
  if (gpu.default_pinned_memory_mib > 0) {
    commands +=
        "set_default_device_pinned_mem_limit 0 " + std::to_string(gpu.default_pinned_memory_mib) + "M\n";
  }
  TESSERA_ASSIGN_OR_RETURN(const std::string answer, program_->Send(env, commands));
  (void)answer;  // the defaults are read back instead: the answers' wording is the daemon's
  TESSERA_ASSIGN_OR_RETURN(const std::string read_percentage,
                           program_->Send(env, "get_default_active_thread_percentage\n"));
  const std::string got = FirstLine(read_percentage);
  char* end = nullptr;
  const double value = std::strtod(got.c_str(), &end);
  if (end == got.c_str() || std::fabs(value - gpu.default_active_thread_percentage) > 0.01) {
    return Error{"the daemon did not take active thread percentage " + percentage + " (it answers '" + got +
                 "')"};
  }
  if (gpu.default_pinned_memory_mib > 0) {
    TESSERA_ASSIGN_OR_RETURN(const std::string read_limit,
                             program_->Send(env, "get_default_device_pinned_mem_limit 0\n"));
    const std::string limit = FirstLine(read_limit);
    const int64_t mib = ParseMiB(limit);
    if (mib >= 0 && mib != gpu.default_pinned_memory_mib) {
      return Error{"the daemon did not take pinned memory limit " +
                   std::to_string(gpu.default_pinned_memory_mib) + "M (it answers '" + limit + "')"};
    }
    if (mib < 0) {
      log::Warn("cannot read back the MPS daemon's pinned memory limit",
                {{"gpu", gpu.uuid}, {"answer", limit}});
    }
  }
  daemon.configured = true;
  return Status::Ok();
}

Status MpsDaemons::StartLocked(Daemon& daemon) {
  const MpsGpu& gpu = daemon.gpu;
  daemon.configured = false;
  int pid = program_->LiveDaemonPid(PipeDirectoryOf(options_.root, gpu.uuid));
  if (pid == 0) {
    TESSERA_RETURN_IF_ERROR(files::MakeDirs(PipeDirectoryOf(options_.root, gpu.uuid), 0755));
    TESSERA_RETURN_IF_ERROR(files::MakeDirs(LogDirectoryOf(options_.root, gpu.uuid), 0755));
    TESSERA_RETURN_IF_ERROR_WRAP(program_->StartDaemon(EnvOf(gpu)), "cannot start its MPS control daemon");
    pid = program_->LiveDaemonPid(PipeDirectoryOf(options_.root, gpu.uuid));
    if (pid == 0) return Error{"its MPS control daemon exited right after starting (see its control.log)"};
  }
  daemon.pid = pid;
  TESSERA_RETURN_IF_ERROR_WRAP(ConfigureLocked(daemon), "cannot set its MPS defaults");
  return Status::Ok();
}

void MpsDaemons::QuitLocked(const Daemon& daemon) {
  const std::string pipe = PipeDirectoryOf(options_.root, daemon.gpu.uuid);
  const int pid = program_->LiveDaemonPid(pipe);
  if (pid == 0) return;
  if (auto sent = program_->Send(EnvOf(daemon.gpu), "quit\n"); !sent.ok()) {
    log::Warn("cannot send quit to the MPS control daemon",
              {{"gpu", daemon.gpu.uuid}, {"error", sent.error().message}});
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.quit_wait;
  while (program_->LiveDaemonPid(pipe) != 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      log::Warn("the MPS control daemon has not ended after quit (it waits for its clients); left to finish",
                {{"gpu", daemon.gpu.uuid}, {"pid", pid}});
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  log::Info("stopped the MPS control daemon", {{"gpu", daemon.gpu.uuid}, {"pid", pid}});
}

Status MpsDaemons::Apply(const std::vector<MpsGpu>& gpus) {
  std::set<std::string> seen;
  for (const MpsGpu& gpu : gpus) {
    TESSERA_RETURN_IF_ERROR(CheckGpu(gpu));
    if (!seen.insert(gpu.uuid).second) return Error{"GPU " + gpu.uuid + " is listed twice for MPS"};
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = daemons_.begin(); it != daemons_.end();) {
    if (seen.count(it->first) == 0) {
      QuitLocked(it->second);
      Report("Normal", "MpsDaemonStopped",
             "stopped the MPS control daemon of " + GpuName(it->second.gpu) + ": the GPU left mps mode");
      it = daemons_.erase(it);
    } else {
      ++it;
    }
  }
  std::string errors;
  for (const MpsGpu& gpu : gpus) {
    auto [it, added] = daemons_.try_emplace(gpu.uuid);
    Daemon& daemon = it->second;
    const bool changed = !added && !(daemon.gpu == gpu);
    daemon.gpu = gpu;
    Status status = Status::Ok();
    if (added || daemon.pid == 0) {
      status = StartLocked(daemon);
      if (status.ok()) {
        Report("Normal", "MpsDaemonStarted",
               "MPS control daemon of " + GpuName(gpu) + " runs (pid " + std::to_string(daemon.pid) + ")");
      }
    } else if (changed || !daemon.configured) {
      status = ConfigureLocked(daemon);
    }
    daemon.error = status.ok() ? "" : status.error().message;
    if (!status.ok()) {
      Report("Warning", "MpsDaemonFailed", GpuName(gpu) + ": " + daemon.error);
      errors += (errors.empty() ? "" : "; ") + GpuName(gpu) + ": " + daemon.error;
    }
  }
  if (!errors.empty()) return Error{errors};
  return Status::Ok();
}

void MpsDaemons::Check() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [uuid, daemon] : daemons_) {
    const int live = program_->LiveDaemonPid(PipeDirectoryOf(options_.root, uuid));
    if (live != 0 && live == daemon.pid && daemon.configured) continue;
    const bool died = daemon.pid != 0 && live != daemon.pid;
    if (died) {
      ++daemon.restarts;
      log::Warn("the MPS control daemon is gone; starting it again",
                {{"gpu", uuid}, {"pid", daemon.pid}, {"restarts", daemon.restarts}});
    }
    daemon.pid = 0;
    const Status status = StartLocked(daemon);
    daemon.error = status.ok() ? "" : status.error().message;
    if (!status.ok()) {
      Report("Warning", "MpsDaemonFailed", GpuName(daemon.gpu) + ": " + daemon.error);
    } else if (died) {
      Report("Warning", "MpsDaemonRestarted",
             "the MPS control daemon of " + GpuName(daemon.gpu) +
                 " was gone (its clients failed); restarted as pid " + std::to_string(daemon.pid));
    }
  }
}

void MpsDaemons::StopAll() {
  if (checker_) {
    checker_->Stop();
    checker_.reset();
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [uuid, daemon] : daemons_) QuitLocked(daemon);
  daemons_.clear();
}

std::string MpsDaemons::PipeDirectory(const std::string& uuid) const {
  std::lock_guard<std::mutex> lock(mu_);
  return daemons_.count(uuid) ? PipeDirectoryOf(options_.root, uuid) : "";
}

bool MpsDaemons::Ready(const std::string& uuid) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = daemons_.find(uuid);
  return it != daemons_.end() && it->second.pid != 0 && it->second.configured && it->second.error.empty();
}

std::vector<MpsDaemons::DaemonStatus> MpsDaemons::Daemons() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DaemonStatus> out;
  for (const auto& [uuid, daemon] : daemons_) {
    out.push_back(DaemonStatus{daemon.gpu, daemon.pid, daemon.restarts, daemon.error});
  }
  return out;
}

std::string MpsDaemons::Metrics() const {
  const std::vector<DaemonStatus> daemons = Daemons();
  PrometheusText text;
  text.Describe("tessera_mps_daemon_up", MetricType::kGauge,
                "1 while the GPU's MPS control daemon runs with its defaults set, else 0.");
  text.Describe("tessera_mps_daemon_restarts_total", MetricType::kCounter,
                "Times tessera-node found the GPU's MPS control daemon gone and started it again.");
  for (const auto& d : daemons) {
    const std::vector<std::pair<std::string, std::string>> labels = {{"gpu", std::to_string(d.gpu.index)},
                                                                     {"uuid", d.gpu.uuid}};
    text.Add("tessera_mps_daemon_up", labels, d.pid != 0 && d.error.empty() ? 1 : 0);
    text.Add("tessera_mps_daemon_restarts_total", labels, d.restarts);
  }
  return text.Render();
}

}  // namespace tessera::node::mps
