#include "node/mig/dynamic_mig.h"

#include <algorithm>
#include <thread>
#include <tuple>

#include "base/log.h"
#include "contract/container_contract.h"
#include "core/mig/geometry.h"
#include "node/device_state.h"

namespace tessera::node::mig {
namespace {

const core::mig::Model* ModelOf(const std::string& name, uint64_t memory_mib, uint32_t pci_device_id) {
  auto model = core::mig::RecogniseModel({name, memory_mib, pci_device_id});
  return model.ok() ? *model : nullptr;
}

std::string GpuName(const host::MigGpuState& gpu) {
  return gpu.uuid + " (#" + std::to_string(gpu.index) + ", " + gpu.name + ")";
}

std::string Join(const std::set<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

}  // namespace

std::vector<MigClaim> MigClaimsOf(const std::vector<BoundPod>& pods) {
  std::vector<const BoundPod*> ordered;
  for (const auto& p : pods) ordered.push_back(&p);
  std::stable_sort(ordered.begin(), ordered.end(), [](const BoundPod* a, const BoundPod* b) {
    return std::tie(a->created, a->pod_namespace, a->pod_name) <
           std::tie(b->created, b->pod_namespace, b->pod_name);
  });
  std::vector<MigClaim> claims;
  for (const BoundPod* pod : ordered) {
    int order = 0;
    for (bool init : {true, false}) {
      for (const auto& c : pod->allocation.containers) {
        if (c.init != init || c.devices.empty()) continue;
        const bool all_mig = std::all_of(c.devices.begin(), c.devices.end(),
                                         [](const core::DeviceSlice& d) { return !d.mig_profile.empty(); });
        if (!all_mig) continue;
        claims.push_back(MigClaim{pod->pod_namespace, pod->pod_name, pod->uid, c.container, pod->created,
                                  order++, c.devices});
      }
    }
  }
  return claims;
}

Result<MigClaim> ChooseClaim(const std::vector<MigClaim>& claims, size_t device_count,
                             const std::set<std::string>& requested_gpus,
                             const std::function<bool(const MigClaim&)>& created,
                             const std::optional<std::set<std::string>>& held,
                             const std::set<std::string>& answered) {
  const MigClaim* best = nullptr;
  bool best_matches = false;
  std::set<std::string> waiting;  // for the error: who waits, with how many devices
  std::string pod_seen;           // only the first waiting container of a pod
  for (const MigClaim& c : claims) {
    const std::string pod = c.pod_namespace + "/" + c.pod_name;
    if (pod == pod_seen) continue;
    const bool made = created(c);
    const bool listed = held && held->count(c.key()) > 0;
    const bool waits = !listed && (!made || (held ? true : answered.count(c.key()) > 0));
    if (!waits) continue;
    pod_seen = pod;  // the kubelet allocates a pod's containers in order
    waiting.insert(c.key() + " (" + std::to_string(c.devices.size()) + ")");
    if (c.devices.size() != device_count) continue;
    std::set<std::string> gpus;
    for (const auto& d : c.devices) gpus.insert(d.uuid);
    const bool matches = gpus == requested_gpus;
    if (best == nullptr || (matches && !best_matches)) {
      best = &c;
      best_matches = matches;
    }
  }
  if (best != nullptr) return *best;
  std::string message =
      "no pod bound to this node waits for " + std::to_string(device_count) + " dynamic MIG instance(s)";
  message += waiting.empty() ? " (none waits for any: was the pod placed by tessera-scheduler with "
                               "nvidia.com/vgpu-mode: mig?)"
                             : "; waiting: " + Join(waiting);
  return Error{message};
}

int DynamicReplicas(const core::mig::Model& model) {
  uint32_t most = 1;
  for (const auto& p : model.profiles) most = std::max(most, p.max_instances);
  return static_cast<int>(most);
}

DynamicMig::DynamicMig(DynamicMigOptions options, host::MigDriver* driver, PodsSource pods, HeldSource held,
                       EventSink events, std::function<int64_t()> clock)
    : options_(std::move(options)),
      driver_(driver),
      pods_(std::move(pods)),
      held_(std::move(held)),
      events_(std::move(events)),
      clock_(std::move(clock)) {}

DynamicMig::~DynamicMig() {
  Stop();
}

int64_t DynamicMig::Now() const {
  if (clock_) return clock_();
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Result<std::vector<core::Gpu>> DynamicMig::Prepare(const std::vector<core::Gpu>& discovered) {
  TESSERA_ASSIGN_OR_RETURN_WRAP(auto listed, driver_->List(), "mig_dynamic_gpus: cannot list the GPUs");
  std::vector<core::Gpu> dynamic;
  std::map<std::string, int> replicas;
  for (int index : options_.gpus.indices) {
    const bool known = std::any_of(listed.begin(), listed.end(),
                                   [&](const host::MigGpuState& g) { return g.index == index; });
    if (!known) {
      return Error{"mig_dynamic_gpus names GPU " + std::to_string(index) +
                   ", which this node does not have (" + std::to_string(listed.size()) + " GPUs)"};
    }
  }
  for (const auto& gpu : listed) {
    if (!options_.gpus.Contains(gpu.index)) continue;
    if (!gpu.mig_capable) {
      if (options_.gpus.all) continue;  // "all": the GPUs that have MIG
      return Error{"mig_dynamic_gpus names GPU " + GpuName(gpu) + ", which has no MIG"};
    }
    auto model = core::mig::RecogniseModel({gpu.name, gpu.memory_mib, gpu.pci_device_id});
    if (!model.ok()) {
      return model.error().Wrap("mig_dynamic_gpus: GPU " + GpuName(gpu) + " cannot be cut dynamically");
    }
    auto it = std::find_if(discovered.begin(), discovered.end(),
                           [&](const core::Gpu& g) { return g.uuid == gpu.uuid; });
    if (it == discovered.end()) return Error{"mig_dynamic_gpus: GPU " + GpuName(gpu) + " was not discovered"};
    dynamic.push_back(*it);
    replicas[gpu.uuid] = DynamicReplicas(**model);
  }
  {
    std::lock_guard lock(mu_);
    gpus_ = dynamic;
    replicas_ = std::move(replicas);
    EnsureModesLocked(listed);
    if (auto again = driver_->List(); again.ok()) listed = std::move(again).value();
    PublishLocked(listed, nullptr);
  }
  for (const auto& gpu : dynamic) {
    log::Info("GPU in mig-dynamic mode", {{"index", gpu.index}, {"uuid", gpu.uuid}, {"model", gpu.model}});
  }
  return dynamic;
}

void DynamicMig::Start() {
  if (!thread_) thread_ = std::make_unique<PeriodicThread>(options_.interval, [this] { Tick(); });
  thread_->Start();
}

void DynamicMig::Stop() {
  if (thread_) thread_->Stop();
  if (watching_xids_) driver_->StopXidWatch();
  watching_xids_ = false;
}

bool DynamicMig::IsDynamicLocked(int index) const {
  return std::any_of(gpus_.begin(), gpus_.end(), [&](const core::Gpu& g) { return g.index == index; });
}

bool DynamicMig::Owns(const std::string& gpu_uuid) const {
  std::lock_guard lock(mu_);
  return replicas_.count(gpu_uuid) > 0;
}

bool DynamicMig::SetHealth(const std::string& gpu_uuid, bool healthy) {
  std::lock_guard lock(mu_);
  if (replicas_.count(gpu_uuid) == 0) return false;
  const bool changed = healthy ? unhealthy_.erase(gpu_uuid) > 0 : unhealthy_.insert(gpu_uuid).second;
  if (changed) ++version_;
  return changed;
}

bool DynamicMig::OnXid(const host::MigXid& xid) {
  std::lock_guard lock(mu_);
  if (replicas_.count(xid.gpu_uuid) == 0 || !xid_health_.Record(xid)) return false;
  log::Warn("mig-dynamic: critical XID; the MIG device(s) it names are unhealthy",
            {{"gpu", xid.gpu_uuid}, {"xid", xid.xid}, {"gpu_instance", xid.gpu_instance_id}});
  bool changed = false;
  for (auto& d : devices_) {
    const bool healthy = xid_health_.Healthy(d.parent_uuid, d.gpu_instance_id);
    changed = changed || healthy != d.healthy;
    d.healthy = healthy;
  }
  if (changed) ++version_;
  return changed;
}

Status DynamicMig::WatchXids() {
  std::vector<std::string> uuids;
  {
    std::lock_guard lock(mu_);
    for (const auto& [uuid, replicas] : replicas_) uuids.push_back(uuid);
  }
  TESSERA_RETURN_IF_ERROR(driver_->StartXidWatch(uuids, [this](const host::MigXid& xid) { OnXid(xid); }));
  watching_xids_ = true;
  return Status::Ok();
}

uint64_t DynamicMig::version() const {
  std::lock_guard lock(mu_);
  return version_;
}

std::vector<core::Gpu> DynamicMig::Advertised() const {
  std::lock_guard lock(mu_);
  std::vector<core::Gpu> out = gpus_;
  for (auto& gpu : out) {
    gpu.slots = replicas_.at(gpu.uuid);
    gpu.healthy = gpu.healthy && mig_on_.count(gpu.uuid) > 0 && unhealthy_.count(gpu.uuid) == 0;
  }
  return out;
}

std::vector<MigDevice> DynamicMig::Devices() const {
  std::lock_guard lock(mu_);
  return devices_;
}

std::vector<core::Gpu> DynamicMig::InventoryGpus() const {
  std::lock_guard lock(mu_);
  std::vector<core::Gpu> out;
  for (core::Gpu gpu : gpus_) {
    gpu.mig_capable = true;
    gpu.mode = core::SharingMode::kMigDynamic;
    gpu.slots = 0;
    // The scheduler places nothing on a GPU whose MIG mode waits for a reset.
    gpu.healthy = gpu.healthy && mig_on_.count(gpu.uuid) > 0 && unhealthy_.count(gpu.uuid) == 0;
    for (const MigDevice& d : devices_) {
      if (d.parent_uuid != gpu.uuid) continue;
      gpu.mig_devices.push_back(core::MigDevice{
          d.mig_uuid, d.profile, static_cast<int>(d.start), static_cast<int>(std::max<uint32_t>(d.size, 1)),
          static_cast<int64_t>(d.memory_mib), static_cast<int>(d.sm_count), d.healthy, d.used_by});
    }
    std::sort(gpu.mig_devices.begin(), gpu.mig_devices.end(),
              [](const core::MigDevice& a, const core::MigDevice& b) { return a.start < b.start; });
    out.push_back(std::move(gpu));
  }
  return out;
}

void DynamicMig::EnsureModesLocked(const std::vector<host::MigGpuState>& gpus) {
  for (const auto& gpu : gpus) {
    if (!IsDynamicLocked(gpu.index)) continue;
    if (gpu.mig_enabled) {
      if (mig_on_.insert(gpu.uuid).second) {
        ++version_;
        log::Info("MIG mode is on for a mig-dynamic GPU", {{"gpu", GpuName(gpu)}});
      }
      continue;
    }
    if (mig_on_.erase(gpu.uuid) > 0) ++version_;
    if (!gpu.mig_pending) {
      // Set once: on A100/A30 it then stays pending until a reset, and a later
      // pass finds it pending and only reports it.
      auto changed = driver_->SetMigMode(gpu.index, true);
      if (!changed.ok()) {
        if (mode_reported_.insert(gpu.uuid).second) {
          const std::string message =
              "cannot turn MIG mode on for mig-dynamic GPU " + GpuName(gpu) + ": " + changed.error().message;
          log::Error(message);
          if (events_) events_("Warning", "MigDynamicFailed", message);
        }
        continue;
      }
      if (!changed->reset_required) {
        mig_on_.insert(gpu.uuid);
        ++version_;
        log::Info("MIG mode turned on for a mig-dynamic GPU", {{"gpu", GpuName(gpu)}});
        continue;
      }
    }
    if (mode_reported_.insert(gpu.uuid).second) {
      const std::string message = "MIG mode of mig-dynamic GPU " + GpuName(gpu) +
                                  " is pending until the GPU is reset (A100/A30); no instance is created "
                                  "there until then";
      log::Warn(message);
      if (events_) events_("Warning", "MigDynamicPending", message);
    }
  }
}

void DynamicMig::PublishLocked(const std::vector<host::MigGpuState>& gpus,
                               const std::vector<MigClaim>* claims) {
  auto devices = MigDevicesOf(
      gpus, [this](int index) { return IsDynamicLocked(index); }, MigStrategy::kSingle);
  for (auto& d : devices) {
    d.resource = options_.resource_name;
    d.healthy = xid_health_.Healthy(d.parent_uuid, d.gpu_instance_id);
    if (claims != nullptr) {
      for (const MigClaim& c : *claims) {
        for (const auto& slice : c.devices) {
          if (slice.uuid == d.parent_uuid && slice.mig_profile == d.profile &&
              slice.mig_start == static_cast<int>(d.start)) {
            d.used_by = c.key();
          }
        }
      }
    }
    if (d.used_by.empty()) {
      if (auto it = made_.find(d.mig_uuid); it != made_.end()) d.used_by = it->second.owner;
    }
  }
  if (devices != devices_) {
    devices_ = std::move(devices);
    ++version_;
  }
}

std::optional<std::set<std::string>> DynamicMig::HeldLocked() {
  if (!held_) return std::nullopt;
  auto held = held_();
  if (!held.ok()) return std::nullopt;
  return std::move(held).value();
}

void DynamicMig::Tick() {
  std::lock_guard lock(mu_);
  auto listed = driver_->List();
  if (!listed.ok()) {
    log::Warn("mig-dynamic: cannot list the GPUs", {{"error", listed.error().message}});
    return;
  }
  EnsureModesLocked(*listed);
  auto pods = pods_ ? pods_() : std::nullopt;
  if (!pods) {  // who uses what is unknown: destroy nothing
    PublishLocked(*listed, nullptr);
    return;
  }
  const std::vector<MigClaim> claims = MigClaimsOf(*pods);
  const std::optional<std::set<std::string>> held = HeldLocked();
  const bool kubelet_answered = !held_ || held.has_value();
  const int64_t now = Now();
  bool destroyed = false;
  for (const auto& gpu : *listed) {
    if (!IsDynamicLocked(gpu.index) || !gpu.mig_enabled) continue;
    const core::mig::Model* model = ModelOf(gpu.name, gpu.memory_mib, gpu.pci_device_id);
    for (const auto& instance : gpu.instances) {
      std::string profile;
      if (model != nullptr) {
        for (const auto& p : model->profiles) {
          if (p.id == instance.profile_id) profile = p.name;
        }
      }
      const MigClaim* owner = nullptr;
      for (const MigClaim& c : claims) {
        for (const auto& slice : c.devices) {
          if (slice.uuid == gpu.uuid && slice.mig_profile == profile &&
              slice.mig_start == static_cast<int>(instance.start)) {
            owner = &c;
          }
        }
      }
      Made& made = made_[instance.mig_uuid];
      if (owner != nullptr) {
        made.owner = owner->key();
        continue;
      }
      if (instance.processes > 0) continue;  // a process uses it, whoever started it
      if (!kubelet_answered) continue;       // without the kubelet's answer nothing goes
      if (held && !made.owner.empty() && held->count(made.owner) > 0)
        continue;  // its container is still there
      if (made.created != 0 && now - made.created < options_.grace_seconds) continue;
      const std::string why = made.owner.empty() ? "no pod's allocation names it and no process uses it"
                                                 : "its container " + made.owner + " is gone";
      if (auto s = driver_->DestroyInstance(gpu.index, instance.gpu_instance_id); !s.ok()) {
        log::Warn("mig-dynamic: cannot destroy an instance (tried again next pass)",
                  {{"gpu", GpuName(gpu)}, {"instance", instance.mig_uuid}, {"error", s.error().message}});
        continue;
      }
      xid_health_.Forget(gpu.uuid, instance.gpu_instance_id);  // a new instance may get its GI id
      log::Info("mig-dynamic: instance destroyed", {{"gpu", GpuName(gpu)},
                                                    {"instance", instance.mig_uuid},
                                                    {"profile", profile},
                                                    {"start", instance.start},
                                                    {"why", why}});
      answered_.erase(made.owner);
      made_.erase(instance.mig_uuid);
      destroyed = true;
    }
  }
  // Forget what is no longer there.
  std::set<std::string> present;
  for (const auto& gpu : *listed) {
    for (const auto& i : gpu.instances) present.insert(i.mig_uuid);
  }
  std::erase_if(made_, [&](const auto& entry) { return present.count(entry.first) == 0; });
  if (destroyed) {
    if (auto again = driver_->List(); again.ok()) listed = std::move(again);
  }
  PublishLocked(*listed, &claims);
}

std::set<std::string> DynamicMig::PreferredGpus(size_t device_count) {
  std::lock_guard lock(mu_);
  auto pods = pods_ ? pods_() : std::nullopt;
  auto listed = driver_->List();
  if (!pods || !listed.ok()) return {};
  const auto claims = MigClaimsOf(*pods);
  const auto held = HeldLocked();
  auto created = [&](const MigClaim& c) {
    return std::all_of(c.devices.begin(), c.devices.end(), [&](const core::DeviceSlice& d) {
      return std::any_of(devices_.begin(), devices_.end(), [&](const MigDevice& m) {
        return m.parent_uuid == d.uuid && m.profile == d.mig_profile &&
               static_cast<int>(m.start) == d.mig_start;
      });
    });
  };
  auto claim = ChooseClaim(claims, device_count, {}, created, held, answered_);
  if (!claim.ok()) return {};
  std::set<std::string> gpus;
  for (const auto& d : claim->devices) gpus.insert(d.uuid);
  return gpus;
}

Result<v1beta1::ContainerAllocateResponse> DynamicMig::Allocate(
    const v1beta1::ContainerAllocateRequest& request) {
  // The kubelet and this agent watch the pods apart: the pod being admitted
  // may reach the kubelet a moment before this agent's pod list.
  const auto deadline = std::chrono::steady_clock::now() + options_.pod_wait;
  while (true) {
    bool no_pod = false;
    {
      std::lock_guard lock(mu_);
      auto answer = AllocateLocked(request, no_pod);
      if (answer.ok() || !no_pod || std::chrono::steady_clock::now() >= deadline) return answer;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Result<v1beta1::ContainerAllocateResponse> DynamicMig::AllocateLocked(
    const v1beta1::ContainerAllocateRequest& request, bool& no_pod) {
  if (request.devices_ids().empty()) return Error{"the request names no devices"};
  std::set<std::string> requested;
  for (const auto& id : request.devices_ids()) {
    TESSERA_ASSIGN_OR_RETURN(const DeviceId parsed, ParseDeviceId(id));
    auto it = replicas_.find(parsed.gpu_uuid);
    if (it == replicas_.end()) return Error{"device ID '" + id + "' names no mig-dynamic GPU of this node"};
    if (parsed.replica >= it->second) {
      return Error{"device ID '" + id + "' is beyond the " + std::to_string(it->second) +
                   " replicas of its GPU"};
    }
    requested.insert(parsed.gpu_uuid);
  }
  auto pods = pods_ ? pods_() : std::nullopt;
  if (!pods) {
    no_pod = true;
    return Error{
        "the pods bound to this node are not known yet (the API server has not answered): "
        "no dynamic MIG instance can be matched to this container"};
  }
  TESSERA_ASSIGN_OR_RETURN_WRAP(auto listed, driver_->List(), "mig-dynamic: cannot list the GPUs");
  const auto claims = MigClaimsOf(*pods);
  auto find_instance = [&](const core::DeviceSlice& d) -> const host::MigInstanceState* {
    for (const auto& gpu : listed) {
      if (gpu.uuid != d.uuid) continue;
      const core::mig::Model* model = ModelOf(gpu.name, gpu.memory_mib, gpu.pci_device_id);
      const core::mig::Profile* profile = model ? model->FindProfile(d.mig_profile) : nullptr;
      for (const auto& i : gpu.instances) {
        if (profile != nullptr && i.profile_id == profile->id && static_cast<int>(i.start) == d.mig_start &&
            i.has_compute_instance && !i.mig_uuid.empty()) {
          return &i;
        }
      }
    }
    return nullptr;
  };
  auto created = [&](const MigClaim& c) {
    return std::all_of(c.devices.begin(), c.devices.end(),
                       [&](const core::DeviceSlice& d) { return find_instance(d) != nullptr; });
  };
  auto chosen = ChooseClaim(claims, static_cast<size_t>(request.devices_ids_size()), requested, created,
                            HeldLocked(), answered_);
  if (!chosen.ok()) {
    no_pod = true;
    return chosen.error();
  }
  const MigClaim claim = std::move(chosen).value();

  // Check everything before creating anything.
  struct Step {
    int gpu_index = 0;
    const core::mig::Profile* profile = nullptr;
    uint32_t start = 0;
    std::string existing;  // MIG UUID when the instance is there already
  };
  std::vector<Step> steps;
  std::map<int, std::vector<core::mig::Instance>>
      planned;  // per GPU index: what is there + what this call adds
  const std::string whose =
      "pod " + claim.pod_namespace + "/" + claim.pod_name + " container " + claim.container;
  for (const auto& d : claim.devices) {
    auto gpu = std::find_if(listed.begin(), listed.end(),
                            [&](const host::MigGpuState& g) { return g.uuid == d.uuid; });
    if (gpu == listed.end())
      return Error{whose + ": its allocation names GPU " + d.uuid + ", which this node does not have"};
    if (!IsDynamicLocked(gpu->index)) {
      return Error{whose + ": its allocation names GPU " + GpuName(*gpu) +
                   ", which is not in mig-dynamic mode"};
    }
    if (!gpu->mig_enabled) {
      return Error{whose + ": MIG mode of GPU " + GpuName(*gpu) + " is pending until the GPU is reset"};
    }
    const core::mig::Model* model = ModelOf(gpu->name, gpu->memory_mib, gpu->pci_device_id);
    if (model == nullptr) return Error{whose + ": GPU " + GpuName(*gpu) + " has no MIG table"};
    const core::mig::Profile* profile = model->FindProfile(d.mig_profile);
    if (profile == nullptr) {
      return Error{whose + ": MIG profile '" + d.mig_profile + "' is not one of " + model->key + "'s (" +
                   model->ProfileNames() + ")"};
    }
    Step step{gpu->index, profile, static_cast<uint32_t>(std::max(d.mig_start, 0)), ""};
    if (const host::MigInstanceState* there = find_instance(d)) {
      step.existing = there->mig_uuid;
      steps.push_back(step);
      continue;
    }
    auto& on_gpu = planned[gpu->index];
    if (on_gpu.empty()) {
      for (const auto& i : gpu->instances) {
        std::string name = "profile-" + std::to_string(i.profile_id);
        for (const auto& p : model->profiles) {
          if (p.id == i.profile_id) name = p.name;
        }
        on_gpu.push_back({name, i.start});
      }
    }
    const core::mig::Instance wanted{profile->name, step.start};
    if (!core::mig::CanAdd(*model, on_gpu, wanted)) {
      std::string there;
      for (const auto& i : on_gpu) there += (there.empty() ? "" : ", ") + core::mig::Describe(i);
      return Error{whose + ": placement " + core::mig::Describe(wanted) + " on GPU " + GpuName(*gpu) +
                   " is taken or invalid (there: " + (there.empty() ? "nothing" : there) + ")"};
    }
    on_gpu.push_back(wanted);
    steps.push_back(step);
  }

  std::vector<std::pair<int, uint32_t>> made_now;  // (GPU index, GI id) to undo on failure
  std::vector<std::string> uuids;
  for (const Step& step : steps) {
    if (!step.existing.empty()) {
      uuids.push_back(step.existing);
      continue;
    }
    auto made = driver_->CreateInstance(step.gpu_index, step.profile->id, step.start);
    if (!made.ok()) {
      for (const auto& [gpu, gi] : made_now) {
        if (auto undone = driver_->DestroyInstance(gpu, gi); !undone.ok()) {
          log::Error("mig-dynamic: cannot undo an instance of a failed Allocate (an orphan, destroyed later)",
                     {{"gpu", gpu}, {"gpu_instance", gi}, {"error", undone.error().message}});
        }
      }
      return made.error().Wrap(whose + ": cannot create MIG instance " + step.profile->name + "@" +
                               std::to_string(step.start) + " on GPU #" + std::to_string(step.gpu_index));
    }
    made_now.emplace_back(step.gpu_index, made->gpu_instance_id);
    uuids.push_back(made->mig_uuid);
    made_[made->mig_uuid] = Made{claim.key(), Now()};
    log::Info("mig-dynamic: instance created", {{"container", claim.key()},
                                                {"gpu", step.gpu_index},
                                                {"profile", step.profile->name},
                                                {"start", step.start},
                                                {"instance", made->mig_uuid}});
  }
  for (const auto& uuid : uuids) {
    Made& m = made_[uuid];
    m.owner = claim.key();
    if (m.created == 0) m.created = Now();
  }
  answered_.insert(claim.key());
  if (!made_now.empty()) {
    if (auto again = driver_->List(); again.ok()) PublishLocked(*again, &claims);
  }

  std::string visible;
  for (const auto& uuid : uuids) visible += (visible.empty() ? "" : ",") + uuid;
  v1beta1::ContainerAllocateResponse response;
  (*response.mutable_envs())[contract::kVisibleDevicesEnv] = visible;
  return response;
}

}  // namespace tessera::node::mig
