// InventoryPublisher: makes the node's GPUs known to the scheduler. It writes
// the node annotation `tessera.io/gpu-inventory` (core/inventory_codec.h) —
// the scheduler's only source for this node's GPUs — and the node labels
// `tessera.io/gpu.product` and `tessera.io/gpu.count` for nodeSelectors.
//
// When: at start, within a moment of any change of the advertised GPUs (a GPU
// turning unhealthy, rediscovery), and at least every `heartbeat` otherwise,
// with the annotation's heartbeat set to the time of writing, so the scheduler
// can tell a live inventory from the last words of a dead agent. Failures
// (API server down, slow, refusing) are retried with exponential backoff up to
// 30 s; a change during an outage is published once the server answers. The
// annotation is left in place on a clean stop: a rolling update must not empty
// the node for the scheduler (its heartbeat goes stale instead).
//
// Thread-safety: Start/Stop from one controlling thread; stats() anywhere.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/periodic_thread.h"
#include "core/inventory_codec.h"
#include "kube/client.h"
#include "node/device_state.h"

namespace tessera::node {

inline constexpr const char* kGpuProductLabel = "tessera.io/gpu.product";
inline constexpr const char* kGpuCountLabel = "tessera.io/gpu.count";

// The inventory for `gpus` stamped with `now` (RFC 3339, seconds, UTC).
core::NodeInventory BuildInventory(const std::string& node, const std::vector<core::Gpu>& gpus,
                                   Clock::Wall now);

// `text` made a Kubernetes label value: every character outside
// [A-Za-z0-9._-] becomes '-', then at most 63 characters, trimmed to start
// and end with a letter or digit ("" when none is left).
std::string LabelValue(const std::string& text);

// Label values: the product name made a valid label value ("NVIDIA A100-SXM4-80GB"
// -> "NVIDIA-A100-SXM4-80GB"), "mixed" when the node has several models,
// absent (nullopt) with no GPUs; the count of GPUs.
std::map<std::string, std::optional<std::string>> NodeLabels(const std::vector<core::Gpu>& gpus);

struct PublisherStats {
  uint64_t publishes = 0;  // successful annotation writes
  uint64_t failures = 0;   // failed attempts
  std::string last_error;  // of the latest failure ("" after a success)
  int64_t last_success_unix = 0;
};

class InventoryPublisher {
 public:
  InventoryPublisher(kube::Client* client, const DeviceState& devices, std::string node_name,
                     std::chrono::seconds heartbeat, Clock* clock = nullptr);
  ~InventoryPublisher();
  InventoryPublisher(const InventoryPublisher&) = delete;
  InventoryPublisher& operator=(const InventoryPublisher&) = delete;

  // GPUs listed beside the vGPU ones (DeviceState): the MIG-managed GPUs with
  // their MIG devices (node/mig/mig_inventory.h). Called on the publisher's
  // thread at each turn (at least every 200 ms): a change of what it returns
  // is published like a change of the vGPU list. Set before Start.
  using ExtraGpus = std::function<std::vector<core::Gpu>()>;
  void SetExtraGpus(ExtraGpus extra) { extra_gpus_ = std::move(extra); }
  // Labels written beside NodeLabels' (the sharing modes' GFD-style labels,
  // node/sharing/labels.h), read at each publish. Set before Start.
  using ExtraLabels = std::function<std::map<std::string, std::optional<std::string>>()>;
  void SetExtraLabels(ExtraLabels extra) { extra_labels_ = std::move(extra); }

  void Start();
  void Stop();

  // One write of the current GPUs (what the thread does each time).
  Status PublishOnce();

  PublisherStats stats() const;

 private:
  // One turn of the thread: publishes when something is due, else waits (at
  // most 200 ms, so Stop is prompt) for a change or the next due time.
  std::chrono::milliseconds Step();

  kube::Client* const client_;
  const DeviceState& devices_;
  const std::string node_name_;
  const std::chrono::seconds heartbeat_;
  Clock* const clock_;
  ExtraGpus extra_gpus_;
  ExtraLabels extra_labels_;

  mutable std::mutex mu_;
  PublisherStats stats_;                                          // guarded by mu_
  std::map<std::string, std::optional<std::string>> labels_set_;  // guarded by mu_: last labels written

  // Thread only (reset by Start):
  uint64_t published_version_ = 0;
  std::vector<core::Gpu> published_extra_;
  bool ever_published_ = false;
  bool failing_ = false;
  std::chrono::steady_clock::time_point next_heartbeat_{};
  std::chrono::steady_clock::time_point next_attempt_{};
  std::chrono::milliseconds backoff_{0};
  PeriodicThread thread_;  // Step, again at once; last: stopped first
};

}  // namespace tessera::node
