// Allocator: the allocation kube-scheduler's DynamicResources plugin computes
// for a pod's ResourceClaims on one node ("structured parameters"), written
// from the published resource.k8s.io/v1 API and allocation rules, for tests of
// the driver that publishes the devices. Pure logic over the API's JSON.
//
// What it follows:
//  - Pools: the ResourceSlices of a (driver, pool) with the highest
//    pool.generation count; slices for the node are those with
//    spec.nodeName == node, spec.allNodes, a matching spec.nodeSelector, or
//    (spec.perDeviceNodeSelection) devices whose own node fields match. A pool
//    with fewer slices of that generation than pool.resourceSliceCount is
//    incomplete, one with duplicate device names, duplicate counter sets or a
//    device consuming an unknown counter is invalid: neither is allocated
//    from, and allocationMode All refuses them outright.
//  - Requests: `exactly` (deviceClassName, selectors, allocationMode
//    ExactCount with count (default 1) or All, capacity.requests,
//    tolerations) and `firstAvailable` (the first subrequest that can be
//    satisfied wins; the result names "request/subrequest"). A device must
//    match every selector of its DeviceClass and of the request (CEL, see
//    cel.h); a runtime error in a selector aborts the allocation.
//  - Availability: a device already in a claim's allocation is not given out
//    again, unless it has allowMultipleAllocations, in which case it is shared
//    until the sum of consumed capacity would pass any of its capacities;
//    devices with a NoSchedule or NoExecute taint need a matching toleration.
//  - Consumable capacity (KEP-5075): for each capacity of a device, the
//    amount consumed by one allocation is the request rounded by the
//    capacity's requestPolicy: validValues -> the smallest valid value >= the
//    request; validRange -> below min goes up to min, then up to
//    min + n*step (whole units, like Kubernetes' integer path); no request
//    -> the policy's default, or the whole capacity without a policy. A
//    result above validRange.max or outside validValues makes the device
//    unsuitable, as does asking for a capacity the device does not have.
//    Shared devices get a shareID (a fresh UUID) and consumedCapacity (every
//    capacity of the device) in their result.
//  - Partitionable devices (KEP-4815): a device's consumesCounters are taken
//    from the pool's sharedCounters (in any slice of the pool, 1.34's or
//    1.35's layout); the counters consumed by all allocated devices never
//    exceed a counter set. A shared device's counters count once.
//  - Constraints: matchAttribute and distinctAttribute over the requests they
//    name (all when none).
//  - Search: requests in claim order, devices in (driver, pool, slice name,
//    slice position) order, backtracking until the first complete solution,
//    as kube-scheduler does (it stops at the first solution too). At most 32
//    results per claim.
//  - The result: devices.results[{request, driver, pool, device, tolerations,
//    shareID, consumedCapacity}], devices.config (the classes' configs with
//    source FromClass, then the claim's with FromClaim; requests cleared when
//    a config applies to every request) and nodeSelector (matchFields
//    metadata.name In [node] when any device is node-local).
// Not covered: adminAccess (refused with an error saying so); devices with
// binding conditions are skipped (their feature is off by default). A node
// object is only needed for slices selected by
// nodeSelector (labels); otherwise the node name suffices.
//
// Thread-safety: an Allocator is immutable; Allocate may run concurrently.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace tessera::testing::dra {

using Json = nlohmann::json;

// The cluster as the scheduler's informers show it.
struct ClusterState {
  std::vector<Json> device_classes;
  std::vector<Json> resource_slices;
  // Every ResourceClaim; those with status.allocation hold their devices.
  std::vector<Json> resource_claims;
};

struct AllocatorOptions {
  // The shareID of each allocation of a shared device. Default: random
  // version-4 UUIDs (kube-scheduler also uses a fresh UUID).
  std::function<std::string()> share_id;
  // Bound on search steps before giving up (the claims are then refused).
  size_t max_steps = 1'000'000;
};

// Why claims could not be allocated on a node.
struct AllocationFailure {
  enum class Kind {
    kUnsatisfiable,  // the node does not have what the claims ask for (now)
    kInvalid,        // a claim, class or slice is unusable: no node would do
    kApi,            // reading or writing the API server failed (scheduler_standin.h)
  };
  Kind kind = Kind::kUnsatisfiable;
  std::string message;               // one line
  std::vector<std::string> reasons;  // per request and device, in search order

  // message and reasons, one per line.
  std::string Describe() const;
  // True when message or a reason contains `text`.
  bool Mentions(const std::string& text) const;
};

class Allocator {
 public:
  explicit Allocator(ClusterState state, AllocatorOptions options = {});

  // Allocates `claims` (a pod's unallocated claims) together on the node:
  // one AllocationResult (the JSON of status.allocation) per claim, in order.
  // `node` is a Node object (metadata.name, metadata.labels).
  Result<std::vector<Json>, AllocationFailure> Allocate(const Json& node,
                                                        const std::vector<Json>& claims) const;
  // The same, for a node known by name only.
  Result<std::vector<Json>, AllocationFailure> AllocateOnNode(const std::string& node_name,
                                                              const std::vector<Json>& claims) const;

 private:
  ClusterState state_;
  AllocatorOptions options_;
};

// A random version-4 UUID ("xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx").
std::string RandomUuid();

}  // namespace tessera::testing::dra
