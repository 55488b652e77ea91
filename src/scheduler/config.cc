#include "scheduler/config.h"

#include "base/files.h"
#include "base/number_format.h"
#include "base/yaml_config.h"

#include <set>

#include "core/policy.h"

namespace tessera::scheduler {
namespace {

std::string Seconds(std::chrono::milliseconds d) {
  return FormatNumber(static_cast<double>(d.count()) / 1000.0);
}

// The keys, each bound to its field of `c` (base/yaml_config.h has the rules
// every key follows), in the order --help lists them.
config::YamlConfig Keys(SchedulerConfig& c) {
  config::YamlConfig keys(" (see --help for the keys)");
  keys.String("schedulerName", &c.scheduler_name,
              "schedulerName the webhook sets on pods asking for tessera resources")
      .String("resources.gpuCount", &c.resources.gpu_count_name, "resource name of the vGPU count")
      .String("resources.gpuMemory", &c.resources.gpu_memory_name,
              "resource name of MiB of GPU memory per vGPU")
      .String("resources.gpuMemoryPercentage", &c.resources.gpu_memory_percent_name,
              "resource name of the percentage of a GPU's memory per vGPU")
      .String("resources.gpuCores", &c.resources.gpu_cores_name,
              "resource name of the percent of compute per vGPU")
      .String("resources.gpuPriority", &c.resources.gpu_priority_name,
              "resource name of the task priority (0 = high, 1 and above = low), passed to the container as "
              "CUDA_TASK_PRIORITY")
      .String(
          "resources.mpsCores", &c.resources.mps_cores_name,
          "resource name of an MPS share's percent of the GPU's threads (makes the container an MPS client)")
      .String("resources.mpsMemory", &c.resources.mps_memory_name,
              "resource name of an MPS share's GiB of GPU memory (makes the container an MPS client)")
      .Int("defaults.gpuCount", &c.resources.default_gpu_count,
           "vGPUs for a container that gives memory or cores but no count (1..16)")
      .Int("defaults.memoryMiB", &c.resources.default_memory_mib,
           "MiB per vGPU when neither gpumem nor gpumem-percentage is given (0 = whole GPU)")
      .Custom(
          "defaults.memoryPercentage", "integer", "an integer",
          [&c](std::string_view text) -> Status {
            TESSERA_ASSIGN_OR_RETURN(c.resources.default_memory_percent,
                                     config::ParseInteger(text, INT32_MIN, INT32_MAX));
            return Status::Ok();
          },
          [&c] {
            return c.resources.default_memory_percent ? std::to_string(*c.resources.default_memory_percent)
                                                      : std::string("unset");
          },
          "percent of the GPU's memory per vGPU when memoryMiB is 0 and nothing is given (1..100; unset = "
          "whole GPU)")
      .Int("defaults.cores", &c.resources.default_cores,
           "percent of compute per vGPU when gpucores is not given (0 = no limit)")
      .String("policy.node", &c.node_policy,
              "node policy when the pod has no override: tessera (fragmentation-aware), binpack or spread "
              "(HAMi's node-scheduler-policy), gpu-binpack, gpu-spread")
      .String("policy.gpu", &c.gpu_policy,
              "GPUs inside the chosen node when the pod has no override: binpack or spread (HAMi's "
              "gpu-scheduler-policy), \"\" = as the node policy places them (tessera: its own choice)")
      .Seconds("reservationTimeoutSeconds", &c.reservation_timeout,
               "how long a bind's reservation is held until the pod shows up bound; must exceed "
               "kube.timeoutSeconds")
      .Seconds("inventoryStaleSeconds", &c.inventory_stale,
               "a node whose tessera.io/gpu-inventory heartbeat is older than this does not fit (0 = never "
               "stale); keep it well above tessera-node's heartbeat period (30 s by default)",
               /*zero_allowed=*/true)
      .String("server.bindAddress", &c.bind_address, "address the HTTP server listens on")
      .Int("server.port", &c.port, "port of extender, /mutate, /healthz, /readyz, /metrics (plain HTTP)")
      .Int("server.webhookPort", &c.webhook_port,
           "second listener for /mutate only, HTTPS with the TLS files (0 = none)")
      .String("server.tlsCertFile", &c.tls_cert_file, "PEM certificate of the webhook listener")
      .String("server.tlsKeyFile", &c.tls_key_file, "PEM private key of the webhook listener")
      .Int("server.threads", &c.http_threads, "HTTP worker threads per listener (concurrent requests)")
      .String("kube.kubeconfig", &c.kubeconfig,
              "kubeconfig path (\"\" = KUBECONFIG, in-cluster, ~/.kube/config)")
      .String("kube.server", &c.api_server, "API server URL overriding the resolved config's server")
      .Number("kube.qps", &c.api_qps, "client-side request rate to the API server (<= 0: unlimited)")
      .Int("kube.burst", &c.api_burst, "client-side burst of requests to the API server")
      .Seconds("kube.timeoutSeconds", &c.api_timeout, "timeout of each API request (bindings, gets, lists)")
      .Bool("leaderElection.enabled", &c.leader_elect,
            "elect one leader through a Lease; only the leader binds")
      .String("leaderElection.namespace", &c.lease_namespace, "namespace of the Lease")
      .String("leaderElection.name", &c.lease_name, "name of the Lease")
      .String("leaderElection.identity", &c.identity, "this candidate's identity (\"\" = hostname)")
      .Seconds("leaderElection.leaseDurationSeconds", &c.lease_duration,
               "how long a lease is valid without renewal")
      .Seconds("leaderElection.renewDeadlineSeconds", &c.renew_deadline,
               "a leader that cannot renew for this long steps down")
      .Seconds("leaderElection.retryPeriodSeconds", &c.retry_period,
               "interval between acquire/renew attempts")
      .Custom(
          "leaderElection.takeoverSettleSeconds", "seconds", "a number of seconds (0 or more)",
          [&c](std::string_view text) -> Status {
            TESSERA_ASSIGN_OR_RETURN(c.takeover_settle, config::ParseSeconds(text, /*zero_allowed=*/true));
            return Status::Ok();
          },
          [&c] { return c.takeover_settle ? Seconds(*c.takeover_settle) : std::string("unset"); },
          "after taking the lease over, bind nothing for this long: Bindings the previous leader sent may "
          "still land (unset = kube.timeoutSeconds; 0 = no wait)")
      .String("logLevel", &c.log_level, "trace, debug, info, warn or error")
      .Bool("preemption.enabled", &c.preemption.enabled,
            "when filter finds a GPU pod fits nowhere for lack of GPU room, the leader deletes the fewest, "
            "lowest-priority GPU pods that make room on one node and nominates the pod there (false: only "
            "the extender's preempt verb, which kube-scheduler calls only when it finds victims itself)")
      .Seconds("preemption.podRetrySeconds", &c.preemption.pod_retry,
               "at most one GPU preemption attempt per pod this often")
      .Bool("dashboard.enabled", &c.dashboard.enabled, "serve the web dashboard on its own listener")
      .String("dashboard.bindAddress", &c.dashboard.bind_address, "address the dashboard listens on")
      .Int("dashboard.port", &c.dashboard.port, "port of the dashboard (plain HTTP; pages and /api/*)")
      .String("dashboard.nodeMetricsURL", &c.dashboard.node_metrics_url,
              "each node's tessera-node metrics: {address} = the node's InternalIP, {node} = its name")
      .String("dashboard.prometheusURL", &c.dashboard.prometheus_url,
              "read usage from this Prometheus (its HTTP API) instead of the nodes (\"\" = the nodes)")
      .Seconds("dashboard.usageRefreshSeconds", &c.dashboard.usage_refresh,
               "how often usage is read again (in the background)")
      .Int("dashboard.scrapeConcurrency", &c.dashboard.scrape_concurrency,
           "node endpoints read at the same time (1..256)")
      .Seconds("dashboard.scrapeTimeoutSeconds", &c.dashboard.scrape_timeout,
               "timeout of each read of a node endpoint or Prometheus query");
  return keys;
}

}  // namespace

Status ApplyConfigYaml(const std::string& yaml, const std::string& origin, SchedulerConfig& config) {
  return Keys(config).Apply(yaml, origin);
}

Status ApplyConfigSetting(const std::string& key, const std::string& value, const std::string& origin,
                          SchedulerConfig& config) {
  return Keys(config).Set(key, value, origin);
}

Status LoadConfigFile(const std::string& path, SchedulerConfig& config) {
  TESSERA_ASSIGN_OR_RETURN_WRAP(const std::string text, files::Read(path), "config file");
  return ApplyConfigYaml(text, path, config);
}

Status SchedulerConfig::Validate() const {
  TESSERA_RETURN_IF_ERROR_WRAP(resources.Validate(), "resources/defaults");
  if (scheduler_name.empty()) return Error{"schedulerName must not be empty"};
  TESSERA_RETURN_IF_ERROR_WRAP(CoreNodePolicyName(node_policy), "policy.node");
  TESSERA_RETURN_IF_ERROR_WRAP(GpuOrderOf(gpu_policy), "policy.gpu");
  if (port < 1 || port > 65535) return Error{"server.port " + std::to_string(port) + " must be 1..65535"};
  if (webhook_port < 0 || webhook_port > 65535 || (webhook_port != 0 && webhook_port == port)) {
    return Error{"server.webhookPort " + std::to_string(webhook_port) +
                 " must be 0 (none) or 1..65535 and not server.port"};
  }
  if (tls_cert_file.empty() != tls_key_file.empty()) {
    return Error{"server.tlsCertFile and server.tlsKeyFile must be given together"};
  }
  if (!tls_cert_file.empty() && webhook_port == 0) {
    return Error{"server.tlsCertFile is set but server.webhookPort is 0: TLS serves the webhook listener"};
  }
  if (http_threads < 1 || http_threads > 1024) return Error{"server.threads must be 1..1024"};
  if (api_burst < 1) return Error{"kube.burst must be at least 1"};
  if (reservation_timeout <= api_timeout) {
    return Error{"reservationTimeoutSeconds (" + Seconds(reservation_timeout) +
                 ") must exceed kube.timeoutSeconds (" + Seconds(api_timeout) +
                 "), or a slow bind could lose its reservation while still in flight"};
  }
  if (leader_elect) {
    if (lease_name.empty() || lease_namespace.empty())
      return Error{"leaderElection.name/namespace must not be empty"};
    if (renew_deadline >= lease_duration) {
      return Error{"leaderElection.renewDeadlineSeconds must be below leaseDurationSeconds"};
    }
    if (retry_period >= renew_deadline) {
      return Error{"leaderElection.retryPeriodSeconds must be below renewDeadlineSeconds"};
    }
  }
  if (dashboard.enabled) {
    const int p = dashboard.port;
    if (p < 1 || p > 65535 || p == port || p == webhook_port) {
      return Error{"dashboard.port " + std::to_string(p) +
                   " must be 1..65535 and differ from server.port and server.webhookPort"};
    }
    auto is_http = [](const std::string& url) {
      return url.starts_with("http://") || url.starts_with("https://");
    };
    if (!is_http(dashboard.node_metrics_url)) {
      return Error{"dashboard.nodeMetricsURL '" + dashboard.node_metrics_url +
                   "' must be an http:// or https:// URL (with {address} or {node})"};
    }
    if (!dashboard.prometheus_url.empty() && !is_http(dashboard.prometheus_url)) {
      return Error{"dashboard.prometheusURL '" + dashboard.prometheus_url +
                   "' must be an http:// or https:// URL, or empty"};
    }
    if (dashboard.scrape_concurrency < 1 || dashboard.scrape_concurrency > 256)
      return Error{"dashboard.scrapeConcurrency must be 1..256"};
  }
  static const std::set<std::string> kLevels = {"trace", "debug", "info", "warn", "error"};
  if (!kLevels.count(log_level))
    return Error{"logLevel '" + log_level + "' must be trace, debug, info, warn or error"};
  return Status::Ok();
}

Result<std::string> CoreNodePolicyName(std::string_view value) {
  if (value == "binpack") return std::string("node-binpack");
  if (value == "spread") return std::string("node-spread");
  for (const std::string& name : core::PolicyNames()) {
    if (value == name) return name;
  }
  return Error{"'" + std::string(value) + "' is not a node policy (" + std::string(kNodePolicyValues) + ")"};
}

Result<std::optional<core::GpuOrder>> GpuOrderOf(std::string_view value) {
  if (value.empty()) return std::optional<core::GpuOrder>();
  if (value == "binpack" || value == "gpu-binpack") return std::optional(core::GpuOrder::kBinpack);
  if (value == "spread" || value == "gpu-spread") return std::optional(core::GpuOrder::kSpread);
  return Error{"'" + std::string(value) + "' is not a GPU policy (" + std::string(kGpuPolicyValues) +
               ": the node policy's own choice)"};
}

std::string ConfigKeysHelp() {
  SchedulerConfig defaults;
  return Keys(defaults).Help();
}

}  // namespace tessera::scheduler
