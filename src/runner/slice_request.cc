#include "runner/slice_request.h"

#include <cctype>

#include "core/quantity.h"

namespace tessera::runner {

Status ParseGpuMemory(std::string_view text, SliceRequest& request) {
  if (text.empty())
    return Error{"--gpumem: empty value; give MiB (3000), a size (3Gi) or a percentage (25%)"};
  if (text.back() == '%') {
    auto q = core::Quantity::Parse(text.substr(0, text.size() - 1));
    if (!q.ok() || !q->IsInteger()) {
      return Error{"--gpumem: '" + std::string(text) + "' is not a whole percentage; e.g. 25%"};
    }
    int64_t pct = *q->ToInteger();
    if (pct < 1 || pct > 100) return Error{"--gpumem: percentage must be 1..100, got " + std::string(text)};
    request.memory_percent = static_cast<int>(pct);
    request.memory_mib = 0;
    return Status::Ok();
  }
  TESSERA_ASSIGN_OR_RETURN_WRAP(const core::Quantity q, core::Quantity::Parse(text), "--gpumem");
  if (q.IsNegative()) return Error{"--gpumem: must not be negative, got " + std::string(text)};
  const bool has_suffix = !text.empty() && !std::isdigit(static_cast<unsigned char>(text.back()));
  int64_t mib = 0;
  if (has_suffix) {
    // A size in bytes ("3Gi"): whole MiB, rounded up so the job gets at least that.
    TESSERA_ASSIGN_OR_RETURN_WRAP(const int64_t bytes, q.ToIntegerCeil(), "--gpumem");
    mib = (bytes + (1 << 20) - 1) >> 20;
  } else {
    auto whole = q.ToInteger();
    if (!whole.ok()) return Error{"--gpumem: MiB must be a whole number, got " + std::string(text)};
    mib = *whole;
  }
  if (mib == 0) return Error{"--gpumem: must be at least 1 MiB (omit the flag for the whole GPU)"};
  request.memory_mib = mib;
  request.memory_percent.reset();
  return Status::Ok();
}

Status Validate(const SliceRequest& request) {
  if (request.gpus < 1 || request.gpus > 16) {
    return Error{"--gpus: must be 1..16, got " + std::to_string(request.gpus)};
  }
  if (request.cores < 0 || request.cores > 100) {
    return Error{"--gpucores: must be 0..100 (percent of a GPU; 100 = exclusive), got " +
                 std::to_string(request.cores)};
  }
  if (auto name = CorePolicyName(request); !name.ok()) return name.error();
  if (request.core_policy != "force" && request.core_policy != "default" &&
      request.core_policy != "disable") {
    return Error{"--core-policy: must be force, default or disable, got '" + request.core_policy + "'"};
  }
  return Status::Ok();
}

core::PodRequest ToPodRequest(const SliceRequest& request) {
  core::PodRequest pod;
  core::ContainerRequest c;
  c.name = "job";
  c.gpus = request.gpus;
  c.memory_mib = request.memory_mib;
  c.memory_percent = request.memory_percent;
  c.cores = request.cores;
  pod.containers.push_back(std::move(c));
  pod.filter.use_types = request.gpu_types;
  return pod;
}

Result<std::string> CorePolicyName(const SliceRequest& request) {
  if (request.policy == "binpack" || request.policy == "spread")
    return "gpu-" + request.policy;  // deprecated
  for (const char* name : {"gpu-binpack", "gpu-spread", "node-binpack", "node-spread", "tessera"}) {
    if (request.policy == name) return std::string(name);
  }
  return Error{"--policy: must be gpu-binpack, gpu-spread, node-binpack, node-spread or tessera, got '" +
               request.policy + "'"};
}

std::string PolicyDeprecation(const SliceRequest& request) {
  if (request.policy != "binpack" && request.policy != "spread") return "";
  return "--policy " + request.policy + " is deprecated: write --policy gpu-" + request.policy +
         " (the same GPUs; policy names are the scheduler's and simulate's, docs/placement.md)";
}

}  // namespace tessera::runner
