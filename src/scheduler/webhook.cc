#include "scheduler/webhook.h"

#include <algorithm>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "contract/container_contract.h"
#include "core/fit.h"
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

// A container's memory rewritten into MiB for a GPU memory quota.
struct MemoryRewrite {
  bool init = false;
  std::string container;
  int64_t mib = 0;
};

std::string Quoted(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "\"" : ", \"") + n + "\"";
  return out;
}

// What core::CheckGpu reads of a GPU besides its UUID, health and holder:
// GPUs alike in these get the same verdict (a cluster has few kinds).
struct GpuKind {
  std::string_view model;
  int64_t memory_mib;
  core::SharingMode mode;
  int replicas, slots, cores;
  auto Tied() const { return std::tie(model, memory_mib, mode, replicas, slots, cores); }
};
struct KindLess {
  using is_transparent = void;
  bool operator()(const GpuKind& a, const GpuKind& b) const { return a.Tied() < b.Tied(); }
};

// The MiB `c` would be given on each GPU of the cluster it could use were the
// GPU empty and healthy (health and pods that hold a GPU come and go; its
// mode, model and UUID stay), with the models that give each; core::CheckGpu
// decides, so the MiB are the allocation's. It runs once per kind of GPU
// (GpuKind), not per GPU: the visit holds ClusterState's reader lock.
Result<std::map<int64_t, std::vector<std::string>>> MemoryOnUsableGpus(const core::ContainerRequest& c,
                                                                       const core::GpuFilter& filter,
                                                                       const ClusterView& view) {
  std::map<int64_t, std::vector<std::string>> sizes;
  if (!view.visit_gpus) return sizes;
  core::GpuFilter kind_filter = filter;  // the UUID terms are checked per GPU
  kind_filter.use_uuids.clear();
  kind_filter.nouse_uuids.clear();
  // Kind -> the MiB it gives (nullopt: the container cannot use it). Keys
  // view the models kept in `owned` (a list: its elements do not move).
  std::map<GpuKind, std::optional<int64_t>, KindLess> verdicts;
  std::list<std::string> owned;
  TESSERA_RETURN_IF_ERROR(view.visit_gpus([&](const core::Gpu& gpu) {
    if (!core::UuidAllowed(filter, gpu.uuid)) return;
    const GpuKind kind{gpu.model, gpu.memory_mib, gpu.mode, gpu.replicas, gpu.slots, gpu.cores};
    auto it = verdicts.find(kind);
    if (it == verdicts.end()) {
      core::GpuState empty{gpu, {}};
      empty.gpu.healthy = true;
      empty.gpu.held_by.clear();
      const core::GpuCheck check = core::CheckGpu(empty, c, kind_filter);
      GpuKind key = kind;
      key.model = owned.emplace_back(gpu.model);
      it = verdicts
               .emplace(key, check.reason == core::GpuReason::kFits ? std::optional<int64_t>(check.memory_mib)
                                                                    : std::nullopt)
               .first;
      if (it->second) sizes[*it->second].push_back(gpu.model);
    }
  }));
  for (auto& [mib, models] : sizes) {
    std::sort(models.begin(), models.end());
    models.erase(std::unique(models.begin(), models.end()), models.end());
  }
  return sizes;
}

// Which GPU containers of `request` a quota on GPU memory in namespace `ns`
// could not count (memory not in MiB), and the MiB to write for each; empty
// when there is no such quota. Fails with the reason to deny the pod.
Result<std::vector<MemoryRewrite>> QuotaMemoryRewrites(const Json& pod, const core::PodRequest& request,
                                                       const SchedulerConfig& config, const ClusterView& view,
                                                       const std::string& ns) {
  std::vector<std::pair<bool, const core::ContainerRequest*>> uncounted;
  for (const bool init : {true, false}) {
    for (const auto& c : init ? request.init_containers : request.containers) {
      if (c.memory_percent || c.memory_mib == 0) uncounted.emplace_back(init, &c);
    }
  }
  std::vector<MemoryRewrite> out;
  if (uncounted.empty() || !view.gpu_memory_quota) return out;
  const core::ResourceConfig& r = config.resources;
  const std::string quota_key = "requests." + r.gpu_memory_name;
  auto asks = [&](const core::ContainerRequest& c) {
    return c.memory_percent ? r.gpu_memory_percent_name + " " + std::to_string(*c.memory_percent)
                            : "the whole GPU's memory (no " + r.gpu_memory_name + " in MiB)";
  };
  const NamespaceQuota quota = view.gpu_memory_quota(ns);
  if (!quota.unknown.empty()) {
    const core::ContainerRequest& c = *uncounted.front().second;
    return Error{"container \"" + c.name + "\" asks " + asks(c) + ", which a ResourceQuota on " + quota_key +
                 " cannot count, and whether namespace \"" + ns + "\" has one is not known (" +
                 quota.unknown + "); retry in a moment, or ask " + r.gpu_memory_name + " in MiB"};
  }
  if (quota.quotas.empty()) return out;
  const std::string quota_text = "namespace \"" + ns + "\" has ResourceQuota" +
                                 (quota.quotas.size() > 1 ? "s " : " ") + Quoted(quota.quotas) + " on " +
                                 quota_key + ", which counts " + r.gpu_memory_name + " in MiB";
  const bool mig = WantsDynamicMig(pod);
  for (const auto& [init, c] : uncounted) {
    const std::string head =
        "container \"" + c->name + "\": " + quota_text + ", but the container asks " + asks(*c);
    if (mig) {
      return Error{head +
                   " and the pod is a dynamic MIG pod, whose memory is its MIG profile's, not a share "
                   "of the GPU the quota could count; ask " +
                   r.gpu_memory_name + " in MiB"};
    }
    if (c->share == core::ShareKind::kExclusive) {
      return Error{head + " and the pod's " + std::string(core::kSharingModeAnnotation) +
                   " is exclusive, which takes whole GPUs and no " + r.gpu_memory_name +
                   ", so the quota cannot count it; drop the annotation and ask " + r.gpu_memory_name +
                   " = the GPU's MiB with " + r.gpu_cores_name + " 100, or run the pod in a namespace " +
                   "without a quota on " + quota_key};
    }
    auto sizes = MemoryOnUsableGpus(*c, request.filter, view);
    if (!sizes.ok()) {
      return Error{head + ", and the GPUs it could land on are not known yet (" + sizes.error().message +
                   "); retry in a moment, or ask " + r.gpu_memory_name + " in MiB"};
    }
    if (sizes->empty()) {
      return Error{head + ", and no GPU in the cluster passes the pod's GPU filters and sharing mode, so " +
                   "its MiB are not known; ask " + r.gpu_memory_name + " in MiB"};
    }
    if (sizes->size() > 1) {
      std::string list;
      for (const auto& [mib, models] : *sizes) {
        list += (list.empty() ? "" : ", ") + std::to_string(mib) + " MiB on " + Quoted(models);
      }
      return Error{head + ", which is " + std::to_string(c->memory_percent.value_or(100)) +
                   " % of GPUs of different sizes it could land on (" + list + "); ask " + r.gpu_memory_name +
                   " in MiB, or pin one GPU type with " + std::string(core::kUseGpuTypeAnnotation)};
    }
    out.push_back({init, c->name, sizes->begin()->first});
  }
  return out;
}

// What the patch writes under one container's resources.
struct ResourceEdit {
  bool init = false;
  size_t index = 0;
  std::vector<std::pair<std::string, std::string>> limits;  // added (or replaced)
  std::vector<std::string> limits_removed;
  std::vector<std::pair<std::string, std::string>> requests;  // replaced or added beside others
  std::vector<std::string> requests_removed;
};

bool HasMember(const Json& resources, const char* field, const std::string& name) {
  auto it = resources.find(field);
  return it != resources.end() && it->is_object() && it->contains(name);
}

// Folds `rewrite` into `edits`: the percentage goes, gpumem in MiB comes,
// in limits and wherever requests named the memory (requests equal limits).
void ApplyRewrite(const Json& spec, const MemoryRewrite& rewrite, const core::ResourceConfig& r,
                  std::vector<ResourceEdit>& edits) {
  const char* list = rewrite.init ? "initContainers" : "containers";
  const Json& containers = spec.at(list);
  size_t index = 0;
  auto named = [&](const Json& c) {
    return c.is_object() && c.contains("name") && c["name"].is_string() && c["name"] == rewrite.container;
  };
  while (index < containers.size() && !named(containers[index])) ++index;
  if (index == containers.size()) return;  // derived from this spec: cannot happen
  auto edit = std::find_if(edits.begin(), edits.end(),
                           [&](const ResourceEdit& e) { return e.init == rewrite.init && e.index == index; });
  if (edit == edits.end())
    edit = edits.insert(edits.end(), ResourceEdit{rewrite.init, index, {}, {}, {}, {}});
  std::erase_if(edit->limits, [&](const auto& l) {
    return l.first == r.gpu_memory_percent_name || l.first == r.gpu_memory_name;
  });
  const std::string mib = std::to_string(rewrite.mib);
  edit->limits.emplace_back(r.gpu_memory_name, mib);
  auto res = containers[index].find("resources");
  if (res == containers[index].end() || !res->is_object()) return;
  if (HasMember(*res, "limits", r.gpu_memory_percent_name))
    edit->limits_removed.push_back(r.gpu_memory_percent_name);
  if (HasMember(*res, "requests", r.gpu_memory_percent_name))
    edit->requests_removed.push_back(r.gpu_memory_percent_name);
  if (HasMember(*res, "requests", r.gpu_memory_percent_name) ||
      HasMember(*res, "requests", r.gpu_memory_name))
    edit->requests.emplace_back(r.gpu_memory_name, mib);
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
Result<Json> MutationPatchUnchecked(const Json& pod, const SchedulerConfig& config, const ClusterView& view,
                                    const std::string& ns);
}  // namespace

Result<Json> MutationPatch(const Json& pod, const SchedulerConfig& config, int64_t largest_gpu_mib) {
  return MutationPatch(pod, config, ClusterView{largest_gpu_mib, nullptr, nullptr});
}

Result<Json> MutationPatch(const Json& pod, const SchedulerConfig& config, const ClusterView& view,
                           const std::string& ns) {
  // A pod shaped unlike any the API server would send must not take the
  // webhook down: JSON type errors become a denial.
  try {
    std::string pod_ns = ns;
    if (pod_ns.empty() && pod.is_object() && pod.contains("metadata") && pod["metadata"].is_object()) {
      const Json& meta = pod["metadata"];
      if (meta.contains("namespace") && meta["namespace"].is_string()) pod_ns = meta["namespace"];
    }
    if (pod_ns.empty()) pod_ns = "default";
    return MutationPatchUnchecked(pod, config, view, pod_ns);
  } catch (const std::exception& e) {
    return Error{std::string("malformed pod: ") + e.what()};
  }
}

namespace {
Result<Json> MutationPatchUnchecked(const Json& pod, const SchedulerConfig& config, const ClusterView& view,
                                    const std::string& ns) {
  Json patch = Json::array();
  if (!pod.is_object() || !core::AsksForTesseraResources(pod, config.resources)) return patch;
  TESSERA_ASSIGN_OR_RETURN(const core::PodRequest request, core::DerivePodRequest(pod, config.resources));
  TESSERA_RETURN_IF_ERROR(CheckAgainstCluster(request.containers, config, view.largest_gpu_mib));
  TESSERA_RETURN_IF_ERROR(CheckAgainstCluster(request.init_containers, config, view.largest_gpu_mib));
  TESSERA_ASSIGN_OR_RETURN(const std::vector<core::ContainerDefaults> defaults,
                           core::DefaultedLimits(pod, config.resources));
  TESSERA_ASSIGN_OR_RETURN(const std::vector<MemoryRewrite> rewrites,
                           QuotaMemoryRewrites(pod, request, config, view, ns));

  const Json& spec = pod.at("spec");
  if (spec.value("schedulerName", "") != config.scheduler_name) {
    patch.push_back({{"op", "add"}, {"path", "/spec/schedulerName"}, {"value", config.scheduler_name}});
  }
  std::vector<ResourceEdit> edits;
  for (const core::ContainerDefaults& d : defaults)
    edits.push_back({d.init_container, d.index, d.limits_to_add, {}, {}, {}});
  for (const MemoryRewrite& rewrite : rewrites) ApplyRewrite(spec, rewrite, config.resources, edits);
  for (const ResourceEdit& e : edits) {
    const char* list = e.init ? "initContainers" : "containers";
    const Json& container = spec.at(list).at(e.index);
    const std::string base = "/spec/" + std::string(list) + "/" + std::to_string(e.index);
    auto op = [&](const char* name, const char* field, const std::string& resource, const Json* value) {
      Json o = {{"op", name}, {"path", base + "/resources/" + field + "/" + EscapeJsonPointer(resource)}};
      if (value) o["value"] = *value;
      patch.push_back(std::move(o));
    };
    Json limits = Json::object();
    for (const auto& [name, value] : e.limits) limits[name] = value;
    auto res = container.find("resources");
    if (res == container.end() || !res->is_object()) {
      patch.push_back({{"op", "add"}, {"path", base + "/resources"}, {"value", {{"limits", limits}}}});
      continue;
    }
    if (!res->contains("limits") || !(*res)["limits"].is_object()) {
      patch.push_back({{"op", "add"}, {"path", base + "/resources/limits"}, {"value", limits}});
    } else {
      for (const std::string& name : e.limits_removed) op("remove", "limits", name, nullptr);
      for (const auto& [name, value] : e.limits) {
        const Json v = value;
        op("add", "limits", name, &v);
      }
    }
    for (const std::string& name : e.requests_removed) op("remove", "requests", name, nullptr);
    for (const auto& [name, value] : e.requests) {
      const Json v = value;
      op("add", "requests", name, &v);
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
  return Mutate(review, config, ClusterView{largest_gpu_mib, nullptr, nullptr});
}

Json Mutate(const Json& review, const SchedulerConfig& config, const ClusterView& view) {
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
      // The namespace the API server admits the pod into (a pod object may
      // leave metadata.namespace out).
      std::string ns;
      if (auto it = request->find("namespace"); it != request->end() && it->is_string()) ns = *it;
      auto patch = MutationPatch(*object, config, view, ns);
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
