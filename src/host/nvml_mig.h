// MIG through NVML: what tessera-node needs to apply a MIG layout and to
// follow its MIG devices — the MIG mode of each GPU, its GPU instances with
// their placements and compute instances, creating an instance (a GPU
// instance at an explicit placement plus one compute instance spanning it)
// and destroying one, and XID events naming a GPU/compute instance.
//
// `MigDriver` is the seam: the layout applier and the MIG device plugin talk
// to it, unit tests give them a fake, production and the integration tests
// the NVML one (`NvmlMigDriver`, over the driver's or the simulated GPU's
// libnvidia-ml.so.1). Its entry points are the MIG section of host/nvml_api.h's
// table.
//
// Thread-safety: NvmlMigDriver serialises its calls with one mutex; the XID
// watch runs on its own thread.
#pragma once

#include <nvml.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/result.h"
#include "host/nvml_api.h"

namespace tessera::host {

// One MIG device: a GPU instance and the compute instance that spans it.
struct MigInstanceState {
  uint32_t gpu_instance_id = 0;
  uint32_t compute_instance_id = 0;
  uint32_t profile_id = 0;  // nvmlGpuInstanceProfileInfo_t::id (nvidia-smi's "ID")
  uint32_t start = 0;       // placement, in memory slices
  uint32_t size = 0;
  bool has_compute_instance = false;
  std::string mig_uuid;  // "MIG-..." of the compute instance; "" without one
  uint64_t memory_mib = 0;
  uint64_t memory_used_bytes = 0;  // of the MIG device, now
  int utilization_percent = -1;  // of the MIG device; -1: NVML has none (NVIDIA's NVML answers NOT_SUPPORTED)
  uint32_t sm_count = 0;         // of the compute instance
  uint32_t processes = 0;        // compute processes running in it now
};

struct MigGpuState {
  int index = 0;
  std::string uuid;
  std::string name;
  uint64_t memory_mib = 0;
  uint32_t pci_device_id = 0;  // nvmlPciInfo_t::pciDeviceId; 0 = unknown
  bool mig_capable = false;    // nvmlDeviceGetMigMode answers
  bool mig_enabled = false;    // the current mode
  bool mig_pending = false;    // the pending mode (differs from the current until a reset on A100/A30)
  std::vector<MigInstanceState> instances;  // while MIG is on; by start
};

struct MigModeChange {
  bool reset_required = false;  // Ampere: the new mode is pending until the GPU is reset
};

// An XID on a GPU, or on one of its MIG devices.
struct MigXid {
  std::string gpu_uuid;
  unsigned long long xid = 0;
  uint32_t gpu_instance_id = 0xFFFFFFFF;  // 0xFFFFFFFF: not specific to a MIG device
  uint32_t compute_instance_id = 0xFFFFFFFF;
};

class MigDriver {
 public:
  virtual ~MigDriver() = default;
  // Every GPU, in index order, with its MIG state.
  virtual Result<std::vector<MigGpuState>> List() = 0;
  virtual Result<MigModeChange> SetMigMode(int gpu_index, bool enabled) = 0;
  // A GPU instance of `profile_id` at `start` and one compute instance
  // spanning it. Nothing is left behind when it fails.
  virtual Result<MigInstanceState> CreateInstance(int gpu_index, uint32_t profile_id, uint32_t start) = 0;
  // The GPU instance's compute instances, then the GPU instance.
  virtual Status DestroyInstance(int gpu_index, uint32_t gpu_instance_id) = 0;
  // Reports XIDs of the GPUs `gpu_uuids` to `on_xid` until StopXidWatch. A
  // driver that cannot watch logs that and returns Ok.
  virtual Status StartXidWatch(const std::vector<std::string>& gpu_uuids,
                               std::function<void(const MigXid&)> on_xid) = 0;
  virtual void StopXidWatch() = 0;
};

// The MIG driver over NVML. `api` must outlive it.
class NvmlMigDriver final : public MigDriver {
 public:
  // Fails, naming `library_name` (the library `api` was loaded from), when
  // the table lacks a MIG entry point.
  static Result<std::unique_ptr<NvmlMigDriver>> Load(const NvmlApi& api, const std::string& library_name);
  explicit NvmlMigDriver(const NvmlApi& api);
  ~NvmlMigDriver() override;

  Result<std::vector<MigGpuState>> List() override;
  Result<MigModeChange> SetMigMode(int gpu_index, bool enabled) override;
  Result<MigInstanceState> CreateInstance(int gpu_index, uint32_t profile_id, uint32_t start) override;
  Status DestroyInstance(int gpu_index, uint32_t gpu_instance_id) override;
  Status StartXidWatch(const std::vector<std::string>& gpu_uuids,
                       std::function<void(const MigXid&)> on_xid) override;
  void StopXidWatch() override;

 private:
  // A compute instance and the profile it was made from.
  struct ComputeInstance {
    nvmlComputeInstanceProfileInfo_t profile;
    nvmlComputeInstance_t handle;
  };
  // Every compute instance of `gi`, by profile index then as NVML lists them.
  std::vector<ComputeInstance> ComputeInstances(nvmlGpuInstance_t gi) const;
  Status EnsureInitialized();  // callers hold mu_
  Result<nvmlDevice_t> Device(int gpu_index);
  Result<MigInstanceState> Describe(nvmlDevice_t device, nvmlGpuInstance_t gi);
  std::string Text(nvmlReturn_t rc) const { return NvmlErrorText(api_, rc); }

  const NvmlApi& api_;

  std::mutex mu_;
  bool initialized_ = false;  // guarded by mu_

  std::thread watcher_;
  std::atomic<bool> stop_watch_{false};
};

}  // namespace tessera::host
