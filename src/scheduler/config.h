// SchedulerConfig: everything tessera-scheduler can be told, from one YAML file
// plus command-line flags (flags win). Every key is listed by ConfigKeysHelp()
// (printed by --help) and in docs/scheduler.md.
//
// Validation is strict: an unknown key, a value of the wrong type or out of
// range fails with a message naming the key, and the binary exits with code 2.
//
// Thread-safety: a plain value.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"
#include "core/fit.h"
#include "core/resource_config.h"

namespace tessera::scheduler {

struct SchedulerConfig {
  // Resource names and per-container defaults (core/resource_config.h).
  core::ResourceConfig resources;
  // schedulerName the webhook writes into pods that ask for tessera resources.
  std::string scheduler_name = "tessera-scheduler";
  // Placement policies used when a pod carries no override annotation, one
  // level each as HAMi splits them (docs/placement.md, "Policy names"): the
  // node (kNodePolicyValues) and the GPUs inside it (kGpuPolicyValues; ""
  // = as the node policy places them, tessera's own choice by default).
  std::string node_policy = "tessera";
  std::string gpu_policy;
  // How long a bind's reservation is held when the API never shows the pod
  // bound (bind failed silently, watch lagging). Must exceed api_timeout.
  std::chrono::milliseconds reservation_timeout{60000};
  // A node whose GPU inventory heartbeat (republished by tessera-node at least
  // every heartbeat_seconds, 30 s by default) is older than this does not fit.
  // 0 = never stale.
  std::chrono::milliseconds inventory_stale{120000};

  // HTTP: extender, /mutate, /healthz, /readyz, /metrics on bind_address:port.
  std::string bind_address = "0.0.0.0";
  int port = 8888;
  // Optional second listener for the webhook only (0 = none); HTTPS when
  // tls_cert_file/tls_key_file are set (the API server calls webhooks over TLS).
  int webhook_port = 0;
  std::string tls_cert_file;
  std::string tls_key_file;
  int http_threads = 32;

  // Kubernetes API.
  std::string kubeconfig;  // "" = KUBECONFIG / in-cluster / ~/.kube/config
  std::string api_server;  // overrides the server of the resolved config (plain http for tests)
  double api_qps = 200;
  int api_burst = 400;
  std::chrono::milliseconds api_timeout{10000};

  // Leader election (only the leader binds).
  bool leader_elect = true;
  std::string lease_namespace = "kube-system";
  std::string lease_name = "tessera-scheduler";
  std::string identity;  // "" = hostname
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  // After taking the Lease over (from another replica, an expired or released
  // lease, or this identity's previous process), bind nothing for this long:
  // a Binding the previous leader sent may still land after its client gave
  // up, and this replica knows nothing of it until it does. Unset = api_timeout.
  // Together with lease_duration - renew_deadline (the gap between the last
  // moment a deposed leader may bind and the first a successor may lead) it
  // bounds how late a predecessor's Binding can land without harm.
  std::optional<std::chrono::milliseconds> takeover_settle;
  std::chrono::milliseconds TakeoverSettle() const { return takeover_settle.value_or(api_timeout); }

  std::string log_level = "info";  // trace|debug|info|warn|error

  // GPU-level preemption that tessera-scheduler starts itself when filter
  // finds that a GPU pod fits nowhere for lack of GPU room (gpu_preemptor.h;
  // kube-scheduler cannot propose GPU victims). On by default, as
  // kube-scheduler's own preemption is; off: only the extender's preempt
  // verb trims what kube-scheduler proposes.
  struct Preemption {
    bool enabled = true;
    std::chrono::milliseconds pod_retry{10000};  // at most one attempt per pod this often
  } preemption;

  // The web dashboard (docs/dashboard.md), on its own listener.
  struct Dashboard {
    bool enabled = true;
    std::string bind_address = "0.0.0.0";
    int port = 8889;
    // Where each node's tessera-node /metrics is read: {address} = the node's
    // InternalIP, {node} = its name. Unused when prometheus_url is set.
    std::string node_metrics_url = "http://{address}:9394/metrics";
    std::string prometheus_url;  // "" = read the nodes' endpoints
    std::chrono::milliseconds usage_refresh{15000};
    int scrape_concurrency = 8;
    std::chrono::milliseconds scrape_timeout{3000};
  } dashboard;

  Status Validate() const;
};

// The values policy.node, policy.gpu and the pods' policy annotations take.
inline constexpr std::string_view kNodePolicyValues = "tessera, binpack, spread, gpu-binpack, gpu-spread";
inline constexpr std::string_view kGpuPolicyValues = "binpack, spread, or empty";
// The core policy (core::MakePolicy) a node-level value names: binpack and
// spread are HAMi's node-scheduler-policy values (core's node-binpack and
// node-spread, also accepted as such); tessera, gpu-binpack and gpu-spread
// are core's own. Error: the value is none of kNodePolicyValues.
Result<std::string> CoreNodePolicyName(std::string_view value);
// The GPU order a GPU-level value names: binpack / spread (HAMi's
// gpu-scheduler-policy values; gpu-binpack / gpu-spread accepted too), or
// nullopt for "" (the node policy's own choice).
Result<std::optional<core::GpuOrder>> GpuOrderOf(std::string_view value);

// Applies the YAML text over `config` (keys absent from the file keep their
// value). `origin` names the file in errors.
Status ApplyConfigYaml(const std::string& yaml, const std::string& origin, SchedulerConfig& config);
// Sets one key ("server.port") from its text, by the same rules.
Status ApplyConfigSetting(const std::string& key, const std::string& value, const std::string& origin,
                          SchedulerConfig& config);
Status LoadConfigFile(const std::string& path, SchedulerConfig& config);

// One line per key: "key (type, default): meaning".
std::string ConfigKeysHelp();

}  // namespace tessera::scheduler
