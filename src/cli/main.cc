// tessera: the command-line face of tessera (run slices, simulate schedules,
// inspect the simulated GPU, ...). Each subcommand lives in src/cli/commands/.
#include <algorithm>
#include <iostream>

#include "cli/command_registry.h"
#include "cli/version.h"

namespace tessera::cli {

std::vector<CommandSpec>& CommandRegistry() {
  static std::vector<CommandSpec> registry;
  return registry;
}

namespace {
int g_exit_code = 0;
}  // namespace

void SetExitCode(int code) {
  g_exit_code = code;
}
int ExitCode() {
  return g_exit_code;
}

}  // namespace tessera::cli

int main(int argc, char** argv) {
  using namespace tessera::cli;
  CLI::App app{
      "tessera shares NVIDIA GPUs between Kubernetes pods and between jobs on one machine: each gets a\n"
      "slice of a GPU (MiB of device memory + % of its compute), enforced inside the process by\n"
      "libvgpu.so and placed by a fragmentation-aware scheduler. No GPU? A simulated one is built in.\n",
      "tessera"};
  app.set_version_flag("--version", VersionLine(), "Print tessera's version and build revision");
  app.footer(
      "Examples:\n"
      "  tessera demo                                     jobs sharing a simulated 2-GPU machine\n"
      "  tessera run --gpumem 2000 --gpucores 30 -- CMD   run CMD on a 2000 MiB, 30 % slice\n"
      "  tessera simulate --nodes N.csv --pods P.csv --policy tessera --seeds 42-51\n"
      "\n"
      "Run 'tessera <command> --help' for the options of one command.\n"
      "Documentation: docs/ in the source tree (docs/run.md: run, ps, smi, demo; docs/sim.md: the\n"
      "simulated GPU; docs/placement.md and docs/benchmarks.md: simulate; docs/scheduler.md, docs/node.md:\n"
      "Kubernetes).");
  app.require_subcommand(1);
  app.fallthrough(false);

  auto& registry = CommandRegistry();
  std::stable_sort(registry.begin(), registry.end(),
                   [](const CommandSpec& a, const CommandSpec& b) { return a.order < b.order; });
  for (const auto& spec : registry) spec.setup(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2 (like most Unix tools); --help exits 0.
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return ExitCode();
}
