#include "scheduler/webhook.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "contract/container_contract.h"
#include "core/pod_request.h"
#include "scheduler/mig_placement.h"

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;

bool HasEnv(const Json& container, std::string_view name) {
  auto env = container.find("env");
  if (env == container.end() || !env->is_array()) return false;
  for (const Json& e : *env) {
    if (e.is_object() && e.value("name", "") == name) return true;
  }
  return false;
}

Json AllocationEnv() {
  return {
      {"name", contract::kAllocationEnv},
      {"valueFrom",
       {{"fieldRef",
         {{"apiVersion", "v1"},
          {"fieldPath", "metadata.annotations['" + std::string(contract::kAllocationAnnotation) + "']"}}}}}};
}

Json AnnotationEnv(std::string_view name, const std::string& annotation) {
  return {
      {"name", name},
      {"valueFrom",
       {{"fieldRef", {{"apiVersion", "v1"}, {"fieldPath", "metadata.annotations['" + annotation + "']"}}}}}};
}

// `priority`: the container's nvidia.com/priority, if it gives one; `mps`:
// whether it is an MPS share.
void WireEnv(const Json& container, const std::string& base, bool init, size_t index,
             std::optional<int> priority, bool mps, Json& patch) {
  Json missing = Json::array();
  if (mps && !HasEnv(container, kMpsThreadPercentageEnv)) {
    missing.push_back(AnnotationEnv(kMpsThreadPercentageEnv, MpsThreadPercentageAnnotation(init, index)));
  }
  if (mps && !HasEnv(container, kMpsPinnedMemoryEnv)) {
    missing.push_back(AnnotationEnv(kMpsPinnedMemoryEnv, MpsPinnedMemoryAnnotation(init, index)));
  }
  if (!HasEnv(container, contract::kAllocationEnv)) missing.push_back(AllocationEnv());
  if (!HasEnv(container, contract::kVisibleDevicesEnv)) {
    missing.push_back(
        {{"name", contract::kVisibleDevicesEnv},
         {"valueFrom",
          {{"fieldRef",
            {{"apiVersion", "v1"},
             {"fieldPath", "metadata.annotations['" + VisibleDevicesAnnotation(init, index) + "']"}}}}}});
  }
  if (!HasEnv(container, contract::kContainerNameEnv)) {
    missing.push_back({{"name", contract::kContainerNameEnv}, {"value", container.value("name", "")}});
  }
  // Passed as given: nvidia.com/priority and CUDA_TASK_PRIORITY share HAMi's
  // and CUDA's convention (0 = high, 1 and above = low).
  if (priority && !HasEnv(container, contract::kTaskPriorityEnv)) {
    missing.push_back({{"name", contract::kTaskPriorityEnv}, {"value", std::to_string(*priority)}});
  }
  if (missing.empty()) return;
  auto env = container.find("env");
  if (env == container.end() || !env->is_array()) {
    patch.push_back({{"op", "add"}, {"path", base + "/env"}, {"value", missing}});
    return;
  }
  for (Json& e : missing)
    patch.push_back({{"op", "add"}, {"path", base + "/env/-"}, {"value", std::move(e)}});
}

bool MountsAt(const Json& container, std::string_view path) {
  auto mounts = container.find("volumeMounts");
  if (mounts == container.end() || !mounts->is_array()) return false;
  for (const Json& m : *mounts) {
    if (m.is_object() && m.value("mountPath", "") == path) return true;
  }
  return false;
}

bool HasVolume(const Json& spec, const std::string& name) {
  auto volumes = spec.find("volumes");
  if (volumes == spec.end() || !volumes->is_array()) return false;
  for (const Json& v : *volumes) {
    if (v.is_object() && v.value("name", "") == name) return true;
  }
  return false;
}

// The container's own limits annotation as a read-only file: a Downward API
// volume per container (a pod-level volume mounted into that container alone,
// so no container reads another's limits and none can write its own). An
// annotation bind has not written yet is an empty file until it is.
void WireLimitsVolume(const Json& spec, const Json& container, const std::string& base, bool init,
                      size_t index, bool& volumes_added, Json& patch) {
  if (MountsAt(container, contract::kPodLimitsContainerDir)) return;
  const std::string name = LimitsVolumeName(init, index);
  if (!HasVolume(spec, name)) {
    Json volume = {
        {"name", name},
        {"downwardAPI",
         {{"items",
           {{{"path", contract::kLimitsFileName},
             {"fieldRef",
              {{"apiVersion", "v1"},
               {"fieldPath", "metadata.annotations['" + LimitsAnnotation(init, index) + "']"}}}}}}}}};
    const bool have_list = spec.contains("volumes") && spec["volumes"].is_array();
    if (!have_list && !volumes_added) {
      patch.push_back({{"op", "add"}, {"path", "/spec/volumes"}, {"value", Json::array({volume})}});
    } else {
      patch.push_back({{"op", "add"}, {"path", "/spec/volumes/-"}, {"value", volume}});
    }
    volumes_added = true;
  }
  Json mount = {{"name", name}, {"mountPath", contract::kPodLimitsContainerDir}, {"readOnly", true}};
  auto mounts = container.find("volumeMounts");
  if (mounts == container.end() || !mounts->is_array()) {
    patch.push_back({{"op", "add"}, {"path", base + "/volumeMounts"}, {"value", Json::array({mount})}});
  } else {
    patch.push_back({{"op", "add"}, {"path", base + "/volumeMounts/-"}, {"value", mount}});
  }
}

Status CheckAgainstCluster(const std::vector<core::ContainerRequest>& containers,
                           const SchedulerConfig& config, int64_t largest_gpu_mib) {
  if (largest_gpu_mib <= 0) return Status::Ok();
  for (const auto& c : containers) {
    if (c.memory_mib > largest_gpu_mib && c.share == core::ShareKind::kMps) {
      return Error{"container \"" + c.name + "\": an MPS share of " + std::to_string(c.memory_mib) +
                   " MiB is more than the largest GPU in the cluster (" + std::to_string(largest_gpu_mib) +
                   " MiB)"};
    }
    if (c.memory_mib > largest_gpu_mib) {
      return Error{"container \"" + c.name + "\": " + config.resources.gpu_memory_name + " is " +
                   std::to_string(c.memory_mib) + " MiB, more than the largest GPU in the cluster (" +
                   std::to_string(largest_gpu_mib) + " MiB)"};
    }
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::string> MutationWarnings(const Json& pod, const SchedulerConfig& config) {
  std::vector<std::string> warnings;
  if (!pod.is_object() || !core::AsksForTesseraResources(pod, config.resources)) return warnings;
  auto request = core::DerivePodRequest(pod, config.resources);
  if (!request.ok()) return warnings;
  std::string mps;  // the MPS containers, quoted
  for (const auto* list : {&request->init_containers, &request->containers}) {
    for (const core::ContainerRequest& c : *list) {
      if (c.share == core::ShareKind::kMps) mps += (mps.empty() ? "\"" : ", \"") + c.name + "\"";
    }
  }
  const Json* spec = pod.contains("spec") && pod["spec"].is_object() ? &pod["spec"] : nullptr;
  const bool host_ipc = spec && spec->contains("hostIPC") && (*spec)["hostIPC"] == true;
  if (!mps.empty() && !host_ipc) {
    warnings.push_back("MPS clients need hostIPC: true to reach the MPS server; the pod does not set it (" +
                       mps + ")");
  }
  return warnings;
}

std::string VisibleDevicesAnnotation(bool init_container, size_t index) {
  std::string key(contract::kVisibleDevicesAnnotationPrefix);
  if (init_container) key += contract::kVisibleDevicesInitInfix;
  return key + std::to_string(index);
}

std::string LimitsAnnotation(bool init_container, size_t index) {
  std::string key(contract::kLimitsAnnotationPrefix);
  if (init_container) key += contract::kVisibleDevicesInitInfix;
  return key + std::to_string(index);
}

std::string LimitsVolumeName(bool init_container, size_t index) {
  return std::string("tessera-limits-") + (init_container ? "init-" : "") + std::to_string(index);
}

std::string MpsThreadPercentageAnnotation(bool init_container, size_t index) {
  return std::string("tessera.io/mps-thread-percentage.") + (init_container ? "init-" : "") +
         std::to_string(index);
}

std::string MpsPinnedMemoryAnnotation(bool init_container, size_t index) {
  return std::string("tessera.io/mps-pinned-memory.") + (init_container ? "init-" : "") +
         std::to_string(index);
}

std::string EscapeJsonPointer(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Base64Encode(std::string_view data) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < data.size(); i += 3) {
    uint32_t v = (uint8_t(data[i]) << 16) | (uint8_t(data[i + 1]) << 8) | uint8_t(data[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i + 1 == data.size()) {
    uint32_t v = uint8_t(data[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == data.size()) {
    uint32_t v = (uint8_t(data[i]) << 16) | (uint8_t(data[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

namespace {
Result<Json> MutationPatchUnchecked(const Json& pod, const SchedulerConfig& config, int64_t largest_gpu_mib);
}  // namespace

Result<Json> MutationPatch(const Json& pod, const SchedulerConfig& config, int64_t largest_gpu_mib) {
  // A pod shaped unlike any the API server would send must not take the
  // webhook down: JSON type errors become a denial.
  try {
    return MutationPatchUnchecked(pod, config, largest_gpu_mib);
  } catch (const std::exception& e) {
    return Error{std::string("malformed pod: ") + e.what()};
  }
}

namespace {
Result<Json> MutationPatchUnchecked(const Json& pod, const SchedulerConfig& config, int64_t largest_gpu_mib) {
  Json patch = Json::array();
  if (!pod.is_object() || !core::AsksForTesseraResources(pod, config.resources)) return patch;
  TESSERA_ASSIGN_OR_RETURN(const core::PodRequest request, core::DerivePodRequest(pod, config.resources));
  TESSERA_RETURN_IF_ERROR(CheckAgainstCluster(request.containers, config, largest_gpu_mib));
  TESSERA_RETURN_IF_ERROR(CheckAgainstCluster(request.init_containers, config, largest_gpu_mib));
  TESSERA_ASSIGN_OR_RETURN(const std::vector<core::ContainerDefaults> defaults,
                           core::DefaultedLimits(pod, config.resources));

  const Json& spec = pod.at("spec");
  if (spec.value("schedulerName", "") != config.scheduler_name) {
    patch.push_back({{"op", "add"}, {"path", "/spec/schedulerName"}, {"value", config.scheduler_name}});
  }
  for (const core::ContainerDefaults& d : defaults) {
    const char* list = d.init_container ? "initContainers" : "containers";
    const Json& container = spec.at(list).at(d.index);
    std::string base = "/spec/" + std::string(list) + "/" + std::to_string(d.index);
    Json limits = Json::object();
    for (const auto& [name, value] : d.limits_to_add) limits[name] = value;
    auto res = container.find("resources");
    if (res == container.end() || !res->is_object()) {
      patch.push_back({{"op", "add"}, {"path", base + "/resources"}, {"value", {{"limits", limits}}}});
    } else if (!res->contains("limits") || !(*res)["limits"].is_object()) {
      patch.push_back({{"op", "add"}, {"path", base + "/resources/limits"}, {"value", limits}});
    } else {
      for (const auto& [name, value] : d.limits_to_add) {
        patch.push_back({{"op", "add"},
                         {"path", base + "/resources/limits/" + EscapeJsonPointer(name)},
                         {"value", value}});
      }
    }
  }
  // A dynamic MIG pod's containers get no variables from us: the MIG device
  // does not exist at bind, so bind writes no visible-devices annotation and
  // the variable would resolve to "" over the MIG UUID Allocate sets (a pod's
  // own env wins over a device plugin's); and libvgpu, the only reader of the
  // rest, is not in a MIG container (docs/decisions.md).
  if (WantsDynamicMig(pod)) return patch;
  bool volumes_added = false;  // this patch created spec.volumes
  for (const char* list : {"initContainers", "containers"}) {
    const bool init = std::string_view(list) == "initContainers";
    std::map<std::string, std::pair<std::optional<int>, bool>> gpu_containers;  // name -> priority, mps
    for (const auto& c : init ? request.init_containers : request.containers) {
      gpu_containers[c.name] = {c.priority, c.share == core::ShareKind::kMps};
    }
    auto arr = spec.find(list);
    if (arr == spec.end() || !arr->is_array()) continue;
    for (size_t i = 0; i < arr->size(); ++i) {
      const Json& container = (*arr)[i];
      if (!container.is_object()) continue;
      auto gpu = gpu_containers.find(container.value("name", ""));
      if (gpu == gpu_containers.end()) continue;
      const std::string base = "/spec/" + std::string(list) + "/" + std::to_string(i);
      WireEnv(container, base, init, i, gpu->second.first, gpu->second.second, patch);
      WireLimitsVolume(spec, container, base, init, i, volumes_added, patch);
    }
  }
  return patch;
}
}  // namespace

Json Mutate(const Json& review, const SchedulerConfig& config, int64_t largest_gpu_mib) {
  Json response = {{"uid", ""}, {"allowed", true}};
  auto deny = [&](int code, const std::string& message) {
    response["allowed"] = false;
    response["status"] = {
        {"code", code}, {"reason", code == 400 ? "BadRequest" : "Invalid"}, {"message", message}};
  };
  const Json* request = nullptr;
  if (review.is_object() && review.contains("request") && review["request"].is_object()) {
    request = &review["request"];
  }
  // A member of the wrong type is denied, not thrown at: value() throws a
  // type_error for a present member that is not a string.
  const Json* uid = nullptr;
  const Json* kind_name = nullptr;
  if (request) {
    if (auto it = request->find("uid"); it != request->end()) uid = &*it;
    if (auto kind = request->find("kind"); kind != request->end() && kind->is_object()) {
      if (auto it = kind->find("kind"); it != kind->end()) kind_name = &*it;
    }
  }
  if (!request) {
    deny(400, "AdmissionReview has no request");
  } else if ((uid && !uid->is_string()) || (kind_name && !kind_name->is_string())) {
    deny(400, "AdmissionReview request.uid and request.kind.kind must be strings");
  } else {
    if (uid) response["uid"] = *uid;
    const bool is_pod = kind_name == nullptr || *kind_name == "Pod";
    auto object = request->find("object");
    if (!is_pod) {
      // Not a pod: nothing to do.
    } else if (object == request->end() || !object->is_object()) {
      deny(400, "AdmissionReview request carries no pod object");
    } else {
      auto patch = MutationPatch(*object, config, largest_gpu_mib);
      if (!patch.ok()) {
        deny(422, "tessera: " + patch.error().message);
      } else {
        if (!patch->empty()) {
          response["patchType"] = "JSONPatch";
          response["patch"] = Base64Encode(patch->dump());
        }
        // AdmissionReview v1 response.warnings: shown by kubectl, never a denial.
        if (auto warnings = MutationWarnings(*object, config); !warnings.empty()) {
          response["warnings"] = std::move(warnings);
        }
      }
    }
  }
  std::string api_version = "admission.k8s.io/v1";
  if (review.is_object() && review.contains("apiVersion") && review["apiVersion"].is_string()) {
    api_version = review["apiVersion"].get<std::string>();
  }
  return {{"apiVersion", api_version}, {"kind", "AdmissionReview"}, {"response", response}};
}

}  // namespace tessera::scheduler
