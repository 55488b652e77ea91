// `tessera ps` and `tessera smi`: what `tessera run` jobs hold on this machine.
#include <iostream>
#include <memory>

#include "cli/command_registry.h"
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
           "\nOne row per job and GPU: memory used / limit (MiB) and peak as libvgpu accounts them, "
           "allocations\n"
           "refused for the limit (OOM), the compute quota and the GPU time used so far.");
       cmd->add_option("--ledger-dir", *dir, "Ledger directory (default: as `tessera run`)");
       cmd->callback([dir] {
         runner::SliceLedger ledger(dir->empty() ? runner::DefaultLedgerDir() : *dir);
         auto entries = ledger.List();
         if (!entries.ok()) {
           std::cerr << "tessera ps: " << entries.error().message << "\n";
           SetExitCode(1);
           return;
         }
         std::cout << runner::RenderJobTable(*entries);
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
           "smi", "Show this machine's GPUs with the slices `tessera run` jobs hold on them");
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
         runner::SliceLedger ledger(flags->dir.empty() ? runner::DefaultLedgerDir() : flags->dir);
         auto entries = ledger.List();
         if (!entries.ok()) {
           std::cerr << "tessera smi: " << entries.error().message << "\n";
           SetExitCode(1);
           return;
         }
         std::cout << runner::RenderGpuTable(local->gpus, *entries);
       });
     }}};

}  // namespace
}  // namespace tessera::cli
