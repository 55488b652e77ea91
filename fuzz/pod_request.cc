// Fuzz target: core::DerivePodRequest and its siblings, which read what a pod
// asks for from the Pod object the API server (or the webhook's
// AdmissionReview, or the extender's ExtenderArgs) hands over. The input is
// the Pod's JSON text, parsed as the callers parse it.
//
// Properties: DefaultedLimits fails exactly when DerivePodRequest fails (its
// header says so); a derived request stays within the documented ranges; a
// pod that asks for nothing derives no containers.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/pod_request.h"
#include "fuzz_support.h"

using namespace tessera;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::AsText(data, size);
  const nlohmann::json pod =
      nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (pod.is_discarded()) return 0;

  static const core::ResourceConfig config;
  const bool asks = core::AsksForTesseraResources(pod, config);
  auto request = core::DerivePodRequest(pod, config);
  auto defaults = core::DefaultedLimits(pod, config);
  FUZZ_CHECK(request.ok() == defaults.ok(),
             request.ok() ? defaults.error().message : request.error().message);
  if (!request.ok()) {
    FUZZ_CHECK(!request.error().message.empty(), "");
    return 0;
  }
  if (!asks) FUZZ_CHECK(request->containers.empty() && request->init_containers.empty(), std::string(text));
  for (const auto* list : {&request->containers, &request->init_containers}) {
    for (const auto& c : *list) {
      FUZZ_CHECK(c.gpus >= 1 && c.gpus <= core::kMaxGpusPerContainer, c.name);
      FUZZ_CHECK(c.memory_mib >= 0 && c.memory_mib <= core::kMaxGpuMemoryMiB, c.name);
      FUZZ_CHECK(c.cores >= 0 && c.cores <= 100, c.name);
      if (c.memory_percent) FUZZ_CHECK(*c.memory_percent >= 1 && *c.memory_percent <= 100, c.name);
    }
  }
  return 0;
}
