// `tessera version`: what build this is.
#include <iostream>
#include <string>

#include "cli/build_info.h"
#include "cli/command_registry.h"
#include "cli/version.h"

namespace tessera::cli {

std::string VersionLine() {
  return std::string("tessera ") + kVersionString + " (revision " + kGitRevision + ", " + kBuildType + ")";
}

namespace {

const CommandRegistration kVersion{
    {"version", 1000, [](CLI::App& root) {
       auto* cmd = root.add_subcommand(
           "version", "Print tessera's version and build revision (also: tessera --version)");
       cmd->callback([] { std::cout << VersionLine() << "\n"; });
     }}};

}  // namespace
}  // namespace tessera::cli
