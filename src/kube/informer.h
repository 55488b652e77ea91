// Informer: a list+watch cache of one kind of object, with event handlers.
//
// Behaviour (the same contract as client-go's reflector):
//  - Starts with a streaming list where the server offers it (a watch with
//    sendInitialEvents=true, KEP-3157: objects arrive one event at a time and
//    the BOOKMARK annotated k8s.io/initial-events-end completes the list),
//    else with a list read `page_size` objects per request (limit/continue),
//    so neither the whole list's bytes nor its JSON tree are ever held. A
//    server that refuses streaming lists (4xx) is not asked again; any other
//    failure of one falls back to a paginated list for that attempt.
//  - `transform`, when set, projects each object as it arrives (list item or
//    watch event) before it is stored or handed to a handler: the store keeps
//    only what the informer's readers use (client-go's TransformFunc).
//    `fields`, when set, goes further: only the selected fields of each
//    object are decoded at all (the rest is checked, not built).
//  - The store keeps each object packed (MessagePack, a fifth of a JSON
//    tree's size); List/Get/ForEach unpack what they return. On the first
//    list the handlers' on_add runs as each object arrives, so no tree of the
//    whole list is ever held; a relist (after 410) diffs against the store.
//  - Lists, then watches from the list's resourceVersion with
//    allowWatchBookmarks=true; every event and BOOKMARK advances the tracked
//    resourceVersion, so a reconnect resumes exactly where the stream ended.
//  - When the server says the version is too old (HTTP 410, or an ERROR event
//    whose Status code is 410) it relists and delivers the difference between
//    the cache and the new list to the handlers: adds, updates (objects whose
//    resourceVersion changed) and deletes (objects no longer listed).
//  - Any other failure (connection refused, 5xx, garbage on the stream) is
//    retried with exponential backoff and jitter; a failed list keeps the old
//    cache; a garbage line on a watch stream (or one longer than
//    kMaxStreamLineBytes) is never applied, and the state is listed again
//    rather than watched again from the same version.
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
  // Objects per list request (limit); 0 = the whole list in one answer.
  int64_t page_size = 500;
  // Try a streaming list (sendInitialEvents) before paginated lists.
  bool streaming_list = true;
  // Projects an object in place as it arrives (see above). It must keep the
  // name, namespace and resourceVersion; it runs on the informer's thread.
  std::function<void(Json& object)> transform{};
  // When set, objects are decoded with only these fields (selected_json.h:
  // the rest of each list item or watch event is checked and skipped, never
  // built); `transform` then runs on what was kept. It must select at least
  // what `transform` keeps, and the name, namespace and resourceVersion.
  std::shared_ptr<const FieldSelection> fields{};
};

// Counters for observability and tests.
struct InformerStats {
  uint64_t lists = 0;            // successful lists (the first one included)
  uint64_t relists = 0;          // lists after the first, because of 410 Gone
  uint64_t watches = 0;          // watch requests started
  uint64_t failures = 0;         // failed list/watch attempts
  uint64_t streaming_lists = 0;  // initial states received as a streaming list
  uint64_t pages = 0;            // list answers read (one per page)
  std::string last_error;        // message of the latest failure
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

  // Thread-safe reads of the cache. List() copies every object; ForEach
  // visits them in place under the informer's lock (`visit` must be quick and
  // must not call back into the informer).
  std::vector<Json> List() const;
  void ForEach(const std::function<void(const Json& object)>& visit) const;
  std::optional<Json> Get(const std::string& key) const;  // "ns/name" or "name"
  size_t Size() const;
  std::string LastResourceVersion() const;
  InformerStats Stats() const;

 private:
  void Run();
  bool ListAndReplace();  // false on failure
  // A streaming list, then the watch that follows it, until it ends. Sets
  // *listed once the initial state has replaced the store.
  ApiStatus StreamingListAndWatch(bool* listed);
  // An object as the store keeps it.
  struct Entry {
    std::string resource_version;
    std::vector<uint8_t> packed;  // MessagePack of the (transformed) object
  };
  static Entry Pack(const Json& object);
  static Json Unpack(const Entry& entry);
  // One object of the initial state (a list item or a streaming list's
  // event) into `fresh`; on the first list, on_add at once.
  void Collect(Json&& object, std::map<std::string, Entry>& fresh);
  // A first list failed after Collect told the handlers about `fresh`: keep
  // those in the store (not synced yet), so that the next attempt tells the
  // difference from them, deletions included.
  void KeepTold(std::map<std::string, Entry>& fresh);
  // Makes `fresh` the store and tells the handlers the difference (on the
  // first list only the adds Collect has not told).
  void Replace(std::map<std::string, Entry>&& fresh, const std::string& resource_version);
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
  // Written by the informer's thread only (under mu_), so that thread reads
  // it without the lock.
  std::map<std::string, Entry> store_;  // guarded by mu_
  std::string resource_version_;        // guarded by mu_
  InformerStats stats_;                 // guarded by mu_
  std::atomic<bool> synced_{false};
  std::atomic<bool> stop_{false};
  std::chrono::milliseconds backoff_{0};  // informer thread only
  uint64_t events_in_watch_ = 0;          // informer thread only
  int consecutive_gone_ = 0;              // informer thread only
  bool streaming_refused_ = false;        // informer thread only: the server has no streaming lists
  uint64_t outage_failures_ = 0;          // informer thread only: failed attempts since the last success
  std::mt19937 rng_{std::random_device{}()};
  std::thread thread_;
};

}  // namespace tessera::kube
