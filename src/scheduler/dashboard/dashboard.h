// Dashboard: tessera-scheduler's web dashboard — a JSON API and the pages
// that read it, served on their own listener (dashboard.port), every asset
// embedded in the binary (assets.h).
//
// Where the data comes from (docs/dashboard.md):
//  - nodes, inventories and GPU usage as allocated: the scheduler's
//    ClusterState, read through ViewBuilder (view.h);
//  - pods: a typed projection fed by the scheduler's pod informer (PodIndex);
//  - node addresses for scraping: the node informer (UpsertNode);
//  - usage as measured: UsageCollector, in the background;
//  - whether the API server answers: `deps.probe_api`, every 5 s on its own
//    thread, so a dead API server is reported (with the data as last known)
//    instead of blanking the page.
// A view is rebuilt every `refresh` by a background thread; a request reads
// the current view (a shared_ptr copy under a mutex) and renders outside every
// lock. No request does I/O beyond answering itself.
//
// Thread-safety: the informer hooks and accessors from any thread;
// Start/Stop from one controlling thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "base/http_listener.h"
#include "base/periodic_thread.h"
#include "base/result.h"
#include "core/resource_config.h"
#include "scheduler/cluster_state.h"
#include "scheduler/dashboard/pod_index.h"
#include "scheduler/dashboard/usage.h"
#include "scheduler/dashboard/view.h"

namespace tessera::scheduler::dashboard {

struct DashboardOptions {
  std::string bind_address = "0.0.0.0";
  int port = 8889;  // 0 = any free port (tests)
  UsageOptions usage;
  std::chrono::milliseconds refresh{1000};
  std::chrono::milliseconds api_probe_interval{5000};
  int threads = 4;  // HTTP workers
};

struct DashboardDeps {
  const ClusterState* state = nullptr;
  core::ResourceConfig resources;
  // Why the scheduler does not decide yet ("" = ready); unset = ready.
  std::function<std::string()> not_ready;
  // Asks the API server something cheap: "" when it answered (any HTTP
  // status), else the failure. Unset = never probed (shown as reachable).
  std::function<std::string()> probe_api;
  // The `tessera` policy's learned mix (empty = none yet); unset = none.
  std::function<MixInput()> learned_mix;
  UsageCollector::Fetch fetch;  // nullptr = HTTP(S)
};

class Dashboard {
 public:
  Dashboard(DashboardOptions options, DashboardDeps deps);
  ~Dashboard();  // Stop()
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  // Informer hooks (objects are core/v1 Node / Pod JSON).
  void UpsertNode(const nlohmann::json& node);
  void DeleteNode(const nlohmann::json& node);
  void UpsertPod(const nlohmann::json& pod);
  void UpsertPod(const PodDigest& pod);  // derived once for every handler (pod_digest.h)
  void DeletePod(const nlohmann::json& pod);

  // Binds the listener, builds the first view, starts the background
  // threads. Fails when the port cannot be bound.
  Status Start();
  void Stop();  // idempotent
  int port() const { return port_; }

  // Tests: a usage round and a view now, on the calling thread.
  void RefreshNow(bool with_usage = true);
  std::shared_ptr<const View> view() const;
  // Answers GET `path` with `query` as the listener does (status, type, body).
  struct Response {
    int status = 200;
    std::string content_type;
    std::string body;
  };
  Response Get(const std::string& path, const std::unordered_map<std::string, std::string>& query) const;

 private:
  void Refresh();
  void ProbeApi();
  std::vector<UsageTarget> Targets() const;

  const DashboardOptions options_;
  const DashboardDeps deps_;
  PodIndex pods_;
  UsageCollector usage_;
  ViewBuilder builder_;  // refresh thread (or RefreshNow) only, under build_mu_
  std::mutex build_mu_;  // one build at a time
  PeriodicThread refresh_thread_;
  PeriodicThread probe_thread_;
  std::unique_ptr<HttpListener> http_;
  int port_ = 0;

  mutable std::mutex mu_;
  std::shared_ptr<const View> view_;                        // guarded by mu_
  std::unordered_map<std::string, std::string> addresses_;  // guarded by mu_; node -> address
  SourceStatus status_;                                     // guarded by mu_ (api fields)
  bool started_ = false;                                    // guarded by mu_
};

// The address tessera-node's endpoint of `node` is reached at: its
// InternalIP, else its first address ("" = none).
std::string NodeAddress(const nlohmann::json& node);

}  // namespace tessera::scheduler::dashboard
