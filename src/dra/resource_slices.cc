#include "dra/resource_slices.h"

#include <algorithm>

#include "core/quantity.h"

namespace tessera::dra {

using Json = nlohmann::json;

namespace resources {
const kube::ResourceType kResourceSlices{"/apis/resource.k8s.io/v1", "resource.k8s.io/v1", "ResourceSlice",
                                         "resourceslices", false};
const kube::ResourceType kResourceClaims{"/apis/resource.k8s.io/v1", "resource.k8s.io/v1", "ResourceClaim",
                                         "resourceclaims", true};
}  // namespace resources

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

std::string MemoryText(int64_t bytes) {
  if (bytes % (1024 * kMiB) == 0) return std::to_string(bytes / (1024 * kMiB)) + "Gi";
  if (bytes % kMiB == 0) return std::to_string(bytes / kMiB) + "Mi";
  return std::to_string(bytes);
}

int64_t Whole(const std::string& text) {
  return *core::Quantity::Parse(text)->ToInteger();  // Validate() checked it
}

// A validRange policy over [min, capacity] in `step`s, with `default_text`
// ("" = the capacity). Errors name the setting.
Result<Json> RangePolicy(const std::string& what, int64_t capacity, const std::string& default_text,
                         const std::string& min_text, const std::string& step_text,
                         std::string (*format)(int64_t)) {
  const int64_t min = Whole(min_text), step = Whole(step_text);
  if (min > capacity) {
    return Error{what + " request policy: min " + min_text + " is above the GPU's " + format(capacity)};
  }
  // The largest value reachable from min in steps.
  const int64_t max = min + (capacity - min) / step * step;
  int64_t def = default_text.empty() ? max : Whole(default_text);
  if (def < min || def > max || (def - min) % step != 0) {
    return Error{what + " request policy: default " + (default_text.empty() ? format(max) : default_text) +
                 " is not min + a multiple of step within the GPU's " + format(capacity)};
  }
  return Json{{"default", format(def)},
              {"validRange", {{"min", format(min)}, {"max", format(max)}, {"step", format(step)}}}};
}

std::string CoresText(int64_t v) {
  return std::to_string(v);
}

}  // namespace

Result<std::vector<Json>> BuildDevices(const DraConfig& config, const std::vector<core::Gpu>& gpus,
                                       const SystemDetails& details) {
  std::vector<core::Gpu> sorted = gpus;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  std::vector<Json> devices;
  const std::string driver_version = ToSemver(details.driver_version);
  const std::string cuda_version = ToSemver(details.cuda_driver_version);
  for (const auto& gpu : sorted) {
    if (!gpu.healthy) continue;
    Json attributes = {{"type", {{"string", "gpu"}}},
                       {"uuid", {{"string", gpu.uuid}}},
                       {"productName", {{"string", gpu.model}}},
                       {"index", {{"int", gpu.index}}}};
    if (!driver_version.empty()) attributes["driverVersion"] = {{"version", driver_version}};
    if (!cuda_version.empty()) attributes["cudaDriverVersion"] = {{"version", cuda_version}};
    for (const auto& d : details.gpus) {
      if (d.uuid != gpu.uuid) continue;
      if (!d.architecture.empty()) attributes["architecture"] = {{"string", d.architecture}};
      if (const auto cc = ToSemver(d.compute_capability); !cc.empty()) {
        attributes["cudaComputeCapability"] = {{"version", cc}};
      }
      if (!d.pci_bus_id.empty()) attributes["resource.kubernetes.io/pciBusID"] = {{"string", d.pci_bus_id}};
    }
    const int64_t memory = gpu.memory_mib * kMiB;
    Json capacity = {{"memory", {{"value", MemoryText(memory)}}}, {"cores", {{"value", "100"}}}};
    Json device = {{"name", "gpu-" + std::to_string(gpu.index)}, {"attributes", attributes}};
    if (config.device_mode == DeviceMode::kVgpu) {
      TESSERA_ASSIGN_OR_RETURN(capacity["memory"]["requestPolicy"],
                               RangePolicy("memory", memory, config.memory_default, config.memory_min,
                                           config.memory_step, &MemoryText));
      TESSERA_ASSIGN_OR_RETURN(
          capacity["cores"]["requestPolicy"],
          RangePolicy("cores", 100, config.cores_default, config.cores_min, config.cores_step, &CoresText));
      device["allowMultipleAllocations"] = true;
    }
    device["capacity"] = capacity;
    devices.push_back(std::move(device));
  }
  return devices;
}

Result<Pool> BuildPool(const DraConfig& config, const std::vector<core::Gpu>& gpus,
                       const SystemDetails& details, const std::vector<MigGpu>& mig_gpus) {
  std::vector<core::Gpu> whole;
  for (const auto& g : gpus) {
    const bool mig =
        std::any_of(mig_gpus.begin(), mig_gpus.end(), [&](const MigGpu& m) { return m.index == g.index; });
    if (!mig) whole.push_back(g);
  }
  Pool pool;
  TESSERA_ASSIGN_OR_RETURN(pool.devices, BuildDevices(config, whole, details));
  for (const auto& m : mig_gpus) {
    // The parent's attributes, as its whole-GPU device would carry them.
    std::vector<core::Gpu> parent;
    for (const auto& g : gpus) {
      if (g.index == m.index && g.healthy) parent.push_back(g);
    }
    if (parent.empty()) continue;  // unhealthy (or gone): none of its partitions
    DraConfig whole_mode = config;
    whole_mode.device_mode = DeviceMode::kWhole;
    TESSERA_ASSIGN_OR_RETURN(const std::vector<Json> parent_device,
                             BuildDevices(whole_mode, parent, details));
    pool.counter_sets.push_back(MigCounterSet(m));
    for (auto& d : MigDevices(m, parent_device.at(0)["attributes"])) pool.devices.push_back(std::move(d));
  }
  return pool;
}

std::vector<Json> BuildResourceSlices(const DraConfig& config, const std::vector<Json>& devices,
                                      int64_t generation) {
  return BuildResourceSlices(config, Pool{devices, {}}, generation);
}

std::vector<Json> BuildResourceSlices(const DraConfig& config, const Pool& pool, int64_t generation) {
  const size_t per_slice = pool.counter_sets.empty() ? kMaxDevicesPerSlice : kMaxDevicesPerSliceWithCounters;
  const size_t device_slices = std::max<size_t>(1, (pool.devices.size() + per_slice - 1) / per_slice);
  const size_t counter_slices =
      (pool.counter_sets.size() + kMaxCounterSetsPerSlice - 1) / kMaxCounterSetsPerSlice;
  const int64_t count = static_cast<int64_t>(device_slices + counter_slices);
  auto slice = [&](const std::string& name, const char* key, Json items) {
    return Json{
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceSlice"},
        {"metadata", {{"name", config.node_name + "-" + config.driver_name + "-" + name}}},
        {"spec",
         {{"driver", config.driver_name},
          {"nodeName", config.node_name},
          {"pool", {{"name", config.node_name}, {"generation", generation}, {"resourceSliceCount", count}}},
          {key, std::move(items)}}}};
  };
  std::vector<Json> slices;
  for (size_t i = 0; i < device_slices; ++i) {
    Json chunk = Json::array();
    for (size_t d = i * per_slice; d < std::min(pool.devices.size(), (i + 1) * per_slice); ++d) {
      chunk.push_back(pool.devices[d]);
    }
    slices.push_back(slice(std::to_string(i), "devices", std::move(chunk)));
  }
  for (size_t j = 0; j < counter_slices; ++j) {
    Json chunk = Json::array();
    for (size_t c = j * kMaxCounterSetsPerSlice;
         c < std::min(pool.counter_sets.size(), (j + 1) * kMaxCounterSetsPerSlice); ++c) {
      chunk.push_back(pool.counter_sets[c]);
    }
    slices.push_back(slice("counters-" + std::to_string(j), "sharedCounters", std::move(chunk)));
  }
  return slices;
}

SlicePublisher::SlicePublisher(const DraConfig& config, std::shared_ptr<kube::Client> client)
    : config_(config), client_(std::move(client)) {}

Result<std::vector<Json>> SlicePublisher::Existing() {
  kube::ListOptions options;
  options.field_selector = "spec.nodeName=" + config_.node_name;
  auto list = client_->List(resources::kResourceSlices, "", options);
  if (!list.ok()) return Error{"cannot list ResourceSlices: " + list.error().message};
  std::vector<Json> mine;
  for (auto& item : list->items) {
    if (item["spec"].value("driver", "") == config_.driver_name) mine.push_back(std::move(item));
  }
  return mine;
}

Result<int> SlicePublisher::Sync(const Pool& pool) {
  if (owner_.is_null()) {
    auto node = client_->Get(kube::resources::kNodes, "", config_.node_name);
    if (node.ok()) {
      owner_ = {{"apiVersion", "v1"},
                {"kind", "Node"},
                {"name", config_.node_name},
                {"uid", kube::UidOf(*node)},
                {"controller", true}};
    }
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<Json> existing, Existing());
  int64_t generation = 0;
  for (const auto& s : existing)
    generation = std::max<int64_t>(generation, s["spec"]["pool"].value("generation", 0));
  std::vector<Json> desired = BuildResourceSlices(config_, pool, generation);

  // In place: every desired slice exists with the same spec, and nothing else.
  bool same = existing.size() == desired.size();
  for (const auto& want : desired) {
    const auto it = std::find_if(existing.begin(), existing.end(),
                                 [&](const Json& s) { return kube::NameOf(s) == kube::NameOf(want); });
    if (it == existing.end() || (*it)["spec"] != want["spec"]) same = false;
  }
  if (same) return 0;

  desired = BuildResourceSlices(config_, pool, generation + 1);
  int writes = 0;
  for (const auto& s : existing) {  // obsolete slices first
    const bool wanted = std::any_of(desired.begin(), desired.end(),
                                    [&](const Json& d) { return kube::NameOf(d) == kube::NameOf(s); });
    if (wanted) continue;
    auto status = client_->Delete(resources::kResourceSlices, "", kube::NameOf(s));
    if (!status.ok() && !status.error().IsNotFound()) {
      return Error{"cannot delete ResourceSlice " + kube::NameOf(s) + ": " + status.error().message};
    }
    ++writes;
  }
  for (auto want : desired) {
    if (!owner_.is_null()) want["metadata"]["ownerReferences"] = Json::array({owner_});
    const auto it = std::find_if(existing.begin(), existing.end(),
                                 [&](const Json& s) { return kube::NameOf(s) == kube::NameOf(want); });
    if (it != existing.end()) {
      want["metadata"]["resourceVersion"] = kube::ResourceVersionOf(*it);
      auto updated = client_->Update(resources::kResourceSlices, "", want);
      if (!updated.ok())
        return Error{"cannot update ResourceSlice " + kube::NameOf(want) + ": " + updated.error().message};
    } else {
      auto created = client_->Create(resources::kResourceSlices, "", want);
      if (!created.ok())
        return Error{"cannot create ResourceSlice " + kube::NameOf(want) + ": " + created.error().message};
    }
    ++writes;
  }
  return writes;
}

Status SlicePublisher::RemoveAll() {
  TESSERA_ASSIGN_OR_RETURN(std::vector<Json> existing, Existing());
  for (const auto& s : existing) {
    auto status = client_->Delete(resources::kResourceSlices, "", kube::NameOf(s));
    if (!status.ok() && !status.error().IsNotFound()) {
      return Error{"cannot delete ResourceSlice " + kube::NameOf(s) + ": " + status.error().message};
    }
  }
  return Status::Ok();
}

}  // namespace tessera::dra
