// NVML events: event sets, and the XID errors they deliver. `tessera sim
// inject-xid` appends to a GPU's XID ring in the shared state; a set registered
// on the GPU delivers, in order, the XIDs injected after its registration,
// polling every 5 ms until the caller's timeout (NVML_ERROR_TIMEOUT after it).
#include <time.h>

#include <algorithm>

#include "sim/nvml_internal.h"

namespace tessera::sim::nvml {
namespace {

constexpr unsigned long long kSupportedEvents =
    nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError |
    nvmlEventTypePState | nvmlEventTypeClock;

// Delivers the oldest XID the set has not delivered yet into `data`; false if
// there is none. The caller holds the state lock.
bool NextXidLocked(nvmlEventSet_t set, nvmlEventData_t* data) {
  for (auto& reg : set->regs) {
    if (!(reg.types & nvmlEventTypeXidCriticalError)) continue;
    const GpuRecord& g = Gpu(reg.gpu);
    if (g.xid_count <= reg.seen_xids) continue;
    // Events older than the ring holds are lost, as a slow reader loses them.
    if (g.xid_count - reg.seen_xids > static_cast<uint64_t>(kMaxXidEvents)) {
      reg.seen_xids = g.xid_count - kMaxXidEvents;
    }
    const XidRecord& x = g.xids[reg.seen_xids % kMaxXidEvents];
    ++reg.seen_xids;
    data->device = &Library().devices[reg.gpu];
    data->eventType = nvmlEventTypeXidCriticalError;
    data->eventData = x.xid;
    data->gpuInstanceId = x.gpu_instance;
    data->computeInstanceId = x.compute_instance;
    return true;
  }
  return false;
}

}  // namespace

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry([&] {
    auto* s = new nvmlEventSet_st();
    s->magic = kSetMagic;
    *set = s;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* eventTypes) {
  return DeviceValue(device, eventTypes, [&](const nvmlDevice_st&) { return kSupportedEvents; });
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set) {
  if (set == nullptr || set->magic != kSetMagic) return NVML_ERROR_INVALID_ARGUMENT;
  return NvmlEntry(device, [&](const nvmlDevice_st& d) {
    if ((eventTypes & ~kSupportedEvents) != 0) return NVML_ERROR_NOT_SUPPORTED;
    StateLock lock(*Library().state);
    // Only events that happen from now on are delivered.
    set->regs.push_back({d.gpu, eventTypes, Gpu(d.gpu).xid_count});
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms) {
  if (set == nullptr || set->magic != kSetMagic || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return Guard([&]() -> nvmlReturn_t {
    const int64_t deadline = MonotonicNs() + static_cast<int64_t>(timeoutms) * 1000000LL;
    for (;;) {
      // NVML_ERROR_TIMEOUT here: nothing to deliver yet.
      const nvmlReturn_t r = NvmlEntry([&] {
        StateLock lock(*Library().state);
        return NextXidLocked(set, data) ? NVML_SUCCESS : NVML_ERROR_TIMEOUT;
      });
      if (r != NVML_ERROR_TIMEOUT) return r;
      const int64_t now = MonotonicNs();
      if (now >= deadline) return NVML_ERROR_TIMEOUT;
      const int64_t nap = std::min<int64_t>(deadline - now, 5000000);
      timespec ts{0, static_cast<long>(nap)};
      nanosleep(&ts, nullptr);
    }
  });
}
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms) {
  return nvmlEventSetWait_v2(set, data, timeoutms);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  if (set == nullptr || set->magic != kSetMagic) return NVML_ERROR_INVALID_ARGUMENT;
  return Guard([&]() -> nvmlReturn_t {
    set->magic = 0;
    delete set;
    return NVML_SUCCESS;
  });
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::nvml
