#include "scheduler/config.h"

#include "base/files.h"

#include <cmath>
#include <functional>
#include <set>
#include <sstream>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/policy.h"

namespace tessera::scheduler {
namespace {

// One configuration key: its dotted path in the YAML file, what it means, and
// how a YAML scalar sets it (returning an error text, empty when accepted).
struct Key {
  const char* path;
  const char* type;
  const char* help;
  std::function<std::string(const YAML::Node&, SchedulerConfig&)> set;
  std::function<std::string(const SchedulerConfig&)> show;
};

std::string AsString(const YAML::Node& n, std::string& out) {
  if (!n.IsScalar()) return "must be a string";
  out = n.Scalar();
  return "";
}

template <typename T>
std::string AsInt(const YAML::Node& n, T& out) {
  if (!n.IsScalar()) return "must be an integer";
  const std::string& s = n.Scalar();
  try {
    size_t used = 0;
    long long v = std::stoll(s, &used);
    if (used != s.size()) return "must be an integer, got '" + s + "'";
    out = static_cast<T>(v);
  } catch (...) {
    return "must be an integer, got '" + s + "'";
  }
  return "";
}

std::string AsDouble(const YAML::Node& n, double& out) {
  if (!n.IsScalar()) return "must be a number";
  const std::string& s = n.Scalar();
  try {
    size_t used = 0;
    out = std::stod(s, &used);
    if (used != s.size() || !std::isfinite(out)) return "must be a number, got '" + s + "'";
  } catch (...) {
    return "must be a number, got '" + s + "'";
  }
  return "";
}

std::string AsBool(const YAML::Node& n, bool& out) {
  if (!n.IsScalar()) return "must be true or false";
  const std::string& s = n.Scalar();
  if (s == "true" || s == "True") {
    out = true;
  } else if (s == "false" || s == "False") {
    out = false;
  } else {
    return "must be true or false, got '" + s + "'";
  }
  return "";
}

std::string AsSeconds(const YAML::Node& n, std::chrono::milliseconds& out) {
  double v = 0;
  if (std::string e = AsDouble(n, v); !e.empty()) return e + " (seconds)";
  if (v <= 0) return "must be a positive number of seconds";
  out = std::chrono::milliseconds(static_cast<int64_t>(std::llround(v * 1000)));
  return "";
}

// Like AsSeconds, 0 allowed (it switches something off).
std::string AsSecondsOrZero(const YAML::Node& n, std::chrono::milliseconds& out) {
  double v = 0;
  if (std::string e = AsDouble(n, v); !e.empty()) return e + " (seconds)";
  if (v < 0) return "must be 0 (off) or a positive number of seconds";
  out = std::chrono::milliseconds(static_cast<int64_t>(std::llround(v * 1000)));
  return "";
}

std::string Seconds(std::chrono::milliseconds d) {
  std::ostringstream s;
  s << static_cast<double>(d.count()) / 1000.0;
  return s.str();
}

#define STR_KEY(P, FIELD, HELP)                                                                      \
  Key {                                                                                              \
    P, "string", HELP, [](const YAML::Node& n, SchedulerConfig& c) { return AsString(n, c.FIELD); }, \
        [](const SchedulerConfig& c) { return c.FIELD.empty() ? std::string("\"\"") : c.FIELD; }     \
  }
#define INT_KEY(P, FIELD, HELP)                                                                    \
  Key {                                                                                            \
    P, "integer", HELP, [](const YAML::Node& n, SchedulerConfig& c) { return AsInt(n, c.FIELD); }, \
        [](const SchedulerConfig& c) { return std::to_string(c.FIELD); }                           \
  }
#define SEC_KEY(P, FIELD, HELP)                                                                        \
  Key {                                                                                                \
    P, "seconds", HELP, [](const YAML::Node& n, SchedulerConfig& c) { return AsSeconds(n, c.FIELD); }, \
        [](const SchedulerConfig& c) { return Seconds(c.FIELD); }                                      \
  }

const std::vector<Key>& Keys() {
  static const std::vector<Key> keys = {
      STR_KEY("schedulerName", scheduler_name,
              "schedulerName the webhook sets on pods asking for tessera resources"),
      STR_KEY("resources.gpuCount", resources.gpu_count_name, "resource name of the vGPU count"),
      STR_KEY("resources.gpuMemory", resources.gpu_memory_name,
              "resource name of MiB of GPU memory per vGPU"),
      STR_KEY("resources.gpuMemoryPercentage", resources.gpu_memory_percent_name,
              "resource name of the percentage of a GPU's memory per vGPU"),
      STR_KEY("resources.gpuCores", resources.gpu_cores_name,
              "resource name of the percent of compute per vGPU"),
      STR_KEY("resources.gpuPriority", resources.gpu_priority_name,
              "resource name of the task priority (0 = high, 1 and above = low), passed to the container as "
              "CUDA_TASK_PRIORITY"),
      INT_KEY("defaults.gpuCount", resources.default_gpu_count,
              "vGPUs for a container that gives memory or cores but no count (1..16)"),
      INT_KEY("defaults.memoryMiB", resources.default_memory_mib,
              "MiB per vGPU when neither gpumem nor gpumem-percentage is given (0 = whole GPU)"),
      Key{"defaults.memoryPercentage", "integer",
          "percent of the GPU's memory per vGPU when memoryMiB is 0 and nothing is given (1..100; unset = "
          "whole GPU)",
          [](const YAML::Node& n, SchedulerConfig& c) {
            int v = 0;
            std::string e = AsInt(n, v);
            if (e.empty()) c.resources.default_memory_percent = v;
            return e;
          },
          [](const SchedulerConfig& c) {
            return c.resources.default_memory_percent ? std::to_string(*c.resources.default_memory_percent)
                                                      : std::string("unset");
          }},
      INT_KEY("defaults.cores", resources.default_cores,
              "percent of compute per vGPU when gpucores is not given (0 = no limit)"),
      STR_KEY("policy.node", node_policy,
              "node policy when the pod has no override: binpack, spread, tessera, gpu-binpack, gpu-spread"),
      STR_KEY("policy.gpu", gpu_policy,
              "GPU order inside the chosen node when the pod has no override: binpack, spread"),
      SEC_KEY("reservationTimeoutSeconds", reservation_timeout,
              "how long a bind's reservation is held until the pod shows up bound; must exceed "
              "kube.timeoutSeconds"),
      Key{"inventoryStaleSeconds", "seconds",
          "a node whose tessera.io/gpu-inventory heartbeat is older than this does not fit (0 = never "
          "stale); keep it well above tessera-node's heartbeat period (30 s by default)",
          [](const YAML::Node& n, SchedulerConfig& c) { return AsSecondsOrZero(n, c.inventory_stale); },
          [](const SchedulerConfig& c) { return Seconds(c.inventory_stale); }},
      STR_KEY("server.bindAddress", bind_address, "address the HTTP server listens on"),
      INT_KEY("server.port", port, "port of extender, /mutate, /healthz, /readyz, /metrics (plain HTTP)"),
      INT_KEY("server.webhookPort", webhook_port,
              "second listener for /mutate only, HTTPS with the TLS files (0 = none)"),
      STR_KEY("server.tlsCertFile", tls_cert_file, "PEM certificate of the webhook listener"),
      STR_KEY("server.tlsKeyFile", tls_key_file, "PEM private key of the webhook listener"),
      INT_KEY("server.threads", http_threads, "HTTP worker threads per listener (concurrent requests)"),
      STR_KEY("kube.kubeconfig", kubeconfig,
              "kubeconfig path (\"\" = KUBECONFIG, in-cluster, ~/.kube/config)"),
      STR_KEY("kube.server", api_server, "API server URL overriding the resolved config's server"),
      Key{"kube.qps", "number", "client-side request rate to the API server (<= 0: unlimited)",
          [](const YAML::Node& n, SchedulerConfig& c) { return AsDouble(n, c.api_qps); },
          [](const SchedulerConfig& c) {
            std::ostringstream s;
            s << c.api_qps;
            return s.str();
          }},
      INT_KEY("kube.burst", api_burst, "client-side burst of requests to the API server"),
      SEC_KEY("kube.timeoutSeconds", api_timeout, "timeout of each API request (bindings, gets, lists)"),
      Key{"leaderElection.enabled", "bool", "elect one leader through a Lease; only the leader binds",
          [](const YAML::Node& n, SchedulerConfig& c) { return AsBool(n, c.leader_elect); },
          [](const SchedulerConfig& c) { return std::string(c.leader_elect ? "true" : "false"); }},
      STR_KEY("leaderElection.namespace", lease_namespace, "namespace of the Lease"),
      STR_KEY("leaderElection.name", lease_name, "name of the Lease"),
      STR_KEY("leaderElection.identity", identity, "this candidate's identity (\"\" = hostname)"),
      SEC_KEY("leaderElection.leaseDurationSeconds", lease_duration,
              "how long a lease is valid without renewal"),
      SEC_KEY("leaderElection.renewDeadlineSeconds", renew_deadline,
              "a leader that cannot renew for this long steps down"),
      SEC_KEY("leaderElection.retryPeriodSeconds", retry_period, "interval between acquire/renew attempts"),
      STR_KEY("logLevel", log_level, "trace, debug, info, warn or error"),
  };
  return keys;
}

Status Walk(const YAML::Node& node, const std::string& prefix, const std::string& origin,
            SchedulerConfig& config) {
  if (!node.IsMap()) {
    return Error{origin + ": " + (prefix.empty() ? std::string("the document") : prefix) +
                 " must be a mapping"};
  }
  for (const auto& kv : node) {
    std::string name = kv.first.as<std::string>();
    std::string path = prefix.empty() ? name : prefix + "." + name;
    const Key* key = nullptr;
    bool is_group = false;
    for (const Key& k : Keys()) {
      if (path == k.path) key = &k;
      if (std::string(k.path).rfind(path + ".", 0) == 0) is_group = true;
    }
    if (key) {
      if (kv.second.IsNull()) continue;  // "key:" with no value keeps the default
      if (std::string e = key->set(kv.second, config); !e.empty()) {
        return Error{origin + ": " + path + " " + e};
      }
    } else if (is_group) {
      if (kv.second.IsNull()) continue;
      if (Status s = Walk(kv.second, path, origin, config); !s) return s;
    } else {
      return Error{origin + ": unknown key '" + path + "' (see --help for the keys)"};
    }
  }
  return Status::Ok();
}

}  // namespace

Status ApplyConfigYaml(const std::string& yaml, const std::string& origin, SchedulerConfig& config) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const std::exception& e) {
    return Error{origin + ": not valid YAML: " + e.what()};
  }
  if (root.IsNull()) return Status::Ok();
  try {
    return Walk(root, "", origin, config);
  } catch (const std::exception& e) {
    return Error{origin + ": " + e.what()};
  }
}

Status LoadConfigFile(const std::string& path, SchedulerConfig& config) {
  TESSERA_ASSIGN_OR_RETURN_WRAP(const std::string text, files::Read(path), "config file");
  return ApplyConfigYaml(text, path, config);
}

Status SchedulerConfig::Validate() const {
  if (Status s = resources.Validate(); !s) return s.error().Wrap("resources/defaults");
  if (scheduler_name.empty()) return Error{"schedulerName must not be empty"};
  static const std::set<std::string> kNodePolicies = {"binpack", "spread"};
  if (!kNodePolicies.count(node_policy)) {
    auto p = core::MakePolicy(node_policy);
    if (!p.ok())
      return Error{"policy.node '" + node_policy +
                   "' is not binpack, spread or a core policy: " + p.error().message};
  }
  if (gpu_policy != "binpack" && gpu_policy != "spread") {
    return Error{"policy.gpu '" + gpu_policy + "' must be binpack or spread"};
  }
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
  static const std::set<std::string> kLevels = {"trace", "debug", "info", "warn", "error"};
  if (!kLevels.count(log_level))
    return Error{"logLevel '" + log_level + "' must be trace, debug, info, warn or error"};
  return Status::Ok();
}

std::string ConfigKeysHelp() {
  SchedulerConfig defaults;
  std::ostringstream out;
  for (const Key& k : Keys()) {
    out << "  " << k.path << " (" << k.type << ", default " << k.show(defaults) << ")\n      " << k.help
        << "\n";
  }
  return out.str();
}

}  // namespace tessera::scheduler
