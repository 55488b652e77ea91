// Informer: a list+watch cache of one kind of object, with event handlers.
//
// Behaviour (the same contract as client-go's reflector):
//  - Lists, then watches from the list's resourceVersion with
//    allowWatchBookmarks=true; every event and BOOKMARK advances the tracked
//    resourceVersion, so a reconnect resumes exactly where the stream ended.
//  - When the server says the version is too old (HTTP 410, or an ERROR event
//    whose Status code is 410) it relists and delivers the difference between
//    the cache and the new list to the handlers: adds, updates (objects whose
//    resourceVersion changed) and deletes (objects no longer listed).
//  - Any other failure (connection refused, 5xx, garbage on the stream) is
//    retried with exponential backoff and jitter; a failed list keeps the old
//    cache; a garbage line on a watch stream is never applied.
//  - Logs (base/log.h) the first failure of an outage at warn, the retries at
//    debug, and the recovery (a list that succeeds, or a watch that delivers)
//    at info with the number of failed attempts; relists after 410 Gone are
//    routine and logged at debug.
//
// Handlers run on the informer's own thread, one at a time and in event order;
// they must not call Stop(). The store may be read from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kube/client.h"

namespace tessera::kube {

struct ResourceEventHandler {
  std::function<void(const Json& object)> on_add;
  std::function<void(const Json& old_object, const Json& new_object)> on_update;
  std::function<void(const Json& last_known)> on_delete;
};

struct InformerOptions {
  ResourceType type;
  std::string ns;  // "" = all namespaces (or a cluster-scoped type)
  std::string label_selector;
  std::string field_selector;
  std::chrono::milliseconds initial_backoff{250};
  std::chrono::milliseconds max_backoff{30000};
  double jitter = 0.5;  // each backoff is multiplied by a random factor in [1, 1 + jitter]
  int watch_timeout_seconds = 300;
};

// Counters for observability and tests.
struct InformerStats {
  uint64_t lists = 0;      // successful lists (the first one included)
  uint64_t relists = 0;    // lists after the first, because of 410 Gone
  uint64_t watches = 0;    // watch requests started
  uint64_t failures = 0;   // failed list/watch attempts
  std::string last_error;  // message of the latest failure
};

class Informer {
 public:
  Informer(Client* client, InformerOptions options);
  ~Informer();  // stops
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // Handlers must be added before Start().
  void AddHandler(ResourceEventHandler handler);
  void Start();
  void Stop();

  bool HasSynced() const { return synced_.load(); }
  // Waits (real time) until the first list has been applied.
  bool WaitForSync(std::chrono::milliseconds timeout) const;

  // Thread-safe reads of the cache.
  std::vector<Json> List() const;
  std::optional<Json> Get(const std::string& key) const;  // "ns/name" or "name"
  size_t Size() const;
  std::string LastResourceVersion() const;
  InformerStats Stats() const;

 private:
  void Run();
  bool ListAndReplace();  // false on failure
  ApiStatus WatchOnce();
  void Apply(WatchEvent&& event);
  void SleepBackoff();
  // Counts a failed list or watch (`what`) and logs it, once per outage at warn.
  void RecordFailure(const char* what, const ApiError& e);
  // A list or watch worked: ends an outage (logged).
  void RecordSuccess();
  // For the log: "pods", or "pods (spec.nodeName=gpu-1)" with selectors.
  std::string Described() const;

  Client* const client_;
  const InformerOptions options_;
  std::vector<ResourceEventHandler> handlers_;  // written before Start only

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, Json> store_;  // guarded by mu_
  std::string resource_version_;       // guarded by mu_
  InformerStats stats_;                // guarded by mu_
  std::atomic<bool> synced_{false};
  std::atomic<bool> stop_{false};
  std::chrono::milliseconds backoff_{0};  // informer thread only
  uint64_t events_in_watch_ = 0;          // informer thread only
  int consecutive_gone_ = 0;              // informer thread only
  uint64_t outage_failures_ = 0;          // informer thread only: failed attempts since the last success
  std::mt19937 rng_{std::random_device{}()};
  std::thread thread_;
};

}  // namespace tessera::kube
