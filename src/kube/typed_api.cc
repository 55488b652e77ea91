#include "kube/typed_api.h"

#include <cstdio>
#include <ctime>
#include <random>

namespace tessera::kube {
namespace {

Json ToPatchObject(const StringPatch& entries) {
  Json j = Json::object();
  for (const auto& [k, v] : entries) j[k] = v ? Json(*v) : Json(nullptr);
  return j;
}

std::string RandomSuffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* alphabet = "bcdfghjklmnpqrstvwxz2456789";
  std::string s;
  for (int i = 0; i < 8; ++i) s += alphabet[rng() % 27];
  return s;
}

}  // namespace

// ---- pods -----------------------------------------------------------------

ApiResult<Json> PodsApi::Get(const std::string& ns, const std::string& name) {
  return client_->Get(resources::kPods, ns, name);
}
ApiResult<ObjectList> PodsApi::List(const std::string& ns, const ListOptions& options) {
  return client_->List(resources::kPods, ns, options);
}
ApiStatus PodsApi::Watch(const std::string& ns, const WatchOptions& options,
                         const std::function<bool(WatchEvent&&)>& on_event, const std::atomic<bool>* cancel) {
  return client_->Watch(resources::kPods, ns, options, on_event, cancel);
}
ApiResult<Json> PodsApi::Create(const std::string& ns, Json pod) {
  return client_->Create(resources::kPods, ns, std::move(pod));
}
ApiStatus PodsApi::Delete(const std::string& ns, const std::string& name) {
  return client_->Delete(resources::kPods, ns, name);
}
ApiResult<Json> PodsApi::UpdateStatus(const std::string& ns, Json pod) {
  return client_->UpdateStatus(resources::kPods, ns, std::move(pod));
}
ApiResult<Json> PodsApi::PatchAnnotations(const std::string& ns, const std::string& name,
                                          const StringPatch& annotations) {
  Json patch;
  patch["metadata"]["annotations"] = ToPatchObject(annotations);
  return client_->MergePatch(resources::kPods, ns, name, patch);
}

ApiStatus PodsApi::Bind(const std::string& ns, const std::string& name, const std::string& node,
                        const std::map<std::string, std::string>& annotations) {
  Json binding = {{"apiVersion", "v1"},
                  {"kind", "Binding"},
                  {"metadata", {{"name", name}, {"namespace", ns}}},
                  {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  if (!annotations.empty()) binding["metadata"]["annotations"] = annotations;
  TESSERA_RETURN_IF_ERROR(client_->CreateSubresource(resources::kPods, ns, name, "binding", binding));
  return ApiStatus::Ok();
}

// ---- nodes ----------------------------------------------------------------

ApiResult<Json> NodesApi::Get(const std::string& name) {
  return client_->Get(resources::kNodes, "", name);
}
ApiResult<ObjectList> NodesApi::List(const ListOptions& options) {
  return client_->List(resources::kNodes, "", options);
}
ApiStatus NodesApi::Watch(const WatchOptions& options, const std::function<bool(WatchEvent&&)>& on_event,
                          const std::atomic<bool>* cancel) {
  return client_->Watch(resources::kNodes, "", options, on_event, cancel);
}
ApiResult<Json> NodesApi::Create(Json node) {
  return client_->Create(resources::kNodes, "", std::move(node));
}
ApiStatus NodesApi::Delete(const std::string& name) {
  return client_->Delete(resources::kNodes, "", name);
}
ApiResult<Json> NodesApi::PatchAnnotations(const std::string& name, const StringPatch& annotations) {
  Json patch;
  patch["metadata"]["annotations"] = ToPatchObject(annotations);
  return client_->MergePatch(resources::kNodes, "", name, patch);
}
ApiResult<Json> NodesApi::PatchLabels(const std::string& name, const StringPatch& labels) {
  Json patch;
  patch["metadata"]["labels"] = ToPatchObject(labels);
  return client_->MergePatch(resources::kNodes, "", name, patch);
}

// ---- leases ---------------------------------------------------------------

std::string FormatMicroTime(Clock::Wall t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(us / 1000000);
  long frac = static_cast<long>(us % 1000000);
  if (frac < 0) {
    frac += 1000000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  return buf;
}

tessera::Result<Clock::Wall> ParseMicroTime(const std::string& text) {
  int y, mo, d, h, mi, s;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &consumed) != 6) {
    return tessera::Error{"invalid time \"" + text +
                          "\": expected RFC 3339, e.g. 2030-01-01T00:00:00.000000Z"};
  }
  size_t pos = static_cast<size_t>(consumed);
  long micros = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int digits = 0;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
      if (digits < 6) micros = micros * 10 + (text[pos] - '0');
      ++digits;
      ++pos;
    }
    for (int i = digits; i < 6; ++i) micros *= 10;
  }
  long offset_s = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    int oh = 0, om = 0;
    if (std::sscanf(text.c_str() + pos + 1, "%2d:%2d", &oh, &om) != 2) {
      return tessera::Error{"invalid time zone offset in \"" + text + "\""};
    }
    offset_s = (oh * 3600L + om * 60L) * (text[pos] == '-' ? -1 : 1);
    pos += 6;
  } else {
    return tessera::Error{"invalid time \"" + text + "\": missing time zone (Z or +hh:mm)"};
  }
  if (pos != text.size()) return tessera::Error{"invalid time \"" + text + "\": trailing characters"};
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  const std::time_t secs = timegm(&tm) - offset_s;
  return Clock::Wall{} + std::chrono::duration_cast<Clock::Wall::duration>(std::chrono::seconds(secs) +
                                                                           std::chrono::microseconds(micros));
}

Json LeaseRecord::ToJson() const {
  Json j = {{"apiVersion", "coordination.k8s.io/v1"}, {"kind", "Lease"}};
  j["metadata"]["name"] = name;
  j["metadata"]["namespace"] = namespace_;
  if (!resource_version.empty()) j["metadata"]["resourceVersion"] = resource_version;
  Json spec = Json::object();
  if (!holder_identity.empty()) spec["holderIdentity"] = holder_identity;
  spec["leaseDurationSeconds"] = lease_duration_seconds;
  if (acquire_time) spec["acquireTime"] = FormatMicroTime(*acquire_time);
  if (renew_time) spec["renewTime"] = FormatMicroTime(*renew_time);
  spec["leaseTransitions"] = lease_transitions;
  j["spec"] = spec;
  return j;
}

tessera::Result<LeaseRecord> LeaseRecord::FromJson(const Json& lease) {
  LeaseRecord r;
  r.name = NameOf(lease);
  r.namespace_ = NamespaceOf(lease);
  r.resource_version = ResourceVersionOf(lease);
  if (!lease.contains("spec") || lease["spec"].is_null()) return r;
  const Json& spec = lease["spec"];
  if (!spec.is_object()) return tessera::Error{"lease " + r.name + ": spec is not an object"};
  if (spec.contains("holderIdentity") && spec["holderIdentity"].is_string()) {
    r.holder_identity = spec["holderIdentity"].get<std::string>();
  }
  if (spec.contains("leaseDurationSeconds") && spec["leaseDurationSeconds"].is_number_integer()) {
    r.lease_duration_seconds = spec["leaseDurationSeconds"].get<int>();
  }
  if (spec.contains("leaseTransitions") && spec["leaseTransitions"].is_number_integer()) {
    r.lease_transitions = spec["leaseTransitions"].get<int>();
  }
  for (const char* field : {"acquireTime", "renewTime"}) {
    if (!spec.contains(field) || spec[field].is_null()) continue;
    if (!spec[field].is_string())
      return tessera::Error{"lease " + r.name + ": spec." + field + " is not a string"};
    auto& slot = std::string(field) == "acquireTime" ? r.acquire_time : r.renew_time;
    TESSERA_ASSIGN_OR_RETURN_WRAP(slot, ParseMicroTime(spec[field].get<std::string>()),
                                  "lease " + r.name + ": spec." + field);
  }
  return r;
}

namespace {
ApiResult<LeaseRecord> ToLease(ApiResult<Json> r, const std::string& what) {
  TESSERA_ASSIGN_OR_RETURN(const Json object, std::move(r));
  auto lease = LeaseRecord::FromJson(object);
  if (!lease.ok()) return ApiError{200, "InvalidResponse", what + ": " + lease.error().message};
  return std::move(lease).value();
}
}  // namespace

ApiResult<LeaseRecord> LeasesApi::Get(const std::string& ns, const std::string& name,
                                      std::chrono::milliseconds timeout) {
  return ToLease(client_->Get(resources::kLeases, ns, name, timeout), "get lease " + ns + "/" + name);
}

ApiResult<LeaseRecord> LeasesApi::Create(const LeaseRecord& lease, std::chrono::milliseconds timeout) {
  Json j = lease.ToJson();
  j["metadata"].erase("resourceVersion");
  return ToLease(client_->Create(resources::kLeases, lease.namespace_, j, timeout),
                 "create lease " + lease.name);
}

ApiResult<LeaseRecord> LeasesApi::Update(const LeaseRecord& lease, std::chrono::milliseconds timeout) {
  return ToLease(client_->Update(resources::kLeases, lease.namespace_, lease.ToJson(), timeout),
                 "update lease " + lease.name);
}

// ---- events ---------------------------------------------------------------

Json MakeObjectReference(const Json& object) {
  Json ref = Json::object();
  for (const char* f : {"kind", "apiVersion"}) {
    if (object.contains(f)) ref[f] = object[f];
  }
  if (object.contains("metadata") && object["metadata"].is_object()) {
    const Json& m = object["metadata"];
    for (const char* f : {"namespace", "name", "uid", "resourceVersion"}) {
      if (m.contains(f)) ref[f] = m[f];
    }
  }
  return ref;
}

ApiResult<Json> EventsApi::Create(const std::string& ns, const EventSpec& spec) {
  Clock* clock = OrRealClock(clock_);
  const auto now = clock->WallNow();
  std::string rfc3339 = FormatMicroTime(now);
  rfc3339 = rfc3339.substr(0, 19) + "Z";  // Time (seconds) for first/lastTimestamp
  const std::string object_name = spec.involved_object.value("name", std::string("object"));
  Json ev = {{"apiVersion", "v1"}, {"kind", "Event"}};
  ev["metadata"]["name"] = object_name + "." + RandomSuffix();
  ev["metadata"]["namespace"] = ns;
  ev["involvedObject"] = spec.involved_object;
  ev["reason"] = spec.reason;
  ev["message"] = spec.message;
  ev["type"] = spec.type;
  ev["count"] = 1;
  ev["firstTimestamp"] = rfc3339;
  ev["lastTimestamp"] = rfc3339;
  ev["eventTime"] = nullptr;
  if (!spec.component.empty()) {
    ev["source"]["component"] = spec.component;
    ev["reportingComponent"] = spec.component;
  }
  if (!spec.instance.empty()) ev["reportingInstance"] = spec.instance;
  return client_->Create(resources::kEvents, ns, ev);
}

}  // namespace tessera::kube
