// The version line `tessera version` and `tessera --version` print.
#pragma once

#include <string>

namespace tessera::cli {

// "tessera 0.1.0 (revision abc1234, Release)"; defined in commands/version.cc.
std::string VersionLine();

}  // namespace tessera::cli
