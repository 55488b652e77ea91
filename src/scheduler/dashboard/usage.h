// UsageCollector: what the GPUs and the slices on them actually use, read in
// the background from the nodes' tessera-node /metrics endpoints, or from a
// Prometheus when one is configured, and kept with a short history.
//
// The request path never scrapes: the dashboard reads Snapshot(), the result
// of the last round. A round visits every target with at most `concurrency`
// requests in flight, each bounded by `timeout`, so one round costs at most
// about targets / concurrency × timeout even when every node is dead; a node
// that does not answer, or answers with a document that does not parse, keeps
// its error (and no usage) until it answers again. In Prometheus mode a round
// is a fixed handful of instant queries (one per metric) whatever the size of
// the cluster.
//
// The metrics read (docs/node.md): per GPU tessera_gpu_memory_used_bytes and
// tessera_gpu_utilization_percent; per container and GPU
// tessera_container_memory_used_bytes, tessera_container_memory_limit_bytes
// and tessera_container_compute_share_percent (labels namespace, pod,
// container, gpu_uuid).
//
// Thread-safety: all methods may be called concurrently; Start/Stop from one
// controlling thread. Snapshots are immutable.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/periodic_thread.h"
#include "base/result.h"
#include "scheduler/dashboard/metrics_text.h"

namespace tessera::scheduler::dashboard {

// A point of a history: unix milliseconds, value.
struct UsagePoint {
  int64_t at_ms = 0;
  float value = 0;
};

struct SliceUsage {
  std::string ns;
  std::string pod;
  std::string container;
  double memory_used_mib = 0;
  double memory_limit_mib = 0;
  double compute_share = 0;         // percent of the GPU over the node's last interval
  std::vector<UsagePoint> history;  // compute_share, oldest first
};

struct GpuUsageRecord {
  std::string uuid;
  std::string node;  // the node whose endpoint reported it ("" from Prometheus)
  int64_t at_ms = 0;
  double memory_used_mib = 0;
  double utilization = 0;           // percent
  std::vector<UsagePoint> history;  // utilization, oldest first
  std::vector<SliceUsage> slices;
};

struct ScrapeStatus {
  int64_t at_ms = 0;  // when the last attempt ended (0 = never tried)
  std::string error;  // "" = the last attempt worked
  int64_t ok_at_ms = 0;
};

struct UsageSnapshot {
  std::string source;  // "nodes" or "prometheus"
  std::string prometheus_url;
  uint64_t rounds = 0;
  int64_t updated_ms = 0;  // end of the last round (0 = none yet)
  std::string error;       // Prometheus: the last round's failure ("" = none)
  std::unordered_map<std::string, std::shared_ptr<const GpuUsageRecord>> gpus;  // by UUID
  std::unordered_map<std::string, ScrapeStatus> nodes;  // by node name (node endpoints only)
};

struct UsageOptions {
  // "http://{address}:9394/metrics": {address} is the node's InternalIP (else
  // its first address), {node} its name.
  std::string node_url_template = "http://{address}:9394/metrics";
  std::string prometheus_url;  // non-empty: query it instead of the nodes
  std::chrono::milliseconds interval{15000};
  int concurrency = 8;
  std::chrono::milliseconds timeout{3000};
  size_t history = 60;  // points kept per GPU and per slice
};

struct UsageTarget {
  std::string node;
  std::string address;  // "" = the node publishes none (reported as such)
};

class UsageCollector {
 public:
  // GET `url`, bounded by `timeout`: the body of a 200 answer, else an error
  // a person can read. nullptr = plain HTTP(S) with cpp-httplib.
  using Fetch = std::function<Result<std::string>(const std::string& url, std::chrono::milliseconds timeout)>;

  UsageCollector(UsageOptions options, std::function<std::vector<UsageTarget>()> targets,
                 Fetch fetch = nullptr);
  ~UsageCollector();  // Stop()

  void Start();  // a round at once, then one per interval
  void Stop();
  // One round on the calling thread (tests; Start's thread runs the same).
  void RunRound();

  std::shared_ptr<const UsageSnapshot> Snapshot() const;
  // The URL of a node's endpoint under the template ("" without an address).
  std::string NodeUrl(const UsageTarget& target) const;

 private:
  void NodesRound();
  void PrometheusRound();
  // Folds one source's samples into per-GPU records (history carried over
  // from `previous`).
  std::vector<std::shared_ptr<const GpuUsageRecord>> Records(const std::vector<MetricSample>& samples,
                                                             const std::string& node, int64_t now_ms) const;
  void Publish();

  const UsageOptions options_;
  const std::function<std::vector<UsageTarget>()> targets_;
  const Fetch fetch_;
  PeriodicThread thread_;

  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const GpuUsageRecord>> gpus_;  // guarded by mu_
  std::unordered_map<std::string, ScrapeStatus> nodes_;                          // guarded by mu_
  std::unordered_map<std::string, std::vector<std::string>> uuids_by_node_;      // guarded by mu_
  std::string error_;                                                            // guarded by mu_
  uint64_t rounds_ = 0;                                                          // guarded by mu_
  int64_t updated_ms_ = 0;                                                       // guarded by mu_
  std::shared_ptr<const UsageSnapshot> published_;                               // guarded by mu_
};

// The default Fetch: GET over HTTP or HTTPS (certificates verified).
Result<std::string> HttpGet(const std::string& url, std::chrono::milliseconds timeout);

}  // namespace tessera::scheduler::dashboard
