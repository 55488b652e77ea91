// `tessera version`: what build this is.
#include <iostream>

#include "cli/build_info.h"
#include "cli/command_registry.h"

namespace tessera::cli {
namespace {

const CommandRegistration kVersion{{"version", 1000, [](CLI::App& root) {
  auto* cmd = root.add_subcommand("version", "Print tessera's version and build revision");
  cmd->callback([] {
    std::cout << "tessera " << kVersionString << " (revision " << kGitRevision << ", " << kBuildType
              << ")\n";
  });
}}};

}  // namespace
}  // namespace tessera::cli
