// ParseCommandLine: CLI11's parse with the exit convention of tessera's
// programs, so each main does not spell its own try/catch. Header-only; a
// program that includes it links CLI11 (header-only itself).
#pragma once

#include <optional>

#include <CLI/CLI.hpp>

namespace tessera {

// Parses argv into `app`. Returns the code the program must exit with when
// the command line ends it: 0 after --help (the help printed on stdout), 2
// after a usage error (the message on stderr, as most Unix tools do); nothing
// when the program goes on.
inline std::optional<int> ParseCommandLine(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int printed = app.exit(e);  // 0 for the help (and --version) CLI11 prints
    return printed == 0 ? 0 : 2;
  }
  return std::nullopt;
}

}  // namespace tessera
