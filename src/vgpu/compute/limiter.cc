#include "vgpu/compute/limiter.h"

#include <dlfcn.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>

#include "contract/container_contract.h"
#include "vgpu/compute/controller.h"
#include "vgpu/compute/estimator.h"
#include "vgpu/compute/neighbours.h"
#include "vgpu/compute/reconciler.h"
#include "vgpu/log.h"
#include "vgpu/runtime.h"

namespace tessera::vgpu::compute {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the ticket futex waits on the low half of a 64-bit word");

// Driver and NVML entry points the limiter calls (not intercepted by libvgpu).
using CtxGetCurrentFn = CUresult (*)(CUcontext*);
using EventCreateFn = CUresult (*)(CUevent*, unsigned int);
using EventRecordFn = CUresult (*)(CUevent, CUstream);
using EventQueryFn = CUresult (*)(CUevent);
using EventElapsedFn = CUresult (*)(float*, CUevent, CUevent);
using StreamIsCapturingFn = CUresult (*)(CUstream, CUstreamCaptureStatus*);
using ProcessUtilizationFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlProcessUtilizationSample_t*, unsigned int*,
                                              unsigned long long);

struct Driver {
  CtxGetCurrentFn ctx_get_current = nullptr;
  EventCreateFn event_create = nullptr;
  EventRecordFn event_record = nullptr;
  EventQueryFn event_query = nullptr;
  EventElapsedFn event_elapsed = nullptr;
  StreamIsCapturingFn stream_is_capturing = nullptr;
  bool can_sample() const {
    return ctx_get_current && event_create && event_record && event_query && event_elapsed &&
           stream_is_capturing;
  }
};

enum SlotState : int { kSlotFree = 0, kSlotRecording = 1, kSlotInFlight = 2 };

struct SampleSlot {
  std::atomic<int> state{kSlotFree};
  CUcontext ctx = nullptr;  // the events' context
  CUevent start = nullptr;
  CUevent end = nullptr;
  Estimates::Entry* entry = nullptr;
  int device = -1;
};

constexpr int kSampleSlots = 8;
constexpr uint64_t kPollIntervalNs = 200'000;
constexpr uint64_t kNeighboursTtlNs = 200'000'000;
constexpr uint64_t kNeighbourWindowUs = 500'000;  // who used the device in the last half second
constexpr int kMaxProcessSamples = 128;

struct NeighbourCache {
  std::mutex mu;
  Neighbours value;         // guarded by mu
  uint64_t fetched_ns = 0;  // guarded by mu; 0 = never
  nvmlDevice_t handle = nullptr;
  bool handle_tried = false;
};

// Reconciliation with the driver's own accounting of this process's device
// time (NVML per-process utilisation), per device. See reconcile().
struct DeviceReconciliation {
  std::mutex mu;
  uint64_t last_us = 0;   // guarded by mu; CLOCK_REALTIME µs of the last reading, 0 = none
  Reconciler arithmetic;  // reconcile()/skip() guarded by mu; scale() lock-free
  std::atomic<uint64_t> next_ns{0};
};

struct State {
  Runtime* rt = nullptr;
  Driver driver;
  Policy policy = Policy::kDefault;
  bool low_priority = false;
  Controller controllers[kMaxDevices];
  NeighbourCache neighbours[kMaxDevices];
  DeviceReconciliation reconcilers[kMaxDevices];
  // Whether NVML has shown our pid (as it names us: the slot's host_pid when
  // known, else getpid()) among a device's users: only then is
  // reconciliation trusted.
  std::atomic<bool> nvml_sees_me{false};
  SampleSlot slots[kSampleSlots];
  std::atomic<int> in_flight{0};
  std::atomic<uint64_t> last_poll_ns{0};
  std::mutex poll_mu;
  Estimates estimates;
  bool nvml_ok = false;
  ProcessUtilizationFn process_utilization = nullptr;
};

// 0 = not decided yet, 1 = off (no quota, or disabled), 2 = on.
std::atomic<int> g_mode{0};
pthread_once_t g_once = PTHREAD_ONCE_INIT;
alignas(State) unsigned char g_state_storage[sizeof(State)];
State* g_state = nullptr;

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t realtime_us() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000ull + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

void charge_process(State& s, int device, int64_t delta) {
  int slot = s.rt->region.slot_index();
  if (slot < 0 || delta == 0) return;
  std::atomic<uint64_t>& used = s.rt->region.raw()->processes[slot].gpu_time_used_ns[device];
  uint64_t v = used.load(std::memory_order_relaxed), next;
  do {
    next = delta >= 0 ? v + static_cast<uint64_t>(delta)
                      : (v > static_cast<uint64_t>(-delta) ? v - static_cast<uint64_t>(-delta) : 0);
  } while (!used.compare_exchange_weak(v, next, std::memory_order_relaxed));
}

// Reads completed samples and applies their corrections. Never blocks: a
// sample whose end event has not completed is left for later.
void poll_samples(State& s, uint64_t now, bool force) {
  if (s.in_flight.load(std::memory_order_acquire) == 0) return;
  if (!force && now - s.last_poll_ns.load(std::memory_order_relaxed) < kPollIntervalNs) return;
  std::unique_lock<std::mutex> lock(s.poll_mu, std::try_to_lock);
  if (!lock.owns_lock()) return;
  s.last_poll_ns.store(now, std::memory_order_relaxed);
  for (SampleSlot& slot : s.slots) {
    if (slot.state.load(std::memory_order_acquire) != kSlotInFlight) continue;
    CUresult q = s.driver.event_query(slot.end);
    if (q == CUDA_ERROR_NOT_READY) continue;
    float ms = 0;
    if (q == CUDA_SUCCESS && s.driver.event_elapsed(&ms, slot.start, slot.end) == CUDA_SUCCESS && ms >= 0) {
      int64_t correction =
          Estimates::on_sample(*slot.entry, static_cast<uint64_t>(static_cast<double>(ms) * 1e6));
      // With the driver's accounting available, reconcile() corrects the
      // totals; the samples then only weigh kernels against each other.
      if (!s.nvml_sees_me.load(std::memory_order_relaxed)) {
        s.controllers[slot.device].charge(correction);
        charge_process(s, slot.device, correction);
      }
    }
    Estimates::sample_done(*slot.entry);
    slot.state.store(kSlotFree, std::memory_order_release);
    s.in_flight.fetch_sub(1, std::memory_order_acq_rel);
  }
}

// Every Reconciler::kIntervalNs, compares what this process was charged on
// `device` with the device time the driver accounted to it over the same
// interval (NVML per-process utilisation, which counts only this process's
// kernels, not the neighbours' work its kernels waited behind), charges the
// difference, and moves the scale applied to launch estimates towards
// measured / charged. Event samples alone over-charge when every kernel
// queues behind another tenant's (lock-step tenants); this fixes that. Trusted
// only once NVML has listed our pid (host_pid, see region_layout.h); otherwise the
// event corrections stand alone.
void reconcile(State& s, int device, uint64_t now) {
  DeviceReconciliation& r = s.reconcilers[device];
  if (!s.nvml_ok || now < r.next_ns.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> lock(r.mu, std::try_to_lock);
  if (!lock.owns_lock() || now < r.next_ns.load(std::memory_order_relaxed)) return;
  r.next_ns.store(now + Reconciler::kIntervalNs, std::memory_order_relaxed);
  nvmlDevice_t handle = s.neighbours[device].handle;
  int slot = s.rt->region.slot_index();
  if (handle == nullptr || slot < 0) return;
  uint64_t charged_total =
      s.rt->region.raw()->processes[slot].gpu_time_used_ns[device].load(std::memory_order_relaxed);
  uint64_t cur_us = realtime_us();
  uint64_t since_us = r.last_us;
  r.last_us = cur_us;
  if (since_us == 0 || cur_us <= since_us) {
    r.arithmetic.skip(charged_total);
    return;
  }
  nvmlProcessUtilizationSample_t samples[kMaxProcessSamples];
  unsigned int count = kMaxProcessSamples;
  nvmlReturn_t rc = s.process_utilization(handle, samples, &count, since_us);
  if (rc == NVML_ERROR_NOT_FOUND) {
    count = 0;
  } else if (rc != NVML_SUCCESS) {
    r.arithmetic.skip(charged_total);  // this interval is not reconciled
    return;
  }
  uint32_t me = s.rt->region.own_driver_pid();  // NVML's name for us: the host pid when known
  uint64_t sum = 0, n = 0;
  for (unsigned int i = 0; i < count && i < kMaxProcessSamples; ++i) {
    if (samples[i].pid != me) continue;
    sum += samples[i].smUtil;
    ++n;
  }
  if (n > 0) s.nvml_sees_me.store(true, std::memory_order_relaxed);
  if (!s.nvml_sees_me.load(std::memory_order_relaxed)) {
    r.arithmetic.skip(charged_total);
    return;
  }
  double window_ns = static_cast<double>(cur_us - since_us) * 1000.0;
  uint64_t measured =
      n > 0 ? static_cast<uint64_t>(static_cast<double>(sum) / static_cast<double>(n) / 100.0 * window_ns)
            : 0;
  int64_t correction = r.arithmetic.reconcile(charged_total, measured);
  s.controllers[device].charge(correction);
  charge_process(s, device, correction);
}

Neighbours query_neighbours(State& s, int device) {
  Runtime& rt = *s.rt;
  NeighbourCache& c = s.neighbours[device];
  if (!s.nvml_ok || s.process_utilization == nullptr) return Neighbours{};
  if (!c.handle_tried) {
    c.handle_tried = true;
    if (rt.nvml.nvmlDeviceGetHandleByUUID(rt.region.raw()->devices[device].uuid, &c.handle) != NVML_SUCCESS)
      c.handle = nullptr;
  }
  if (c.handle == nullptr) return Neighbours{};
  nvmlProcessUtilizationSample_t samples[kMaxProcessSamples];
  unsigned int count = kMaxProcessSamples;
  uint64_t since = realtime_us() - kNeighbourWindowUs;
  nvmlReturn_t r = s.process_utilization(c.handle, samples, &count, since);
  if (r == NVML_ERROR_NOT_FOUND) {
    Neighbours n;
    n.known = true;
    return n;
  }
  if (r != NVML_SUCCESS) return Neighbours{};
  ProcessShare shares[kMaxProcessSamples];
  int n_shares = 0;
  for (unsigned int i = 0; i < count && i < kMaxProcessSamples; ++i)
    shares[n_shares++] = ProcessShare{samples[i].pid, samples[i].smUtil};
  uint32_t own[256];
  int n_own = 0;
  Region* region = rt.region.raw();
  for (uint32_t i = 0; i < kRegionMaxProcesses && n_own < 256; ++i) {
    if (region->processes[i].state.load(std::memory_order_acquire) == kSlotActive)
      own[n_own++] = rt.region.slot_driver_pid(i);  // host pid when known, as NVML reports it
  }
  return summarise_neighbours(shares, n_shares, own, n_own);
}

class RealEnvironment : public Environment {
 public:
  RealEnvironment(State& s, int device) : s_(s), device_(device) {}
  uint64_t now_ns() override { return monotonic_ns(); }
  void sleep_until_ns(uint64_t deadline) override {
    timespec ts{static_cast<time_t>(deadline / 1'000'000'000ull),
                static_cast<long>(deadline % 1'000'000'000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
  }
  void wait_for_turn(std::atomic<uint64_t>& serving, uint64_t seen, uint64_t timeout_ns) override {
    timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000ull),
                static_cast<long>(timeout_ns % 1'000'000'000ull)};
    // The region is MAP_SHARED: a shared (not private) futex, so waiters in
    // every process of the container are woken.
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&serving), FUTEX_WAIT, static_cast<uint32_t>(seen), &ts,
            nullptr, 0);
  }
  void wake_turns(std::atomic<uint64_t>& serving) override {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&serving), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
  Neighbours neighbours(uint64_t now) override {
    NeighbourCache& c = s_.neighbours[device_];
    std::lock_guard<std::mutex> lock(c.mu);  // held for one NVML query at most, never while waiting
    if (c.fetched_ns == 0 || now - c.fetched_ns >= kNeighboursTtlNs) {
      c.value = query_neighbours(s_, device_);
      c.fetched_ns = now;
    }
    return c.value;
  }
  void idle_work() override {
    uint64_t now = monotonic_ns();
    poll_samples(s_, now, true);
    reconcile(s_, device_, now);
  }

 private:
  State& s_;
  int device_;
};

void atfork_child() {
  if (g_state == nullptr) return;
  // Events belong to the parent's contexts, which the child does not have.
  for (SampleSlot& slot : g_state->slots) {
    if (slot.state.load(std::memory_order_relaxed) != kSlotFree && slot.entry != nullptr)
      Estimates::sample_done(*slot.entry);
    slot.state.store(kSlotFree, std::memory_order_relaxed);
    slot.ctx = nullptr;
    slot.start = slot.end = nullptr;
  }
  g_state->in_flight.store(0, std::memory_order_relaxed);
  new (&g_state->poll_mu) std::mutex();
  for (NeighbourCache& c : g_state->neighbours) new (&c.mu) std::mutex();
  // The child is another pid: its own charges, its own readings.
  for (DeviceReconciliation& r : g_state->reconcilers) {
    new (&r.mu) std::mutex();
    r.last_us = 0;
    r.arithmetic.skip(0);
    r.next_ns.store(0, std::memory_order_relaxed);
  }
  g_state->nvml_sees_me.store(false, std::memory_order_relaxed);
}

template <typename T>
void resolve(void* lib, const char* name, T* out) {
  *out = lib != nullptr ? reinterpret_cast<T>(real_dlsym(lib, name)) : nullptr;
}

// One line per repair verify() made (docs/security.md): rare, never on a
// quiet path.
void log_compute_repairs(Runtime& rt, const DeviceEntry& e, unsigned repaired) {
  const uint32_t quota =
      rt.authoritative_cores[&e - rt.region.raw()->devices].load(std::memory_order_relaxed);
  if (repaired & Controller::kRepairedQuota)
    log_event(LogLevel::kWarn,
              "region %s: the compute quota of %s was changed from outside libvgpu (this process's quota is "
              "%u %%); restored",
              rt.config.region_path.c_str(), e.uuid, quota);
  if (repaired &
      (Controller::kRepairedBurst | Controller::kRepairedBudget | Controller::kRepairedRefillMark)) {
    char what[64] = {};
    snprintf(what, sizeof(what), "%s%s%s", (repaired & Controller::kRepairedBurst) ? " burst" : "",
             (repaired & Controller::kRepairedBudget) ? " budget" : "",
             (repaired & Controller::kRepairedRefillMark) ? " refill-mark" : "");
    log_event(LogLevel::kWarn,
              "region %s: the compute budget of %s was changed from outside libvgpu (fields:%s); restored",
              rt.config.region_path.c_str(), e.uuid, what);
  }
}

std::atomic<Runtime*> g_init_runtime{nullptr};  // handed to initialise() (pthread_once takes no argument)

void initialise() {
  Runtime& rt = *g_init_runtime.load(std::memory_order_acquire);
  auto* s = new (g_state_storage) State();
  s->rt = &rt;
  s->policy = parse_policy(rt.config.core_policy.c_str());
  // CUDA_TASK_PRIORITY follows CUDA's convention: lower is more important;
  // 0 (the default) is high, 1 and above are low.
  s->low_priority = !contract::IsHighPriority(rt.config.priority);
  if (rt.config.control_disabled || !rt.accounting || s->policy == Policy::kDisable) {
    g_mode.store(1, std::memory_order_release);
    return;
  }
  Region* region = rt.region.raw();
  uint64_t now = monotonic_ns();
  bool any = false;
  uint32_t count = region->header.device_count.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < count && i < static_cast<uint32_t>(kMaxDevices); ++i) {
    DeviceEntry& e = region->devices[i];
    // The quota this process set up for the device (Runtime::authoritative_cores),
    // not the region's field, which a process of the container can rewrite.
    uint32_t quota = rt.authoritative_cores[i].load(std::memory_order_relaxed);
    if (quota == 0 || quota >= 100) continue;
    e.priority.store(s->low_priority ? 0 : 1, std::memory_order_relaxed);  // region: higher = served first
    s->controllers[i].bind(&e, s->policy, s->low_priority, now, quota);
    if (unsigned repaired = s->controllers[i].verify(now)) log_compute_repairs(rt, e, repaired);
    any = true;
    log_event(LogLevel::kInfo, "compute: %s limited to %u %% (policy %s, priority %s)", e.uuid, quota,
              rt.config.core_policy.c_str(), s->low_priority ? "low" : "high");
  }
  if (!any) {
    g_mode.store(1, std::memory_order_release);
    return;
  }
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  resolve(cuda, "cuCtxGetCurrent", &s->driver.ctx_get_current);
  resolve(cuda, "cuEventCreate", &s->driver.event_create);
  resolve(cuda, "cuEventRecord", &s->driver.event_record);
  resolve(cuda, "cuEventQuery", &s->driver.event_query);
  resolve(cuda, "cuEventElapsedTime", &s->driver.event_elapsed);
  resolve(cuda, "cuStreamIsCapturing", &s->driver.stream_is_capturing);
  if (!s->driver.can_sample())
    log_event(LogLevel::kWarn, "compute: driver lacks event timing; launches are charged estimates only");
  {
    if (rt.load_nvml() && rt.nvml.nvmlInit_v2 != nullptr && rt.nvml.nvmlInit_v2() == NVML_SUCCESS &&
        rt.nvml.nvmlDeviceGetHandleByUUID != nullptr) {
      void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
      resolve(nvml, "nvmlDeviceGetProcessUtilization", &s->process_utilization);
      s->nvml_ok = s->process_utilization != nullptr;
    }
    for (int i = 0; i < kMaxDevices && s->nvml_ok; ++i) {
      NeighbourCache& c = s->neighbours[i];
      c.handle_tried = true;
      if (!s->controllers[i].bound() ||
          rt.nvml.nvmlDeviceGetHandleByUUID(region->devices[i].uuid, &c.handle) != NVML_SUCCESS)
        c.handle = nullptr;
    }
    if (!s->nvml_ok)
      log_event(LogLevel::kInfo,
                "compute: NVML per-process utilisation unavailable; other tenants unknown, "
                "the quota is held");
  }
  g_state = s;
  pthread_atfork(nullptr, nullptr, &atfork_child);
  g_mode.store(2, std::memory_order_release);
}

int claim_sample_slot(State& s, CUstream stream) {
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (s.driver.stream_is_capturing(stream, &capture) != CUDA_SUCCESS ||
      capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return -1;
  CUcontext ctx = nullptr;
  if (s.driver.ctx_get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr) return -1;
  for (int i = 0; i < kSampleSlots; ++i) {
    SampleSlot& slot = s.slots[i];
    int expected = kSlotFree;
    if (!slot.state.compare_exchange_strong(expected, kSlotRecording, std::memory_order_acq_rel)) continue;
    if (slot.ctx != ctx) {
      // Events belong to a context; a slot moving to another context gets new
      // ones (the old ones are left to their context, which may be gone).
      if (s.driver.event_create(&slot.start, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
          s.driver.event_create(&slot.end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
        slot.ctx = nullptr;
        slot.state.store(kSlotFree, std::memory_order_release);
        return -1;
      }
      slot.ctx = ctx;
    }
    if (s.driver.event_record(slot.start, stream) != CUDA_SUCCESS) {
      slot.state.store(kSlotFree, std::memory_order_release);
      return -1;
    }
    return i;
  }
  return -1;
}

}  // namespace

LaunchGate before_launch(Runtime& rt, const void* key, CUstream stream, bool per_thread) {
  LaunchGate gate;
  int mode = g_mode.load(std::memory_order_acquire);
  if (mode == 1) return gate;
  if (mode == 0) {
    if (!rt.cuda_devices_ready.load(std::memory_order_acquire)) return gate;
    g_init_runtime.store(&rt, std::memory_order_release);
    pthread_once(&g_once, &initialise);
    if (g_mode.load(std::memory_order_acquire) != 2) return gate;
  }
  State& s = *g_state;
  int dev = rt.current_device();
  if (dev < 0 || dev >= kMaxDevices || !s.controllers[dev].bound()) return gate;
  if (stream == nullptr && per_thread) stream = CU_STREAM_PER_THREAD;
  uint64_t k = reinterpret_cast<uint64_t>(key) ^ (static_cast<uint64_t>(dev) << 58);
  Estimates::Entry* e = s.estimates.find_or_add(k);
  uint64_t cost = e != nullptr ? Estimates::charge_for(*e) : Estimates::kUnknownEstimateNs;
  cost = s.reconcilers[dev].arithmetic.scaled(cost);
  RealEnvironment env(s, dev);
  uint64_t now = monotonic_ns();
  if (unsigned repaired = s.controllers[dev].verify(now))
    log_compute_repairs(rt, *s.controllers[dev].entry(), repaired);
  poll_samples(s, now, false);
  reconcile(s, dev, now);
  s.controllers[dev].admit(env, cost);
  charge_process(s, dev, static_cast<int64_t>(cost));
  gate.device = dev;
  gate.stream = stream;
  gate.charged = cost;
  gate.entry = e;
  if (e != nullptr) {
    Estimates::note_charged(*e, cost);
    // Once the driver's accounting is trusted it sets the totals, and a
    // key's estimate only weighs it against the process's other kernels: it
    // is kept as first measured. Re-sampling would move it whenever the
    // minimum of its window changed — on a shared device every sample of a
    // launch queued behind a neighbour's work is contended, and the minimum
    // jumps as uncontended ones leave the window — and charges multiplied by
    // a scale learnt for the previous estimate would be off until the next
    // readings (docs/compute.md, Measurement).
    const bool reconciled = s.nvml_sees_me.load(std::memory_order_relaxed);
    if (s.driver.can_sample() && Estimates::should_sample(*e, reconciled)) {
      gate.sample = claim_sample_slot(s, stream);
      if (gate.sample < 0) {
        Estimates::sample_done(*e);
      } else {
        s.slots[gate.sample].entry = e;
        s.slots[gate.sample].device = dev;
      }
    }
  }
  return gate;
}

void after_launch(const LaunchGate& gate, CUresult rc) {
  if (gate.device < 0) return;
  State& s = *g_state;
  auto* e = static_cast<Estimates::Entry*>(gate.entry);
  if (rc != CUDA_SUCCESS) {
    // Nothing ran: give the charge back.
    s.controllers[gate.device].charge(-static_cast<int64_t>(gate.charged));
    charge_process(s, gate.device, -static_cast<int64_t>(gate.charged));
    if (e != nullptr) Estimates::unnote_charged(*e, gate.charged);
    if (gate.sample >= 0) {
      Estimates::sample_done(*e);
      s.slots[gate.sample].state.store(kSlotFree, std::memory_order_release);
    }
    return;
  }
  if (gate.sample < 0) return;
  SampleSlot& slot = s.slots[gate.sample];
  if (s.driver.event_record(slot.end, gate.stream) != CUDA_SUCCESS) {
    Estimates::sample_done(*e);
    slot.state.store(kSlotFree, std::memory_order_release);
    return;
  }
  s.in_flight.fetch_add(1, std::memory_order_acq_rel);
  slot.state.store(kSlotInFlight, std::memory_order_release);
}

}  // namespace tessera::vgpu::compute
