// FakeApiServer: an in-process stand-in of the Kubernetes API server for tests.
//
// It speaks the real REST and watch protocol for pods, nodes, events (core/v1)
// and leases (coordination.k8s.io/v1), so the code under test talks to it
// exactly as it would to a cluster:
//  - one resourceVersion counter across all objects, strictly increasing;
//    lists carry metadata.resourceVersion;
//  - GET ?watch=true&resourceVersion=N streams, chunked, one JSON event per
//    line, every change after N (ADDED/MODIFIED/DELETED, BOOKMARK when
//    allowWatchBookmarks=true, ERROR); without N (or N=0) it first sends the
//    current objects as ADDED; timeoutSeconds ends the stream;
//  - a bounded event history: a watch from a version older than the history
//    gets an ERROR event with a Status of code 410 (reason Expired), or an
//    HTTP 410 when SetGoneAsHttpStatus(true);
//  - objects leaving/entering a watch's selectors become DELETED/ADDED;
//  - 409 Conflict on a stale resourceVersion (PUT, or a merge patch naming
//    one) and on creating an existing name (reason AlreadyExists); 404 with a
//    Status body; JSON merge patch (RFC 7386); status subresources;
//  - pods/<name>/binding (and POST .../bindings): sets spec.nodeName, merges
//    the Binding's metadata.annotations into the pod, 409 if already bound;
//  - label selectors (=, ==, !=, exists, !exists, in, notin) and the field
//    selectors the real server supports for these kinds.
// Not implemented: pagination (limit/continue), graceful pod deletion (deletes
// are immediate), strategic-merge and JSON patch (415), admission, defaulting
// beyond pod phase, validation beyond names and namespaces.
//
// Test hooks: fault injection (status codes, garbage bodies, delays), dropping
// all watch streams, compacting the history (forcing 410), bookmarks on
// demand, a request log, and an optional bearer-token check.
//
// Thread-safety: all public methods may be called from any thread while the
// server runs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace tessera::testing {

using Json = nlohmann::json;

struct FakeApiServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                  // 0: pick a free port
  size_t history_limit = 10000;  // events kept for watches to resume from
  std::chrono::milliseconds bookmark_interval{1000};
  int default_watch_timeout_seconds = 1800;
  std::string bearer_token;    // non-empty: require "Authorization: Bearer <token>"
  size_t threads = 64;         // HTTP worker threads (each open watch holds one)
  int keep_alive_seconds = 2;  // idle keep-alive; bounds how long Stop() waits
};

struct Fault {
  enum class Kind {
    kStatus,   // answer `status` with a Status body
    kGarbage,  // answer 200 with a body that is not JSON (watches: one garbage line, then end)
    kDelay,    // wait `delay`, then serve normally
  };
  enum class Applies { kAll, kWatchOnly, kNonWatch };
  Kind kind = Kind::kStatus;
  std::string method;         // "" = any
  std::string path_contains;  // "" = any path
  Applies applies_to = Applies::kAll;
  int status = 500;
  std::chrono::milliseconds delay{0};
  int times = -1;  // how many requests it hits; -1 = until ClearFaults()
};

struct RequestRecord {
  std::string method;
  std::string path;    // without query
  std::string target;  // with query
  std::string content_type;
  std::string body;
  bool watch = false;
  int status = 0;  // for watches: the status the stream started with
};

class FakeApiServer {
 public:
  explicit FakeApiServer(FakeApiServerOptions options = {});
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  // Starts listening (again, on the same port after a Stop()). Objects persist
  // across Stop()/Start(), like etcd behind an API server restart.
  tessera::Status Start();
  // Stops listening and ends every watch; in-flight requests finish.
  void Stop();
  bool running() const;
  int port() const;
  std::string url() const;  // http://127.0.0.1:<port>

  // Direct store access, with the same semantics (and watch events) as REST.
  // `plural` is "pods", "nodes", "events" or "leases".
  tessera::Result<Json> CreateObject(const std::string& plural, Json object);
  std::optional<Json> GetObject(const std::string& plural, const std::string& ns,
                                const std::string& name) const;
  std::vector<Json> ListObjects(const std::string& plural) const;
  uint64_t CurrentResourceVersion() const;

  // Fault injection.
  void AddFault(Fault fault);
  void ClearFaults();
  void DropWatches();                   // abruptly ends every open watch stream
  void CompactHistory();                // forgets every event so far: older watches get 410
  void SetGoneAsHttpStatus(bool http);  // 410 as HTTP status instead of an ERROR event
  void SendBookmarks();                 // a BOOKMARK now on each watch that allows them
  size_t ActiveWatches() const;

  std::vector<RequestRecord> Requests() const;
  void ClearRequests();

 public:
  // Implementation details, declared here so the .cc's helpers can name them.
  struct Kind;
  struct Route;
  struct WatchState;

 private:
  struct HistoryEvent {
    uint64_t rv;
    std::string plural;
    std::string type;  // ADDED/MODIFIED/DELETED
    Json object;
    Json prev;  // null when none
  };

  void Handle(const httplib::Request& req, httplib::Response& res);
  void Serve(const Route& route, const httplib::Request& req, httplib::Response& res, RequestRecord* record);
  void ServeList(const Route& route, const httplib::Request& req, httplib::Response& res);
  void ServeWatch(const Route& route, const httplib::Request& req, httplib::Response& res, bool garbage);
  void ServeCreate(const Route& route, const httplib::Request& req, httplib::Response& res);
  void ServeUpdate(const Route& route, const httplib::Request& req, httplib::Response& res);
  void ServePatch(const Route& route, const httplib::Request& req, httplib::Response& res);
  void ServeDelete(const Route& route, httplib::Response& res);
  void ServeBinding(const Route& route, const Json& binding, httplib::Response& res);

  // Store mutations; mu_ must be held. Return the HTTP status and body.
  std::pair<int, Json> CreateLocked(const Kind& kind, const std::string& ns, Json object);
  std::pair<int, Json> ReplaceLocked(const Kind& kind, const std::string& ns, const std::string& name,
                                     const std::string& subresource, Json object);
  void RecordEventLocked(const std::string& plural, const std::string& type, const Json& object,
                         const Json& prev);
  uint64_t NextRvLocked();

  const FakeApiServerOptions options_;
  int port_ = 0;
  std::unique_ptr<httplib::Server> http_;
  std::thread listener_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::map<std::string, Json>> objects_;  // guarded by mu_; plural -> key -> object
  uint64_t rv_ = 1;                                             // guarded by mu_; last issued resourceVersion
  std::deque<HistoryEvent> history_;                            // guarded by mu_; ascending rv
  uint64_t compacted_rv_ = 0;            // guarded by mu_; events at or below are forgotten
  bool gone_as_http_ = false;            // guarded by mu_
  uint64_t drop_generation_ = 0;         // guarded by mu_
  uint64_t bookmark_generation_ = 0;     // guarded by mu_
  bool stopping_ = false;                // guarded by mu_
  size_t active_watches_ = 0;            // guarded by mu_
  std::vector<Fault> faults_;            // guarded by mu_
  std::vector<RequestRecord> requests_;  // guarded by mu_
  uint64_t uid_counter_ = 0;             // guarded by mu_
};

}  // namespace tessera::testing
