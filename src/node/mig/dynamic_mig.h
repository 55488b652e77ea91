// DynamicMig: GPUs in `mig-dynamic` mode (issue 14 item 3, the node's half).
// tessera-scheduler picks a profile and a placement per container
// (scheduler/mig_placement.h) and writes them into the pod's allocation
// (`"mig": {"profile", "start"}` on a device whose uuid is the parent GPU);
// tessera-node creates that GPU instance (and one compute instance spanning
// it) when the kubelet calls Allocate, and destroys it once the container is
// gone.
//
//  - Start: every selected GPU must exist (when named by index), have MIG and
//    a geometry table (core/mig); MIG mode is turned on where it is off —
//    Hopper at once, A100/A30 pending until a GPU reset (set once, reported
//    once, never looped; the GPU is advertised unhealthy meanwhile, as after
//    a critical XID).
//  - Advertised under the vGPU resource (`nvidia.com/gpu`) as replicas
//    `<GPU UUID>::<k>`, one per instance the GPU can hold (7 on an A100, 4
//    on an A30), so HAMi-style pods are admitted by the kubelet; the replicas
//    keep only the kubelet's count, as for vGPUs.
//  - Allocate: the kubelet does not say which pod it serves. The container is
//    found among the pods bound to this node whose allocation names MIG
//    instances (ChooseClaim below, docs/decisions.md); its instances are
//    created at the allocation's placements (an instance already there with
//    that profile is the container's own: a retried Allocate gets the same
//    one) and the answer is NVIDIA_VISIBLE_DEVICES=<MIG UUID>[,...]. Nothing
//    is created when any of them cannot be (placement taken, profile unknown,
//    GPU not dynamic, MIG mode pending); a failed create destroys what this
//    call made.
//  - Cleanup (Tick): an instance is kept while a live pod's allocation names
//    it, a process runs in it, the kubelet (PodResources) still lists the
//    container it was made for, or it was made less than `grace_seconds`
//    ago; otherwise it is destroyed — never without an answer from the pod
//    list and from the kubelet. Instances found at start with no such reason
//    (orphans of an earlier run) go on the first pass.
//
// Thread-safety: every public member may be called from any thread; one mutex
// serialises Allocate and Tick (and so every driver call made here).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/periodic_thread.h"
#include "base/result.h"
#include "core/allocation.h"
#include "core/device.h"
#include "core/mig/geometry.h"
#include "deviceplugin/v1beta1/api.pb.h"
#include "host/nvml_mig.h"
#include "node/mig/mig_devices.h"
#include "node/mig/mig_settings.h"
#include "node/mig/xid_health.h"

namespace tessera::node::mig {

// A pod bound to this node with its allocation (node_pods.h), as DynamicMig needs it.
struct BoundPod {
  std::string pod_namespace;
  std::string pod_name;
  std::string uid;
  std::string created;  // metadata.creationTimestamp (RFC 3339): the kubelet admits older pods first
  core::PodAllocation allocation;
};

// One container whose allocation names MIG instances to create.
struct MigClaim {
  std::string pod_namespace;
  std::string pod_name;
  std::string pod_uid;
  std::string container;
  std::string created;                     // the pod's
  int order = 0;                           // the kubelet's order within the pod: init containers first
  std::vector<core::DeviceSlice> devices;  // each with mig_profile set
  std::string key() const { return pod_namespace + "/" + pod_name + "/" + container; }
};

// The claims of `pods`: every container all of whose devices carry a MIG
// profile, in the order the kubelet admits them (older pods first, then
// namespace and name; within a pod init containers, then the others).
std::vector<MigClaim> MigClaimsOf(const std::vector<BoundPod>& pods);

// Which claim an Allocate of `device_count` devices serves. Eligible: the
// first container (in order) of each pod that still waits — its instances not
// all created, or created but not yet listed by the kubelet (`held`, the
// containers PodResources lists with devices; nullopt when the kubelet did not
// answer: then only a container this process `answered` before counts as a
// retry) — with exactly `device_count` devices. Among them, one whose parent
// GPUs are `requested_gpus` (GetPreferredAllocation steers the kubelet there)
// before one that is not, then the kubelet's order. The error says what was
// looked for and what there is.
Result<MigClaim> ChooseClaim(const std::vector<MigClaim>& claims, size_t device_count,
                             const std::set<std::string>& requested_gpus,
                             const std::function<bool(const MigClaim&)>& created,
                             const std::optional<std::set<std::string>>& held,
                             const std::set<std::string>& answered);

// Replicas advertised for a dynamic GPU of `model`: the most instances it can hold.
int DynamicReplicas(const core::mig::Model& model);

struct DynamicMigOptions {
  MigGpuSelection gpus{false, {}};  // mig_dynamic_gpus
  std::string resource_name = "nvidia.com/gpu";
  int grace_seconds = 300;  // region_grace_seconds
  std::chrono::milliseconds interval{1000};
  // How long Allocate waits for the pod it serves to reach this agent's pod
  // list (the kubelet may see it first).
  std::chrono::milliseconds pod_wait{5000};
};

class DynamicMig {
 public:
  // nullopt: the pods bound here are not known yet (the pod list has not synced).
  using PodsSource = std::function<std::optional<std::vector<BoundPod>>()>;
  // The containers ("<ns>/<pod>/<container>") the kubelet lists holding
  // devices of the resource; an error when it did not answer. Null: no
  // PodResources (then nothing is ever destroyed for want of a container).
  using HeldSource = std::function<Result<std::set<std::string>>()>;
  // An Event on the Node: type ("Normal"/"Warning"), reason, message. May be null.
  using EventSink = std::function<void(const std::string&, const std::string&, const std::string&)>;

  // `driver` must outlive this. `clock`: seconds, for the grace period (null: the steady clock).
  DynamicMig(DynamicMigOptions options, host::MigDriver* driver, PodsSource pods, HeldSource held,
             EventSink events = nullptr, std::function<int64_t()> clock = nullptr);
  ~DynamicMig();
  DynamicMig(const DynamicMig&) = delete;
  DynamicMig& operator=(const DynamicMig&) = delete;

  // Checks the selected GPUs among `discovered` and turns MIG mode on where it
  // is off; returns the dynamic GPUs (as discovered). Fails, changing nothing,
  // on a GPU index the node lacks, a GPU without MIG, or one whose model has
  // no MIG table.
  Result<std::vector<core::Gpu>> Prepare(const std::vector<core::Gpu>& discovered);
  // The cleanup thread (Tick every `interval`).
  void Start();
  void Stop();
  // One pass: MIG mode, cleanup, the device list. Tests call it directly.
  void Tick();

  bool Owns(const std::string& gpu_uuid) const;
  // A whole-GPU health change (a critical XID, the GPU lost) of a dynamic
  // GPU; returns whether it changed anything. Other UUIDs are ignored.
  bool SetHealth(const std::string& gpu_uuid, bool healthy);
  // A critical XID on a dynamic GPU (others are ignored): one naming a GPU
  // instance marks only that instance's MIG device unhealthy, one naming none
  // all of the GPU's (MigXidHealth, as for layouts); sticky until restart or
  // until the instance is destroyed. Returns whether a device changed.
  bool OnXid(const host::MigXid& xid);
  // Starts the driver's XID watch over the dynamic GPUs, feeding OnXid (Stop
  // ends it). The driver has one watch: with a MigManager too, the agent has
  // it forward these GPUs' XIDs instead (MigManager::ForwardXids).
  Status WatchXids();
  // For the vGPU plugin: the dynamic GPUs with `slots` = DynamicReplicas and
  // healthy while MIG mode is on; `version` moves when that changes.
  std::vector<core::Gpu> Advertised() const;
  uint64_t version() const;
  // One container's answer (above).
  Result<v1beta1::ContainerAllocateResponse> Allocate(const v1beta1::ContainerAllocateRequest& request);
  // The parent GPUs of the container the next Allocate of `device_count`
  // devices would serve (empty when none waits): GetPreferredAllocation
  // prefers their replicas.
  std::set<std::string> PreferredGpus(size_t device_count);
  // The dynamic GPUs as the inventory lists them: mode dynamic, slots 0, the
  // instances with the container each is for; unhealthy while MIG mode is pending.
  std::vector<core::Gpu> InventoryGpus() const;
  // The instances listed on the last pass.
  std::vector<MigDevice> Devices() const;

 private:
  struct Made {
    std::string owner;    // "<ns>/<pod>/<container>" it was made or kept for
    int64_t created = 0;  // clock; 0 = found, not made by this process
  };
  // `no_pod`: set when the failure is that no waiting pod was found (yet).
  Result<v1beta1::ContainerAllocateResponse> AllocateLocked(const v1beta1::ContainerAllocateRequest& request,
                                                            bool& no_pod);
  bool IsDynamicLocked(int index) const;
  void EnsureModesLocked(const std::vector<host::MigGpuState>& gpus);
  void PublishLocked(const std::vector<host::MigGpuState>& gpus, const std::vector<MigClaim>* claims);
  std::optional<std::set<std::string>> HeldLocked();
  int64_t Now() const;

  const DynamicMigOptions options_;
  host::MigDriver* const driver_;
  const PodsSource pods_;
  const HeldSource held_;
  const EventSink events_;
  const std::function<int64_t()> clock_;

  mutable std::mutex mu_;
  std::vector<core::Gpu> gpus_;          // guarded by mu_: the dynamic GPUs as discovered
  std::map<std::string, int> replicas_;  // guarded by mu_: uuid -> replicas
  std::set<std::string> mig_on_;         // guarded by mu_: uuids with MIG mode on
  std::set<std::string> unhealthy_;      // guarded by mu_: uuids found unhealthy (SetHealth)
  std::set<std::string> mode_reported_;  // guarded by mu_: pending GPUs already reported
  std::map<std::string, Made> made_;     // guarded by mu_: MIG UUID -> why it is there
  std::set<std::string> answered_;       // guarded by mu_: claims answered by this process
  std::vector<MigDevice> devices_;       // guarded by mu_
  MigXidHealth xid_health_;              // guarded by mu_
  uint64_t version_ = 0;                 // guarded by mu_
  bool watching_xids_ = false;           // Start/Stop's thread only
  std::unique_ptr<PeriodicThread> thread_;
};

}  // namespace tessera::node::mig
