#include "dra/mig_partitions.h"

#include <algorithm>
#include <sstream>

namespace tessera::dra {

using Json = nlohmann::json;

std::string CounterSetName(int gpu_index) {
  return "gpu-" + std::to_string(gpu_index) + "-counter-set";
}

std::string MigDeviceName(int gpu_index, const core::mig::Profile& profile, uint32_t start) {
  std::string compact;
  for (char c : profile.name) {
    if (c != '.') compact += c;
  }
  return "gpu-" + std::to_string(gpu_index) + "-mig-" + compact + "-" + std::to_string(profile.id) + "-" +
         std::to_string(start);
}

std::optional<MigDeviceRef> ParseMigDeviceName(const std::string& name) {
  // gpu-<index>-mig-<profile>-<id>-<start>
  if (name.rfind("gpu-", 0) != 0) return std::nullopt;
  const size_t mig = name.find("-mig-");
  if (mig == std::string::npos) return std::nullopt;
  const size_t last = name.rfind('-');
  const size_t before = name.rfind('-', last - 1);
  if (before == std::string::npos || before <= mig + 4) return std::nullopt;
  auto number = [](const std::string& text, uint32_t* out) {
    if (text.empty() || text.size() > 6 || text.find_first_not_of("0123456789") != std::string::npos)
      return false;
    *out = static_cast<uint32_t>(std::stoul(text));
    return true;
  };
  uint32_t gpu = 0;
  MigDeviceRef ref;
  if (!number(name.substr(4, mig - 4), &gpu) ||
      !number(name.substr(before + 1, last - before - 1), &ref.profile_id) ||
      !number(name.substr(last + 1), &ref.start)) {
    return std::nullopt;
  }
  ref.gpu_index = static_cast<int>(gpu);
  return ref;
}

Json MigCounterSet(const MigGpu& gpu) {
  Json counters = Json::object();
  for (uint32_t k = 0; k < gpu.model->memory_slices; ++k)
    counters["memory-slice-" + std::to_string(k)] = {{"value", "1"}};
  counters["compute-slices"] = {{"value", std::to_string(gpu.model->compute_slices)}};
  return {{"name", CounterSetName(gpu.index)}, {"counters", counters}};
}

std::vector<Json> MigDevices(const MigGpu& gpu, const Json& parent_attributes) {
  std::vector<Json> devices;
  for (const auto& profile : gpu.model->profiles) {
    if (profile.media_extension) continue;
    for (uint32_t start : profile.starts) {
      Json attributes = parent_attributes;
      attributes.erase("index");
      attributes.erase("uuid");
      attributes["type"] = {{"string", "mig"}};
      attributes["profile"] = {{"string", profile.name}};
      attributes["parentUUID"] = {{"string", gpu.uuid}};
      attributes["parentIndex"] = {{"int", gpu.index}};
      Json consumed = {{"compute-slices", {{"value", std::to_string(profile.compute_slices)}}}};
      for (uint32_t k = start; k < start + profile.memory_slices; ++k) {
        consumed["memory-slice-" + std::to_string(k)] = {{"value", "1"}};
      }
      devices.push_back({{"name", MigDeviceName(gpu.index, profile, start)},
                         {"attributes", attributes},
                         {"capacity",
                          {{"memory", {{"value", std::to_string(profile.memory_mib) + "Mi"}}},
                           {"multiprocessors", {{"value", std::to_string(profile.sm_count)}}}}},
                         {"consumesCounters", Json::array({{{"counterSet", CounterSetName(gpu.index)},
                                                            {"counters", consumed}}})}});
    }
  }
  return devices;
}

Result<std::vector<int>> ParseMigGpus(const std::string& text, const std::vector<core::Gpu>& gpus) {
  std::vector<int> out;
  if (text == "none" || text.empty()) return out;
  if (text == "all") {
    for (const auto& g : gpus) {
      if (g.mig_capable) out.push_back(g.index);
    }
    return out;
  }
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty() || item.size() > 4 || item.find_first_not_of("0123456789") != std::string::npos) {
      return Error{"--mig-gpus '" + text + "' is not none, all or GPU indices such as 0,2"};
    }
    const int index = std::stoi(item);
    if (std::find(out.begin(), out.end(), index) == out.end()) out.push_back(index);
  }
  return out;
}

Result<std::vector<MigGpu>> SelectMigGpus(const std::string& selection, const std::vector<core::Gpu>& gpus,
                                          host::MigDriver& driver, std::vector<std::string>* skipped) {
  TESSERA_ASSIGN_OR_RETURN(const std::vector<int> indices, ParseMigGpus(selection, gpus));
  std::vector<MigGpu> out;
  if (indices.empty()) return out;
  TESSERA_ASSIGN_OR_RETURN(const std::vector<host::MigGpuState> states, driver.List());
  for (int index : indices) {
    const auto state =
        std::find_if(states.begin(), states.end(), [&](const auto& s) { return s.index == index; });
    if (state == states.end())
      return Error{"--mig-gpus names GPU " + std::to_string(index) + ", which this node does not have"};
    if (!state->mig_capable)
      return Error{"--mig-gpus names GPU " + std::to_string(index) + " (" + state->name +
                   "), which has no MIG"};
    TESSERA_ASSIGN_OR_RETURN(
        const core::mig::Model* model,
        core::mig::RecogniseModel({state->name, state->memory_mib, state->pci_device_id}));
    if (!state->mig_enabled) {
      TESSERA_ASSIGN_OR_RETURN(const host::MigModeChange change, driver.SetMigMode(index, true));
      if (change.reset_required) {
        if (skipped) {
          skipped->push_back(
              "GPU " + std::to_string(index) +
              ": MIG mode is pending until a GPU reset; its partitions are published after it");
        }
        continue;
      }
    }
    out.push_back({index, state->uuid, model});
  }
  return out;
}

}  // namespace tessera::dra
