// Fuzz target: the mutating webhook (POST /mutate), from the body the API
// server (or anyone reaching the webhook port) sends: parsed as the handler
// parses it (nlohmann, no exceptions; not JSON is a 400 there), answered by
// scheduler::Mutate, and the answer dumped as the handler dumps it.
//
// The cluster the webhook sees is chosen by the input's length: with or
// without a GPU memory quota in every namespace (the percentage rewrite),
// GPUs of one size or of two (the refusal), so the quota path is fuzzed too.
//
// Properties: the answer is an AdmissionReview with a response; an allowed
// response with a patch carries a base64 JSONPatch that decodes to a JSON
// array; applying that patch to the pod succeeds and gives a pod whose patch
// is empty (the header promises idempotence).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "fuzz_support.h"
#include "scheduler/webhook.h"

using namespace tessera;
using nlohmann::json;

namespace {

std::string Base64Decode(const std::string& text) {
  static const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    if (c == '=') break;
    const size_t v = alphabet.find(c);
    FUZZ_CHECK(v != std::string::npos, "patch is not base64: " + text);
    bits = (bits << 6) | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xFF));
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = (log::SetLevel(log::Level::kError), true);  // a line per request drowns the run
  (void)quiet;
  const std::string_view body = fuzz::AsText(data, size);
  const json review = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (review.is_discarded()) return 0;
  static const scheduler::SchedulerConfig config;
  const bool quota = size % 2 == 1;
  const bool two_sizes = size % 4 >= 2;
  scheduler::ClusterView view;
  view.largest_gpu_mib = 81920;
  if (quota) {
    view.gpu_memory_quota = [](const std::string&) { return scheduler::NamespaceQuota{"", {"gpu-quota"}}; };
  }
  view.visit_gpus = [two_sizes](const std::function<void(const core::Gpu&)>& visit) {
    core::Gpu a100;
    a100.uuid = "GPU-a100";
    a100.model = "NVIDIA A100-SXM4-80GB";
    a100.memory_mib = 81920;
    visit(a100);
    if (two_sizes) {
      core::Gpu t4 = a100;
      t4.uuid = "GPU-t4";
      t4.model = "Tesla T4";
      t4.memory_mib = 15109;
      visit(t4);
    }
    return Status{};
  };
  json answer = scheduler::Mutate(review, config, view);
  const std::string text = answer.dump();  // the handler's Reply: dump() with its defaults
  FUZZ_CHECK(answer.is_object() && answer.contains("response") && answer["response"].is_object(), text);
  const json& response = answer["response"];
  FUZZ_CHECK(response.contains("allowed") && response["allowed"].is_boolean(), text);
  if (!response["allowed"].get<bool>() || !response.contains("patch")) return 0;

  FUZZ_CHECK(response["patch"].is_string(), text);
  const json patch = json::parse(Base64Decode(response["patch"].get<std::string>()), nullptr, false);
  FUZZ_CHECK(patch.is_array(), text);
  // Idempotence: the patched pod needs no further patch.
  json patched;
  try {
    patched = review.at("request").at("object").patch(patch);
  } catch (const json::exception& e) {
    fuzz::Fail(__FILE__, __LINE__, "the patch applies to the pod",
               std::string(e.what()) + ": " + patch.dump());
  }
  const json& request = review.at("request");
  const std::string ns = request.contains("namespace") && request["namespace"].is_string()
                             ? request["namespace"].get<std::string>()
                             : "";
  auto again = scheduler::MutationPatch(patched, config, view, ns);
  FUZZ_CHECK(again.ok(), again.ok() ? "" : again.error().message);
  FUZZ_CHECK(again->empty(), "second patch: " + again->dump());
  return 0;
}
