#include "node/mig/mig_devices.h"

#include <algorithm>
#include <functional>

#include "core/mig/geometry.h"
#include "node/inventory_publisher.h"

namespace tessera::node::mig {
namespace {

// The MIG profile name as a label-key or resource-name segment: '+' is not
// allowed there ("1g.10gb+me" -> "1g.10gb.me", as NVIDIA's plugin writes it).
std::string NameSegment(std::string profile) {
  std::replace(profile.begin(), profile.end(), '+', '.');
  return profile;
}

const core::mig::Model* ModelOf(const host::MigGpuState& gpu) {
  auto model = core::mig::RecogniseModel({gpu.name, gpu.memory_mib, gpu.pci_device_id});
  return model.ok() ? *model : nullptr;
}

}  // namespace

const char* MigStrategyName(MigStrategy strategy) {
  return strategy == MigStrategy::kSingle ? "single" : "mixed";
}

bool ParseMigStrategy(const std::string& text, MigStrategy& out) {
  if (text == "single") {
    out = MigStrategy::kSingle;
    return true;
  }
  if (text == "mixed") {
    out = MigStrategy::kMixed;
    return true;
  }
  return false;
}

std::string MigResourceName(MigStrategy strategy, const std::string& profile) {
  if (strategy == MigStrategy::kSingle) return "nvidia.com/gpu";
  return "nvidia.com/mig-" + NameSegment(profile);
}

std::vector<MigDevice> MigDevicesOf(const std::vector<host::MigGpuState>& gpus,
                                    const std::function<bool(int index)>& managed, MigStrategy strategy) {
  std::vector<MigDevice> devices;
  for (const auto& gpu : gpus) {
    if (!gpu.mig_enabled || !managed(gpu.index)) continue;
    const core::mig::Model* model = ModelOf(gpu);
    for (const auto& instance : gpu.instances) {
      if (!instance.has_compute_instance || instance.mig_uuid.empty()) continue;
      MigDevice device;
      device.mig_uuid = instance.mig_uuid;
      device.parent_uuid = gpu.uuid;
      device.parent_index = gpu.index;
      device.parent_name = gpu.name;
      if (model != nullptr) device.model = model->key;
      device.profile = "profile-" + std::to_string(instance.profile_id);
      if (model != nullptr) {
        for (const auto& p : model->profiles) {
          if (p.id == instance.profile_id) device.profile = p.name;
        }
      }
      device.start = instance.start;
      device.size = instance.size;
      device.gpu_instance_id = instance.gpu_instance_id;
      device.compute_instance_id = instance.compute_instance_id;
      device.memory_mib = instance.memory_mib;
      device.sm_count = instance.sm_count;
      device.resource = MigResourceName(strategy, device.profile);
      devices.push_back(std::move(device));
    }
  }
  return devices;
}

std::map<std::string, std::optional<std::string>> MigNodeLabels(
    MigStrategy strategy, const std::vector<MigDevice>& devices,
    const std::map<std::string, std::optional<std::string>>& previous) {
  std::map<std::string, std::optional<std::string>> labels;
  for (const auto& [key, value] : previous) {
    if (value) labels[key] = std::nullopt;  // unless set again below
  }
  labels[kMigStrategyLabel] = MigStrategyName(strategy);

  // Per profile: how many devices, and the profile's figures (from the first
  // device: memory and SMs as NVML reports them; slices and engines from the
  // geometry tables).
  std::map<std::string, std::vector<const MigDevice*>> by_profile;
  for (const auto& d : devices) by_profile[d.profile].push_back(&d);
  auto put = [&](const std::string& prefix, const std::vector<const MigDevice*>& of) {
    const MigDevice& first = *of.front();
    labels[prefix + ".count"] = std::to_string(of.size());
    labels[prefix + ".memory"] = std::to_string(first.memory_mib);
    labels[prefix + ".multiprocessors"] = std::to_string(first.sm_count);
    const core::mig::Model* model = core::mig::FindModel(first.model);
    const core::mig::Profile* profile = model ? model->FindProfile(first.profile) : nullptr;
    if (profile != nullptr) {
      labels[prefix + ".slices.gi"] = std::to_string(profile->compute_slices);
      labels[prefix + ".slices.ci"] = std::to_string(profile->compute_slices);
      labels[prefix + ".engines.copy"] = std::to_string(profile->copy_engines);
      labels[prefix + ".engines.decoder"] = std::to_string(profile->decoders);
      labels[prefix + ".engines.encoder"] = "0";
      labels[prefix + ".engines.jpeg"] = std::to_string(profile->jpegs);
      labels[prefix + ".engines.ofa"] = std::to_string(profile->ofas);
    }
  };
  if (strategy == MigStrategy::kMixed) {
    for (const auto& [profile, of] : by_profile) put("nvidia.com/mig-" + NameSegment(profile), of);
  } else if (by_profile.size() == 1) {
    const auto& of = by_profile.begin()->second;
    put("nvidia.com/gpu", of);
    std::string product = of.front()->parent_name;
    if (product.rfind("NVIDIA ", 0) == 0) product = product.substr(7);
    labels["nvidia.com/gpu.product"] = LabelValue(product + "-MIG-" + of.front()->profile);
  }
  return labels;
}

void MigDeviceState::Set(std::vector<MigDevice> devices) {
  {
    std::lock_guard lock(mu_);
    if (devices == devices_) return;
    devices_ = std::move(devices);
    ++version_;
  }
  changed_.notify_all();
}

MigDeviceState::Snapshot MigDeviceState::Get() const {
  std::lock_guard lock(mu_);
  return Snapshot{version_, devices_};
}

uint64_t MigDeviceState::WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return version_ != seen; });
  return version_;
}

}  // namespace tessera::node::mig
