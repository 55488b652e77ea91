// NVML's view of the processes using a GPU: running compute processes (v1,
// _v2, _v3: pid and device memory, and for a MIG device the processes in its
// GPU instance with their instance ids; an MPS server with its clients'
// memory), MPS clients (nvmlDeviceGetMPSComputeRunningProcesses), graphics
// processes (none), per-process utilisation from the busy intervals in the
// shared state, and process names (read in TESSERA_SIM_PROC). Dead processes are reclaimed first, so a killed
// process's memory is gone by the next query.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

#include "sim/nvml_internal.h"

namespace tessera::sim::nvml {
namespace {

// Which processes a list names: compute processes (ordinary CUDA processes and
// MPS servers, which hold their clients' memory), MPS clients, or graphics
// processes (there are none on a simulated GPU).
enum class Listed { kCompute, kMpsClients, kGraphics };

template <typename Info>
nvmlReturn_t RunningProcesses(nvmlDevice_t device, unsigned int* infoCount, Info* infos, Listed listed) {
  if (infoCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    const int gpu = d.gpu;
    SimState& st = *Library().state;
    StateLock lock(st);
    st.ReclaimDeadLocked();
    // On a MIG device handle: the processes in its GPU instance; on a GPU a
    // container sees through some of its MIG devices, those in their instances.
    std::vector<uint32_t> instances = VisibleGpuInstanceIds(gpu);
    if (d.gi >= 0) instances = {Gpu(gpu).gis[d.gi].id};
    std::vector<std::pair<const ProcessRecord*, uint64_t>> procs;  // with the memory it holds
    for (const ProcessRecord& p : File()->processes) {
      if (!p.in_use || (p.contexts[gpu] == 0 && p.used_bytes[gpu] == 0)) continue;
      if (!instances.empty() &&
          std::find(instances.begin(), instances.end(), p.gpu_instance[gpu]) == instances.end()) {
        continue;
      }
      if (listed == Listed::kGraphics || (p.mps_role == kMpsClient) != (listed == Listed::kMpsClients))
        continue;
      uint64_t used = p.used_bytes[gpu];
      if (p.mps_role == kMpsServer) {
        for (const ProcessRecord& c : File()->processes) {
          if (c.in_use && c.mps_role == kMpsClient && c.mps_server_pid == p.pid) used += c.used_bytes[gpu];
        }
      }
      procs.emplace_back(&p, used);
    }
    if (infos == nullptr || *infoCount < procs.size()) {
      const bool empty_ok = procs.empty();
      *infoCount = static_cast<unsigned>(procs.size());
      return empty_ok ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (size_t i = 0; i < procs.size(); ++i) {
      const ProcessRecord& p = *procs[i].first;
      std::memset(&infos[i], 0, sizeof(Info));
      infos[i].pid = static_cast<unsigned>(p.pid);
      infos[i].usedGpuMemory = procs[i].second;
      if constexpr (!std::is_same_v<Info, nvmlProcessInfo_v1_t>) {
        const uint32_t gi = p.gpu_instance[gpu];
        infos[i].gpuInstanceId = gi != 0 ? gi : kNoInstance;
        infos[i].computeInstanceId = gi != 0 ? p.compute_instance[gpu] : kNoInstance;
      }
    }
    *infoCount = static_cast<unsigned>(procs.size());
    return NVML_SUCCESS;
  });
}

}  // namespace

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char* name, unsigned int length) {
  return Guard([&]() -> nvmlReturn_t {
    if (name == nullptr || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
    char path[512];
    std::snprintf(path, sizeof(path), "%s/%u/comm", ProcRoot(), pid);
    FILE* f = std::fopen(path, "r");
    if (f == nullptr) return NVML_ERROR_NOT_FOUND;
    char buf[256] = {};
    if (std::fgets(buf, sizeof(buf), f) == nullptr) buf[0] = '\0';
    std::fclose(f);
    buf[std::strcspn(buf, "\n")] = '\0';
    std::snprintf(name, length, "%s", buf);
    return NVML_SUCCESS;
  });
}

// The three ABI versions of a process list: _v3 and _v2 (nvmlProcessInfo_t
// and its _v2 twin) and the unsuffixed v1 (nvmlProcessInfo_v1_t).
#define PROCESS_LIST_ENTRY_POINTS(name, listed)                                                       \
  nvmlReturn_t name##_v3(nvmlDevice_t device, unsigned int* infoCount, nvmlProcessInfo_t* infos) {    \
    return RunningProcesses(device, infoCount, infos, listed);                                        \
  }                                                                                                   \
  nvmlReturn_t name##_v2(nvmlDevice_t device, unsigned int* infoCount, nvmlProcessInfo_v2_t* infos) { \
    return RunningProcesses(device, infoCount, infos, listed);                                        \
  }                                                                                                   \
  nvmlReturn_t name(nvmlDevice_t device, unsigned int* infoCount, nvmlProcessInfo_v1_t* infos) {      \
    return RunningProcesses(device, infoCount, infos, listed);                                        \
  }

PROCESS_LIST_ENTRY_POINTS(nvmlDeviceGetComputeRunningProcesses, Listed::kCompute)
PROCESS_LIST_ENTRY_POINTS(nvmlDeviceGetMPSComputeRunningProcesses, Listed::kMpsClients)
PROCESS_LIST_ENTRY_POINTS(nvmlDeviceGetGraphicsRunningProcesses, Listed::kGraphics)

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* processSamplesCount,
                                             unsigned long long lastSeenTimeStamp) {
  if (processSamplesCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    if (d.gi >= 0) return NVML_ERROR_NOT_SUPPORTED;
    SimState& st = *Library().state;
    StateLock lock(st);
    const int64_t now_ns = MonotonicNs();
    const int64_t now_us = RealtimeUs();
    // Window: since lastSeenTimeStamp (CPU time in µs), at most 10 s back, and
    // the last second when the caller has seen nothing yet.
    int64_t from_ns = now_ns - kUtilWindowNs;
    if (lastSeenTimeStamp > 0) {
      const int64_t back_us = now_us - static_cast<int64_t>(lastSeenTimeStamp);
      if (back_us <= 0) {
        *processSamplesCount = 0;
        return NVML_ERROR_NOT_FOUND;
      }
      from_ns = now_ns - std::min<int64_t>(back_us * 1000, 10 * kUtilWindowNs);
    }
    const auto busy = st.BusyByProcessLocked(d.gpu, from_ns, now_ns);
    if (busy.empty()) {
      *processSamplesCount = 0;
      return NVML_ERROR_NOT_FOUND;
    }
    if (utilization == nullptr || *processSamplesCount < busy.size()) {
      *processSamplesCount = static_cast<unsigned>(busy.size());
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    const int64_t window = now_ns - from_ns;
    unsigned i = 0;
    for (const auto& [pid, ns] : busy) {
      nvmlProcessUtilizationSample_t& s = utilization[i++];
      s.pid = static_cast<unsigned>(pid);
      s.timeStamp = static_cast<unsigned long long>(now_us);
      s.smUtil = static_cast<unsigned>(std::min<int64_t>(100, (ns * 100 + window / 2) / window));
      s.memUtil = s.smUtil / 2;
      s.encUtil = 0;
      s.decUtil = 0;
    }
    *processSamplesCount = i;
    return NVML_SUCCESS;
  });
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::nvml
