// tessera-scheduler: scheduler extender + mutating webhook + cluster state.
// Exit codes: 0 clean stop, 1 runtime failure (cannot listen, no API config),
// 2 invalid configuration or flags.
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <iostream>
#include <map>
#include <optional>
#include <thread>

#include "base/command_line.h"
#include "base/log.h"
#include "kube/config.h"
#include "scheduler/config.h"
#include "scheduler/scheduler.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int signal) {
  g_stop = signal;
}

}  // namespace

int main(int argc, char** argv) {
  // Memory that stays flat under load (docs/scheduler.md, "Memory"): two
  // malloc arenas instead of one per HTTP worker (up to 8 per core), each of
  // which kept its own freed memory; and a fixed mmap threshold, so that the
  // evaluation caches' per-node arrays (hundreds of KB) go back to the system
  // when evicted instead of raising glibc's threshold and fragmenting a heap.
  mallopt(M_ARENA_MAX, 2);
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  using tessera::scheduler::SchedulerConfig;
  CLI::App app{
      "tessera-scheduler: kube-scheduler extender (filter/prioritize/bind), mutating webhook (/mutate)\n"
      "and GPU cluster state for tessera. Settings come from --config (YAML), then --set, then the\n"
      "dedicated flags below (later wins)."};
  std::string config_file;
  std::vector<std::string> sets;
  app.add_option("--config", config_file, "YAML configuration file (keys below)");
  app.add_option("--set", sets, "KEY=VALUE for any key below (repeatable), e.g. --set defaults.cores=20");
  // The dedicated flags: each sets one key, by the same rules as --set.
  const std::pair<const char*, const char*> kFlags[] = {
      {"--kubeconfig", "kube.kubeconfig"},
      {"--api-server", "kube.server"},
      {"--scheduler-name", "schedulerName"},
      {"--port", "server.port"},
      {"--webhook-port", "server.webhookPort"},
      {"--tls-cert-file", "server.tlsCertFile"},
      {"--tls-key-file", "server.tlsKeyFile"},
      {"--leader-elect", "leaderElection.enabled"},
      {"--identity", "leaderElection.identity"},
      {"--node-policy", "policy.node"},
      {"--gpu-policy", "policy.gpu"},
      {"--log-level", "logLevel"},
  };
  std::map<std::string, std::optional<std::string>> flag_values;  // key -> the value given
  for (const auto& [flag, key] : kFlags) {
    app.add_option(flag, flag_values[key], std::string("= ") + key);
  }
  app.footer("Configuration keys (YAML nested mappings: \"server.port\" is written server: {port: 8888}):\n" +
             tessera::scheduler::ConfigKeysHelp());
  if (const auto exit_code = tessera::ParseCommandLine(app, argc, argv)) return *exit_code;

  SchedulerConfig config;
  auto invalid = [](const std::string& message) {
    std::cerr << "tessera-scheduler: invalid configuration: " << message << "\n";
    return 2;
  };
  if (!config_file.empty()) {
    if (auto s = tessera::scheduler::LoadConfigFile(config_file, config); !s)
      return invalid(s.error().message);
  }
  for (const std::string& kv : sets) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return invalid("--set " + kv + ": expected KEY=VALUE");
    const std::string key = kv.substr(0, eq);
    if (auto s = tessera::scheduler::ApplyConfigSetting(key, kv.substr(eq + 1), "--set " + key, config); !s) {
      return invalid(s.error().message);
    }
  }
  for (const auto& [flag, key] : kFlags) {
    if (const auto& value = flag_values[key]; value) {
      if (auto s = tessera::scheduler::ApplyConfigSetting(key, *value, flag, config); !s) {
        return invalid(s.error().message);
      }
    }
  }
  if (config.identity.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    config.identity = std::string(host) + "-" + std::to_string(getpid());
  }
  if (auto s = config.Validate(); !s) return invalid(s.error().message);
  namespace log = tessera::log;
  log::SetLevel(*log::ParseLevel(config.log_level));  // validated

  auto seconds = [](std::chrono::milliseconds d) { return std::chrono::duration<double>(d); };
  log::Info("tessera-scheduler starting",
            {{"identity", config.identity},
             {"scheduler_name", config.scheduler_name},
             {"listen", config.bind_address + ":" + std::to_string(config.port)},
             {"webhook_port", config.webhook_port},
             {"webhook_tls", !config.tls_cert_file.empty()},
             {"node_policy", config.node_policy},
             {"gpu_policy", config.gpu_policy},
             {"reservation_timeout", seconds(config.reservation_timeout)},
             {"inventory_stale", seconds(config.inventory_stale)},
             {"leader_election", config.leader_elect},
             {"lease", config.lease_namespace + "/" + config.lease_name},
             {"lease_duration", seconds(config.lease_duration)},
             {"renew_deadline", seconds(config.renew_deadline)},
             {"retry_period", seconds(config.retry_period)},
             {"api_qps", config.api_qps},
             {"api_burst", config.api_burst},
             {"api_timeout", seconds(config.api_timeout)},
             {"http_threads", config.http_threads},
             {"dashboard", config.dashboard.enabled
                               ? config.dashboard.bind_address + ":" + std::to_string(config.dashboard.port)
                               : std::string("off")},
             {"usage_from", config.dashboard.prometheus_url.empty() ? config.dashboard.node_metrics_url
                                                                    : config.dashboard.prometheus_url},
             {"log_level", config.log_level}});

  // The same resolution as tessera-node: --api-server alone talks to that URL
  // without credentials; with a kubeconfig it overrides the kubeconfig's server.
  tessera::kube::ResolveOptions resolve;
  resolve.kubeconfig = config.kubeconfig;
  resolve.api_server = config.api_server;
  auto resolved = tessera::kube::ResolveConfig(resolve);
  if (!resolved.ok()) {
    log::Error("no Kubernetes API configuration", {{"error", resolved.error().message}});
    return 1;
  }
  log::Info("API server", {{"server", resolved->server}, {"source", resolved->source}});
  const tessera::kube::ClientConfig client_config = std::move(resolved).value();
  tessera::kube::ClientOptions client_options;
  client_options.qps = config.api_qps;
  client_options.burst = config.api_burst;
  client_options.timeout = config.api_timeout;
  std::shared_ptr<tessera::kube::Client> client = tessera::kube::MakeClient(client_config, client_options);

  tessera::scheduler::Scheduler scheduler(config, client);
  if (auto s = scheduler.Start(); !s) {
    log::Error("cannot start", {{"error", s.error().message}});
    return 1;
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  log::Info("serving", {{"listen", config.bind_address + ":" + std::to_string(scheduler.port())},
                        {"webhook_port", scheduler.webhook_port()},
                        {"dashboard_port", scheduler.dashboard_port()}});
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  log::Info("stopping", {{"signal", static_cast<int>(g_stop)}});
  scheduler.Stop();
  return 0;
}
