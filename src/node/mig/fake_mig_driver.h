// FakeMigDriver: a host::MigDriver over a table, for the unit tests of
// src/node/mig (test-only; no library includes it). It keeps NVML's rules:
// instances only while MIG is on, placements that fit the model's geometry
// (core/mig), Ampere mode changes pending until Reset().
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "core/mig/geometry.h"
#include "host/nvml_mig.h"

namespace tessera::node::mig::testing {

// A MIG driver over a table, with NVML's rules: instances only while MIG is
// on, no overlapping placements, Ampere mode changes pending until Reset().
class FakeMigDriver final : public host::MigDriver {
 public:
  void AddGpu(const std::string& model_key, const std::string& name, uint64_t memory_mib, bool mig_capable,
              bool mig_enabled, bool ampere) {
    host::MigGpuState gpu;
    gpu.index = static_cast<int>(gpus_.size());
    gpu.uuid = "GPU-fake-" + std::to_string(gpu.index);
    gpu.name = name;
    gpu.memory_mib = memory_mib;
    gpu.mig_capable = mig_capable;
    gpu.mig_enabled = gpu.mig_pending = mig_enabled;
    gpus_.push_back(gpu);
    models_.push_back(model_key);
    ampere_.push_back(ampere);
  }
  void Reset(int index) { gpus_[index].mig_enabled = gpus_[index].mig_pending; }

  Result<std::vector<host::MigGpuState>> List() override { return gpus_; }
  Result<host::MigModeChange> SetMigMode(int index, bool enabled) override {
    ++mode_calls;
    auto& gpu = gpus_.at(index);
    if (!gpu.mig_capable) return Error{"not supported"};
    gpu.mig_pending = enabled;
    if (!ampere_[index]) gpu.mig_enabled = enabled;
    return host::MigModeChange{ampere_[index]};
  }
  Result<host::MigInstanceState> CreateInstance(int index, uint32_t profile_id, uint32_t start) override {
    if (fail_creates_after >= 0 && creates >= fail_creates_after) return Error{"injected failure"};
    auto& gpu = gpus_.at(index);
    const core::mig::Model* model = core::mig::FindModel(models_[index]);
    const core::mig::Profile* profile = nullptr;
    for (const auto& p : model->profiles) {
      if (p.id == profile_id) profile = &p;
    }
    if (!gpu.mig_enabled || profile == nullptr) return Error{"invalid"};
    std::vector<core::mig::Instance> existing;
    for (const auto& i : gpu.instances) existing.push_back({NameOf(*model, i.profile_id), i.start});
    if (!core::mig::CanAdd(*model, existing, {profile->name, start})) return Error{"insufficient resources"};
    ++creates;
    host::MigInstanceState made;
    made.gpu_instance_id = next_id_++;
    made.profile_id = profile_id;
    made.start = start;
    made.size = profile->memory_slices;
    made.has_compute_instance = true;
    made.mig_uuid = "MIG-fake-" + std::to_string(index) + "-" + std::to_string(made.gpu_instance_id);
    made.memory_mib = profile->memory_mib;
    made.sm_count = profile->sm_count;
    gpu.instances.push_back(made);
    return made;
  }
  Status DestroyInstance(int index, uint32_t gi) override {
    auto& list = gpus_.at(index).instances;
    std::erase_if(list, [&](const auto& i) { return i.gpu_instance_id == gi; });
    ++destroys;
    return Status::Ok();
  }
  Status StartXidWatch(const std::vector<std::string>&, std::function<void(const host::MigXid&)>) override {
    return Status::Ok();
  }
  void StopXidWatch() override {}

  std::vector<std::string> Profiles(int index) const {
    std::vector<std::string> out;
    const core::mig::Model* model = core::mig::FindModel(models_[index]);
    for (const auto& i : gpus_[index].instances)
      out.push_back(NameOf(*model, i.profile_id) + "@" + std::to_string(i.start));
    std::sort(out.begin(), out.end());
    return out;
  }

  std::vector<host::MigGpuState> gpus_;
  int mode_calls = 0, creates = 0, destroys = 0;
  int fail_creates_after = -1;

 private:
  static std::string NameOf(const core::mig::Model& model, uint32_t id) {
    for (const auto& p : model.profiles) {
      if (p.id == id) return p.name;
    }
    return "?";
  }
  std::vector<std::string> models_;
  std::vector<bool> ampere_;
  uint32_t next_id_ = 1;
};

}  // namespace tessera::node::mig::testing
