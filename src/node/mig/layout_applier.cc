#include "node/mig/layout_applier.h"

#include <algorithm>
#include <map>

#include "base/log.h"
#include "core/mig/geometry.h"

namespace tessera::node::mig {
namespace {

std::string GpuName(const host::MigGpuState& gpu) {
  return "GPU " + std::to_string(gpu.index) + " (" + gpu.name + ")";
}

const core::mig::Model* ModelOf(const host::MigGpuState& gpu) {
  auto model = core::mig::RecogniseModel({gpu.name, gpu.memory_mib, gpu.pci_device_id});
  return model.ok() ? *model : nullptr;
}

const core::mig::Profile* ProfileById(const core::mig::Model& model, uint32_t id) {
  for (const auto& p : model.profiles) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

std::string Join(const std::vector<core::mig::Instance>& instances) {
  std::string out;
  for (const auto& i : instances) out += (out.empty() ? "" : ", ") + core::mig::Describe(i);
  return out;
}

// What one managed GPU came to.
struct GpuOutcome {
  bool failed = false;
  bool pending = false;
  bool blocked = false;
};

// Instances of a GPU in MIG mode as the planner's ExistingInstances.
std::vector<core::mig::ExistingInstance> Existing(const core::mig::Model& model, const host::MigGpuState& gpu,
                                                  const std::set<std::string>& in_use) {
  std::vector<core::mig::ExistingInstance> existing;
  for (const auto& instance : gpu.instances) {
    const core::mig::Profile* profile = ProfileById(model, instance.profile_id);
    core::mig::ExistingInstance e;
    e.instance = {profile ? profile->name : "profile-" + std::to_string(instance.profile_id), instance.start};
    e.in_use = instance.processes > 0 || (!instance.mig_uuid.empty() && in_use.count(instance.mig_uuid) > 0);
    e.gpu_instance_id = instance.gpu_instance_id;
    existing.push_back(std::move(e));
  }
  return existing;
}

GpuOutcome ApplyToGpu(host::MigDriver& driver, const host::MigGpuState& gpu, const core::mig::GpuPlan& plan,
                      const std::set<std::string>& in_use, ApplyResult& result) {
  GpuOutcome outcome;
  const std::string name = GpuName(gpu);
  const bool want_mig = plan.action == core::mig::GpuAction::kEnable;
  const core::mig::Model* model = ModelOf(gpu);

  // Instances the layout no longer names go first (all of them when MIG is to
  // be off); then the mode; then what is missing.
  std::vector<core::mig::Instance> wanted = want_mig ? plan.instances : std::vector<core::mig::Instance>{};
  if (gpu.mig_enabled && model != nullptr) {
    auto existing = Existing(*model, gpu, in_use);
    core::mig::InstanceDiff diff = core::mig::DiffInstances(*model, wanted, existing);
    for (const auto& gone : diff.destroy) {
      if (auto s = driver.DestroyInstance(gpu.index, gone.gpu_instance_id); !s.ok()) {
        result.messages.push_back(name + ": cannot destroy " + core::mig::Describe(gone.instance) + ": " +
                                  s.error().message + "; nothing created");
        outcome.failed = true;
        return outcome;
      }
      ++result.destroyed;
    }
    if (!diff.blocked.empty()) {
      std::vector<core::mig::Instance> blocked;
      for (const auto& b : diff.blocked) blocked.push_back(b.instance);
      std::string message = name + ": " + Join(blocked) + (blocked.size() == 1 ? " is" : " are") +
                            " in use by a container and left in place (retried later)";
      if (!diff.deferred.empty()) message += "; waiting to create " + Join(diff.deferred);
      result.messages.push_back(message);
      outcome.blocked = true;
    }
    if (want_mig) {
      std::vector<host::MigInstanceState> created;
      for (const auto& instance : diff.create) {
        const core::mig::Profile* profile = model->FindProfile(instance.profile);
        auto made = profile ? driver.CreateInstance(gpu.index, profile->id, instance.start)
                            : Result<host::MigInstanceState>(Error{"unknown profile " + instance.profile});
        if (!made.ok()) {
          // All or nothing on this GPU: take back what this call made.
          for (const auto& undo : created) (void)driver.DestroyInstance(gpu.index, undo.gpu_instance_id);
          result.messages.push_back(name + ": cannot create " + core::mig::Describe(instance) + ": " +
                                    made.error().message + "; the " + std::to_string(created.size()) +
                                    " instance(s) created before were destroyed again");
          outcome.failed = true;
          return outcome;
        }
        created.push_back(*made);
      }
      result.created += static_cast<int>(created.size());
      if (!created.empty()) {
        result.messages.push_back(name + ": created " + Join(diff.create));
      }
      return outcome;
    }
    if (outcome.blocked) return outcome;  // MIG cannot go off while an instance stays
  } else if (gpu.mig_enabled && model == nullptr) {
    result.messages.push_back(name + ": no MIG table for this model; left as it is");
    outcome.failed = true;
    return outcome;
  }

  // The mode.
  if (gpu.mig_enabled != want_mig) {
    if (gpu.mig_pending == want_mig) {
      // Set before; waiting for the reset. Never set again (no loop).
      outcome.pending = true;
    } else {
      auto change = driver.SetMigMode(gpu.index, want_mig);
      if (!change.ok()) {
        result.messages.push_back(name + ": " + change.error().message);
        outcome.failed = true;
        return outcome;
      }
      outcome.pending = change->reset_required;
      if (!change->reset_required && want_mig) {
        // On at once (Hopper): create the instances now.
        auto again = driver.List();
        if (!again.ok()) {
          result.messages.push_back(
              name + ": MIG mode is on but the GPU cannot be read again: " + again.error().message);
          outcome.failed = true;
          return outcome;
        }
        for (const auto& g : *again) {
          if (g.index == gpu.index && g.mig_enabled) return ApplyToGpu(driver, g, plan, in_use, result);
        }
        result.messages.push_back(name + ": MIG mode did not turn on");
        outcome.failed = true;
        return outcome;
      }
      if (!change->reset_required) result.messages.push_back(name + ": MIG mode off");
    }
    if (outcome.pending) {
      result.reset_required = true;
      result.messages.push_back(name + ": MIG mode " + (want_mig ? "on" : "off") +
                                " is pending until the GPU is reset (nvidia-smi --gpu-reset -i " +
                                std::to_string(gpu.index) + "); the layout is applied after the reset");
    }
  }
  return outcome;
}

}  // namespace

namespace {

// Per state: its label value and the reason of its Event.
struct StateNames {
  const char* label;
  const char* reason;
};
StateNames NamesOf(ApplyState state) {
  switch (state) {
    case ApplyState::kSuccess:
      return {"success", "MigConfigApplied"};
    case ApplyState::kPending:
      return {"pending", "MigConfigPending"};
    case ApplyState::kFailed:
      break;
  }
  return {"failed", "MigConfigFailed"};
}

}  // namespace

const char* ApplyStateName(ApplyState state) {
  return NamesOf(state).label;
}

const char* ApplyStateReason(ApplyState state) {
  return NamesOf(state).reason;
}

std::string ApplyResult::Summary() const {
  std::string out;
  for (const auto& m : messages) out += (out.empty() ? "" : "; ") + m;
  return out;
}

ApplyResult ApplyLayout(host::MigDriver& driver, const ApplyRequest& request) {
  ApplyResult result;
  auto fail = [&](std::string message) {
    result.state = ApplyState::kFailed;
    result.messages.push_back(std::move(message));
    return result;
  };
  auto listed = driver.List();
  if (!listed.ok()) return fail("cannot read the GPUs' MIG state: " + listed.error().message);
  const std::vector<host::MigGpuState>& gpus = *listed;

  std::vector<core::mig::NodeGpu> node_gpus;
  for (const auto& gpu : gpus) {
    core::mig::NodeGpu n;
    n.index = gpu.index;
    n.identity = {gpu.name, gpu.memory_mib, gpu.pci_device_id};
    n.mig_capable = gpu.mig_capable;
    if (const core::mig::Model* model = ModelOf(gpu); model != nullptr && gpu.mig_enabled) {
      for (const auto& e : Existing(*model, gpu, request.in_use)) n.current.push_back(e.instance);
    }
    node_gpus.push_back(std::move(n));
  }
  auto plan = core::mig::ResolveLayout(*request.file, request.config, node_gpus);
  if (!plan.ok()) return fail(plan.error().message);

  // The layout must be right for every managed GPU before anything changes.
  for (const auto& failure : plan->failures) {
    if (request.managed(failure.index)) result.messages.push_back(failure.error.message);
  }
  std::set<std::string> profiles;
  for (const auto& p : plan->plans) {
    if (!request.managed(p.index) || p.action != core::mig::GpuAction::kEnable) continue;
    for (const auto& i : p.instances) profiles.insert(i.profile);
  }
  if (request.strategy == MigStrategy::kSingle && profiles.size() > 1) {
    std::string list;
    for (const auto& p : profiles) list += (list.empty() ? "" : ", ") + p;
    result.messages.push_back(
        "mig_strategy single advertises every MIG device as nvidia.com/gpu and needs one "
        "profile on every MIG GPU, but configuration '" +
        request.config + "' makes " + list + " (use mig_strategy mixed)");
  }
  if (!result.messages.empty()) {
    result.state = ApplyState::kFailed;
    result.messages.push_back("nothing of configuration '" + request.config + "' was applied");
    return result;
  }

  bool failed = false, pending = false;
  for (const auto& p : plan->plans) {
    if (p.action == core::mig::GpuAction::kLeave) continue;
    if (!request.managed(p.index)) {
      log::Debug("GPU not MIG-managed; the layout's entry for it is ignored", {{"index", p.index}});
      continue;
    }
    auto gpu = std::find_if(gpus.begin(), gpus.end(), [&](const auto& g) { return g.index == p.index; });
    if (gpu == gpus.end()) continue;
    GpuOutcome outcome = ApplyToGpu(driver, *gpu, p, request.in_use, result);
    failed = failed || outcome.failed;
    pending = pending || outcome.pending || outcome.blocked;
    result.blocked = result.blocked || outcome.blocked;
  }
  result.state = failed ? ApplyState::kFailed : pending ? ApplyState::kPending : ApplyState::kSuccess;
  return result;
}

}  // namespace tessera::node::mig
