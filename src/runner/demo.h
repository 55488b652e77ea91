// `tessera demo`: several jobs with different slices sharing a simulated
// two-GPU machine through the real `tessera run` path — one job tries to take
// more memory than its slice, one tries to take more compute — with a live
// view, a closing table (quota vs achieved compute share, limit vs peak
// memory, OOM refusals) and an SVG chart of compute share over time.
//
// Everything runs in a private temporary simulated GPU and ledger, so the demo
// never disturbs other `tessera run` jobs or simulated GPUs on the machine.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"

namespace tessera::runner {

struct DemoJob {
  std::string name;
  std::string purpose;    // one line for the table
  std::string gpumem;     // the slice: --gpumem
  int cores = 0;          // the slice: --gpucores
  int64_t wants_mib = 0;  // what the program tries to allocate
  int64_t kernel_us = 1000;
};

struct DemoOptions {
  std::string sim_spec = "2xL4";
  double seconds = 20;
  std::string out_dir = "tessera-demo";  // chart and table are written here
  bool live = true;                      // redraw a live view when stdout is a terminal
};

// The default cast of jobs.
std::vector<DemoJob> DefaultDemoJobs();

struct DemoJobResult {
  DemoJob job;
  std::string gpu;  // UUID the job ran on
  int exit_code = -1;
  double achieved_share = 0;    // device time / wall time over the run, percent
  double max_window_share = 0;  // highest 1-second window, percent
  int64_t limit_mib = 0;
  int64_t peak_mib = 0;  // from the job's region (libvgpu's accounting)
  uint64_t oom_refusals = 0;
  std::vector<std::pair<double, double>> share_series;  // (t, percent) per window
};

struct DemoReport {
  std::vector<DemoJobResult> jobs;
  std::string table;       // the closing table as printed
  std::string chart_path;  // SVG written
};

// Runs the demo; progress goes to stdout. `tessera_exe` is the CLI to invoke
// as `tessera run`, `job_exe` the workload program.
Result<DemoReport> RunDemo(const DemoOptions& options, const std::vector<DemoJob>& jobs,
                           const std::string& tessera_exe, const std::string& job_exe);

// The SVG chart of each job's compute share over time.
std::string RenderShareChart(const std::vector<DemoJobResult>& jobs, double seconds);

}  // namespace tessera::runner
