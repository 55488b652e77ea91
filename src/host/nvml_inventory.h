// NvmlInventory: the node's GPUs as NVML reports them, and their health from
// NVML's XID events.
//
// Discovery fills, per GPU: UUID, index, product name, memory (MiB), SM count,
// NUMA node, MIG capability, NVLink peers (link count) and PCIe P2P peers.
// The NVML subset has no multiprocessor-count query, so the SM count is derived
// from the CUDA core count and the compute capability (cores per SM is fixed
// per architecture); it is 0 when either is unavailable.
//
// Health: a GPU is healthy when discovered (unless NVML reports it lost); a
// critical XID event (see IsCriticalXid) marks it unhealthy. It stays so until
// tessera-node restarts: those XIDs need a GPU reset, which restarts the agent
// on a real node anyway.
//
// Thread-safety: Discover from one thread; the health watch runs on its own
// thread, started and stopped from the same controlling thread.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <thread>

#include "host/inventory.h"
#include "host/nvml_api.h"

namespace tessera::host {

// XIDs after which the GPU cannot be trusted with new work (double-bit ECC,
// row-remapping failures, fallen off the bus, uncontained errors, ...).
bool IsCriticalXid(unsigned long long xid);

// Cores per SM for a compute capability; 0 when unknown.
int CoresPerSm(int major, int minor);

class NvmlInventory final : public InventorySource {
 public:
  // `api` must outlive the inventory. `library` (optional) is kept alive with it.
  explicit NvmlInventory(const NvmlApi& api, std::unique_ptr<NvmlLibrary> library = nullptr);
  ~NvmlInventory() override;

  Result<std::vector<core::Gpu>> Discover() override;
  Status StartHealthWatch(HealthCallback on_health) override;
  void StopHealthWatch() override;
  // Memory (nvmlDeviceGetMemoryInfo), utilization (nvmlDeviceGetUtilizationRates)
  // and compute processes (nvmlDeviceGetComputeRunningProcesses_v3) per GPU,
  // with each process's SM utilisation since the previous Sample
  // (nvmlDeviceGetProcessUtilization; -1 where the driver cannot say).
  Result<std::vector<GpuSample>> Sample() override;

 private:
  Status EnsureInitialized();
  void WatchLoop(nvmlEventSet_t set, HealthCallback on_health);
  void AddProcessUtilization(nvmlDevice_t handle, GpuSample& sample);

  std::unique_ptr<NvmlLibrary> library_;
  const NvmlApi& api_;
  bool initialized_ = false;
  std::map<nvmlDevice_t, std::string> uuid_by_handle_;  // written by Discover before the watch starts
  std::thread watcher_;
  std::atomic<bool> stop_watch_{false};
  // Per GPU: the newest process-utilisation sample seen (µs), Sample's caller only.
  std::map<nvmlDevice_t, unsigned long long> utilization_seen_us_;
};

}  // namespace tessera::host
