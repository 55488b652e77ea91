#include "dra/claim_preparer.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include <algorithm>
#include "base/files.h"
#include "base/log.h"
#include "contract/container_contract.h"
#include "core/allocation.h"
#include "core/allocation_codec.h"
#include "core/quantity.h"
#include "dra/cdi_spec.h"
#include "dra/gpu_config.h"
#include "dra/mig_partitions.h"

namespace tessera::dra {
namespace {

using Json = nlohmann::json;
constexpr int64_t kMiB = int64_t{1} << 20;

bool IsSafeUid(const std::string& uid) {
  if (uid.empty() || uid.size() > 64) return false;
  for (char c : uid) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string StringAt(const Json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// The base request of "req/sub".
std::string BaseRequest(const std::string& request) {
  return request.substr(0, request.find('/'));
}

// consumedCapacity[name] under its short or driver-qualified name.
const Json* Capacity(const Json& consumed, const std::string& driver, const std::string& name) {
  if (!consumed.is_object()) return nullptr;
  if (auto it = consumed.find(name); it != consumed.end()) return &*it;
  if (auto it = consumed.find(driver + "/" + name); it != consumed.end()) return &*it;
  return nullptr;
}

Result<int64_t> WholeQuantity(const Json& value, const std::string& what) {
  if (!value.is_string() && !value.is_number_integer()) return Error{what + " is not a quantity"};
  const std::string text =
      value.is_string() ? value.get<std::string>() : std::to_string(value.get<int64_t>());
  auto q = core::Quantity::Parse(text);
  if (!q.ok()) return Error{what + ": " + q.error().message};
  if (q->IsNegative()) return Error{what + " is negative (" + text + ")"};
  auto n = q->ToIntegerCeil();
  if (!n.ok()) return Error{what + ": " + n.error().message};
  return *n;
}

Status MakeDir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return Error{"cannot create '" + path + "': " + std::strerror(errno)};
  }
  // chmod, not the umask (process-wide): the region is written by whatever
  // user the container runs as.
  if (::chmod(path.c_str(), mode) != 0) return Error{"cannot chmod '" + path + "': " + std::strerror(errno)};
  return Status::Ok();
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) log::Warn("cannot remove", {{"path", path}, {"error", ec.message()}});
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

}  // namespace

std::string DeviceNameOf(const core::Gpu& gpu) {
  return "gpu-" + std::to_string(gpu.index);
}

ClaimPreparer::ClaimPreparer(DraConfig config, PreparerDeps deps)
    : config_(std::move(config)), deps_(std::move(deps)) {}

std::string ClaimPreparer::CheckpointPath(const std::string& uid) const {
  return files::Join(files::Join(config_.StateDir(), "claims"), uid + ".json");
}
std::string ClaimPreparer::RegionDirPath(const std::string& uid) const {
  return files::Join(config_.region_host_dir, uid);
}
std::string ClaimPreparer::LimitsDirPath(const std::string& uid) const {
  return files::Join(config_.region_host_dir, uid + ".limits");
}
std::string ClaimPreparer::CdiSpecPath(const std::string& uid) const {
  return files::Join(config_.cdi_dir, CdiSpecFileName(uid));
}

std::vector<PreparedClaim> ClaimPreparer::Prepared() const {
  std::lock_guard lock(mu_);
  std::vector<PreparedClaim> out;
  for (const auto& [uid, claim] : prepared_) out.push_back(claim);
  return out;
}

void ClaimPreparer::RemoveFiles(const std::string& uid) {
  ::unlink(CdiSpecPath(uid).c_str());
  RemoveTree(RegionDirPath(uid));
  RemoveTree(LimitsDirPath(uid));
}

Status ClaimPreparer::Recover() {
  std::lock_guard lock(mu_);
  const std::string claims_dir = files::Join(config_.StateDir(), "claims");
  TESSERA_RETURN_IF_ERROR(files::MakeDirs(claims_dir, 0700));
  TESSERA_RETURN_IF_ERROR(files::MakeDirs(config_.cdi_dir, 0755));
  TESSERA_RETURN_IF_ERROR(files::MakeDirs(config_.region_host_dir, 0755));
  prepared_.clear();
  for (const auto& name : ListDir(claims_dir)) {
    const std::string path = files::Join(claims_dir, name);
    if (name.size() < 6 || name.substr(name.size() - 5) != ".json") {
      ::unlink(path.c_str());  // a temporary file of an interrupted write
      continue;
    }
    auto text = files::Read(path);
    Result<PreparedClaim> claim = text.ok() ? [&]() -> Result<PreparedClaim> {
      const Json j = Json::parse(*text, nullptr, false);
      if (j.is_discarded()) return Error{"not JSON"};
      return PreparedClaimFromJson(j);
    }()
        : Result<PreparedClaim>(text.error());
    if (!claim.ok()) {
      log::Error("unreadable checkpoint: the claim is forgotten, the kubelet prepares it again",
                 {{"path", path}, {"error", claim.error().message}});
      const std::string uid = name.substr(0, name.size() - 5);
      ::unlink(path.c_str());
      if (IsSafeUid(uid)) RemoveFiles(uid);
      continue;
    }
    if (!claim->cdi_spec_path.empty() && ::access(claim->cdi_spec_path.c_str(), F_OK) != 0) {
      TESSERA_RETURN_IF_ERROR(files::ReplaceAtomically(claim->cdi_spec_path, claim->cdi_spec.dump(2)));
      log::Info("CDI spec written again from the checkpoint", {{"path", claim->cdi_spec_path}});
    }
    prepared_[claim->uid] = std::move(*claim);
  }
  // Leftovers of prepares that did not reach their checkpoint: MIG
  // instances on the GPUs tessera-dra manages that no claim holds, then files.
  if (deps_.mig != nullptr && deps_.mig_gpus) {
    const std::vector<MigGpu> managed = deps_.mig_gpus();
    TESSERA_ASSIGN_OR_RETURN(const std::vector<host::MigGpuState> states, deps_.mig->List());
    for (const auto& g : states) {
      if (std::none_of(managed.begin(), managed.end(), [&](const MigGpu& m) { return m.index == g.index; }))
        continue;
      for (const auto& i : g.instances) {
        bool held = false;
        for (const auto& [uid, claim] : prepared_) {
          for (const auto& d : claim.devices) {
            if (d.mig_gpu_index == g.index && d.mig_gpu_instance_id == i.gpu_instance_id) held = true;
          }
        }
        if (held) continue;
        log::Info("destroying a MIG instance no prepared claim holds",
                  {{"gpu", g.index}, {"gpu_instance", static_cast<int>(i.gpu_instance_id)}});
        TESSERA_RETURN_IF_ERROR(deps_.mig->DestroyInstance(g.index, i.gpu_instance_id));
      }
    }
  }
  for (const auto& name : ListDir(config_.cdi_dir)) {
    const std::string uid = ClaimUidOfCdiSpecFile(name);
    if (!uid.empty() && prepared_.count(uid) == 0) {
      log::Info("removing the CDI spec of an interrupted prepare", {{"claim_uid", uid}});
      ::unlink(files::Join(config_.cdi_dir, name).c_str());
    }
  }
  for (const auto& name : ListDir(config_.region_host_dir)) {
    std::string uid = name;
    if (uid.size() > 7 && uid.substr(uid.size() - 7) == ".limits") uid.resize(uid.size() - 7);
    if (IsSafeUid(uid) && prepared_.count(uid) == 0) {
      log::Info("removing a region of an interrupted prepare", {{"path", name}});
      RemoveTree(files::Join(config_.region_host_dir, name));
    }
  }
  return Status::Ok();
}

Status ClaimPreparer::Step(std::string_view step, bool& crash) {
  if (!deps_.on_step) return Status::Ok();
  return deps_.on_step(step, crash);
}

Result<PreparedClaim> ClaimPreparer::Prepare(const std::string& ns, const std::string& name,
                                             const std::string& uid,
                                             std::chrono::steady_clock::time_point deadline) {
  std::lock_guard lock(mu_);
  return PrepareLocked(ns, name, uid, deadline);
}

Result<PreparedClaim> ClaimPreparer::Plan(const Json& claim, const std::string& uid, GpuConfig& gpu_config) {
  const std::string& driver = config_.driver_name;
  const Json* allocation = nullptr;
  if (auto status = claim.find("status"); status != claim.end() && status->is_object()) {
    if (auto a = status->find("allocation"); a != status->end() && a->is_object()) allocation = &*a;
  }
  if (allocation == nullptr) return Error{"the claim is not allocated (status.allocation is empty)"};
  const Json empty = Json::object();
  const Json& devices = allocation->contains("devices") ? (*allocation)["devices"] : empty;
  const Json results = devices.value("results", Json::array());
  if (!results.is_array()) return Error{"status.allocation.devices.results is not a list"};

  const std::vector<core::Gpu> gpus = deps_.gpus();
  PreparedClaim out;
  out.uid = uid;
  std::set<std::string> requests;
  for (const auto& r : results) {
    if (StringAt(r, "driver") != driver) continue;
    PreparedDevice d;
    d.request = StringAt(r, "request");
    d.pool = StringAt(r, "pool");
    d.device = StringAt(r, "device");
    d.share_id = StringAt(r, "shareID");
    if (d.pool != config_.node_name) {
      return Error{"device '" + d.device + "' was allocated from pool '" + d.pool +
                   "', but this node's pool is '" + config_.node_name + "'"};
    }
    const std::vector<MigGpu> mig_gpus = deps_.mig_gpus ? deps_.mig_gpus() : std::vector<MigGpu>{};
    if (auto ref = ParseMigDeviceName(d.device)) {
      TESSERA_RETURN_IF_ERROR(PlanMigDevice(*ref, mig_gpus, d));
      d.cdi_name = uid + "-" + d.device;
      requests.insert(d.request);
      out.devices.push_back(std::move(d));
      continue;
    }
    for (const auto& m : mig_gpus) {
      if ("gpu-" + std::to_string(m.index) == d.device) {
        return Error{"device '" + d.device + "' is in MIG mode on this node: claims get its partitions (" +
                     "DeviceClass mig.tessera.io), not the whole GPU"};
      }
    }
    const core::Gpu* gpu = nullptr;
    std::string known;
    for (const auto& g : gpus) {
      known += (known.empty() ? "" : ", ") + DeviceNameOf(g);
      if (DeviceNameOf(g) == d.device) gpu = &g;
    }
    if (gpu == nullptr) {
      return Error{"device '" + d.device + "' of pool '" + d.pool + "' is not on this node (it has " +
                   (known.empty() ? std::string("no GPUs") : known) + ")"};
    }
    d.uuid = gpu->uuid;
    if (!d.share_id.empty() && !IsSafeUid(d.share_id))
      return Error{"shareID '" + d.share_id + "' is not a UID"};
    const Json consumed = r.value("consumedCapacity", Json::object());
    const int64_t gpu_bytes = gpu->memory_mib * kMiB;
    if (const Json* memory = Capacity(consumed, driver, "memory")) {
      TESSERA_ASSIGN_OR_RETURN(
          const int64_t bytes,
          WholeQuantity(*memory, "consumedCapacity memory of device '" + d.device + "'"));
      if (bytes > gpu_bytes) {
        return Error{"device '" + d.device + "': consumed memory " + std::to_string(bytes / kMiB) +
                     " MiB is more than the GPU's " + std::to_string(gpu->memory_mib) + " MiB"};
      }
      if (bytes == 0) return Error{"device '" + d.device + "': consumed memory is zero"};
      // libvgpu counts MiB; a share is never given more than it consumed.
      d.memory_mib = std::max<int64_t>(1, bytes / kMiB);
    } else if (!d.share_id.empty()) {
      d.memory_mib = gpu->memory_mib;
    }
    if (const Json* cores = Capacity(consumed, driver, "cores")) {
      TESSERA_ASSIGN_OR_RETURN(const int64_t percent,
                               WholeQuantity(*cores, "consumedCapacity cores of device '" + d.device + "'"));
      if (percent > contract::kMaxCoresPercent) {
        return Error{"device '" + d.device + "': consumed cores " + std::to_string(percent) +
                     " are more than the GPU's 100"};
      }
      d.cores = static_cast<int>(percent);
    } else if (!d.share_id.empty()) {
      d.cores = 100;
    }
    d.cdi_name = uid + "-" + d.device + (d.share_id.empty() ? "" : "-" + d.share_id);
    requests.insert(d.request);
    out.devices.push_back(std::move(d));
  }
  if (out.devices.empty()) return out;
  const auto mig = std::count_if(out.devices.begin(), out.devices.end(),
                                 [](const auto& d) { return d.mig_gpu_index >= 0; });
  if (mig > 0 && mig < static_cast<long>(out.devices.size())) {
    return Error{
        "the claim holds MIG partitions and shared GPUs together; a container gets either (a MIG "
        "instance is isolated by the GPU, a share by libvgpu, which would hide the instance): "
        "use one claim for each"};
  }

  // What is already prepared on each GPU, against what this claim adds.
  for (const auto& d : out.devices) {
    if (d.mig_gpu_index >= 0) continue;  // an instance of its own: the scheduler's counters keep them apart
    const core::Gpu* gpu = nullptr;
    for (const auto& g : gpus) {
      if (g.uuid == d.uuid) gpu = &g;
    }
    int64_t memory = 0;
    int cores = 0;
    std::string exclusive_holder, holders;
    for (const auto& [other_uid, other] : prepared_) {
      if (other_uid == uid) continue;
      for (const auto& od : other.devices) {
        if (od.uuid != d.uuid || od.mig_gpu_index >= 0) continue;
        holders += (holders.empty() ? "" : ", ") + other.ns + "/" + other.name;
        if (od.share_id.empty()) exclusive_holder = other.ns + "/" + other.name;
        memory += od.memory_mib;
        cores += od.cores;
      }
    }
    for (const auto& same : out.devices) {
      if (same.uuid == d.uuid && same.mig_gpu_index < 0) {
        memory += same.memory_mib;
        cores += same.cores;
      }
    }
    if (!exclusive_holder.empty()) {
      return Error{"device '" + d.device + "' is held whole by prepared claim " + exclusive_holder};
    }
    if (d.share_id.empty() && !holders.empty()) {
      return Error{"device '" + d.device + "' was allocated whole, but claims " + holders +
                   " are prepared on it"};
    }
    if (memory > gpu->memory_mib || cores > 100) {
      return Error{"device '" + d.device +
                   "' would be over-committed: the claims prepared on it and this one " + "consume " +
                   std::to_string(memory) + " MiB and " + std::to_string(cores) + " cores of " +
                   std::to_string(gpu->memory_mib) + " MiB and 100"};
    }
  }

  // Opaque configuration for this driver, in the allocation's order (the
  // classes' entries come before the claim's, later wins).
  const Json configs = devices.value("config", Json::array());
  size_t index = 0;
  for (const auto& c : configs.is_array() ? configs : Json::array()) {
    ++index;
    const Json opaque = c.value("opaque", Json::object());
    if (StringAt(opaque, "driver") != driver) continue;
    const Json applies = c.value("requests", Json::array());
    bool relevant = !applies.is_array() || applies.empty();
    for (const auto& request : applies.is_array() ? applies : Json::array()) {
      if (!request.is_string()) continue;
      for (const auto& ours : requests) {
        if (request == ours || request == BaseRequest(ours)) relevant = true;
      }
    }
    if (!relevant) continue;
    auto parsed = ParseGpuConfig(opaque.value("parameters", Json()));
    if (!parsed.ok()) {
      return Error{"invalid opaque config #" + std::to_string(index) + " (" + StringAt(c, "source") +
                   ") for " + driver + ": " + parsed.error().message};
    }
    gpu_config.MergeFrom(*parsed);
  }

  return out;
}

Status ClaimPreparer::BuildEnv(const PreparedClaim& prepared, const GpuConfig& gpu_config,
                               std::vector<std::string>& env, std::string& limits_payload) const {
  // The environment: the limits as the scheduler's payload (libvgpu's source
  // when the limits file is not mounted), the region, the visible GPUs.
  const std::string container = "claim:" + prepared.ns + "/" + prepared.name;
  core::PodAllocation payload;
  payload.node = config_.node_name;
  core::ContainerAllocation entry;
  entry.container = container;
  std::string visible;
  for (const auto& d : prepared.devices) {
    bool merged = false;
    for (auto& slice : entry.devices) {
      if (slice.uuid != d.uuid) continue;
      slice.memory_mib += d.memory_mib;
      slice.cores += d.cores;
      merged = true;
    }
    if (merged) continue;
    entry.devices.push_back(core::DeviceSlice{d.uuid, d.memory_mib, d.cores});
    visible += (visible.empty() ? "" : ",") + d.uuid;
  }
  for (auto& slice : entry.devices) slice.cores = std::min(slice.cores, 100);
  payload.containers.push_back(entry);
  TESSERA_ASSIGN_OR_RETURN(const std::string encoded, core::EncodeAllocation(payload));
  env = {std::string(contract::kAllocationEnv) + "=" + encoded,
         std::string(contract::kContainerNameEnv) + "=" + container,
         std::string(contract::kLimitsEnv) + "=" + contract::kLimitsContainerDir + "/" +
             contract::kLimitsFileName,
         std::string(contract::kSharedCacheEnv) + "=" + config_.RegionFileContainerPath(),
         std::string(contract::kVisibleDevicesEnv) + "=" + visible};
  if (!config_.ld_so_preload) env.push_back("LD_PRELOAD=" + config_.libvgpu_container_path);
  if (gpu_config.compute_policy)
    env.push_back(std::string(contract::kCorePolicyEnv) + "=" + *gpu_config.compute_policy);
  if (gpu_config.priority)
    env.push_back(std::string(contract::kTaskPriorityEnv) + "=" + std::to_string(*gpu_config.priority));
  if (gpu_config.oversubscription.value_or(false)) {
    env.push_back(std::string(contract::kOversubscribeEnv) + "=" + std::string(contract::kEnvTrue));
  }
  limits_payload = encoded;  // the limits file holds the same payload
  return Status::Ok();
}
Status ClaimPreparer::PlanMigDevice(const MigDeviceRef& ref, const std::vector<MigGpu>& mig_gpus,
                                    PreparedDevice& d) const {
  const MigGpu* gpu = nullptr;
  for (const auto& m : mig_gpus) {
    if (m.index == ref.gpu_index) gpu = &m;
  }
  if (gpu == nullptr || deps_.mig == nullptr) {
    return Error{"device '" + d.device + "' is a MIG partition of GPU " + std::to_string(ref.gpu_index) +
                 ", which tessera-dra does not manage in MIG mode on this node"};
  }
  if (!d.share_id.empty()) return Error{"device '" + d.device + "' is a MIG partition and cannot be shared"};
  for (const auto& profile : gpu->model->profiles) {
    if (profile.id != ref.profile_id || profile.media_extension) continue;
    if (MigDeviceName(ref.gpu_index, profile, ref.start) != d.device ||
        std::find(profile.starts.begin(), profile.starts.end(), ref.start) == profile.starts.end()) {
      break;
    }
    d.mig_gpu_index = ref.gpu_index;
    d.mig_profile_id = ref.profile_id;
    d.mig_start = ref.start;
    d.mig_parent_uuid = gpu->uuid;
    d.mig_profile = profile.name;
    return Status::Ok();
  }
  return Error{"device '" + d.device + "' is no MIG partition the " + gpu->model->key + " of GPU " +
               std::to_string(ref.gpu_index) + " can hold"};
}

Result<PreparedClaim> ClaimPreparer::PrepareLocked(const std::string& ns, const std::string& name,
                                                   const std::string& uid,
                                                   std::chrono::steady_clock::time_point deadline) {
  if (!IsSafeUid(uid)) return Error{"claim UID '" + uid + "' is not a UID"};
  if (auto it = prepared_.find(uid); it != prepared_.end()) return it->second;

  auto read = deps_.read_claim(ns, name);
  if (!read.ok()) return Error{"cannot read ResourceClaim " + ns + "/" + name + ": " + read.error().message};
  if (!read->has_value())
    return Error{"ResourceClaim " + ns + "/" + name + " does not exist (was it deleted?)"};
  const Json& claim = **read;
  const std::string actual_uid = claim.contains("metadata") ? StringAt(claim["metadata"], "uid") : "";
  if (actual_uid != uid) {
    return Error{"ResourceClaim " + ns + "/" + name + " has UID " + actual_uid + ", not " + uid +
                 " (it was deleted and created again)"};
  }
  bool crashed = false;
  if (auto s = Step("read", crashed); !s.ok()) return s.error();

  GpuConfig gpu_config;
  TESSERA_ASSIGN_OR_RETURN(PreparedClaim prepared, Plan(claim, uid, gpu_config));
  prepared.ns = ns;
  prepared.name = name;
  if (prepared.devices.empty()) {  // nothing of this driver's: nothing to make
    prepared_[uid] = prepared;
    return prepared;
  }
  // Before anything is made: a container given this claim and another of
  // ours would get two limits mounts at one path.
  if (deps_.read_pod) {
    ContainerClaimCheck check{config_.driver_name, deps_.read_pod, deps_.read_claim, deadline};
    TESSERA_RETURN_IF_ERROR(CheckOneClaimPerContainer(claim, check));
  }

  // MIG partitions: their instances, made first (their UUIDs go into the
  // limits and the spec); undone with everything else on a failure.
  std::vector<std::pair<int, uint32_t>> made;
  auto rollback = [&] {
    RemoveFiles(uid);
    for (const auto& [gpu, instance] : made) {
      if (auto s = deps_.mig->DestroyInstance(gpu, instance); !s.ok()) {
        log::Warn("cannot destroy a MIG instance made for a failed prepare",
                  {{"gpu", gpu}, {"gpu_instance", static_cast<int>(instance)}, {"error", s.error().message}});
      }
    }
  };
  for (auto& d : prepared.devices) {
    if (d.mig_gpu_index < 0) continue;
    auto instance = deps_.mig->CreateInstance(d.mig_gpu_index, d.mig_profile_id, d.mig_start);
    if (!instance.ok()) {
      rollback();
      return Error{"cannot create the MIG instance for device '" + d.device +
                   "': " + instance.error().message};
    }
    made.emplace_back(d.mig_gpu_index, instance->gpu_instance_id);
    d.uuid = instance->mig_uuid;
    d.mig_gpu_instance_id = instance->gpu_instance_id;
  }
  // MIG partitions: the instances and nothing else (tessera-node's MIG
  // containers likewise): the GPU isolates them, libvgpu has no part.
  const bool mig_only = !made.empty();
  std::vector<std::string> env;
  std::string limits_payload;
  if (mig_only) {
    std::string visible;
    for (const auto& d : prepared.devices) visible += (visible.empty() ? "" : ",") + d.uuid;
    env.push_back(std::string(contract::kVisibleDevicesEnv) + "=" + visible);
  } else if (auto s = BuildEnv(prepared, gpu_config, env, limits_payload); !s.ok()) {
    rollback();
    return s.error();
  }

  if (!mig_only) {
    prepared.region_dir = RegionDirPath(uid);
    prepared.limits_dir = LimitsDirPath(uid);
  }
  prepared.cdi_spec_path = CdiSpecPath(uid);
  std::vector<std::pair<std::string, int>> indices;
  for (const auto& g : deps_.gpus()) indices.emplace_back(g.uuid, g.index);
  prepared.cdi_spec = BuildCdiSpec(config_, prepared, env, indices);

  auto write = [&]() -> Status {
    if (mig_only) {
      TESSERA_RETURN_IF_ERROR(files::MakeDirs(config_.cdi_dir, 0755));
      return files::ReplaceAtomically(prepared.cdi_spec_path, prepared.cdi_spec.dump(2));
    }
    TESSERA_RETURN_IF_ERROR(files::MakeDirs(config_.region_host_dir, 0755));
    TESSERA_RETURN_IF_ERROR(MakeDir(prepared.region_dir, 0777));
    TESSERA_RETURN_IF_ERROR(MakeDir(prepared.limits_dir, 0755));
    TESSERA_RETURN_IF_ERROR(files::ReplaceAtomically(
        files::Join(prepared.limits_dir, contract::kLimitsFileName), limits_payload));
    TESSERA_RETURN_IF_ERROR(files::MakeDirs(config_.cdi_dir, 0755));
    return files::ReplaceAtomically(prepared.cdi_spec_path, prepared.cdi_spec.dump(2));
  };
  if (auto s = write(); !s.ok()) {
    rollback();
    return s.error();
  }
  bool crash = false;
  if (auto s = Step("written", crash); !s.ok()) {
    if (!crash) rollback();
    return s.error();
  }

  // The claim may have gone while this was written: then the kubelet will not
  // start the pod, and nothing would ever unprepare what is here.
  auto again = deps_.read_claim(ns, name);
  if (!again.ok() || !again->has_value() ||
      StringAt((**again).value("metadata", Json::object()), "uid") != uid) {
    rollback();
    if (!again.ok())
      return Error{"cannot read ResourceClaim " + ns + "/" + name + " again: " + again.error().message};
    return Error{"ResourceClaim " + ns + "/" + name + " was deleted while it was being prepared"};
  }
  if (auto s = Step("rechecked", crash); !s.ok()) {
    if (!crash) rollback();
    return s.error();
  }

  const std::string checkpoint = CheckpointPath(uid);
  Status s = files::MakeDirs(files::Join(config_.StateDir(), "claims"), 0700);
  if (s.ok()) s = files::ReplaceAtomically(checkpoint, PreparedClaimToJson(prepared).dump());
  if (!s.ok()) {
    rollback();
    return Error{"cannot write the checkpoint: " + s.error().message};
  }
  prepared_[uid] = prepared;
  return prepared;
}

Status ClaimPreparer::DestroyInstances(const PreparedClaim& claim) {
  std::vector<host::MigGpuState> states;
  for (const auto& d : claim.devices) {
    if (d.mig_gpu_index < 0) continue;
    if (deps_.mig == nullptr)
      return Error{"the claim holds MIG instances, but MIG is not managed here (--mig-gpus)"};
    if (states.empty()) {
      TESSERA_ASSIGN_OR_RETURN(states, deps_.mig->List());
    }
    // Only an instance that is still there (an unprepare cut short may have
    // destroyed it already).
    bool present = false;
    for (const auto& g : states) {
      for (const auto& i : g.instances) {
        if (g.index == d.mig_gpu_index && i.gpu_instance_id == d.mig_gpu_instance_id) present = true;
      }
    }
    if (!present) continue;
    TESSERA_RETURN_IF_ERROR_WRAP(deps_.mig->DestroyInstance(d.mig_gpu_index, d.mig_gpu_instance_id),
                                 "cannot destroy the MIG instance of device '" + d.device + "'");
  }
  return Status::Ok();
}

Status ClaimPreparer::Unprepare(const std::string& uid) {
  if (!IsSafeUid(uid)) return Error{"claim UID '" + uid + "' is not a UID"};
  std::lock_guard lock(mu_);
  if (auto it = prepared_.find(uid); it != prepared_.end()) {
    TESSERA_RETURN_IF_ERROR(DestroyInstances(it->second));
  }
  RemoveFiles(uid);
  if (::unlink(CheckpointPath(uid).c_str()) != 0 && errno != ENOENT) {
    return Error{"cannot remove the checkpoint '" + CheckpointPath(uid) + "': " + std::strerror(errno)};
  }
  prepared_.erase(uid);
  return Status::Ok();
}

}  // namespace tessera::dra
