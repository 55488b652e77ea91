// `tessera ps` and `tessera smi`: what `tessera run` jobs hold on this machine.
#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/command_registry.h"
#include "host/paths.h"
#include "runner/ledger.h"
#include "runner/local_gpus.h"
#include "runner/status_view.h"

namespace tessera::cli {
namespace {

const CommandRegistration kPs{
    {"ps", 11, [](CLI::App& root) {
       auto dir = std::make_shared<std::string>();
       auto* cmd = root.add_subcommand("ps", "List the running `tessera run` slices and what they use");
       cmd->footer(
           "\nOne row per job and GPU, from the job's libvgpu region: memory used / limit (MiB), its peak,\n"
           "SPILLED (only when some job's memory went to the host under CUDA_OVERSUBSCRIBE), allocations\n"
           "refused for the limit (OOM), and COMPUTE: the share of the GPU's time the job used over the "
           "last\n"
           "0.5 s (ps reads the regions twice, 0.5 s apart) / its --gpucores quota, with its --core-policy.\n"
           "Compute use is measured where libvgpu limits it: a quota of 1..99 % and a policy other than\n"
           "disable. A job that has not used CUDA yet shows zeros and '-'.");
       cmd->add_option("--ledger-dir", *dir, "Ledger directory (default: as `tessera run`)");
       cmd->callback([dir] {
         runner::SliceLedger ledger(dir->empty() ? host::DefaultRunStateDir() : *dir);
         auto entries = ledger.List();
         if (!entries.ok()) {
           std::cerr << "tessera ps: " << entries.error().message << "\n";
           SetExitCode(1);
           return;
         }
         const runner::RegionReadings first = runner::ReadRegions(*entries);
         if (!runner::AnyComputeMeasured(*entries, first)) {
           std::cout << runner::RenderJobTable(*entries, first, nullptr);
           return;
         }
         // A compute share needs two readings of the GPU time used.
         std::this_thread::sleep_for(std::chrono::milliseconds(500));
         auto still = ledger.List();  // jobs that ended meanwhile are left out
         if (!still.ok()) {
           std::cerr << "tessera ps: " << still.error().message << "\n";
           SetExitCode(1);
           return;
         }
         std::cout << runner::RenderJobTable(*still, runner::ReadRegions(*still), &first);
       });
     }}};

const CommandRegistration kSmi{
    {"smi", 12, [](CLI::App& root) {
       struct Flags {
         std::string dir;
         std::string sim;
       };
       auto flags = std::make_shared<Flags>();
       auto* cmd = root.add_subcommand(
           "smi", "Show this machine's GPUs with the slices and MIG devices `tessera run` jobs hold on them");
       cmd->footer(
           "\nPer GPU: its memory and the slices on it (memory used / limit, cores, job). A GPU in MIG mode\n"
           "lists its MIG devices instead: profile, placement (first memory slice + how many), MIG UUID,\n"
           "memory used / total (NVML), SMs, and the `tessera run --mig` job holding it, if any.");
       cmd->add_option("--ledger-dir", flags->dir, "Ledger directory (default: as `tessera run`)");
       cmd->add_option("--sim", flags->sim, "Show the simulated GPU with this spec (as `tessera run --sim`)");
       cmd->callback([flags] {
         runner::LocalGpuOptions options;
         if (!flags->sim.empty()) options.sim_spec = flags->sim;
         auto local = runner::OpenLocalGpus(options, runner::DiscoverInstallPaths());
         if (!local.ok()) {
           std::cerr << "tessera smi: " << local.error().message << "\n";
           SetExitCode(1);
           return;
         }
         if (!local->note.empty()) std::cerr << local->note << "\n";
         runner::SliceLedger ledger(flags->dir.empty() ? host::DefaultRunStateDir() : flags->dir);
         auto entries = ledger.List();
         if (!entries.ok()) {
           std::cerr << "tessera smi: " << entries.error().message << "\n";
           SetExitCode(1);
           return;
         }
         // MIG devices, when this NVML has MIG (an older driver's has not: GPUs only).
         std::vector<host::MigGpuState> mig;
         if (auto opened = runner::OpenLocalMig(*local); opened.ok()) {
           if (auto listed = opened->driver->List(); listed.ok()) {
             mig = std::move(listed).value();
           } else {
             std::cerr << "tessera smi: cannot list MIG devices: " << listed.error().message << "\n";
           }
         }
         std::cout << runner::RenderGpuTable(local->gpus, *entries, runner::ReadRegions(*entries), mig);
       });
     }}};

}  // namespace
}  // namespace tessera::cli
