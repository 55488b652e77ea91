// One tessera claim per container (docs/dra.md, "One claim per container").
//
// Every claim of tessera's driver that holds a libvgpu slice mounts its region
// directory and its limits directory at the same container paths
// (DraConfig::region_container_dir, contract::kLimitsContainerDir) and sets
// the same environment names; a MIG claim sets NVIDIA_VISIBLE_DEVICES. A
// container given two such claims would get two mounts at one destination,
// one shadowing the other, so one claim's limits would silently go
// unenforced. One claim with several of tessera's devices is fine: the mounts
// are the spec's edits, which the runtime applies once per container.
//
// NodePrepareResources names claims, not pods: the check goes from the claim
// to the pods of its status.reservedFor, and from each pod's containers
// (init containers too) through spec.resourceClaims to ResourceClaims: an
// entry's resourceClaimName, or for a resourceClaimTemplateName the claim
// the pod's status.resourceClaimStatuses names. A container's reference with
// a `request` gets only that request's results.
//
// Thread-safety: pure functions; the readers are called on the caller's
// thread.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace tessera::dra {

// A container's reference to a ResourceClaim, resolved to the claim's name.
struct ContainerClaimRef {
  std::string pod_claim;  // the spec.resourceClaims entry's name
  std::string claim;      // the ResourceClaim's name, in the pod's namespace
  std::string request;    // "" = every result of the claim
  bool operator==(const ContainerClaimRef&) const = default;
};

struct ContainerClaims {
  std::string container;
  bool init = false;  // an init container (restartable or not)
  std::vector<ContainerClaimRef> claims;
  bool operator==(const ContainerClaims&) const = default;
};

// The containers of `pod` (init containers first) that reference claims,
// each with its references resolved. A reference that does not resolve (no
// such spec.resourceClaims entry, a template's claim not generated yet, or
// none needed) is left out: the kubelet cannot start that container either.
std::vector<ContainerClaims> ContainersWithClaims(const nlohmann::json& pod);

// Whether a container referencing `claim` with `request` ("" = all) gets a
// device of `driver` from it.
bool GetsDeviceOf(const nlohmann::json& claim, const std::string& driver, const std::string& request);

// The object `ns`/`name` as the API server has it; std::nullopt when it does
// not exist (404); an error for anything else.
using ObjectReader =
    std::function<Result<std::optional<nlohmann::json>>(const std::string& ns, const std::string& name)>;

struct ContainerClaimCheck {
  std::string driver;
  ObjectReader read_pod;
  ObjectReader read_claim;
  // Reads are not started after this (the kubelet's call has a deadline).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// Ok when no container of the pods `claim` is reserved for gets `claim`
// together with another claim that gives it a device of the driver.
// Otherwise the error, naming the pod, the container and the claims (the
// same words for each of the claims, so every one of them is refused with
// it). A pod that is gone (404, or another UID under its name) cannot run
// and is skipped; a pod or claim that cannot be read, or the deadline, is an
// error the kubelet retries: a claim is not prepared unchecked.
Status CheckOneClaimPerContainer(const nlohmann::json& claim, const ContainerClaimCheck& check);

}  // namespace tessera::dra
