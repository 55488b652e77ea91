// MIG devices as tessera-node advertises them: the resource names NVIDIA's
// device plugin uses (so pod specs written for it work unchanged), the
// GPU-feature-discovery style node labels, and the versioned list of devices
// the MIG device plugins follow.
//
//   strategy single: every MIG device is `nvidia.com/gpu` (every MIG GPU cut
//                    into one uniform profile);
//   strategy mixed:  one resource per profile, `nvidia.com/mig-<profile>` with
//                    '+' written '.' ("1g.10gb+me" -> nvidia.com/mig-1g.10gb.me).
//
// Pure functions, and MigDeviceState (thread-safe).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "host/nvml_mig.h"

namespace tessera::node::mig {

enum class MigStrategy { kSingle, kMixed };

const char* MigStrategyName(MigStrategy strategy);
bool ParseMigStrategy(const std::string& text, MigStrategy& out);

inline constexpr const char* kMigConfigLabel = "nvidia.com/mig.config";
inline constexpr const char* kMigConfigStateLabel = "nvidia.com/mig.config.state";
inline constexpr const char* kMigStrategyLabel = "nvidia.com/mig.strategy";

// One MIG device (a GPU instance and the compute instance spanning it).
struct MigDevice {
  std::string mig_uuid;  // "MIG-...": the device ID the kubelet sees
  std::string parent_uuid;
  int parent_index = 0;
  std::string parent_name;  // "NVIDIA A100-SXM4-80GB"
  std::string model;        // core::mig::Model::key ("A100-80GB"); "" when tessera has no table
  std::string profile;      // "1g.10gb"
  uint32_t start = 0;       // placement, memory slices
  uint32_t size = 1;        // placement: how many memory slices
  uint32_t gpu_instance_id = 0;
  uint32_t compute_instance_id = 0;
  uint64_t memory_mib = 0;
  uint32_t sm_count = 0;
  std::string resource;  // the resource it is advertised as
  bool healthy = true;
  std::string used_by;  // "<namespace>/<pod>/<container>" when a container holds it (PodResources)
  bool operator==(const MigDevice&) const = default;
};

// "nvidia.com/gpu" (single) or "nvidia.com/mig-<profile>" (mixed).
std::string MigResourceName(MigStrategy strategy, const std::string& profile);

// The MIG devices of `gpus` (only those with `managed` true for their index):
// one per GPU instance that has a compute instance and a MIG UUID. Profile
// names come from src/core/mig's tables by profile id.
std::vector<MigDevice> MigDevicesOf(const std::vector<host::MigGpuState>& gpus,
                                    const std::function<bool(int index)>& managed, MigStrategy strategy);

// GFD-style labels for `devices`: nvidia.com/mig.strategy; mixed:
// nvidia.com/mig-<profile>.{count,memory,multiprocessors,slices.gi,slices.ci,
// engines.copy,engines.decoder,engines.encoder,engines.jpeg,engines.ofa};
// single: nvidia.com/gpu.{product,count,memory,multiprocessors,slices.*,
// engines.*} with the product "<name>-MIG-<profile>". `previous` (the labels
// written last time) gets nullopt for every key no longer set, so a profile
// that is gone loses its labels.
std::map<std::string, std::optional<std::string>> MigNodeLabels(
    MigStrategy strategy, const std::vector<MigDevice>& devices,
    const std::map<std::string, std::optional<std::string>>& previous);

// The MIG devices every MIG device-plugin stream follows (as DeviceState for
// vGPUs): a versioned snapshot.
class MigDeviceState {
 public:
  struct Snapshot {
    uint64_t version = 0;
    std::vector<MigDevice> devices;
  };
  // Replaces the list; the version moves only when something changed.
  void Set(std::vector<MigDevice> devices);
  Snapshot Get() const;
  uint64_t WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  uint64_t version_ = 0;            // guarded by mu_
  std::vector<MigDevice> devices_;  // guarded by mu_
};

}  // namespace tessera::node::mig
