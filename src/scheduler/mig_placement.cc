#include "scheduler/mig_placement.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <map>
#include <memory>
#include <mutex>

#include "core/fit.h"
#include "core/mig/placement.h"

namespace tessera::scheduler {
namespace {

// One Placer per model, with the default mix, built on first use.
const core::mig::Placer& PlacerFor(const core::mig::Model& model) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<core::mig::Placer>> placers;  // guarded by mu
  std::lock_guard lock(mu);
  auto& slot = placers[model.key];
  if (!slot) slot = std::make_unique<core::mig::Placer>(model, core::mig::DefaultMix(model));
  return *slot;
}

// A GPU's MIG model and its Placer. RecogniseModel's name matching was most
// of a filter over many nodes, and a cluster has few distinct models, so each
// thread keeps its last answer.
struct ModelOfGpu {
  std::string name;
  int64_t memory_mib = -1;
  Result<const core::mig::Model*> model = Error{"not looked up"};
  const core::mig::Placer* placer = nullptr;
};

const ModelOfGpu& ModelOf(const core::Gpu& gpu) {
  thread_local ModelOfGpu last;
  if (last.memory_mib != gpu.memory_mib || last.name != gpu.model) {
    last.name = gpu.model;
    last.memory_mib = gpu.memory_mib;
    last.model = core::mig::RecogniseModel({gpu.model, static_cast<uint64_t>(gpu.memory_mib), 0});
    last.placer = last.model.ok() ? &PlacerFor(**last.model) : nullptr;
  }
  return last;
}

std::string Head(const core::Gpu& gpu, int index) {
  return gpu.uuid + " (#" + std::to_string(index) + ", " + gpu.model + "): ";
}

// Memory slices the instances occupy.
int SlicesUsed(const core::mig::Model& model, const std::vector<core::mig::Instance>& instances) {
  uint32_t mask = 0;
  for (const auto& i : instances) mask |= core::mig::SliceMask(model, i);
  return std::popcount(mask);
}

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

bool WantsDynamicMig(const nlohmann::json& pod) {
  const auto* annotations = &pod;
  for (const char* key : {"metadata", "annotations"}) {
    if (!annotations->is_object() || !annotations->contains(key)) return false;
    annotations = &(*annotations)[key];
  }
  if (!annotations->is_object()) return false;
  auto it = annotations->find(std::string(kVgpuModeAnnotation));
  return it != annotations->end() && it->is_string() &&
         EqualsIgnoringCase(it->get<std::string>(), kVgpuModeMig);
}

Result<std::vector<MigContainerPlacement>> PlaceDynamicMig(const core::NodeState& node,
                                                           const core::PodRequest& pod,
                                                           const std::vector<PendingMigInstance>& pending) {
  const auto& gpus = node.gpus();
  // The instances on each GPU: the inventory's, the pending ones, and those placed below.
  std::vector<std::vector<core::mig::Instance>> on_gpu(gpus.size());
  std::vector<const core::mig::Model*> models(gpus.size(), nullptr);
  std::vector<const core::mig::Placer*> placers(gpus.size(), nullptr);
  std::vector<std::string> unusable(gpus.size());
  for (size_t g = 0; g < gpus.size(); ++g) {
    const core::Gpu& gpu = gpus[g].gpu;
    const int index = static_cast<int>(g);
    if (gpu.mode != core::SharingMode::kMigDynamic) {
      unusable[g] = Head(gpu, index) + "not in mig-dynamic mode";
      continue;
    }
    if (!gpu.healthy) {
      unusable[g] = Head(gpu, index) + "unhealthy";
      continue;
    }
    if (!core::UuidAllowed(pod.filter, gpu.uuid)) {
      unusable[g] = Head(gpu, index) + "excluded by the pod's GPU UUID filter";
      continue;
    }
    if (!core::TypeAllowed(pod.filter, gpu.model)) {
      unusable[g] = Head(gpu, index) + "model excluded by the pod's GPU type filter";
      continue;
    }
    const ModelOfGpu& model = ModelOf(gpu);
    if (!model.model.ok()) {
      unusable[g] = Head(gpu, index) + model.model.error().message;
      continue;
    }
    models[g] = *model.model;
    placers[g] = model.placer;
    for (const core::MigDevice& d : gpu.mig_devices) {
      on_gpu[g].push_back({d.profile, static_cast<uint32_t>(d.start)});
    }
    for (const PendingMigInstance& p : pending) {
      if (p.gpu_uuid == gpu.uuid &&
          std::find(on_gpu[g].begin(), on_gpu[g].end(), p.instance) == on_gpu[g].end()) {
        on_gpu[g].push_back(p.instance);
      }
    }
  }

  std::vector<MigContainerPlacement> out;
  auto place_container = [&](const core::ContainerRequest& c, int ci, bool init) -> Status {
    MigContainerPlacement placed;
    placed.container = ci;
    placed.init = init;
    for (int v = 0; v < c.gpus; ++v) {
      int best = -1;
      double best_value = -1;
      int best_used = -1;
      core::mig::Instance best_instance;
      std::vector<std::string> why;
      for (size_t g = 0; g < gpus.size(); ++g) {
        if (models[g] == nullptr) {
          why.push_back(unusable[g]);
          continue;
        }
        const bool taken =
            std::any_of(placed.devices.begin(), placed.devices.end(),
                        [&](const MigDevicePlacement& d) { return d.gpu == static_cast<int>(g); });
        if (taken) {
          why.push_back(Head(gpus[g].gpu, static_cast<int>(g)) +
                        "already holds another device of this container");
          continue;
        }
        core::mig::PlacementRequest request;
        const int64_t whole = static_cast<int64_t>(models[g]->Whole().memory_mib);
        int64_t memory = c.memory_mib;
        if (c.memory_percent) memory = whole * *c.memory_percent / 100;
        if (memory == 0 && !c.memory_percent) memory = whole;
        request.memory_mib = static_cast<uint64_t>(memory);
        request.sm_percent = std::clamp(c.cores, 0, 100);
        const core::mig::Placer& placer = *placers[g];
        auto instance = placer.Place(on_gpu[g], request);
        if (!instance.ok()) {
          why.push_back(Head(gpus[g].gpu, static_cast<int>(g)) + instance.error().message);
          continue;
        }
        auto with = on_gpu[g];
        with.push_back(*instance);
        auto value = placer.Value(with);
        const double v_after = value.ok() ? *value : 0;
        // Fullest GPU first (whole GPUs stay free for large requests), then
        // the placement that leaves the GPU most useful, then the lowest index.
        const int used = SlicesUsed(*models[g], on_gpu[g]);
        if (best < 0 || used > best_used || (used == best_used && v_after > best_value)) {
          best = static_cast<int>(g);
          best_used = used;
          best_value = v_after;
          best_instance = *instance;
        }
      }
      if (best < 0) {
        std::string message = "container '" + c.name + "' needs a MIG instance; no mig-dynamic GPU has one";
        for (const auto& w : why) message += "; " + w;
        if (gpus.empty()) message += "; the node has no GPUs";
        return Error{message};
      }
      on_gpu[best].push_back(best_instance);
      const core::mig::Profile* profile = models[best]->FindProfile(best_instance.profile);
      placed.devices.push_back({best, best_instance, profile ? profile->memory_mib : 0, best_used,
                                static_cast<int>(models[best]->memory_slices), best_value});
    }
    out.push_back(std::move(placed));
    return Status::Ok();
  };
  for (size_t i = 0; i < pod.containers.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(place_container(pod.containers[i], static_cast<int>(i), false));
  }
  for (size_t i = 0; i < pod.init_containers.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(place_container(pod.init_containers[i], static_cast<int>(i), true));
  }
  return out;
}

core::PodAllocation ToMigAllocation(const core::NodeState& node, const core::PodRequest& pod,
                                    const std::vector<MigContainerPlacement>& placements) {
  core::PodAllocation allocation;
  allocation.node = node.name();
  for (const MigContainerPlacement& p : placements) {
    const auto& requests = p.init ? pod.init_containers : pod.containers;
    core::ContainerAllocation c;
    c.container = requests[static_cast<size_t>(p.container)].name;
    c.init = p.init;
    for (const MigDevicePlacement& d : p.devices) {
      core::DeviceSlice slice;
      slice.uuid = node.gpus()[static_cast<size_t>(d.gpu)].gpu.uuid;
      slice.memory_mib = static_cast<int64_t>(d.memory_mib);
      slice.mig_profile = d.instance.profile;
      slice.mig_start = static_cast<int>(d.instance.start);
      c.devices.push_back(std::move(slice));
    }
    allocation.containers.push_back(std::move(c));
  }
  return allocation;
}

double MigPlacementScore(const std::vector<MigContainerPlacement>& placements) {
  double sum = 0;
  int devices = 0;
  for (const MigContainerPlacement& c : placements) {
    for (const MigDevicePlacement& d : c.devices) {
      if (d.memory_slices <= 0) continue;
      sum +=
          static_cast<double>(d.slices_used_before) / d.memory_slices + d.value_after / (d.memory_slices + 1);
      ++devices;
    }
  }
  return devices == 0 ? 0 : sum / devices;
}

SplitAllocation SplitByKind(const core::PodAllocation& allocation) {
  SplitAllocation out;
  out.vgpu.node = allocation.node;
  for (const core::ContainerAllocation& c : allocation.containers) {
    core::ContainerAllocation slices{c.container, {}, c.init};
    for (const core::DeviceSlice& d : c.devices) {
      if (d.mig_profile.empty()) {
        slices.devices.push_back(d);
      } else {
        out.mig.push_back({d.uuid, {d.mig_profile, static_cast<uint32_t>(std::max(d.mig_start, 0))}});
      }
    }
    if (!slices.devices.empty()) out.vgpu.containers.push_back(std::move(slices));
  }
  return out;
}

Status CheckMigInstance(const core::NodeState& node, const PendingMigInstance& instance) {
  const int g = node.IndexOf(instance.gpu_uuid);
  const std::string what =
      "MIG instance " + core::mig::Describe(instance.instance) + " on GPU " + instance.gpu_uuid;
  if (g < 0) return Error{what + ": node '" + node.name() + "' has no such GPU"};
  const core::Gpu& gpu = node.gpus()[static_cast<size_t>(g)].gpu;
  if (gpu.mode != core::SharingMode::kMigDynamic) return Error{what + ": the GPU is not in mig-dynamic mode"};
  const ModelOfGpu& model = ModelOf(gpu);
  if (!model.model.ok()) return Error{what + ": " + model.model.error().message};
  const core::mig::Instance one[] = {instance.instance};
  TESSERA_RETURN_IF_ERROR_WRAP(core::mig::CheckInstances(**model.model, one), "GPU " + instance.gpu_uuid);
  return Status::Ok();
}

}  // namespace tessera::scheduler
