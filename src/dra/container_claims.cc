#include "dra/container_claims.h"

#include <algorithm>
#include <map>
#include <set>

#include "contract/container_contract.h"

namespace tessera::dra {
namespace {

using Json = nlohmann::json;

std::string StringAt(const Json& j, const char* key) {
  if (!j.is_object()) return "";
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

const Json& At(const Json& j, const char* key) {
  static const Json kNull;
  if (!j.is_object()) return kNull;
  const auto it = j.find(key);
  return it != j.end() ? *it : kNull;
}

// spec.resourceClaims entry name -> the ResourceClaim's name.
std::map<std::string, std::string> ResolvePodClaims(const Json& pod) {
  std::map<std::string, std::string> generated;
  const Json& statuses = At(At(pod, "status"), "resourceClaimStatuses");
  if (statuses.is_array()) {
    for (const auto& s : statuses) {
      const std::string claim = StringAt(s, "resourceClaimName");
      if (!claim.empty()) generated[StringAt(s, "name")] = claim;
    }
  }
  std::map<std::string, std::string> out;
  const Json& entries = At(At(pod, "spec"), "resourceClaims");
  if (!entries.is_array()) return out;
  for (const auto& e : entries) {
    const std::string name = StringAt(e, "name");
    if (name.empty()) continue;
    if (const std::string direct = StringAt(e, "resourceClaimName"); !direct.empty()) {
      out[name] = direct;
    } else if (!StringAt(e, "resourceClaimTemplateName").empty()) {
      if (auto it = generated.find(name); it != generated.end()) out[name] = it->second;
    }
  }
  return out;
}

}  // namespace

std::vector<ContainerClaims> ContainersWithClaims(const Json& pod) {
  const std::map<std::string, std::string> resolved = ResolvePodClaims(pod);
  std::vector<ContainerClaims> out;
  for (const char* list : {"initContainers", "containers"}) {
    const Json& containers = At(At(pod, "spec"), list);
    if (!containers.is_array()) continue;
    for (const auto& c : containers) {
      const Json& refs = At(At(c, "resources"), "claims");
      if (!refs.is_array()) continue;
      ContainerClaims entry;
      entry.container = StringAt(c, "name");
      entry.init = std::string(list) == "initContainers";
      for (const auto& r : refs) {
        const std::string pod_claim = StringAt(r, "name");
        auto it = resolved.find(pod_claim);
        if (it == resolved.end()) continue;
        entry.claims.push_back({pod_claim, it->second, StringAt(r, "request")});
      }
      if (!entry.claims.empty()) out.push_back(std::move(entry));
    }
  }
  return out;
}

bool GetsDeviceOf(const Json& claim, const std::string& driver, const std::string& request) {
  const Json& results = At(At(At(At(claim, "status"), "allocation"), "devices"), "results");
  if (!results.is_array()) return false;
  for (const auto& r : results) {
    if (StringAt(r, "driver") != driver) continue;
    // A result's request is "req" or "req/subrequest"; a container names "req".
    const std::string of = StringAt(r, "request");
    if (request.empty() || of.substr(0, of.find('/')) == request) return true;
  }
  return false;
}

Status CheckOneClaimPerContainer(const Json& claim, const ContainerClaimCheck& check) {
  const std::string ns = StringAt(At(claim, "metadata"), "namespace");
  const std::string name = StringAt(At(claim, "metadata"), "name");
  const Json& reserved = At(At(claim, "status"), "reservedFor");
  if (!reserved.is_array()) return Status::Ok();

  auto out_of_time = [&](const std::string& what) -> Status {
    if (std::chrono::steady_clock::now() < check.deadline) return Status::Ok();
    return Error{"not prepared: " + what +
                 " could not be checked for a second tessera claim in one container before the call's "
                 "deadline; the kubelet calls again"};
  };
  std::map<std::string, std::optional<Json>> claims;  // read once per call
  claims[name] = claim;

  for (const auto& consumer : reserved) {
    // Only pods use claims today; other consumers have no containers here.
    if (!StringAt(consumer, "apiGroup").empty() || StringAt(consumer, "resource") != "pods") continue;
    const std::string pod_name = StringAt(consumer, "name");
    const std::string pod_ref = "pod " + ns + "/" + pod_name;
    TESSERA_RETURN_IF_ERROR(out_of_time(pod_ref));
    auto pod = check.read_pod(ns, pod_name);
    if (!pod.ok()) {
      return Error{"cannot read " + pod_ref + " (the claim is reserved for it) to check its containers: " +
                   pod.error().message + "; the kubelet calls again"};
    }
    // Gone, or another pod under the name: it cannot run with this claim.
    if (!pod->has_value() || StringAt(At(**pod, "metadata"), "uid") != StringAt(consumer, "uid")) continue;

    for (const auto& container : ContainersWithClaims(**pod)) {
      const bool uses_this = std::any_of(
          container.claims.begin(), container.claims.end(),
          [&](const auto& r) { return r.claim == name && GetsDeviceOf(claim, check.driver, r.request); });
      if (!uses_this) continue;
      std::set<std::string> tessera_claims;
      for (const auto& ref : container.claims) {
        auto it = claims.find(ref.claim);
        if (it == claims.end()) {
          TESSERA_RETURN_IF_ERROR(out_of_time(pod_ref));
          auto read = check.read_claim(ns, ref.claim);
          if (!read.ok()) {
            return Error{"cannot read ResourceClaim " + ns + "/" + ref.claim + " of " + pod_ref +
                         " to check its containers: " + read.error().message + "; the kubelet calls again"};
          }
          it = claims.emplace(ref.claim, std::move(*read)).first;
        }
        // A claim that is gone cannot be given to the container.
        if (it->second.has_value() && GetsDeviceOf(*it->second, check.driver, ref.request))
          tessera_claims.insert(ref.claim);
      }
      if (tessera_claims.size() < 2) continue;
      std::string list;
      for (const auto& c : tessera_claims) list += (list.empty() ? "" : ", ") + ns + "/" + c;
      return Error{pod_ref + ": " + (container.init ? "init container" : "container") + " '" +
                   container.container + "' would get " + std::to_string(tessera_claims.size()) +
                   " claims of " + check.driver + " (" + list +
                   "), but a container may hold one: each mounts its limits at " +
                   contract::kLimitsContainerDir +
                   ", one would hide the other's; ask for the devices in one claim, or give each claim its "
                   "own container"};
    }
  }
  return Status::Ok();
}

}  // namespace tessera::dra
