// ClaimPreparer: NodePrepareResources and NodeUnprepareResources for one
// claim, without gRPC (dra_plugin.h calls it).
//
// Prepare(namespace, name, uid):
//  1. a claim with a checkpoint is answered from it (idempotent, also after a
//     plugin restart; the API is not asked again);
//  2. reads the ResourceClaim; not found, another UID (deleted and created
//     again), or no allocation are errors;
//  3. takes the allocation results of this driver: each must come from this
//     node's pool and name one of its GPUs ("gpu-<index>"); the consumed
//     memory and cores (consumedCapacity, with or without the driver's
//     domain) must fit the GPU, and with the claims already prepared on it
//     they must not exceed it; a result without shareID is the GPU's alone
//     (no limit, and no other claim on it);
//  4. applies the GpuConfig of the allocation's opaque configs for this
//     driver (classes' first, then the claim's; later wins), strictly;
//     and refuses the claim when a container of a pod it is reserved for
//     would get it together with another claim of this driver
//     (container_claims.h: their mounts would collide);
//  5. writes the region directory, the limits directory with limits.json,
//     and the CDI spec; then reads the claim again — a claim deleted while it
//     was being prepared is not committed — and writes the checkpoint.
// Anything that fails removes what this call wrote, so an error leaves no CDI
// spec, region or checkpoint behind. Checks 2-4 happen before anything is
// written.
//
// Unprepare(uid) removes the CDI spec, the region and limits directories,
// then the checkpoint; an unknown claim is already unprepared (Ok).
//
// Recover() at start: loads the checkpoints, writes back CDI specs that went
// missing, and removes CDI specs, regions and limits directories of ours
// that have no checkpoint (an interrupted prepare).
//
// Thread-safety: every public member may be called from any thread; calls are
// serialised (as the DRA helper serialises prepare and unprepare).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "core/device.h"
#include "dra/config.h"
#include "dra/container_claims.h"
#include "dra/gpu_config.h"
#include "dra/mig_partitions.h"
#include "dra/prepared_claim.h"
#include "host/nvml_mig.h"

namespace tessera::dra {

// The ResourceClaim `ns`/`name` as the API server has it; std::nullopt when it
// does not exist (404); an error for anything else.
using ClaimReader =
    std::function<Result<std::optional<nlohmann::json>>(const std::string& ns, const std::string& name)>;

struct PreparerDeps {
  ClaimReader read_claim;
  // The Pod `ns`/`name`, likewise: for the one-claim-per-container check
  // (container_claims.h). Null skips the check (tests of other parts).
  ClaimReader read_pod;
  // The node's GPUs now (index, UUID, memory in MiB).
  std::function<std::vector<core::Gpu>()> gpus;
  // MIG (--mig-gpus): the driver that makes and destroys instances, and the
  // GPUs whose partitions are published. Null / empty without MIG.
  host::MigDriver* mig = nullptr;
  std::function<std::vector<MigGpu>()> mig_gpus;
  // Test seam: called with the name of each step as it completes
  // ("read", "written", "rechecked"); an error returned aborts the prepare
  // there, as a crash would, without rolling back when `crash` is true.
  std::function<Status(std::string_view step, bool& crash)> on_step;
};

// A GPU's device name in tessera's ResourceSlices.
std::string DeviceNameOf(const core::Gpu& gpu);

class ClaimPreparer {
 public:
  ClaimPreparer(DraConfig config, PreparerDeps deps);

  Status Recover();
  // Reads of the API are not started after `deadline` (an error the kubelet
  // retries); a checkpointed claim is answered whatever the time.
  Result<PreparedClaim> Prepare(
      const std::string& ns, const std::string& name, const std::string& uid,
      std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());
  Status Unprepare(const std::string& uid);

  std::vector<PreparedClaim> Prepared() const;

  std::string CheckpointPath(const std::string& uid) const;
  std::string RegionDirPath(const std::string& uid) const;
  std::string LimitsDirPath(const std::string& uid) const;
  std::string CdiSpecPath(const std::string& uid) const;

 private:
  Result<PreparedClaim> PrepareLocked(const std::string& ns, const std::string& name, const std::string& uid,
                                      std::chrono::steady_clock::time_point deadline);
  // Checks everything and computes what Prepare makes: the devices and the
  // GpuConfig that applies. Changes nothing.
  Result<PreparedClaim> Plan(const nlohmann::json& claim, const std::string& uid, GpuConfig& gpu_config);
  Status PlanMigDevice(const MigDeviceRef& ref, const std::vector<MigGpu>& mig_gpus,
                       PreparedDevice& device) const;
  // The container environment and the limits file's content.
  Status BuildEnv(const PreparedClaim& prepared, const GpuConfig& gpu_config, std::vector<std::string>& env,
                  std::string& limits_payload) const;
  Status DestroyInstances(const PreparedClaim& claim);
  Status Step(std::string_view step, bool& crash);
  void RemoveFiles(const std::string& uid);

  const DraConfig config_;
  const PreparerDeps deps_;
  mutable std::mutex mu_;
  std::map<std::string, PreparedClaim> prepared_;  // guarded by mu_; by claim UID
};

}  // namespace tessera::dra
