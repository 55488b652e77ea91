#include "host/paths.h"

#include <unistd.h>

#include <cstdlib>

namespace tessera::host {

std::string DefaultRunStateDir() {
  if (const char* s = std::getenv("TESSERA_RUN_STATE"); s && *s) return s;
  if (::geteuid() == 0) return "/run/tessera";
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x) return std::string(x) + "/tessera";
  return "/tmp/tessera-" + std::to_string(::geteuid());
}

}  // namespace tessera::host
