// NVML telemetry of a GPU: utilisation (the share of the last second its
// timeline was busy, from the busy intervals in the shared state; memory
// utilisation reported as half of it) and GPU utilisation samples, and what
// follows from utilisation on a simulated GPU: temperature (32 °C idle to
// 70 °C busy), power (15 % to 85 % of the limit), energy, P-state and clocks
// (idle SM clock 210 MHz, the model's maximum when busy). Fans: not supported.
#include <algorithm>

#include "sim/nvml_internal.h"

namespace tessera::sim::nvml {
namespace {

// Device time of all processes' kernels on `gpu` within [from, to). The
// caller holds the state lock.
int64_t BusyNsLocked(int gpu, int64_t from, int64_t to) {
  int64_t busy = 0;
  for (auto& [pid, ns] : Library().state->BusyByProcessLocked(gpu, from, to)) busy += ns;
  return busy;
}

// Device utilisation over the last second, 0..1 (drives temperature, power, clocks).
double RecentUtil(int gpu) {
  StateLock lock(*Library().state);
  const int64_t now = MonotonicNs();
  return std::min(1.0, static_cast<double>(BusyNsLocked(gpu, now - 1000000000LL, now)) / 1e9);
}

unsigned MaxClock(int gpu, nvmlClockType_t type) {
  const GpuModel& m = ModelOf(gpu);
  switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
      return m.sm_clock_mhz;
    case NVML_CLOCK_MEM:
      return m.mem_clock_mhz;
    case NVML_CLOCK_VIDEO:
      return m.sm_clock_mhz * 9 / 10;
    default:
      return 0;
  }
}

}  // namespace

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

// ----- utilisation -----
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    if (d.gi >= 0) return NVML_ERROR_NOT_SUPPORTED;
    StateLock lock(*Library().state);
    const int64_t now = MonotonicNs();
    const int64_t busy = BusyNsLocked(d.gpu, now - kUtilWindowNs, now);
    utilization->gpu =
        static_cast<unsigned>(std::min<int64_t>(100, (busy * 100 + kUtilWindowNs / 2) / kUtilWindowNs));
    utilization->memory = utilization->gpu / 2;  // a proxy: kernels touch memory (docs/sim.md)
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type,
                                  unsigned long long lastSeenTimeStamp, nvmlValueType_t* sampleValType,
                                  unsigned int* sampleCount, nvmlSample_t* samples) {
  if (sampleValType == nullptr || sampleCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (type != NVML_GPU_UTILIZATION_SAMPLES) return NVML_ERROR_NOT_SUPPORTED;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    // One sample per 1/6 s over the last 2 s (NVML's GPU utilisation sampling rate).
    constexpr int kSamples = 12;
    constexpr int64_t kPeriod = kUtilWindowNs / 6;
    *sampleValType = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (samples == nullptr) {
      *sampleCount = kSamples;
      return NVML_SUCCESS;
    }
    StateLock lock(*Library().state);
    const int64_t now_ns = MonotonicNs(), now_us = RealtimeUs();
    unsigned n = 0;
    for (int k = kSamples - 1; k >= 0 && n < *sampleCount; --k) {
      const int64_t end = now_ns - k * kPeriod, start = end - kPeriod;
      const unsigned long long ts = static_cast<unsigned long long>(now_us - k * kPeriod / 1000);
      if (ts <= lastSeenTimeStamp) continue;
      const int64_t busy = BusyNsLocked(d.gpu, start, end);
      samples[n].timeStamp = ts;
      samples[n].sampleValue.uiVal = static_cast<unsigned>(std::min<int64_t>(100, busy * 100 / kPeriod));
      ++n;
    }
    *sampleCount = n;
    return n == 0 ? NVML_ERROR_NOT_FOUND : NVML_SUCCESS;
  });
}

// ----- temperature, power -----
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int* temp) {
  if (temp == nullptr || sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    *temp = 32 + static_cast<unsigned>(38 * RecentUtil(d.gpu));
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
                                               unsigned int* temp) {
  if (temp == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st&) {
    switch (thresholdType) {
      case NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
        *temp = 92;
        break;
      case NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
        *temp = 89;
        break;
      case NVML_TEMPERATURE_THRESHOLD_MEM_MAX:
        *temp = 95;
        break;
      case NVML_TEMPERATURE_THRESHOLD_GPU_MAX:
        *temp = 87;
        break;
      default:
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int* speed) {
  if (speed == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  // Passively cooled parts.
  return NvmlEntry(device, [](const nvmlDevice_st&) { return NVML_ERROR_NOT_SUPPORTED; });
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
  if (power == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    const double limit = ModelOf(d.gpu).power_limit_w * 1000.0, idle = limit * 0.15;
    *power = static_cast<unsigned>(idle + (limit * 0.85 - idle) * RecentUtil(d.gpu));
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int* limit) {
  return DeviceValue(device, limit,
                     [&](const nvmlDevice_st& d) { return ModelOf(d.gpu).power_limit_w * 1000; });
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* limit) {
  return nvmlDeviceGetPowerManagementLimit(device, limit);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* energy) {
  if (energy == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    // Idle power since boot (CLOCK_MONOTONIC), plus the busy time's extra.
    const double idle_w = ModelOf(d.gpu).power_limit_w * 0.15;
    *energy = static_cast<unsigned long long>(idle_w * static_cast<double>(MonotonicNs()) / 1e6);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t* pState) {
  return DeviceValue(device, pState, [&](const nvmlDevice_st& d) {
    return RecentUtil(d.gpu) > 0 ? NVML_PSTATE_0 : NVML_PSTATE_8;
  });
}

// ----- clocks -----
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock) {
  if (clock == nullptr || type >= NVML_CLOCK_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    *clock = MaxClock(d.gpu, type);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock) {
  if (clock == nullptr || type >= NVML_CLOCK_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    // Boost clocks while busy, idle clocks otherwise; memory runs at its clock.
    const bool busy = RecentUtil(d.gpu) > 0;
    *clock = type == NVML_CLOCK_MEM || busy ? MaxClock(d.gpu, type) : 210;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t clockType, nvmlClockId_t clockId,
                                unsigned int* clockMHz) {
  if (clockId == NVML_CLOCK_ID_CURRENT) return nvmlDeviceGetClockInfo(device, clockType, clockMHz);
  return nvmlDeviceGetMaxClockInfo(device, clockType, clockMHz);
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::nvml
