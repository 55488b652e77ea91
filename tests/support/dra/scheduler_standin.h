// DraSchedulerStandIn: kube-scheduler's DRA part, played against an API server
// (the API-server stand-in, or any) over its REST API, for tests of a DRA
// driver:
//  - reads DeviceClasses, ResourceSlices and every ResourceClaim (lists, as
//    the scheduler's informers hold them);
//  - allocates a pod's claims on a node with the Allocator (allocator.h);
//  - writes each claim as kube-scheduler's PreBind does: first the finalizer
//    resource.kubernetes.io/delete-protection (an update of the claim, when
//    missing), then status.allocation together with the pod in
//    status.reservedFor (an update of the status subresource), each with the
//    resourceVersion it read, so a concurrent change is a 409, not an
//    overwrite. A claim that is already allocated is only reserved for the
//    pod (a claim shared by several pods).
// It also plays the resourceclaim controller's part for templates
// (ClaimFromTemplate).
//
// Plain HTTP only (the stand-in's default).
//
// Thread-safety: one call at a time per instance.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "dra/allocator.h"

namespace tessera::testing::dra {

class DraSchedulerStandIn {
 public:
  struct Options {
    std::string api_url;  // http://host:port
    std::string bearer_token;
    AllocatorOptions allocator;
  };
  struct Pod {
    std::string name;
    std::string uid;
  };

  // The finalizer kube-scheduler puts on claims it allocates.
  static constexpr const char* kFinalizer = "resource.kubernetes.io/delete-protection";
  // The annotation the resourceclaim controller names a template's claim with.
  static constexpr const char* kPodClaimNameAnnotation = "resource.kubernetes.io/pod-claim-name";

  explicit DraSchedulerStandIn(Options options);

  // Allocates the claims `claim_names` of namespace `ns` on `node` for `pod`
  // and writes them; returns the claims as written. Claims already allocated
  // are reserved for the pod without a new allocation. A refusal by the
  // allocator changes nothing; an API error is AllocationFailure::kApi (claims
  // written before it stay written, as with kube-scheduler, which would retry).
  Result<std::vector<Json>, AllocationFailure> Schedule(const std::string& ns,
                                                        const std::vector<std::string>& claim_names,
                                                        const Json& node, const Pod& pod);
  // For a node known by name only.
  Result<std::vector<Json>, AllocationFailure> ScheduleOnNode(const std::string& ns,
                                                              const std::vector<std::string>& claim_names,
                                                              const std::string& node_name, const Pod& pod);

  // The ResourceClaims of `pod` (a Pod object), in spec.resourceClaims
  // order: an entry's resourceClaimName, or for a resourceClaimTemplateName
  // the claim status.resourceClaimStatuses names (an entry without one is
  // left out, as kube-scheduler does when none was needed). The same claim
  // named by two entries is listed once.
  static std::vector<std::string> ClaimNamesOf(const Json& pod);
  // Schedule for a Pod object on `node_name`: its namespace, ClaimNamesOf
  // and its name and UID (as reservedFor records them).
  Result<std::vector<Json>, AllocationFailure> SchedulePod(const Json& pod, const std::string& node_name);

  // The ResourceClaim the resourceclaim controller creates for `pod`'s
  // spec.resourceClaims entry `pod_claim_name` from a ResourceClaimTemplate:
  // generateName "<pod>-<pod claim name>-", the template's metadata labels and
  // annotations plus the pod-claim-name annotation, the pod as controlling
  // owner, and the template's claim spec.
  static Json ClaimFromTemplate(const Json& claim_template, const Json& pod,
                                const std::string& pod_claim_name);

 private:
  Result<Json> Get(const std::string& path);
  Result<Json> Put(const std::string& path, const Json& body);

  Options options_;
};

}  // namespace tessera::testing::dra
