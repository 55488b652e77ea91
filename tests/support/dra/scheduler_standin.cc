#include "dra/scheduler_standin.h"

#include <httplib.h>

#include <algorithm>
#include <map>

namespace tessera::testing::dra {
namespace {

constexpr const char* kResourceApi = "/apis/resource.k8s.io/v1";

AllocationFailure ApiFailure(const std::string& message) {
  AllocationFailure failure;
  failure.kind = AllocationFailure::Kind::kApi;
  failure.message = message;
  return failure;
}

std::vector<Json> Items(const Json& list) {
  std::vector<Json> out;
  if (list.contains("items") && list["items"].is_array()) {
    for (const Json& item : list["items"]) out.push_back(item);
  }
  return out;
}

}  // namespace

DraSchedulerStandIn::DraSchedulerStandIn(Options options) : options_(std::move(options)) {}

Result<Json> DraSchedulerStandIn::Get(const std::string& path) {
  httplib::Client client(options_.api_url);
  httplib::Headers headers;
  if (!options_.bearer_token.empty()) headers.emplace("Authorization", "Bearer " + options_.bearer_token);
  auto response = client.Get(path, headers);
  if (!response) return Error{"GET " + path + ": " + httplib::to_string(response.error())};
  Json body = Json::parse(response->body, nullptr, false);
  if (response->status != 200 || body.is_discarded()) {
    return Error{"GET " + path + ": HTTP " + std::to_string(response->status) + " " + response->body};
  }
  return body;
}

Result<Json> DraSchedulerStandIn::Put(const std::string& path, const Json& object) {
  httplib::Client client(options_.api_url);
  httplib::Headers headers;
  if (!options_.bearer_token.empty()) headers.emplace("Authorization", "Bearer " + options_.bearer_token);
  auto response = client.Put(path, headers, object.dump(), "application/json");
  if (!response) return Error{"PUT " + path + ": " + httplib::to_string(response.error())};
  Json body = Json::parse(response->body, nullptr, false);
  if (response->status != 200 || body.is_discarded()) {
    const std::string message =
        body.is_object() && body.contains("message") ? body["message"].get<std::string>() : response->body;
    return Error{"PUT " + path + ": HTTP " + std::to_string(response->status) + ": " + message};
  }
  return body;
}

Result<std::vector<Json>, AllocationFailure> DraSchedulerStandIn::ScheduleOnNode(
    const std::string& ns, const std::vector<std::string>& claim_names, const std::string& node_name,
    const Pod& pod) {
  return Schedule(ns, claim_names, Json{{"metadata", {{"name", node_name}}}}, pod);
}

Result<std::vector<Json>, AllocationFailure> DraSchedulerStandIn::Schedule(
    const std::string& ns, const std::vector<std::string>& claim_names, const Json& node, const Pod& pod) {
  // What the informers would hold.
  ClusterState state;
  for (const char* plural : {"deviceclasses", "resourceslices", "resourceclaims"}) {
    auto list = Get(std::string(kResourceApi) + "/" + plural);
    if (!list.ok()) return ApiFailure(list.error().message);
    std::vector<Json>& into = std::string(plural) == "deviceclasses"    ? state.device_classes
                              : std::string(plural) == "resourceslices" ? state.resource_slices
                                                                        : state.resource_claims;
    into = Items(*list);
  }
  std::vector<Json> claims;
  std::vector<Json> to_allocate;
  for (const auto& name : claim_names) {
    auto claim = Get(std::string(kResourceApi) + "/namespaces/" + ns + "/resourceclaims/" + name);
    if (!claim.ok()) return ApiFailure(claim.error().message);
    claims.push_back(*claim);
    if (!claim->contains("status") || !(*claim)["status"].contains("allocation"))
      to_allocate.push_back(*claim);
  }

  std::vector<Json> allocations;
  if (!to_allocate.empty()) {
    Allocator allocator(std::move(state), options_.allocator);
    auto allocated = allocator.Allocate(node, to_allocate);
    if (!allocated.ok()) return allocated.error();
    allocations = std::move(*allocated);
  }

  std::vector<Json> written;
  size_t next_allocation = 0;
  for (Json claim : claims) {
    const std::string name = claim["metadata"]["name"].get<std::string>();
    const std::string path = std::string(kResourceApi) + "/namespaces/" + ns + "/resourceclaims/" + name;
    const bool allocate = !claim.contains("status") || !claim["status"].contains("allocation");
    if (allocate) {
      // The finalizer first, so that the claim cannot vanish while allocated.
      Json& finalizers = claim["metadata"]["finalizers"];
      if (!finalizers.is_array()) finalizers = Json::array();
      if (std::find(finalizers.begin(), finalizers.end(), kFinalizer) == finalizers.end()) {
        finalizers.push_back(kFinalizer);
        auto updated = Put(path, claim);
        if (!updated.ok()) return ApiFailure(updated.error().message);
        claim = *updated;
      }
      claim["status"]["allocation"] = allocations[next_allocation++];
    }
    Json& reserved = claim["status"]["reservedFor"];
    if (!reserved.is_array()) reserved = Json::array();
    const Json consumer = {{"resource", "pods"}, {"name", pod.name}, {"uid", pod.uid}};
    const bool already = std::any_of(reserved.begin(), reserved.end(), [&](const Json& r) {
      return r.value("resource", "") == "pods" && r.value("uid", "") == pod.uid;
    });
    if (!already) reserved.push_back(consumer);
    auto updated = Put(path + "/status", claim);
    if (!updated.ok()) return ApiFailure(updated.error().message);
    written.push_back(*updated);
  }
  return written;
}

std::vector<std::string> DraSchedulerStandIn::ClaimNamesOf(const Json& pod) {
  std::map<std::string, std::string> generated;
  if (pod.contains("status") && pod["status"].contains("resourceClaimStatuses")) {
    for (const auto& s : pod["status"]["resourceClaimStatuses"]) {
      if (s.contains("resourceClaimName")) generated[s.value("name", "")] = s["resourceClaimName"];
    }
  }
  std::vector<std::string> names;
  if (!pod.contains("spec") || !pod["spec"].contains("resourceClaims")) return names;
  for (const auto& entry : pod["spec"]["resourceClaims"]) {
    std::string claim = entry.value("resourceClaimName", "");
    if (claim.empty()) {
      auto it = generated.find(entry.value("name", ""));
      if (it == generated.end()) continue;
      claim = it->second;
    }
    if (std::find(names.begin(), names.end(), claim) == names.end()) names.push_back(claim);
  }
  return names;
}

Result<std::vector<Json>, AllocationFailure> DraSchedulerStandIn::SchedulePod(const Json& pod,
                                                                              const std::string& node_name) {
  const Json& meta = pod.at("metadata");
  return ScheduleOnNode(meta.value("namespace", "default"), ClaimNamesOf(pod), node_name,
                        {meta.value("name", ""), meta.value("uid", "")});
}

Json DraSchedulerStandIn::ClaimFromTemplate(const Json& claim_template, const Json& pod,
                                            const std::string& pod_claim_name) {
  const Json& pod_meta = pod["metadata"];
  const std::string pod_name = pod_meta.value("name", "");
  Json metadata = {{"generateName", pod_name + "-" + pod_claim_name + "-"},
                   {"namespace", pod_meta.value("namespace", "default")}};
  const Json template_meta = claim_template.contains("spec") && claim_template["spec"].contains("metadata")
                                 ? claim_template["spec"]["metadata"]
                                 : Json::object();
  if (template_meta.contains("labels")) metadata["labels"] = template_meta["labels"];
  metadata["annotations"] =
      template_meta.contains("annotations") ? template_meta["annotations"] : Json::object();
  metadata["annotations"][kPodClaimNameAnnotation] = pod_claim_name;
  metadata["ownerReferences"] = Json::array({{{"apiVersion", "v1"},
                                              {"kind", "Pod"},
                                              {"name", pod_name},
                                              {"uid", pod_meta.value("uid", "")},
                                              {"controller", true},
                                              {"blockOwnerDeletion", true}}});
  Json spec = claim_template.contains("spec") && claim_template["spec"].contains("spec")
                  ? claim_template["spec"]["spec"]
                  : Json::object();
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", metadata},
          {"spec", spec}};
}

}  // namespace tessera::testing::dra
