// Initialisation of the simulated driver: the process-wide Runtime, cuInit
// (configuration from the environment, attaching the shared state, registering
// this process), the devices it sees (NVIDIA_VISIBLE_DEVICES and
// CUDA_VISIBLE_DEVICES: indices, GPU UUIDs, MIG UUIDs), and the exit and fork hooks that give this process's
// record back or make a forked child forget its parent's contexts and memory.
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "sim/cuda_internal.h"
#include "sim/device_list.h"

namespace tessera::sim::cuda {

Runtime& R() {
  static Runtime* rt = new Runtime();  // never destroyed: other threads may outlive exit
  return *rt;
}

namespace {

void ReleaseProcessAtExit() {
  Runtime& rt = R();
  if (!rt.state) return;
  // Do not wait forever on a lock held by a thread that will never run again.
  timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 1;
  const int rc = pthread_mutex_timedlock(&rt.state->file()->mutex, &deadline);
  if (rc == EOWNERDEAD) {
    pthread_mutex_consistent(&rt.state->file()->mutex);
  } else if (rc != 0) {
    return;  // others reclaim us once we are gone
  }
  const int slot = rt.state->ProcessSlotLocked(rt.pid, false);
  if (slot >= 0)
    std::memset(static_cast<void*>(&rt.state->file()->processes[slot]), 0, sizeof(ProcessRecord));
  pthread_mutex_unlock(&rt.state->file()->mutex);
}

void AfterForkInChild() {
  // CUDA is not usable in a forked child; make it start from scratch if it tries.
  // The parent's contexts, memory and handles are not the child's: forget them
  // (leaking the bookkeeping) so that nothing is charged or freed twice.
  Runtime& rt = R();
  new (&rt.mu) std::recursive_mutex();
  rt.initialized = false;
  rt.pid = SelfPid();
  rt.allocs.clear();
  rt.live.clear();
  rt.vmm_handles.clear();
  rt.vmm_mappings.clear();
  rt.vmm_reservations.clear();
  rt.graph_allocs.clear();
  rt.mps = MpsClient{};
  for (int g = 0; g < kMaxGpus; ++g) {
    rt.graph_pool[g] = GraphMemPool{};
    rt.primary[g] = nullptr;
    rt.primary_refs[g] = 0;
    rt.contexts[g] = 0;
    rt.default_pool[g] = nullptr;
    rt.current_pool[g] = nullptr;
    rt.gpu_gi[g] = -1;
    rt.gpu_ci[g] = -1;
  }
  ForgetContextStackAfterFork();
  ForgetPerThreadStreamsAfterFork();
}

// The devices this process sees (device_list.h): NVIDIA_VISIBLE_DEVICES, then
// CUDA_VISIBLE_DEVICES; a MIG device is used through its GPU instance.
std::vector<int> VisibleDevices(SimState& state) {
  StateLock lock(state);
  const std::vector<DeviceRef> container =
      ContainerDevices(*state.file(), std::getenv("NVIDIA_VISIBLE_DEVICES"));
  std::vector<int> out;
  for (const DeviceRef& d : CudaDevices(*state.file(), container, std::getenv("CUDA_VISIBLE_DEVICES"))) {
    out.push_back(d.gpu);
    R().gpu_gi[d.gpu] = d.gi_slot;
    R().gpu_ci[d.gpu] = d.ci_slot;
  }
  return out;
}

CUresult DoInit() {
  Runtime& rt = R();
  if (rt.initialized) return rt.init_error;
  rt.initialized = true;
  rt.pid = SelfPid();
  bool is_explicit = false;
  auto config = ConfigFromEnvironment(&is_explicit);
  if (!config.ok()) {
    rt.init_message = config.error().message;
    std::fprintf(stderr, "tessera sim: %s\n", rt.init_message.c_str());
    return rt.init_error = CUDA_ERROR_INVALID_VALUE;
  }
  auto state = SimState::Open(SimState::DefaultDir(), *config, is_explicit);
  if (!state.ok()) {
    rt.init_message = state.error().message;
    std::fprintf(stderr, "tessera sim: %s\n", rt.init_message.c_str());
    return rt.init_error = CUDA_ERROR_NOT_INITIALIZED;
  }
  rt.state = std::move(*state);
  {
    StateLock lock(*rt.state);
    rt.state->ReclaimDeadLocked();
    if (rt.state->ProcessSlotLocked(rt.pid, true) < 0) {
      rt.init_message = "the simulator's process table is full";
      return rt.init_error = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  rt.visible = VisibleDevices(*rt.state);
  if (CUresult r = ConnectToMps(&rt.visible, &rt.init_message); r != CUDA_SUCCESS) {
    std::fprintf(stderr, "tessera sim: %s\n", rt.init_message.c_str());
    return rt.init_error = r;
  }
  static bool hooks = false;
  if (!hooks) {
    hooks = true;
    std::atexit(ReleaseProcessAtExit);
    pthread_atfork(nullptr, nullptr, AfterForkInChild);
  }
  return rt.init_error = CUDA_SUCCESS;
}

}  // namespace

CUresult CheckInit() {
  Runtime& rt = R();
  if (!rt.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  return rt.init_error;
}

bool IsLive(const void* handle) {
  return handle != nullptr && R().live.count(handle) > 0;
}

#pragma GCC visibility push(default)  // the exported entry points
extern "C" {

CUresult cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return Guard([&]() -> CUresult {
    std::lock_guard<std::recursive_mutex> lock(R().mu);
    return DoInit();
  });
}

CUresult cuDriverGetVersion(int* driverVersion) {
  return Guard([&]() -> CUresult {
    if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = CUDA_VERSION;
    std::lock_guard<std::recursive_mutex> lock(R().mu);
    if (CheckInit() == CUDA_SUCCESS) *driverVersion = static_cast<int>(R().state->file()->driver_version);
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
#pragma GCC visibility pop

}  // namespace tessera::sim::cuda
