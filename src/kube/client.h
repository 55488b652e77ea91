// Client: REST access to Kubernetes API objects, as JSON, over a Transport.
//
// Objects are nlohmann::json values in the API's own wire form, so nothing is
// lost between read and write. Every call goes through the client-side rate
// limiter (QPS + burst) and carries a timeout. Failures are ApiErrors: HTTP
// answers keep their status and the server's Status.message; a 2xx answer
// that is not the JSON we expect is an error with reason "InvalidResponse".
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "kube/api_error.h"
#include "kube/rate_limiter.h"
#include "kube/selected_json.h"
#include "kube/transport.h"

namespace tessera::kube {

using Json = nlohmann::json;

// Where a kind of object lives in the REST tree.
struct ResourceType {
  std::string api_prefix;   // "/api/v1" or "/apis/coordination.k8s.io/v1"
  std::string api_version;  // "v1" or "coordination.k8s.io/v1"
  std::string kind;         // "Pod"
  std::string plural;       // "pods"
  bool namespaced = true;

  // Collection path; for a namespaced type an empty namespace means all namespaces.
  std::string CollectionPath(const std::string& ns) const;
  std::string ObjectPath(const std::string& ns, const std::string& name) const;
};

namespace resources {
extern const ResourceType kPods;
extern const ResourceType kNodes;
extern const ResourceType kLeases;
extern const ResourceType kEvents;
}  // namespace resources

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // "" = most recent (a quorum read)
  // Pagination: at most `limit` items per answer (0 = all at once); a next
  // page passes the previous answer's continue_token. An expired token is a
  // 410 (IsGone()): list again from the start.
  int64_t limit = 0;
  std::string continue_token{};
  // When set, each item is decoded with only these fields (selected_json.h;
  // the rest is checked and skipped, never built), kind and apiVersion put
  // back as for any item. A body the selective parser cannot read is parsed
  // whole, so errors are as without it.
  std::shared_ptr<const FieldSelection> item_fields{};
};

struct ObjectList {
  std::string resource_version;  // the list's metadata.resourceVersion
  std::string continue_token{};  // metadata.continue: "" on the last page
  std::vector<Json> items;
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // start after this version
  bool allow_bookmarks = true;
  int timeout_seconds = 300;  // server-side end of the watch; 0 = server default
  // A streaming list (KEP-3157): the server first sends every current object
  // as ADDED, then a BOOKMARK annotated k8s.io/initial-events-end: "true",
  // then the changes. Sent with resourceVersionMatch=NotOlderThan (and
  // allowWatchBookmarks=true, which it requires); a server that does not
  // offer it refuses the request (4xx).
  bool send_initial_events = false;
  // When set, the object of each ADDED, MODIFIED and DELETED event is decoded
  // with only these fields (selected_json.h); BOOKMARK and ERROR events, and
  // any line the selective parser cannot read, are parsed whole as without it.
  std::shared_ptr<const FieldSelection> object_fields{};
};

// The annotation on the BOOKMARK that ends a streaming list's initial events.
inline constexpr std::string_view kInitialEventsEndAnnotation = "k8s.io/initial-events-end";

struct WatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark };
  Type type = Type::kAdded;
  Json object;
};
const char* WatchEventTypeName(WatchEvent::Type type);

struct ClientOptions {
  double qps = 50;  // <= 0 disables rate limiting
  int burst = 100;
  std::chrono::milliseconds timeout{30000};  // per request (not per watch)
  Clock* clock = nullptr;                    // nullptr: RealClock
};

class Client {
 public:
  Client(std::shared_ptr<Transport> transport, ClientOptions options = {});

  // `timeout` of zero means the client's default.
  ApiResult<Json> Get(const ResourceType& type, const std::string& ns, const std::string& name,
                      std::chrono::milliseconds timeout = {});
  // `cancel`, when given, aborts the request once it becomes true (reason "Cancelled").
  ApiResult<ObjectList> List(const ResourceType& type, const std::string& ns, const ListOptions& options = {},
                             const std::atomic<bool>* cancel = nullptr);
  // POST to the collection. The object's kind/apiVersion are filled in when absent.
  ApiResult<Json> Create(const ResourceType& type, const std::string& ns, Json object,
                         std::chrono::milliseconds timeout = {});
  // PUT of the whole object; with metadata.resourceVersion set this is a
  // compare-and-swap and a stale version fails with IsConflict().
  ApiResult<Json> Update(const ResourceType& type, const std::string& ns, Json object,
                         std::chrono::milliseconds timeout = {});
  // PUT to the status subresource.
  ApiResult<Json> UpdateStatus(const ResourceType& type, const std::string& ns, Json object);
  // PATCH with application/merge-patch+json (RFC 7386).
  ApiResult<Json> MergePatch(const ResourceType& type, const std::string& ns, const std::string& name,
                             const Json& patch, const std::string& subresource = "");
  ApiStatus Delete(const ResourceType& type, const std::string& ns, const std::string& name);
  // POST to a subresource (e.g. pods/<name>/binding); returns the answer body.
  ApiResult<Json> CreateSubresource(const ResourceType& type, const std::string& ns, const std::string& name,
                                    const std::string& subresource, const Json& body);

  // Streams watch events to `on_event` until it returns false, the server ends
  // the watch (returns Ok), `cancel` becomes true, or a failure. An ERROR event
  // becomes an ApiError carrying the Status in it (code 410 → IsGone()); a
  // line that is not a watch event is an "InvalidResponse" error. Events
  // before the failure have been delivered.
  ApiStatus Watch(const ResourceType& type, const std::string& ns, const WatchOptions& options,
                  const std::function<bool(WatchEvent&&)>& on_event,
                  const std::atomic<bool>* cancel = nullptr);

  RateLimiter& rate_limiter() { return limiter_; }

 private:
  // `body_fields`: decode the answer with only these fields (nullptr: whole).
  ApiResult<Json> Call(HttpRequest request, const FieldSelection* body_fields = nullptr);

  std::shared_ptr<Transport> transport_;
  ClientOptions options_;
  RateLimiter limiter_;
};

// Decodes a non-2xx answer into an ApiError (used by the client; exposed for tests).
ApiError ErrorFromResponse(const std::string& what, int status, const std::string& body);

// Percent-encodes a query parameter value.
std::string UrlEncode(const std::string& value);

// Object helpers (empty string / null when absent).
std::string NameOf(const Json& object);
std::string NamespaceOf(const Json& object);
std::string ResourceVersionOf(const Json& object);
std::string UidOf(const Json& object);
// metadata.annotations[key], or "" when absent or not a string.
std::string AnnotationOf(const Json& object, std::string_view key);
// A pod whose phase is Succeeded or Failed: its containers will not run again.
bool IsPodTerminal(const Json& pod);
// "namespace/name" for namespaced objects, "name" otherwise.
std::string KeyOf(const Json& object);

}  // namespace tessera::kube
