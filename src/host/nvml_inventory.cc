#include "host/nvml_inventory.h"

#include "base/log.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <set>
#include <tuple>

namespace tessera::host {
namespace {

constexpr unsigned kEventWaitMs = 250;
constexpr int64_t kMiB = 1024 * 1024;

using PciKey = std::tuple<unsigned, unsigned, unsigned>;  // domain, bus, device

struct Discovered {
  nvmlDevice_t handle = nullptr;
  core::Gpu gpu;
  bool has_pci = false;
  PciKey pci{};
};

}  // namespace

bool IsCriticalXid(unsigned long long xid) {
  // 48 double-bit ECC; 63/64 ECC page retirement / row remapping events;
  // 74 NVLink error; 79 fallen off the bus; 92 high single-bit ECC rate;
  // 94/95 contained / uncontained ECC errors.
  static const std::set<unsigned long long> critical = {48, 63, 64, 74, 79, 92, 94, 95};
  return critical.count(xid) > 0;
}

int CoresPerSm(int major, int minor) {
  switch (major) {
    case 3:
      return 192;  // Kepler
    case 5:
      return 128;  // Maxwell
    case 6:
      return minor == 0 ? 64 : 128;  // Pascal: P100 64, others 128
    case 7:
      return 64;  // Volta, Turing
    case 8:
      return minor == 0 ? 64 : 128;  // Ampere: A100/A30 64, GA10x/Ada 128
    case 9:
      return 128;  // Hopper
    case 10:
    case 12:
      return 128;  // Blackwell
    default:
      return 0;
  }
}

NvmlInventory::NvmlInventory(const NvmlApi& api, std::unique_ptr<NvmlLibrary> library)
    : library_(std::move(library)), api_(api) {}

NvmlInventory::~NvmlInventory() {
  StopHealthWatch();
  if (initialized_) api_.Shutdown();
}

Status NvmlInventory::EnsureInitialized() {
  if (initialized_) return Status::Ok();
  nvmlReturn_t rc = api_.Init();
  if (rc != NVML_SUCCESS) return Error{"nvmlInit failed: " + NvmlErrorText(api_, rc)};
  initialized_ = true;
  return Status::Ok();
}

Result<std::vector<core::Gpu>> NvmlInventory::Discover() {
  TESSERA_RETURN_IF_ERROR(EnsureInitialized());
  unsigned count = 0;
  if (nvmlReturn_t rc = api_.DeviceGetCount(&count); rc != NVML_SUCCESS) {
    return Error{"nvmlDeviceGetCount failed: " + NvmlErrorText(api_, rc)};
  }

  std::vector<Discovered> found;
  for (unsigned i = 0; i < count; ++i) {
    Discovered d;
    if (nvmlReturn_t rc = api_.DeviceGetHandleByIndex(i, &d.handle); rc != NVML_SUCCESS) {
      log::Warn("GPU skipped: no NVML handle", {{"index", i}, {"error", NvmlErrorText(api_, rc)}});
      continue;
    }
    core::Gpu& gpu = d.gpu;
    std::array<char, NVML_DEVICE_UUID_V2_BUFFER_SIZE> uuid{};
    if (nvmlReturn_t rc = api_.DeviceGetUUID(d.handle, uuid.data(), uuid.size()); rc != NVML_SUCCESS) {
      log::Warn("GPU skipped: no UUID, and devices are keyed by UUID",
                {{"index", i}, {"error", NvmlErrorText(api_, rc)}});
      continue;
    }
    gpu.uuid = uuid.data();
    unsigned index = i;
    if (api_.DeviceGetIndex != nullptr && api_.DeviceGetIndex(d.handle, &index) != NVML_SUCCESS) index = i;
    gpu.index = static_cast<int>(index);

    std::array<char, NVML_DEVICE_NAME_V2_BUFFER_SIZE> name{};
    if (api_.DeviceGetName(d.handle, name.data(), name.size()) == NVML_SUCCESS) gpu.model = name.data();

    nvmlMemory_t memory{};
    if (nvmlReturn_t rc = api_.DeviceGetMemoryInfo(d.handle, &memory); rc == NVML_SUCCESS) {
      gpu.memory_mib = static_cast<int64_t>(memory.total / kMiB);
    } else {
      log::Warn("GPU memory unreadable; marked unhealthy",
                {{"index", i}, {"gpu", gpu.uuid}, {"error", NvmlErrorText(api_, rc)}});
      gpu.healthy = false;
    }

    unsigned cores = 0;
    int major = 0, minor = 0;
    if (api_.DeviceGetNumGpuCores != nullptr && api_.DeviceGetCudaComputeCapability != nullptr &&
        api_.DeviceGetNumGpuCores(d.handle, &cores) == NVML_SUCCESS &&
        api_.DeviceGetCudaComputeCapability(d.handle, &major, &minor) == NVML_SUCCESS) {
      int per_sm = CoresPerSm(major, minor);
      gpu.sm_count = per_sm > 0 ? static_cast<int>(cores) / per_sm : 0;
    }

    unsigned numa = 0;
    if (api_.DeviceGetNumaNodeId != nullptr && api_.DeviceGetNumaNodeId(d.handle, &numa) == NVML_SUCCESS) {
      gpu.numa_node = static_cast<int>(numa);
    }

    unsigned current = 0, pending = 0;
    gpu.mig_capable = api_.DeviceGetMigMode != nullptr &&
                      api_.DeviceGetMigMode(d.handle, &current, &pending) == NVML_SUCCESS;

    nvmlPciInfo_t pci{};
    if (api_.DeviceGetPciInfo != nullptr && api_.DeviceGetPciInfo(d.handle, &pci) == NVML_SUCCESS) {
      d.has_pci = true;
      d.pci = PciKey{pci.domain, pci.bus, pci.device};
    }
    found.push_back(std::move(d));
  }

  // Links: NVLink peers found through each active link's remote PCI address
  // (links to an NVSwitch lead to no GPU and are not listed); then PCIe P2P
  // for pairs with no NVLink.
  std::map<PciKey, size_t> by_pci;
  for (size_t i = 0; i < found.size(); ++i) {
    if (found[i].has_pci) by_pci[found[i].pci] = i;
  }
  for (size_t i = 0; i < found.size(); ++i) {
    std::map<size_t, int> nvlink_lanes;
    if (api_.DeviceGetNvLinkState != nullptr && api_.DeviceGetNvLinkRemotePciInfo != nullptr) {
      for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
        nvmlEnableState_t active = NVML_FEATURE_DISABLED;
        nvmlReturn_t rc = api_.DeviceGetNvLinkState(found[i].handle, link, &active);
        if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_INVALID_ARGUMENT) break;
        if (rc != NVML_SUCCESS || active != NVML_FEATURE_ENABLED) continue;
        nvmlPciInfo_t remote{};
        if (api_.DeviceGetNvLinkRemotePciInfo(found[i].handle, link, &remote) != NVML_SUCCESS) continue;
        auto peer = by_pci.find(PciKey{remote.domain, remote.bus, remote.device});
        if (peer != by_pci.end() && peer->second != i) ++nvlink_lanes[peer->second];
      }
    }
    for (size_t j = 0; j < found.size(); ++j) {
      if (j == i) continue;
      if (auto lanes = nvlink_lanes.find(j); lanes != nvlink_lanes.end()) {
        found[i].gpu.links.push_back(
            core::GpuLink{found[j].gpu.uuid, core::LinkKind::kNvlink, lanes->second});
        continue;
      }
      nvmlGpuP2PStatus_t status = NVML_P2P_STATUS_UNKNOWN;
      if (api_.DeviceGetP2PStatus != nullptr &&
          api_.DeviceGetP2PStatus(found[i].handle, found[j].handle, NVML_P2P_CAPS_INDEX_READ, &status) ==
              NVML_SUCCESS &&
          status == NVML_P2P_STATUS_OK) {
        found[i].gpu.links.push_back(core::GpuLink{found[j].gpu.uuid, core::LinkKind::kPcie, 1});
      }
    }
  }

  std::vector<core::Gpu> gpus;
  uuid_by_handle_.clear();
  for (auto& d : found) {
    uuid_by_handle_[d.handle] = d.gpu.uuid;
    gpus.push_back(std::move(d.gpu));
  }
  return gpus;
}

Status NvmlInventory::StartHealthWatch(HealthCallback on_health) {
  if (watcher_.joinable()) return Status::Ok();
  TESSERA_RETURN_IF_ERROR(EnsureInitialized());
  if (api_.EventSetCreate == nullptr || api_.DeviceRegisterEvents == nullptr ||
      api_.EventSetWait == nullptr) {
    log::Warn("this NVML has no event API: GPU health will not follow XID errors");
    return Status::Ok();
  }
  nvmlEventSet_t set = nullptr;
  if (nvmlReturn_t rc = api_.EventSetCreate(&set); rc != NVML_SUCCESS) {
    log::Warn("nvmlEventSetCreate failed: GPU health will not follow XID errors",
              {{"error", NvmlErrorText(api_, rc)}});
    return Status::Ok();
  }
  int registered = 0;
  for (const auto& [handle, uuid] : uuid_by_handle_) {
    nvmlReturn_t rc = api_.DeviceRegisterEvents(handle, nvmlEventTypeXidCriticalError, set);
    if (rc == NVML_SUCCESS) {
      ++registered;
    } else {
      log::Warn("cannot watch XID events", {{"gpu", uuid}, {"error", NvmlErrorText(api_, rc)}});
    }
  }
  log::Info("watching XID events", {{"gpus", registered}, {"of", uuid_by_handle_.size()}});
  stop_watch_ = false;
  watcher_ = std::thread([this, set, cb = std::move(on_health)] { WatchLoop(set, cb); });
  return Status::Ok();
}

void NvmlInventory::StopHealthWatch() {
  stop_watch_ = true;
  if (watcher_.joinable()) watcher_.join();
}

void NvmlInventory::WatchLoop(nvmlEventSet_t set, HealthCallback on_health) {
  while (!stop_watch_) {
    nvmlEventData_t event{};
    nvmlReturn_t rc = api_.EventSetWait(set, &event, kEventWaitMs);
    if (rc == NVML_ERROR_TIMEOUT) continue;
    if (rc != NVML_SUCCESS) {
      // Not expected; do not spin on a broken event set.
      log::Warn("nvmlEventSetWait failed", {{"error", NvmlErrorText(api_, rc)}});
      std::this_thread::sleep_for(std::chrono::milliseconds(kEventWaitMs));
      continue;
    }
    if ((event.eventType & nvmlEventTypeXidCriticalError) == 0) continue;
    const unsigned long long xid = event.eventData;
    if (!IsCriticalXid(xid)) {
      log::Info("XID reported (application-level, the GPU stays healthy)", {{"xid", xid}});
      continue;
    }
    const std::string reason = "XID " + std::to_string(xid);
    auto it = uuid_by_handle_.find(event.device);
    if (it != uuid_by_handle_.end()) {
      log::Warn("critical XID; marking the GPU unhealthy", {{"gpu", it->second}, {"reason", reason}});
      on_health(it->second, false, reason);
    } else {
      // The event names no GPU we know: be safe and take every GPU out.
      log::Warn("critical XID on an unknown device; marking every GPU unhealthy", {{"reason", reason}});
      for (const auto& [handle, uuid] : uuid_by_handle_) on_health(uuid, false, reason);
    }
  }
  if (api_.EventSetFree != nullptr) api_.EventSetFree(set);
}

Result<std::vector<GpuSample>> NvmlInventory::Sample() {
  TESSERA_RETURN_IF_ERROR(EnsureInitialized());
  std::vector<GpuSample> samples;
  for (const auto& [handle, uuid] : uuid_by_handle_) {
    GpuSample sample;
    sample.uuid = uuid;
    nvmlMemory_t memory{};
    nvmlReturn_t rc = api_.DeviceGetMemoryInfo(handle, &memory);
    if (rc == NVML_ERROR_GPU_IS_LOST) {
      sample.lost = true;
      samples.push_back(std::move(sample));
      continue;
    }
    if (rc == NVML_SUCCESS) {
      sample.memory_total_bytes = memory.total;
      sample.memory_used_bytes = memory.used;
    }
    if (api_.DeviceGetUtilizationRates != nullptr) {
      nvmlUtilization_t utilization{};
      if (api_.DeviceGetUtilizationRates(handle, &utilization) == NVML_SUCCESS) {
        sample.utilization_percent = static_cast<int>(utilization.gpu);
      }
    }
    if (api_.DeviceGetComputeRunningProcesses != nullptr) {
      // The list can grow between the size query and the read: retry a few
      // times with room to spare.
      std::vector<nvmlProcessInfo_t> infos(64);
      for (int attempt = 0; attempt < 4; ++attempt) {
        unsigned count = static_cast<unsigned>(infos.size());
        rc = api_.DeviceGetComputeRunningProcesses(handle, &count, infos.data());
        if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
          infos.resize(static_cast<size_t>(count) + 16);
          continue;
        }
        if (rc == NVML_SUCCESS) {
          sample.processes_known = true;
          for (unsigned i = 0; i < count; ++i) {
            GpuProcess p;
            p.pid = infos[i].pid;
            // NVML_VALUE_NOT_AVAILABLE (all ones) when the driver cannot tell.
            p.used_bytes = infos[i].usedGpuMemory == ~0ULL ? 0 : infos[i].usedGpuMemory;
            sample.processes.push_back(p);
          }
        }
        break;
      }
    }
    if (sample.processes_known) AddProcessUtilization(handle, sample);
    samples.push_back(std::move(sample));
  }
  return samples;
}

void NvmlInventory::AddProcessUtilization(nvmlDevice_t handle, GpuSample& sample) {
  if (api_.DeviceGetProcessUtilization == nullptr) return;
  // The samples since the previous call's newest (NVML keeps a few seconds of
  // them; 0 = what it has). NOT_FOUND: no process ran a kernel since then.
  unsigned long long& last_seen = utilization_seen_us_[handle];
  unsigned count = 0;
  nvmlReturn_t rc = api_.DeviceGetProcessUtilization(handle, nullptr, &count, last_seen);
  std::vector<nvmlProcessUtilizationSample_t> buffer;
  if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
    buffer.resize(static_cast<size_t>(count) + 16);
    count = static_cast<unsigned>(buffer.size());
    rc = api_.DeviceGetProcessUtilization(handle, buffer.data(), &count, last_seen);
  }
  if (rc == NVML_ERROR_NOT_FOUND)
    count = 0;
  else if (rc != NVML_SUCCESS)
    return;  // unknown: every process stays at -1
  // Several samples of one process (one per driver sampling period): their mean.
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> by_pid;  // pid -> (sum, samples)
  for (unsigned i = 0; i < count && i < buffer.size(); ++i) {
    auto& [sum, n] = by_pid[buffer[i].pid];
    sum += buffer[i].smUtil;
    ++n;
    if (buffer[i].timeStamp > last_seen) last_seen = buffer[i].timeStamp;
  }
  for (GpuProcess& p : sample.processes) {
    auto it = by_pid.find(p.pid);
    p.sm_util_percent = it == by_pid.end() ? 0 : static_cast<int>(it->second.first / it->second.second);
    if (it != by_pid.end()) by_pid.erase(it);
  }
  // Busy, yet not in the compute list (it ended, or the lists were read a
  // moment apart): listed all the same, holding no memory.
  for (const auto& [pid, sum_n] : by_pid) {
    GpuProcess p;
    p.pid = pid;
    p.sm_util_percent = static_cast<int>(sum_n.first / sum_n.second);
    sample.processes.push_back(p);
  }
}

}  // namespace tessera::host
