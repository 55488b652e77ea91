// Typed access to the objects tessera uses: pods, nodes, leases, events.
//
// Thin, stateless facades over Client that know each resource's path and the
// shape of the requests that change it (merge patches of annotations and
// labels, the pods/binding subresource, Lease records, v1 Events). Objects
// stay JSON; LeaseRecord is typed because leader election reasons about it.
//
// Thread-safety: as Client (all methods may be called concurrently).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "kube/client.h"

namespace tessera::kube {

// Values of an annotation/label patch: a string sets the key, nullopt removes it.
using StringPatch = std::map<std::string, std::optional<std::string>>;

class PodsApi {
 public:
  explicit PodsApi(Client* client) : client_(client) {}
  ApiResult<Json> Get(const std::string& ns, const std::string& name);
  // ns "" lists pods of all namespaces.
  ApiResult<ObjectList> List(const std::string& ns, const ListOptions& options = {});
  ApiStatus Watch(const std::string& ns, const WatchOptions& options,
                  const std::function<bool(WatchEvent&&)>& on_event,
                  const std::atomic<bool>* cancel = nullptr);
  ApiResult<Json> Create(const std::string& ns, Json pod);
  ApiStatus Delete(const std::string& ns, const std::string& name);
  ApiResult<Json> UpdateStatus(const std::string& ns, Json pod);
  ApiResult<Json> PatchAnnotations(const std::string& ns, const std::string& name,
                                   const StringPatch& annotations);
  // POST pods/<name>/binding: assigns the pod to `node` and, in the same
  // request, adds `annotations` to the pod. A pod that is already bound fails
  // with IsConflict().
  ApiStatus Bind(const std::string& ns, const std::string& name, const std::string& node,
                 const std::map<std::string, std::string>& annotations = {});

 private:
  Client* client_;
};

class NodesApi {
 public:
  explicit NodesApi(Client* client) : client_(client) {}
  ApiResult<Json> Get(const std::string& name);
  ApiResult<ObjectList> List(const ListOptions& options = {});
  ApiStatus Watch(const WatchOptions& options, const std::function<bool(WatchEvent&&)>& on_event,
                  const std::atomic<bool>* cancel = nullptr);
  ApiResult<Json> Create(Json node);
  ApiStatus Delete(const std::string& name);
  ApiResult<Json> PatchAnnotations(const std::string& name, const StringPatch& annotations);
  ApiResult<Json> PatchLabels(const std::string& name, const StringPatch& labels);

 private:
  Client* client_;
};

// coordination.k8s.io/v1 Lease spec, as leader election sees it.
struct LeaseRecord {
  std::string namespace_;
  std::string name;
  std::string resource_version;  // from the server; sent back on Update
  std::string holder_identity;   // "" = free
  int lease_duration_seconds = 0;
  std::optional<Clock::Wall> acquire_time;
  std::optional<Clock::Wall> renew_time;
  int lease_transitions = 0;

  Json ToJson() const;
  static tessera::Result<LeaseRecord> FromJson(const Json& lease);
};

// RFC 3339 with microseconds ("2030-01-01T00:00:00.000000Z"), the MicroTime format.
std::string FormatMicroTime(Clock::Wall t);
tessera::Result<Clock::Wall> ParseMicroTime(const std::string& text);

class LeasesApi {
 public:
  explicit LeasesApi(Client* client) : client_(client) {}
  ApiResult<LeaseRecord> Get(const std::string& ns, const std::string& name,
                             std::chrono::milliseconds timeout = {});
  // Fails with IsConflict() (reason AlreadyExists) when the lease exists.
  ApiResult<LeaseRecord> Create(const LeaseRecord& lease, std::chrono::milliseconds timeout = {});
  // Compare-and-swap on resource_version; a stale one fails with IsConflict().
  ApiResult<LeaseRecord> Update(const LeaseRecord& lease, std::chrono::milliseconds timeout = {});

 private:
  Client* client_;
};

// What an Event is about and what to say.
struct EventSpec {
  Json involved_object;  // {kind, namespace, name, uid, apiVersion}; see MakeObjectReference
  std::string reason;    // CamelCase, e.g. "FailedScheduling"
  std::string message;
  std::string type = "Normal";  // or "Warning"
  std::string component;        // source.component / reportingController
  std::string instance;         // reportingInstance (e.g. pod name)
};

// An ObjectReference to `object` (kind/apiVersion/namespace/name/uid/resourceVersion).
Json MakeObjectReference(const Json& object);

class EventsApi {
 public:
  EventsApi(Client* client, Clock* clock = nullptr) : client_(client), clock_(clock) {}
  // Creates a v1 Event in `ns` (usually the involved object's namespace).
  ApiResult<Json> Create(const std::string& ns, const EventSpec& spec);

 private:
  Client* client_;
  Clock* clock_;
};

}  // namespace tessera::kube
