#include "host/nvml_mig.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <utility>
#include <vector>

#include "base/log.h"

namespace tessera::host {
namespace {

constexpr unsigned kEventWaitMs = 250;
constexpr unsigned kMaxInstances = 32;

// The compute-instance profile index (NVML_COMPUTE_INSTANCE_PROFILE_*) that
// spans a GPU instance of `slices` compute slices.
constexpr std::pair<unsigned, unsigned> kFullComputeProfiles[] = {
    {1, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE}, {2, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE},
    {3, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE}, {4, NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE},
    {6, NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE}, {7, NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE},
    {8, NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE}};

Result<unsigned> FullComputeProfile(unsigned slices) {
  for (const auto& [spanned, profile] : kFullComputeProfiles) {
    if (spanned == slices) return profile;
  }
  return Error{"no compute-instance profile spans " + std::to_string(slices) + " compute slices"};
}

}  // namespace

Result<std::unique_ptr<NvmlMigDriver>> NvmlMigDriver::Load(const NvmlApi& api,
                                                           const std::string& library_name) {
  if (!HasMigEntryPoints(api)) {
    return Error{"NVML library '" + library_name +
                 "' lacks the MIG entry points (nvmlDeviceCreateGpuInstanceWithPlacement, ...): "
                 "a driver older than R450, or not NVIDIA's"};
  }
  return std::make_unique<NvmlMigDriver>(api);
}

NvmlMigDriver::NvmlMigDriver(const NvmlApi& api) : api_(api) {}

NvmlMigDriver::~NvmlMigDriver() {
  StopXidWatch();
  {
    std::lock_guard lock(mu_);
    if (initialized_) api_.Shutdown();
  }
}

Status NvmlMigDriver::EnsureInitialized() {
  if (initialized_) return Status::Ok();
  if (nvmlReturn_t rc = api_.Init(); rc != NVML_SUCCESS) return Error{"nvmlInit failed: " + Text(rc)};
  initialized_ = true;
  return Status::Ok();
}

Result<nvmlDevice_t> NvmlMigDriver::Device(int gpu_index) {
  TESSERA_RETURN_IF_ERROR(EnsureInitialized());
  nvmlDevice_t device = nullptr;
  if (nvmlReturn_t rc = api_.DeviceGetHandleByIndex(static_cast<unsigned>(gpu_index), &device);
      rc != NVML_SUCCESS) {
    return Error{"GPU " + std::to_string(gpu_index) + ": no NVML handle: " + Text(rc)};
  }
  return device;
}

std::vector<NvmlMigDriver::ComputeInstance> NvmlMigDriver::ComputeInstances(nvmlGpuInstance_t gi) const {
  std::vector<ComputeInstance> found;
  for (unsigned p = 0; p < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++p) {
    nvmlComputeInstanceProfileInfo_t profile{};
    if (api_.GpuInstanceGetComputeInstanceProfileInfo(gi, p, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                                                      &profile) != NVML_SUCCESS) {
      continue;
    }
    std::array<nvmlComputeInstance_t, kMaxInstances> handles{};
    unsigned count = static_cast<unsigned>(handles.size());
    if (api_.GpuInstanceGetComputeInstances(gi, profile.id, handles.data(), &count) != NVML_SUCCESS) continue;
    for (unsigned k = 0; k < count; ++k) found.push_back({profile, handles[k]});
  }
  return found;
}

Result<MigInstanceState> NvmlMigDriver::Describe(nvmlDevice_t, nvmlGpuInstance_t gi) {
  nvmlGpuInstanceInfo_t info{};
  if (nvmlReturn_t rc = api_.GpuInstanceGetInfo(gi, &info); rc != NVML_SUCCESS) {
    return Error{"nvmlGpuInstanceGetInfo: " + Text(rc)};
  }
  MigInstanceState state;
  state.gpu_instance_id = info.id;
  state.profile_id = info.profileId;
  state.start = info.placement.start;
  state.size = info.placement.size;
  // tessera makes one compute instance per GPU instance; the first found is it.
  if (const auto cis = ComputeInstances(gi); !cis.empty()) {
    nvmlComputeInstanceInfo_t ci{};
    if (nvmlReturn_t rc = api_.ComputeInstanceGetInfo(cis.front().handle, &ci); rc != NVML_SUCCESS) {
      return Error{"nvmlComputeInstanceGetInfo: " + Text(rc)};
    }
    state.has_compute_instance = true;
    state.compute_instance_id = ci.id;
    state.sm_count = cis.front().profile.multiprocessorCount;
    std::array<char, NVML_DEVICE_UUID_V2_BUFFER_SIZE> uuid{};
    if (api_.DeviceGetUUID(ci.device, uuid.data(), uuid.size()) == NVML_SUCCESS) state.mig_uuid = uuid.data();
    nvmlMemory_t memory{};
    if (api_.DeviceGetMemoryInfo(ci.device, &memory) == NVML_SUCCESS) {
      state.memory_mib = memory.total >> 20;
      state.memory_used_bytes = memory.used;
    }
    nvmlUtilization_t utilization{};
    if (api_.DeviceGetUtilizationRates != nullptr &&
        api_.DeviceGetUtilizationRates(ci.device, &utilization) == NVML_SUCCESS) {
      state.utilization_percent = static_cast<int>(utilization.gpu);
    }
    if (api_.DeviceGetComputeRunningProcesses != nullptr) {
      std::array<nvmlProcessInfo_t, 64> processes{};
      unsigned n = static_cast<unsigned>(processes.size());
      nvmlReturn_t rc = api_.DeviceGetComputeRunningProcesses(ci.device, &n, processes.data());
      if (rc == NVML_SUCCESS || rc == NVML_ERROR_INSUFFICIENT_SIZE) state.processes = n;
    }
  }
  return state;
}

Result<std::vector<MigGpuState>> NvmlMigDriver::List() {
  std::lock_guard lock(mu_);
  TESSERA_RETURN_IF_ERROR(EnsureInitialized());
  unsigned count = 0;
  if (nvmlReturn_t rc = api_.DeviceGetCount(&count); rc != NVML_SUCCESS) {
    return Error{"nvmlDeviceGetCount: " + Text(rc)};
  }
  std::vector<MigGpuState> gpus;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    if (api_.DeviceGetHandleByIndex(i, &device) != NVML_SUCCESS) continue;
    MigGpuState gpu;
    gpu.index = static_cast<int>(i);
    std::array<char, NVML_DEVICE_UUID_V2_BUFFER_SIZE> uuid{};
    if (api_.DeviceGetUUID(device, uuid.data(), uuid.size()) != NVML_SUCCESS) continue;
    gpu.uuid = uuid.data();
    std::array<char, NVML_DEVICE_NAME_V2_BUFFER_SIZE> name{};
    if (api_.DeviceGetName(device, name.data(), name.size()) == NVML_SUCCESS) gpu.name = name.data();
    nvmlMemory_t memory{};
    if (api_.DeviceGetMemoryInfo(device, &memory) == NVML_SUCCESS) gpu.memory_mib = memory.total >> 20;
    nvmlPciInfo_t pci{};
    if (api_.DeviceGetPciInfo != nullptr && api_.DeviceGetPciInfo(device, &pci) == NVML_SUCCESS) {
      gpu.pci_device_id = pci.pciDeviceId;
    }
    unsigned current = 0, pending = 0;
    gpu.mig_capable = api_.DeviceGetMigMode(device, &current, &pending) == NVML_SUCCESS;
    gpu.mig_enabled = gpu.mig_capable && current == NVML_DEVICE_MIG_ENABLE;
    gpu.mig_pending = gpu.mig_capable && pending == NVML_DEVICE_MIG_ENABLE;
    if (gpu.mig_enabled) {
      for (unsigned p = 0; p < NVML_GPU_INSTANCE_PROFILE_COUNT; ++p) {
        nvmlGpuInstanceProfileInfo_t profile{};
        if (api_.DeviceGetGpuInstanceProfileInfo(device, p, &profile) != NVML_SUCCESS) continue;
        std::array<nvmlGpuInstance_t, kMaxInstances> gis{};
        unsigned n = static_cast<unsigned>(gis.size());
        if (api_.DeviceGetGpuInstances(device, profile.id, gis.data(), &n) != NVML_SUCCESS) continue;
        for (unsigned k = 0; k < n; ++k) {
          TESSERA_ASSIGN_OR_RETURN_WRAP(MigInstanceState instance, Describe(device, gis[k]),
                                        "GPU " + std::to_string(i));
          gpu.instances.push_back(std::move(instance));
        }
      }
      std::sort(gpu.instances.begin(), gpu.instances.end(),
                [](const auto& a, const auto& b) { return a.start < b.start; });
    }
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

Result<MigModeChange> NvmlMigDriver::SetMigMode(int gpu_index, bool enabled) {
  std::lock_guard lock(mu_);
  TESSERA_ASSIGN_OR_RETURN(nvmlDevice_t device, Device(gpu_index));
  nvmlReturn_t activation = NVML_SUCCESS;
  nvmlReturn_t rc =
      api_.DeviceSetMigMode(device, enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE, &activation);
  if (rc != NVML_SUCCESS) {
    std::string message = "GPU " + std::to_string(gpu_index) + ": cannot turn MIG mode " +
                          (enabled ? "on" : "off") + ": " + Text(rc);
    if (rc == NVML_ERROR_IN_USE) message += " (processes or instances are on the GPU)";
    return Error{message};
  }
  MigModeChange change;
  change.reset_required = activation == NVML_ERROR_RESET_REQUIRED;
  return change;
}

Result<MigInstanceState> NvmlMigDriver::CreateInstance(int gpu_index, uint32_t profile_id, uint32_t start) {
  std::lock_guard lock(mu_);
  TESSERA_ASSIGN_OR_RETURN(nvmlDevice_t device, Device(gpu_index));
  const std::string where = "GPU " + std::to_string(gpu_index) + ": profile id " +
                            std::to_string(profile_id) + " at slice " + std::to_string(start);
  nvmlGpuInstanceProfileInfo_t profile{};
  bool found = false;
  for (unsigned p = 0; p < NVML_GPU_INSTANCE_PROFILE_COUNT && !found; ++p) {
    found =
        api_.DeviceGetGpuInstanceProfileInfo(device, p, &profile) == NVML_SUCCESS && profile.id == profile_id;
  }
  if (!found) return Error{where + ": NVML knows no such GPU-instance profile on this GPU"};
  // The placement's size is the profile's memory slices, which only its
  // possible placements tell.
  std::array<nvmlGpuInstancePlacement_t, 16> possible{};
  unsigned n = static_cast<unsigned>(possible.size());
  if (nvmlReturn_t rc = api_.DeviceGetGpuInstancePossiblePlacements(device, profile_id, possible.data(), &n);
      rc != NVML_SUCCESS) {
    return Error{where + ": cannot read the profile's placements: " + Text(rc)};
  }
  auto at = std::find_if(possible.begin(), possible.begin() + n,
                         [&](const nvmlGpuInstancePlacement_t& p) { return p.start == start; });
  if (at == possible.begin() + n) return Error{where + ": not one of the profile's placements"};
  nvmlGpuInstancePlacement_t placement = *at;
  nvmlGpuInstance_t gi = nullptr;
  if (nvmlReturn_t rc = api_.DeviceCreateGpuInstanceWithPlacement(device, profile_id, &placement, &gi);
      rc != NVML_SUCCESS) {
    std::string message = where + ": cannot create the GPU instance: " + Text(rc);
    if (rc == NVML_ERROR_INSUFFICIENT_RESOURCES) message += " (the placement overlaps an instance)";
    return Error{message};
  }
  // One compute instance spanning the GPU instance; without it there is no MIG device.
  auto undo = [&](const std::string& why) -> Error {
    api_.GpuInstanceDestroy(gi);
    return Error{where + ": " + why};
  };
  auto ci_index = FullComputeProfile(profile.sliceCount);
  if (!ci_index.ok()) return undo(ci_index.error().message);
  nvmlComputeInstanceProfileInfo_t ci_profile{};
  if (nvmlReturn_t rc = api_.GpuInstanceGetComputeInstanceProfileInfo(
          gi, *ci_index, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_profile);
      rc != NVML_SUCCESS) {
    return undo("no compute-instance profile spans it: " + Text(rc));
  }
  nvmlComputeInstance_t ci = nullptr;
  if (nvmlReturn_t rc = api_.GpuInstanceCreateComputeInstance(gi, ci_profile.id, &ci); rc != NVML_SUCCESS) {
    return undo("cannot create its compute instance: " + Text(rc));
  }
  auto described = Describe(device, gi);
  if (!described.ok()) {
    api_.ComputeInstanceDestroy(ci);
    return undo(described.error().message);
  }
  return described;
}

Status NvmlMigDriver::DestroyInstance(int gpu_index, uint32_t gpu_instance_id) {
  std::lock_guard lock(mu_);
  TESSERA_ASSIGN_OR_RETURN(nvmlDevice_t device, Device(gpu_index));
  const std::string where =
      "GPU " + std::to_string(gpu_index) + ": GPU instance " + std::to_string(gpu_instance_id);
  nvmlGpuInstance_t gi = nullptr;
  nvmlReturn_t rc = api_.DeviceGetGpuInstanceById(device, gpu_instance_id, &gi);
  if (rc == NVML_ERROR_NOT_FOUND) return Status::Ok();  // already gone
  if (rc != NVML_SUCCESS) return Error{where + ": " + Text(rc)};
  for (const ComputeInstance& ci : ComputeInstances(gi)) {
    if (nvmlReturn_t d = api_.ComputeInstanceDestroy(ci.handle); d != NVML_SUCCESS) {
      return Error{where + ": cannot destroy its compute instance: " + Text(d)};
    }
  }
  if (nvmlReturn_t d = api_.GpuInstanceDestroy(gi); d != NVML_SUCCESS) {
    return Error{where + ": cannot destroy it: " + Text(d)};
  }
  return Status::Ok();
}

Status NvmlMigDriver::StartXidWatch(const std::vector<std::string>& gpu_uuids,
                                    std::function<void(const MigXid&)> on_xid) {
  if (watcher_.joinable()) return Status::Ok();
  if (api_.EventSetCreate == nullptr || api_.DeviceRegisterEvents == nullptr ||
      api_.EventSetWait == nullptr) {
    log::Warn("this NVML has no event API: MIG device health will not follow XID errors");
    return Status::Ok();
  }
  std::map<nvmlDevice_t, std::string> uuid_by_handle;
  nvmlEventSet_t set = nullptr;
  {
    std::lock_guard lock(mu_);
    TESSERA_RETURN_IF_ERROR(EnsureInitialized());
    if (nvmlReturn_t rc = api_.EventSetCreate(&set); rc != NVML_SUCCESS) {
      log::Warn("nvmlEventSetCreate failed: MIG device health will not follow XID errors",
                {{"error", Text(rc)}});
      return Status::Ok();
    }
    unsigned count = 0;
    if (api_.DeviceGetCount(&count) == NVML_SUCCESS) {
      for (unsigned i = 0; i < count; ++i) {
        nvmlDevice_t device = nullptr;
        std::array<char, NVML_DEVICE_UUID_V2_BUFFER_SIZE> uuid{};
        if (api_.DeviceGetHandleByIndex(i, &device) != NVML_SUCCESS ||
            api_.DeviceGetUUID(device, uuid.data(), uuid.size()) != NVML_SUCCESS ||
            std::find(gpu_uuids.begin(), gpu_uuids.end(), uuid.data()) == gpu_uuids.end()) {
          continue;
        }
        if (nvmlReturn_t rc = api_.DeviceRegisterEvents(device, nvmlEventTypeXidCriticalError, set);
            rc != NVML_SUCCESS) {
          log::Warn("cannot watch XID events of a MIG GPU", {{"gpu", uuid.data()}, {"error", Text(rc)}});
          continue;
        }
        uuid_by_handle[device] = uuid.data();
      }
    }
  }
  stop_watch_ = false;
  watcher_ = std::thread([this, set, uuid_by_handle, on_xid = std::move(on_xid)] {
    while (!stop_watch_) {
      nvmlEventData_t event{};
      nvmlReturn_t rc = api_.EventSetWait(set, &event, kEventWaitMs);
      if (rc == NVML_ERROR_TIMEOUT) continue;
      if (rc != NVML_SUCCESS) {
        std::this_thread::sleep_for(std::chrono::milliseconds(kEventWaitMs));
        continue;
      }
      if ((event.eventType & nvmlEventTypeXidCriticalError) == 0) continue;
      MigXid xid;
      auto it = uuid_by_handle.find(event.device);
      xid.gpu_uuid = it == uuid_by_handle.end() ? "" : it->second;
      xid.xid = event.eventData;
      xid.gpu_instance_id = event.gpuInstanceId;
      xid.compute_instance_id = event.computeInstanceId;
      on_xid(xid);
    }
    if (api_.EventSetFree != nullptr) api_.EventSetFree(set);
  });
  return Status::Ok();
}

void NvmlMigDriver::StopXidWatch() {
  stop_watch_ = true;
  if (watcher_.joinable()) watcher_.join();
}

}  // namespace tessera::host
