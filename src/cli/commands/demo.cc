// `tessera demo`: jobs with different slices sharing simulated GPUs.
#include <iostream>
#include <memory>

#include "cli/command_registry.h"
#include "runner/demo.h"
#include "runner/local_gpus.h"

namespace tessera::cli {
namespace {

const CommandRegistration kDemo{
    {"demo", 5, [](CLI::App& root) {
       auto options = std::make_shared<runner::DemoOptions>();
       auto* cmd = root.add_subcommand(
           "demo", "Run several jobs with different GPU slices on simulated GPUs and report");
       cmd->footer(
           "\nFour jobs start through `tessera run` on a private simulated two-GPU machine: a trainer, a "
           "job\n"
           "that asks for more memory than its slice (libvgpu refuses the excess with "
           "CUDA_ERROR_OUT_OF_MEMORY),\n"
           "a job that tries to take more compute than its quota, and an inference job. A live view shows "
           "each\n"
           "job's compute share and memory; at the end a table compares quota with achieved share and limit "
           "with\n"
           "peak memory, and an SVG chart of compute share over time is written to --out. Every job runs\n"
           "with --core-policy force (held to its quota even on an idle GPU), so the shares follow the "
           "quotas.");
       cmd->add_option("--seconds", options->seconds, "How long the jobs run")
           ->default_val(20)
           ->check(CLI::Range(3.0, 600.0));
       cmd->add_option("--sim", options->sim_spec, "Simulated GPUs to use")->default_val("2xL4");
       cmd->add_option("--out", options->out_dir, "Where the chart, table and job logs go")
           ->default_val("tessera-demo");
       cmd->add_flag("--no-live{false}", options->live, "Print progress lines instead of a live view");
       cmd->callback([options] {
         const auto paths = runner::DiscoverInstallPaths();
         auto report = runner::RunDemo(*options, runner::DefaultDemoJobs(), paths.bin_dir + "/tessera",
                                       paths.bin_dir + "/tessera-demo-job");
         if (!report.ok()) {
           std::cerr << "tessera demo: " << report.error().message << "\n";
           SetExitCode(1);
           return;
         }
         for (const auto& j : report->jobs) {
           if (j.exit_code != 0) SetExitCode(1);
         }
       });
     }}};

}  // namespace
}  // namespace tessera::cli
