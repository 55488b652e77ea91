#include "runner/demo.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "contract/container_contract.h"
#include "host/region_reader.h"
#include "runner/ledger.h"
#include "runner/local_gpus.h"

namespace tessera::runner {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Sample {
  double t = 0;        // seconds since the job's program started
  double busy_ms = 0;  // device time used so far
  int64_t mem_mib = 0;
  int oom = 0;
};

struct RunningJob {
  DemoJob job;
  pid_t pid = -1;
  int out_fd = -1;
  std::string pending;  // partial stdout line
  std::vector<Sample> samples;
  std::string region;
  std::string gpu;
  int64_t limit_mib = 0;
  uint64_t peak_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t oom = 0;
  int exit_code = -1;
  std::string log_path;
};

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string Pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

// Starts `tessera run ... -- demo-job ...` with stdout on a pipe, stderr to a log.
Result<RunningJob> StartDemoJob(const DemoJob& job, const DemoOptions& options, const std::string& ledger_dir,
                                const std::string& tessera_exe, const std::string& job_exe) {
  RunningJob r;
  r.job = job;
  r.log_path = options.out_dir + "/" + job.name + ".log";
  std::vector<std::string> args = {tessera_exe,
                                   "run",
                                   "--sim",
                                   options.sim_spec,
                                   "--ledger-dir",
                                   ledger_dir,
                                   "--gpumem",
                                   job.gpumem,
                                   "--gpucores",
                                   std::to_string(job.cores),
                                   "--core-policy",
                                   "force",
                                   "--",
                                   job_exe,
                                   "--mem-mib",
                                   std::to_string(job.wants_mib),
                                   "--kernel-us",
                                   std::to_string(job.kernel_us),
                                   "--duration-s",
                                   Fixed(options.seconds, 1),
                                   "--report-ms",
                                   "250"};
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return Error{std::string("pipe: ") + std::strerror(errno)};
  int log = ::open(r.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return Error{"cannot write " + r.log_path + ": " + std::strerror(errno)};
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return Error{std::string("fork: ") + std::strerror(errno)};
  if (pid == 0) {
    ::dup2(pipefd[1], STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(pipefd[1]);
  ::close(log);
  r.pid = pid;
  r.out_fd = pipefd[0];
  return r;
}

void ParseLines(RunningJob& r, const char* data, size_t n) {
  r.pending.append(data, n);
  size_t pos;
  while ((pos = r.pending.find('\n')) != std::string::npos) {
    std::string line = r.pending.substr(0, pos);
    r.pending.erase(0, pos + 1);
    try {
      auto j = nlohmann::json::parse(line);
      r.samples.push_back({j.at("t").get<double>(), j.at("busy_ms").get<double>(),
                           j.at("mem_mib").get<int64_t>(), j.at("oom").get<int>()});
    } catch (const std::exception&) {
      // Not a progress line (the program's own output): ignore.
    }
  }
}

// Share of device time per window of about one second, from the samples.
std::vector<std::pair<double, double>> ShareSeries(const std::vector<Sample>& samples) {
  std::vector<std::pair<double, double>> out;
  size_t start = 0;
  for (size_t i = 1; i < samples.size(); ++i) {
    double dt = samples[i].t - samples[start].t;
    if (dt >= 0.999 || (i + 1 == samples.size() && dt > 0.5)) {
      double share = 100.0 * (samples[i].busy_ms - samples[start].busy_ms) / (dt * 1000.0);
      out.emplace_back(samples[i].t, share);
      start = i;
    }
  }
  return out;
}

double CurrentShare(const std::vector<Sample>& s) {
  if (s.size() < 2) return 0;
  size_t j = s.size() - 1, i = j;
  while (i > 0 && s[j].t - s[i].t < 1.0) --i;
  double dt = s[j].t - s[i].t;
  return dt > 0 ? 100.0 * (s[j].busy_ms - s[i].busy_ms) / (dt * 1000.0) : 0;
}

void RefreshRegion(RunningJob& r, SliceLedger& ledger) {
  if (r.region.empty()) {
    auto entries = ledger.List();
    if (!entries.ok()) return;
    for (const auto& e : *entries) {
      if (!e.holders.empty() && e.holders[0].pid == r.pid && !e.slices.devices.empty()) {
        r.region = e.region_path;
        r.gpu = e.slices.devices[0].uuid;
        r.limit_mib = e.slices.devices[0].memory_mib;
      }
    }
    if (r.region.empty()) return;
  }
  auto snap = host::ReadRegion(r.region);
  if (!snap.ok()) return;
  for (const auto& d : snap->devices) {
    r.peak_bytes = std::max(r.peak_bytes, d.memory_peak_bytes);
    r.used_bytes = d.memory_used_bytes;
    r.oom = std::max(r.oom, d.oom_refusals);
  }
}

std::string LiveView(const std::vector<RunningJob>& jobs, double elapsed,
                     const std::map<std::string, int>& index) {
  std::ostringstream out;
  out << "  t=" << Fixed(elapsed, 1) << "s\n";
  for (const auto& r : jobs) {
    std::string gpu = r.gpu.empty() ? "?" : std::to_string(index.count(r.gpu) ? index.at(r.gpu) : -1);
    double share = CurrentShare(r.samples);
    int bar = static_cast<int>(std::lround(std::clamp(share, 0.0, 100.0) / 5));
    out << "  " << Pad(r.job.name, 12) << " GPU " << gpu << "  compute " << Pad(Fixed(share, 0) + "%", 5)
        << "[" << std::string(bar, '#') << std::string(20 - bar, ' ') << "] quota "
        << Pad(std::to_string(r.job.cores) + "%", 5) << " memory "
        << Pad(std::to_string(r.used_bytes >> 20) + "/" + std::to_string(r.limit_mib) + " MiB", 16) << " OOM "
        << r.oom << (r.exit_code >= 0 ? "  (done)" : "") << "\n";
  }
  return out.str();
}

std::string RenderTable(const std::vector<DemoJobResult>& results, const std::map<std::string, int>& index) {
  std::ostringstream out;
  out << Pad("JOB", 12) << Pad("GPU", 5) << Pad("QUOTA", 7) << Pad("ACHIEVED", 10) << Pad("MAX 1s", 8)
      << Pad("LIMIT MiB", 11) << Pad("PEAK MiB", 10) << Pad("OOM", 5) << Pad("EXIT", 6) << "WHAT IT TRIES\n";
  for (const auto& r : results) {
    std::string gpu = index.count(r.gpu) ? std::to_string(index.at(r.gpu)) : "?";
    out << Pad(r.job.name, 12) << Pad(gpu, 5) << Pad(std::to_string(r.job.cores) + "%", 7)
        << Pad(Fixed(r.achieved_share, 1) + "%", 10) << Pad(Fixed(r.max_window_share, 1) + "%", 8)
        << Pad(std::to_string(r.limit_mib), 11) << Pad(std::to_string(r.peak_mib), 10)
        << Pad(std::to_string(r.oom_refusals), 5) << Pad(std::to_string(r.exit_code), 6) << r.job.purpose
        << "\n";
  }
  return out.str();
}

}  // namespace

std::vector<DemoJob> DefaultDemoJobs() {
  return {
      {"trainer", "3000 MiB, saturates its 40% share", "4000", 40, 3000, 2000},
      {"memory-hog", "asks 6000 MiB of a 2000 MiB slice", "2000", 20, 6000, 1000},
      {"compute-hog", "saturates the GPU with a 20% quota", "1000", 20, 512, 500},
      {"inference", "1500 MiB, short kernels, 30% share", "3000", 30, 1500, 200},
  };
}

std::string RenderShareChart(const std::vector<DemoJobResult>& jobs, double seconds) {
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};
  const double w = 760, h = 360, left = 60, top = 30, pw = 660, ph = 280;
  auto x = [&](double t) { return left + pw * std::clamp(t / seconds, 0.0, 1.0); };
  auto y = [&](double pct) { return top + ph * (1.0 - std::clamp(pct, 0.0, 100.0) / 100.0); };
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h + 40
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << left
      << "\" y=\"18\" font-size=\"14\">tessera demo: compute share per job (1-second windows; "
         "dashed = quota)</text>\n";
  for (int p = 0; p <= 100; p += 20) {
    svg << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << y(p) << "\" y2=\"" << y(p)
        << "\" stroke=\"#ddd\"/>\n<text x=\"" << left - 8 << "\" y=\"" << y(p) + 4
        << "\" text-anchor=\"end\">" << p << "%</text>\n";
  }
  for (int t = 0; t <= static_cast<int>(seconds); t += 5) {
    svg << "<text x=\"" << x(t) << "\" y=\"" << top + ph + 16 << "\" text-anchor=\"middle\">" << t
        << "s</text>\n";
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    const char* c = kColors[i % 6];
    const auto& j = jobs[i];
    if (j.job.cores > 0) {
      svg << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << y(j.job.cores) << "\" y2=\""
          << y(j.job.cores) << "\" stroke=\"" << c << "\" stroke-dasharray=\"6,4\" stroke-width=\"1\"/>\n";
    }
    svg << "<polyline fill=\"none\" stroke=\"" << c << "\" stroke-width=\"2\" points=\"";
    for (const auto& [t, pct] : j.share_series) svg << Fixed(x(t), 1) << "," << Fixed(y(pct), 1) << " ";
    svg << "\"/>\n";
    svg << "<rect x=\"" << left + 10 + 180 * static_cast<double>(i % 4) << "\" y=\"" << h + 8 + 16 * (i / 4)
        << "\" width=\"12\" height=\"4\" fill=\"" << c << "\"/><text x=\""
        << left + 26 + 180 * static_cast<double>(i % 4) << "\" y=\"" << h + 14 + 16 * (i / 4) << "\">"
        << j.job.name << " (quota " << j.job.cores << "%)</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

Result<DemoReport> RunDemo(const DemoOptions& options, const std::vector<DemoJob>& jobs,
                           const std::string& tessera_exe, const std::string& job_exe) {
  if (!fs::exists(job_exe))
    return Error{"the demo workload " + job_exe + " is missing; build tessera first (make)"};
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) return Error{"cannot create " + options.out_dir + ": " + ec.message()};

  // A private simulated machine and ledger, removed at the end.
  char tmpl[] = "/tmp/tessera-demo-XXXXXX";
  if (!::mkdtemp(tmpl)) return Error{std::string("mkdtemp: ") + std::strerror(errno)};
  const std::string scratch = tmpl;
  const std::string ledger_dir = scratch + "/ledger";
  ::setenv(contract::kSimStateEnv, (scratch + "/sim").c_str(), 1);
  ::setenv(contract::kSimGpusEnv, options.sim_spec.c_str(), 1);

  auto local = OpenLocalGpus({options.sim_spec}, DiscoverInstallPaths());
  if (!local.ok()) {
    fs::remove_all(scratch, ec);
    return local.error();
  }
  std::map<std::string, int> index;
  for (const auto& g : local->gpus) index[g.uuid] = g.index;

  std::cout << "tessera demo: " << jobs.size() << " jobs share a simulated " << options.sim_spec
            << " machine for " << Fixed(options.seconds, 0)
            << " s, each through `tessera run` with its own slice.\n";
  for (const auto& j : jobs) {
    std::cout << "  " << Pad(j.name, 12) << " --gpumem " << Pad(j.gpumem, 5) << " --gpucores "
              << Pad(std::to_string(j.cores), 3) << "  " << j.purpose << "\n";
  }
  // Quotas are held strictly (--core-policy force) so the table can be read
  // against them: under `default` a job may borrow idle time.
  std::cout
      << "Every job runs with --core-policy force: held to its compute quota even when the GPU is idle.\n";
  std::cout << "\n";

  SliceLedger ledger(ledger_dir);
  std::vector<RunningJob> running;
  auto stop_all = [&] {
    for (auto& r : running) {
      if (r.exit_code < 0 && r.pid > 0) ::kill(r.pid, SIGTERM);
    }
    for (auto& r : running) {
      if (r.exit_code < 0 && r.pid > 0) ::waitpid(r.pid, nullptr, 0);
      if (r.out_fd >= 0) ::close(r.out_fd);
    }
    fs::remove_all(scratch, ec);
  };
  // Start one at a time, each after the previous one's slice is recorded, so
  // the placement (binpack) is the same on every run.
  for (const auto& j : jobs) {
    auto r = StartDemoJob(j, options, ledger_dir, tessera_exe, job_exe);
    if (!r.ok()) {
      stop_all();
      return r.error();
    }
    running.push_back(std::move(r).value());
    auto& job = running.back();
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (job.region.empty() && Clock::now() < deadline) {
      RefreshRegion(job, ledger);
      int status = 0;
      if (job.region.empty() && ::waitpid(job.pid, &status, WNOHANG) == job.pid) {
        job.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        std::ifstream log(job.log_path);
        std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
        stop_all();
        return Error{"job " + j.name + " did not start (exit " + std::to_string(job.exit_code) +
                     "): " + text};
      }
      if (job.region.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (job.region.empty()) {
      stop_all();
      return Error{"job " + j.name + " was not placed within 30 s"};
    }
  }

  const bool tty = options.live && ::isatty(STDOUT_FILENO);
  const auto start = Clock::now();
  auto next_view = start;
  int view_lines = 0;
  size_t remaining = running.size();
  while (remaining > 0) {
    std::vector<pollfd> fds;
    for (auto& r : running) {
      if (r.out_fd >= 0) fds.push_back({r.out_fd, POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 100);
    for (auto& r : running) {
      if (r.out_fd < 0) continue;
      pollfd p{r.out_fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(r.out_fd, buf, sizeof(buf));
      if (n > 0) {
        ParseLines(r, buf, static_cast<size_t>(n));
      } else if (n == 0) {
        ::close(r.out_fd);
        r.out_fd = -1;
      }
    }
    for (auto& r : running) {
      if (r.exit_code >= 0) continue;
      RefreshRegion(r, ledger);
      int status = 0;
      if (::waitpid(r.pid, &status, WNOHANG) == r.pid) {
        r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --remaining;
      }
    }
    const auto now = Clock::now();
    if (now >= next_view) {
      const double elapsed = std::chrono::duration<double>(now - start).count();
      std::string view = LiveView(running, elapsed, index);
      if (tty) {
        if (view_lines > 0) std::cout << "\x1b[" << view_lines << "F";
        std::cout << view << std::flush;
        view_lines = static_cast<int>(std::count(view.begin(), view.end(), '\n'));
        next_view = now + std::chrono::milliseconds(500);
      } else {
        std::cout << view << std::flush;
        next_view = now + std::chrono::seconds(5);
      }
    }
  }
  for (auto& r : running) {
    if (r.out_fd >= 0) ::close(r.out_fd);
  }

  DemoReport report;
  for (const auto& r : running) {
    DemoJobResult res;
    res.job = r.job;
    res.gpu = r.gpu;
    res.exit_code = r.exit_code;
    res.limit_mib = r.limit_mib;
    res.peak_mib = static_cast<int64_t>((r.peak_bytes + (1 << 20) - 1) >> 20);
    res.oom_refusals = r.oom;
    res.share_series = ShareSeries(r.samples);
    if (!r.samples.empty() && r.samples.back().t > 0) {
      res.achieved_share = 100.0 * r.samples.back().busy_ms / (r.samples.back().t * 1000.0);
    }
    for (const auto& [t, pct] : res.share_series) res.max_window_share = std::max(res.max_window_share, pct);
    report.jobs.push_back(std::move(res));
  }
  report.table = RenderTable(report.jobs, index);
  report.chart_path = options.out_dir + "/compute-share.svg";
  {
    std::ofstream svg(report.chart_path);
    svg << RenderShareChart(report.jobs, options.seconds);
  }
  {
    std::ofstream table(options.out_dir + "/summary.txt");
    table << report.table;
  }
  std::cout << "\n"
            << report.table << "\nChart of compute share over time: " << report.chart_path
            << "\nPer-job logs (tessera run and libvgpu messages): " << options.out_dir << "/<job>.log\n";
  fs::remove_all(scratch, ec);
  return report;
}

}  // namespace tessera::runner
