#include "runner/mig_job.h"

#include <algorithm>

#include "contract/container_contract.h"
#include "core/mig/geometry.h"
#include "core/mig/placement.h"

namespace tessera::runner {
namespace {

namespace mig = core::mig;

std::string GpuHead(const host::MigGpuState& gpu) {
  return "#" + std::to_string(gpu.index) + " " + gpu.name + " (" + gpu.uuid + "): ";
}

const host::MigGpuState* FindGpu(const std::vector<host::MigGpuState>& gpus, const std::string& uuid) {
  auto it = std::find_if(gpus.begin(), gpus.end(), [&](const auto& g) { return g.uuid == uuid; });
  return it == gpus.end() ? nullptr : &*it;
}

// The instances on `gpu` a new one must fit beside: those NVML lists, and
// those other runners reserved there but have not created yet.
Result<std::vector<mig::Instance>> InstancesOn(const host::MigGpuState& gpu, const mig::Model& model,
                                               const std::vector<LedgerEntry>& entries) {
  std::vector<mig::Instance> out;
  for (const auto& i : gpu.instances) {
    auto p = std::find_if(model.profiles.begin(), model.profiles.end(),
                          [&](const mig::Profile& q) { return q.id == i.profile_id; });
    if (p == model.profiles.end()) {
      return Error{"it has an instance of profile id " + std::to_string(i.profile_id) + " at slice " +
                   std::to_string(i.start) + " that tessera's " + model.key + " table lacks"};
    }
    out.push_back({p->name, i.start});
  }
  for (const auto& e : entries) {
    if (!e.mig || e.mig->parent_uuid != gpu.uuid) continue;
    const bool listed = std::any_of(gpu.instances.begin(), gpu.instances.end(),
                                    [&](const auto& i) { return i.start == e.mig->start; });
    if (!listed) out.push_back({e.mig->profile, e.mig->start});
  }
  return out;
}

uint32_t SlicesTaken(const mig::Model& model, const std::vector<mig::Instance>& instances) {
  uint32_t mask = 0;
  for (const auto& i : instances) mask |= mig::SliceMask(model, i);
  return static_cast<uint32_t>(__builtin_popcount(mask));
}

struct Candidate {
  const host::MigGpuState* gpu;
  const mig::Profile* profile;
  mig::Instance instance;
  uint32_t taken;  // memory slices in use before it
};

}  // namespace

std::string HowToEnableMig(int index, bool needs_reset, bool pending, bool simulated) {
  const std::string i = std::to_string(index);
  const std::string reset =
      simulated ? "`tessera sim reset --gpu " + i + "`" : "`sudo nvidia-smi -i " + i + " -r`";
  if (pending) return "MIG mode is off until the GPU is reset (the change is pending): " + reset;
  std::string out = "MIG mode is off; turn it on with ";
  out += simulated ? "`tessera sim mig --gpu " + i + " on`" : "`sudo nvidia-smi -i " + i + " -mig 1`";
  if (needs_reset) out += ", then reset the GPU (" + reset + "; this model applies the change at a reset)";
  return out;
}

Result<std::vector<std::string>> CleanOrphanedInstances(SliceLedger& ledger, host::MigDriver& driver) {
  std::vector<std::string> notes;
  TESSERA_RETURN_IF_ERROR(ledger.Update([&](std::vector<LedgerEntry>& entries) -> Status {
    if (std::none_of(entries.begin(), entries.end(), IsOrphaned)) return Status::Ok();
    TESSERA_ASSIGN_OR_RETURN(const std::vector<host::MigGpuState> gpus, driver.List());
    std::erase_if(entries, [&](const LedgerEntry& e) {
      if (!IsOrphaned(e)) return false;
      const MigInstanceRecord& m = *e.mig;
      const std::string what = "the " + m.profile + " instance at slice " + std::to_string(m.start) + " of " +
                               m.parent_uuid + " (job " + e.job_id + ", whose runner is gone)";
      const host::MigGpuState* gpu = FindGpu(gpus, m.parent_uuid);
      if (gpu == nullptr) return true;  // the GPU is gone, and its instances with it
      auto it = std::find_if(gpu->instances.begin(), gpu->instances.end(), [&](const auto& i) {
        return i.start == m.start && i.profile_id == m.profile_id &&
               (!m.created || i.gpu_instance_id == m.gpu_instance_id);
      });
      if (it == gpu->instances.end()) return true;  // never created, or already destroyed
      if (auto st = driver.DestroyInstance(gpu->index, it->gpu_instance_id); !st.ok()) {
        notes.push_back("cannot remove " + what + " yet: " + st.error().message);
        return false;
      }
      notes.push_back("removed " + what);
      return true;
    });
    return Status::Ok();
  }));
  return notes;
}

Result<MigReservation> ReserveMigInstance(SliceLedger& ledger, host::MigDriver& driver,
                                          const MigRequest& request,
                                          const std::vector<std::string>& command) {
  if (request.profile.empty()) return Error{"--mig needs a profile name, e.g. --mig 1g.10gb"};
  MigReservation out;
  TESSERA_RETURN_IF_ERROR(ledger.Update([&](std::vector<LedgerEntry>& entries) -> Status {
    TESSERA_ASSIGN_OR_RETURN(const std::vector<host::MigGpuState> gpus, driver.List());
    if (request.gpu_index && std::none_of(gpus.begin(), gpus.end(),
                                          [&](const auto& g) { return g.index == *request.gpu_index; })) {
      out.refusal = "--gpu " + std::to_string(*request.gpu_index) +
                    ": this machine has no such GPU (it has " + std::to_string(gpus.size()) + ")";
      return Status::Ok();
    }
    std::vector<std::string> reasons;
    std::vector<Candidate> candidates;
    bool any_capable = false, any_has_profile = false, any_in_mig_mode = false;
    for (const auto& gpu : gpus) {
      if (request.gpu_index && gpu.index != *request.gpu_index) continue;
      const std::string head = GpuHead(gpu);
      if (!gpu.mig_capable) {
        reasons.push_back(head + "not MIG-capable");
        continue;
      }
      any_capable = true;
      auto model = mig::RecogniseModel({gpu.name, gpu.memory_mib, gpu.pci_device_id});
      if (!model.ok()) {
        reasons.push_back(head + model.error().message);
        continue;
      }
      const mig::Profile* profile = (*model)->FindProfile(request.profile);
      if (profile == nullptr) {
        reasons.push_back(head + "its model (" + (*model)->key + ") has no MIG profile '" + request.profile +
                          "'; its profiles: " + (*model)->ProfileNames());
        continue;
      }
      any_has_profile = true;
      if (!gpu.mig_enabled) {
        reasons.push_back(head + HowToEnableMig(gpu.index, (*model)->mode_change_needs_reset, gpu.mig_pending,
                                                request.simulated));
        continue;
      }
      any_in_mig_mode = true;
      auto existing = InstancesOn(gpu, **model, entries);
      if (!existing.ok()) {
        reasons.push_back(head + existing.error().message);
        continue;
      }
      mig::Placer placer(**model, mig::DefaultMix(**model));
      mig::PlacementRequest wanted;
      wanted.allowed_profiles = {request.profile};
      auto placed = placer.Place(*existing, wanted);
      if (!placed.ok()) {
        reasons.push_back(head + placed.error().message);
        continue;
      }
      candidates.push_back({&gpu, profile, *placed, SlicesTaken(**model, *existing)});
    }
    if (candidates.empty()) {
      std::string headline;
      if (!any_capable) {
        headline = request.gpu_index ? "GPU " + std::to_string(*request.gpu_index) + " has no MIG"
                                     : "no MIG-capable GPU on this machine";
      } else if (!any_has_profile) {
        headline = "unknown MIG profile '" + request.profile + "'";
      } else if (!any_in_mig_mode) {
        headline = "no GPU with the profile " + request.profile + " is in MIG mode";
      } else {
        headline = "no GPU can take a " + request.profile + " instance";
      }
      out.refusal = headline + (reasons.empty() ? ": this machine has no GPU" : ":");
      for (const auto& r : reasons) out.refusal += "\n  " + r;
      return Status::Ok();
    }
    // The fullest GPU first (as binpack does for slices), then the lowest index.
    const Candidate& best = *std::min_element(candidates.begin(), candidates.end(), [](auto& a, auto& b) {
      return a.taken != b.taken ? a.taken > b.taken : a.gpu->index < b.gpu->index;
    });
    LedgerEntry e = NewEntry(command);
    e.slices.container = "job";
    MigInstanceRecord m;
    m.parent_uuid = best.gpu->uuid;
    m.gpu_index = best.gpu->index;
    m.profile = best.profile->name;
    m.profile_id = best.profile->id;
    m.start = best.instance.start;
    m.size = best.profile->memory_slices;
    m.memory_mib = best.profile->memory_mib;
    m.sm_count = best.profile->sm_count;
    e.mig = m;
    entries.push_back(e);
    out.entry = std::move(e);
    return Status::Ok();
  }));
  return out;
}

Result<LedgerEntry> CreateMigInstance(SliceLedger& ledger, host::MigDriver& driver,
                                      const LedgerEntry& reserved) {
  const MigInstanceRecord& m = *reserved.mig;
  auto created = driver.CreateInstance(m.gpu_index, m.profile_id, m.start);
  if (!created.ok()) {
    (void)ledger.Remove(reserved.job_id);
    return Error{"cannot create the " + m.profile + " instance: " + created.error().message};
  }
  LedgerEntry entry = reserved;
  entry.mig->created = true;
  entry.mig->gpu_instance_id = created->gpu_instance_id;
  entry.mig->mig_uuid = created->mig_uuid;
  if (created->memory_mib > 0) entry.mig->memory_mib = created->memory_mib;
  if (created->sm_count > 0) entry.mig->sm_count = created->sm_count;
  Status recorded = entry.mig->mig_uuid.empty()
                        ? Status(Error{"NVML gave the new instance no MIG UUID"})
                        : ledger.Update([&](std::vector<LedgerEntry>& entries) -> Status {
                            for (auto& e : entries) {
                              if (e.job_id == entry.job_id) e = entry;
                            }
                            return Status::Ok();
                          });
  if (!recorded.ok()) {
    (void)driver.DestroyInstance(m.gpu_index, created->gpu_instance_id);
    (void)ledger.Remove(reserved.job_id);
    return Error{"cannot record the " + m.profile + " instance: " + recorded.error().message};
  }
  return entry;
}

Status ReleaseMigInstance(SliceLedger& ledger, host::MigDriver& driver, const LedgerEntry& entry) {
  const MigInstanceRecord& m = *entry.mig;
  if (m.created) {
    TESSERA_RETURN_IF_ERROR_WRAP(driver.DestroyInstance(m.gpu_index, m.gpu_instance_id),
                                 "cannot remove the " + m.profile + " instance " + m.mig_uuid);
  }
  return ledger.Remove(entry.job_id);
}

JobSpec BuildMigJobSpec(const LedgerEntry& entry, const LocalGpus& local,
                        const std::vector<std::string>& command) {
  JobSpec spec;
  spec.argv = command;
  spec.set_env = local.job_env;
  spec.set_env[contract::kVisibleDevicesEnv] = entry.mig->mig_uuid;
  spec.set_env[contract::kCudaVisibleDevicesEnv] = entry.mig->mig_uuid;
  spec.set_env[contract::kJobIdEnv] = entry.job_id;
  spec.prepend_path_env = local.job_path_env;
  return spec;
}

}  // namespace tessera::runner
