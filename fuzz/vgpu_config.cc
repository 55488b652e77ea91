// Fuzz target: libvgpu's reading of its environment (vgpu::load_config), the
// first code in a container to see what the pod spec, the webhook and the
// node agent put there: TESSERA_ALLOCATION, HAMi's CUDA_DEVICE_* limits, the
// unplaced-pod policy, the log level, the region path.
//
// Input: the environment as NUL-separated NAME=value entries (what
// /proc/<pid>/environ holds); an entry without '=' is skipped, the first of
// duplicate names wins (as getenv finds it).
//
// Properties: never more than kMaxConfigDevices grants; the allocation source
// implies at least one grant; the per-device answers stay in range.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_support.h"
#include "vgpu/config.h"

using namespace tessera;

namespace {

using Environment = std::vector<std::pair<std::string, std::string>>;

const char* Lookup(void* context, const char* name) {
  for (const auto& [key, value] : *static_cast<const Environment*>(context)) {
    if (key == name) return value.c_str();
  }
  return nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Environment env;
  std::string_view rest = fuzz::AsText(data, size);
  while (!rest.empty()) {
    std::string_view entry;
    fuzz::SplitOnce(rest, '\0', entry, rest);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace_back(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  const vgpu::Config config = vgpu::load_config(&Lookup, &env);

  FUZZ_CHECK(config.grants.size() <= vgpu::kMaxConfigDevices, std::to_string(config.grants.size()));
  if (config.source == vgpu::ConfigSource::kAllocation) FUZZ_CHECK(!config.grants.empty(), "");
  FUZZ_CHECK(config.log_level >= 0 && config.log_level <= 4, std::to_string(config.log_level));
  for (int index = -1; index <= vgpu::kMaxConfigDevices; ++index) {
    const char* uuid = index >= 0 && static_cast<size_t>(index) < config.grants.size()
                           ? config.grants[static_cast<size_t>(index)].uuid.c_str()
                           : "GPU-00000000-0000-0000-0000-000000000000";
    const int cores = config.cores_for(uuid, index);
    FUZZ_CHECK(cores >= 0 && cores <= 100, std::to_string(cores));
    (void)config.memory_limit_for(uuid, index);
    (void)config.device_visible(uuid);
  }
  (void)config.device_visible("");
  for (const auto& g : config.grants) FUZZ_CHECK(!g.uuid.empty(), "");
  return 0;
}
