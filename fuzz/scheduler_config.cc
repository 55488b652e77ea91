// Fuzz target: tessera-scheduler's YAML configuration (--config, the
// ConfigMap of deploy/scheduler/config.yaml), read by
// scheduler::ApplyConfigYaml over the defaults and then validated, as main()
// does.
//
// Properties: a refusal names the file; no exception escapes (yaml-cpp throws
// on malformed documents; the reader must turn that into an error).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "scheduler/config.h"

using namespace tessera;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string yaml(fuzz::AsText(data, size));
  scheduler::SchedulerConfig config;
  auto applied = scheduler::ApplyConfigYaml(yaml, "fuzz.yaml", config);
  if (!applied.ok()) {
    FUZZ_CHECK(applied.error().message.find("fuzz.yaml") != std::string::npos, applied.error().message);
    return 0;
  }
  (void)config.Validate();
  return 0;
}
