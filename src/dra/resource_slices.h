// The ResourceSlices of this node's pool (resource.k8s.io/v1), and their
// publisher.
//
// One device per healthy GPU, named gpu-<index>, with attributes (unqualified
// names are in the driver's domain): type "gpu", uuid, productName, index,
// architecture, driverVersion, cudaDriverVersion and cudaComputeCapability
// (semantic versions, as NVIDIA's DRA driver publishes them), and the
// standard resource.kubernetes.io/pciBusID. Capacities: memory (bytes) and
// cores (percent of the GPU, 100). In vgpu mode the device has
// allowMultipleAllocations and request policies on both (defaults and
// validRange from the configuration; max = the GPU's capacity), so claims
// take consumable shares; in whole mode a claim takes the GPU. An unhealthy
// GPU (critical XID) is left out, so nothing new is allocated on it.
// At most 128 devices per slice; the pool's slices share one generation.
//
// SlicePublisher::Sync makes the API hold exactly the desired slices for the
// node and driver: obsolete slices are deleted first, changed ones updated
// with the pool's generation bumped, missing ones created, each owned by the
// Node (garbage-collected with it). Unchanged slices are not written.
//
// Thread-safety: BuildResourceSlices is pure; a SlicePublisher is used from
// one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "core/device.h"
#include "dra/config.h"
#include "dra/gpu_details.h"
#include "dra/mig_partitions.h"
#include "kube/client.h"

namespace tessera::dra {

namespace resources {
extern const kube::ResourceType kResourceSlices;
extern const kube::ResourceType kResourceClaims;
}  // namespace resources

inline constexpr size_t kMaxDevicesPerSlice = 128;
// Once a slice's devices consume counters (1.35+: ResourceSliceMaxDevicesWithTaintsOrConsumesCounters).
inline constexpr size_t kMaxDevicesPerSliceWithCounters = 64;
// Counter sets per slice (1.35+), which holds counters or devices, never both.
inline constexpr size_t kMaxCounterSetsPerSlice = 8;

// The devices of the pool (spec.devices entries), in index order.
Result<std::vector<nlohmann::json>> BuildDevices(const DraConfig& config, const std::vector<core::Gpu>& gpus,
                                                 const SystemDetails& details);

// A pool: its devices and, with MIG partitions (mig_partitions.h), the
// counter sets they consume.
struct Pool {
  std::vector<nlohmann::json> devices;
  std::vector<nlohmann::json> counter_sets;
};

// The whole-GPU devices of the GPUs not in `mig_gpus` and the partitions
// and counter sets of those that are.
Result<Pool> BuildPool(const DraConfig& config, const std::vector<core::Gpu>& gpus,
                       const SystemDetails& details, const std::vector<MigGpu>& mig_gpus);

// The pool's slices, named "<node>-<driver>-<i>" (devices; 128 per slice, 64
// once counters are used) and "<node>-<driver>-counters-<j>" (8 counter sets
// per slice, in slices of their own as 1.35+ servers require); spec.pool
// {name: node, generation, resourceSliceCount} on each.
std::vector<nlohmann::json> BuildResourceSlices(const DraConfig& config, const Pool& pool,
                                                int64_t generation);
std::vector<nlohmann::json> BuildResourceSlices(const DraConfig& config,
                                                const std::vector<nlohmann::json>& devices,
                                                int64_t generation);

class SlicePublisher {
 public:
  SlicePublisher(const DraConfig& config, std::shared_ptr<kube::Client> client);

  // Returns how many API writes it made (0 when everything was in place).
  Result<int> Sync(const Pool& pool);
  Result<int> Sync(const std::vector<nlohmann::json>& devices) { return Sync(Pool{devices, {}}); }
  // Deletes every slice of this node and driver.
  Status RemoveAll();

 private:
  Result<std::vector<nlohmann::json>> Existing();

  const DraConfig& config_;
  std::shared_ptr<kube::Client> client_;
  nlohmann::json owner_;  // the Node's ownerReference, once known
};

}  // namespace tessera::dra
