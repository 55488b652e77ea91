// InventorySource: where this machine's GPUs come from (NVML in production, a
// fixed list in tests), their health, and their live usage. tessera-node's
// agent owns one (its inventory publisher and metrics read the agent's
// DeviceState rather than the source); `tessera run` discovers through one.
//
// Thread-safety: Discover is called from the owner's thread; the health
// callback runs on the source's own thread.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "base/result.h"
#include "core/device.h"

namespace tessera::host {

// A process using a GPU, as the driver sees it.
struct GpuProcess {
  uint32_t pid = 0;         // in the driver's (the host's) pid namespace
  uint64_t used_bytes = 0;  // device memory the driver charges to it
  // Share of the GPU's SMs its kernels kept busy since the previous sample
  // (NVML per-process utilisation, averaged over its samples); -1 = unknown.
  int sm_util_percent = -1;
  bool operator==(const GpuProcess&) const = default;
};

// A GPU's live usage at one moment.
struct GpuSample {
  std::string uuid;
  bool lost = false;  // the driver says the GPU is gone (fallen off the bus)
  uint64_t memory_total_bytes = 0;
  uint64_t memory_used_bytes = 0;
  int utilization_percent = -1;  // -1 = unknown
  bool processes_known = false;  // the process list could be read
  std::vector<GpuProcess> processes;
};

class InventorySource {
 public:
  using HealthCallback =
      std::function<void(const std::string& gpu_uuid, bool healthy, const std::string& reason)>;

  virtual ~InventorySource() = default;

  // The physical GPUs: memory_mib is the physical size, slots untouched (the
  // agent applies memory scaling and the split count).
  virtual Result<std::vector<core::Gpu>> Discover() = 0;

  // Starts reporting health changes to `on_health` until StopHealthWatch.
  // A source that cannot watch reports that in the log and returns Ok: health
  // then stays as discovered.
  virtual Status StartHealthWatch(HealthCallback on_health) = 0;
  virtual void StopHealthWatch() = 0;

  // Live usage of every discovered GPU (called after Discover, from the
  // agent's monitor thread). Values a source cannot read are left unknown.
  virtual Result<std::vector<GpuSample>> Sample() = 0;
};

// A fixed list whose health tests flip by hand.
class StaticInventory final : public InventorySource {
 public:
  explicit StaticInventory(std::vector<core::Gpu> gpus) : gpus_(std::move(gpus)) {}

  Result<std::vector<core::Gpu>> Discover() override { return gpus_; }
  Status StartHealthWatch(HealthCallback on_health) override {
    std::lock_guard lock(mu_);
    on_health_ = std::move(on_health);
    return Status::Ok();
  }
  void StopHealthWatch() override {
    std::lock_guard lock(mu_);
    on_health_ = nullptr;
  }
  Result<std::vector<GpuSample>> Sample() override {
    std::lock_guard lock(mu_);
    return samples_;
  }
  void SetSamples(std::vector<GpuSample> samples) {
    std::lock_guard lock(mu_);
    samples_ = std::move(samples);
  }

  // Reports a health change as a real source would (no-op when not watching).
  void ReportHealth(const std::string& gpu_uuid, bool healthy, const std::string& reason) {
    std::lock_guard lock(mu_);
    if (on_health_) on_health_(gpu_uuid, healthy, reason);
  }

 private:
  std::vector<core::Gpu> gpus_;
  std::mutex mu_;
  HealthCallback on_health_;        // guarded by mu_
  std::vector<GpuSample> samples_;  // guarded by mu_
};

}  // namespace tessera::host
