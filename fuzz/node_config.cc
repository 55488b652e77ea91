// Fuzz target: tessera-node's YAML configuration, both files it reads: the
// main file (--config, node::ApplyYaml) and the per-node overrides file
// (node_config_file, node::ApplyNodeOverrides, which validates every entry).
// Each input is tried as both, over the defaults, then validated, as
// ParseCommandLine does.
//
// Properties: a refusal names the file; no exception escapes (yaml-cpp
// throws on malformed documents).
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_support.h"
#include "node/config.h"

using namespace tessera;

namespace {

std::string g_path;  // the overrides file each input is written to; removed at exit

const std::string& OverridesPath() {
  if (g_path.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    g_path = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tessera-fuzz-nodes-XXXXXX";
    const int fd = mkstemp(g_path.data());
    FUZZ_CHECK(fd >= 0, g_path);
    ::close(fd);
    std::atexit([] { ::unlink(g_path.c_str()); });
  }
  return g_path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string yaml(fuzz::AsText(data, size));
  {
    node::NodeConfig config;
    auto applied = node::ApplyYaml(yaml, "fuzz.yaml", config);
    if (applied.ok()) {
      (void)node::Validate(config);
    } else {
      FUZZ_CHECK(applied.error().message.find("fuzz.yaml") != std::string::npos, applied.error().message);
    }
  }
  {
    const std::string& path = OverridesPath();
    const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    FUZZ_CHECK(fd >= 0, path);
    FUZZ_CHECK(::write(fd, yaml.data(), yaml.size()) == static_cast<ssize_t>(yaml.size()), path);
    ::close(fd);
    node::NodeConfig config;
    config.node_config_file = path;
    config.node_name = "gpu-1";
    auto applied = node::ApplyNodeOverrides(config);
    if (applied.ok()) {
      (void)node::Validate(config);
    } else {
      FUZZ_CHECK(applied.error().message.find(path) != std::string::npos, applied.error().message);
    }
  }
  return 0;
}
