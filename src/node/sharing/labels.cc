#include "node/sharing/labels.h"

#include <algorithm>
#include <set>

#include "node/inventory_publisher.h"

namespace tessera::node::sharing {

std::map<std::string, std::optional<std::string>> SharingLabels(const ModeAssignment& modes,
                                                                const std::vector<core::Gpu>& gpus) {
  std::set<std::string> mode_names;
  bool timeslice = false;
  bool mps = false;
  bool renamed = false;
  int replicas = 0;
  std::set<std::string> shared_models;
  for (const GpuMode& mode : modes.gpus) {
    mode_names.insert(core::SharingModeName(mode.mode));
    if (mode.mode == core::SharingMode::kMps) mps = true;
    if (mode.replicas == 0) continue;
    timeslice = timeslice || mode.mode == core::SharingMode::kTimeslice;
    replicas = std::max(replicas, mode.replicas);
    renamed = renamed || mode.renamed;
    for (const auto& gpu : gpus) {
      if (gpu.uuid == mode.uuid) shared_models.insert(gpu.model);
    }
  }
  const bool mps_replicas = std::any_of(modes.gpus.begin(), modes.gpus.end(), [](const GpuMode& m) {
    return m.mode == core::SharingMode::kMps && m.replicas > 0;
  });
  std::map<std::string, std::optional<std::string>> labels;
  labels[kSharingStrategyLabel] = timeslice && mps_replicas ? "mixed"
                                  : timeslice               ? "time-slicing"
                                  : mps_replicas            ? "mps"
                                                            : "none";
  labels[kReplicasLabel] = std::to_string(std::max(1, replicas));
  labels[kMpsCapableLabel] = mps ? "true" : "false";
  if (renamed && !shared_models.empty()) {
    labels[kProductLabel] = shared_models.size() == 1 ? LabelValue(*shared_models.begin() + "-SHARED")
                                                      : std::string("mixed-SHARED");
  }
  std::string joined;
  for (const auto& name : mode_names) joined += (joined.empty() ? "" : ".") + name;
  labels[kSharingModesLabel] = joined.empty() ? std::nullopt : std::optional<std::string>(joined);
  return labels;
}

}  // namespace tessera::node::sharing
