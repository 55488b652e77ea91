// NVML's view of the processes using a GPU: running compute processes (v1,
// _v2, _v3: pid and device memory, and for a MIG device the processes in its
// GPU instance with their instance ids; graphics lists are empty), per-process
// utilisation from the busy intervals in the shared state, and process names
// (read in TESSERA_SIM_PROC). Dead processes are reclaimed first, so a killed
// process's memory is gone by the next query.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

#include "sim/nvml_internal.h"

namespace tessera::sim::nvml {
namespace {

template <typename Info>
nvmlReturn_t RunningProcesses(nvmlDevice_t device, unsigned int* infoCount, Info* infos) {
  if (infoCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    const int gpu = d.gpu;
    SimState& st = *Library().state;
    StateLock lock(st);
    st.ReclaimDeadLocked();
    // On a MIG device handle: the processes in its GPU instance.
    const uint32_t gi_id = d.gi >= 0 ? Gpu(gpu).gis[d.gi].id : 0;
    std::vector<const ProcessRecord*> procs;
    for (const ProcessRecord& p : File()->processes) {
      if (!p.in_use || (p.contexts[gpu] == 0 && p.used_bytes[gpu] == 0)) continue;
      if (gi_id != 0 && p.gpu_instance[gpu] != gi_id) continue;
      procs.push_back(&p);
    }
    if (infos == nullptr || *infoCount < procs.size()) {
      const bool empty_ok = procs.empty();
      *infoCount = static_cast<unsigned>(procs.size());
      return empty_ok ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (size_t i = 0; i < procs.size(); ++i) {
      std::memset(&infos[i], 0, sizeof(Info));
      infos[i].pid = static_cast<unsigned>(procs[i]->pid);
      infos[i].usedGpuMemory = procs[i]->used_bytes[gpu];
      if constexpr (!std::is_same_v<Info, nvmlProcessInfo_v1_t>) {
        const uint32_t gi = procs[i]->gpu_instance[gpu];
        infos[i].gpuInstanceId = gi != 0 ? gi : kNoInstance;
        infos[i].computeInstanceId = gi != 0 ? procs[i]->compute_instance[gpu] : kNoInstance;
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

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos) {
  return RunningProcesses(device, infoCount, infos);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_v2_t* infos) {
  return RunningProcesses(device, infoCount, infos);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                  nvmlProcessInfo_v1_t* infos) {
  return RunningProcesses(device, infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                      nvmlProcessInfo_t* infos) {
  (void)infos;
  if (infoCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st&) {
    *infoCount = 0;  // no graphics contexts on a simulated GPU
    return NVML_SUCCESS;
  });
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                      nvmlProcessInfo_v2_t* infos) {
  return nvmlDeviceGetGraphicsRunningProcesses_v3(device, infoCount,
                                                  reinterpret_cast<nvmlProcessInfo_t*>(infos));
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                   nvmlProcessInfo_v1_t* infos) {
  return nvmlDeviceGetGraphicsRunningProcesses_v3(device, infoCount,
                                                  reinterpret_cast<nvmlProcessInfo_t*>(infos));
}

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
