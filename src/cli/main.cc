// tessera: the command-line face of tessera (run slices, simulate schedules,
// inspect the simulated GPU, ...). Each subcommand lives in src/cli/commands/.
#include <algorithm>
#include <iostream>

#include "cli/command_registry.h"

namespace tessera::cli {

std::vector<CommandSpec>& CommandRegistry() {
  static std::vector<CommandSpec> registry;
  return registry;
}

namespace {
int g_exit_code = 0;
}  // namespace

void SetExitCode(int code) { g_exit_code = code; }
int ExitCode() { return g_exit_code; }

}  // namespace tessera::cli

int main(int argc, char** argv) {
  using namespace tessera::cli;
  CLI::App app{
      "tessera: enforced GPU slices (memory MiB + compute %) for Kubernetes pods and local jobs.\n"
      "\n"
      "Examples:\n"
      "  tessera version\n"
      "  tessera simulate --nodes nodes.csv --pods pods.csv --policy tessera --seeds 42-51\n"
      "\n"
      "Run 'tessera <command> --help' for the options of one command.",
      "tessera"};
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
