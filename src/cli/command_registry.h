// Subcommands of the `tessera` CLI register themselves here, one file per
// subcommand under src/cli/commands/, so that adding a command touches no
// shared file. Each file defines a static CommandRegistration.
//
// A command's Setup adds its CLI11 subcommand and options; its callback does the
// work and stores the process exit code via SetExitCode.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace tessera::cli {

struct CommandSpec {
  std::string name;  // for ordering in --help
  int order = 100;   // lower appears first in --help
  std::function<void(CLI::App& root)> setup;
};

std::vector<CommandSpec>& CommandRegistry();

struct CommandRegistration {
  explicit CommandRegistration(CommandSpec spec) { CommandRegistry().push_back(std::move(spec)); }
};

// The exit code the running command wants (0 unless set).
void SetExitCode(int code);
int ExitCode();

}  // namespace tessera::cli
