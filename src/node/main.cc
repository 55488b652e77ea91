// tessera-node: the tessera agent on each GPU node (a DaemonSet). See
// docs/node.md for deployment, every configuration key and every metric.
// Exit codes: 0 after SIGTERM/SIGINT, 1 when starting fails for a reason
// outside the configuration (NVML, API configuration, sockets, ports),
// 2 for an invalid configuration.
#include <signal.h>

#include <cstdlib>
#include <iostream>

#include "base/log.h"
#include "host/nvml_inventory.h"
#include "host/nvml_mig.h"
#include "kube/config.h"
#include "node/agent.h"
#include "node/config.h"

namespace {

int Run(int argc, char** argv) {
  const char* node_name = std::getenv("NODE_NAME");
  auto command_line = tessera::node::ParseCommandLine(argc, argv, node_name ? node_name : "");
  if (command_line.exit_now) {
    (command_line.exit_code == 0 ? std::cout : std::cerr) << command_line.output << std::endl;
    return command_line.exit_code;
  }
  const auto& config = command_line.config;
  if (config.kubernetes && config.node_name.empty()) {
    std::cerr << "tessera-node: invalid configuration: node_name is empty: set NODE_NAME (spec.nodeName "
                 "through the Downward API) or --node-name, or run with --kubernetes=false"
              << std::endl;
    return 2;
  }
  namespace log = tessera::log;
  log::SetLevel(*log::ParseLevel(config.log_level));  // validated
  log::Info("tessera-node starting",
            {{"node", config.node_name},
             {"resource", config.resource_name},
             {"split_count", config.split_count},
             {"memory_scaling", config.memory_scaling},
             {"core_scaling", config.core_scaling},
             {"plugin_dir", config.plugin_dir},
             {"visible_devices", tessera::node::VisibleDevicesModeName(config.visible_devices)},
             {"unplaced_pods", tessera::node::UnplacedPodsPolicyName(config.unplaced_pods)},
             {"kubernetes", config.kubernetes},
             {"log_level", config.log_level}});

  // Signals are taken synchronously by this thread; block them before any
  // other thread exists so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  tessera::node::AgentDependencies deps;
  if (config.kubernetes) {
    tessera::kube::ResolveOptions resolve;
    resolve.kubeconfig = config.kubeconfig;
    resolve.api_server = config.api_server;
    auto client_config = tessera::kube::ResolveConfig(resolve);
    if (!client_config.ok()) {
      log::Error("no Kubernetes API configuration (or run with --kubernetes=false)",
                 {{"error", client_config.error().message}});
      return 1;
    }
    log::Info("API server", {{"server", client_config->server}, {"source", client_config->source}});
    tessera::kube::ClientOptions options;
    options.qps = 20;
    options.burst = 40;
    // Events are recorded from the monitor thread: a dead API server must not
    // hold it for long.
    options.timeout = std::chrono::seconds(5);
    deps.client = tessera::kube::MakeClient(*client_config, options);
  } else {
    log::Warn("kubernetes=false: the GPU inventory is not published; the scheduler will not place pods here");
  }
  if (!config.pod_resources_socket.empty()) {
    deps.pod_resources = std::make_unique<tessera::node::KubeletPodResources>(config.pod_resources_socket);
  }

  auto library = tessera::host::NvmlLibrary::Load(config.nvml_library);
  if (!library.ok()) {
    log::Error("cannot start", {{"error", library.error().message}});
    return 1;
  }
  const tessera::host::NvmlApi& api = (*library)->api();
  deps.inventory = std::make_unique<tessera::host::NvmlInventory>(api, std::move(library).value());
  if (!config.mig_layout_file.empty() || config.mig_dynamic_gpus != "none") {
    auto mig = tessera::host::NvmlMigDriver::Load(api, config.nvml_library);
    if (!mig.ok()) {
      log::Error("cannot start: mig_layout_file or mig_dynamic_gpus is set but MIG cannot be managed",
                 {{"error", mig.error().message}});
      return 1;
    }
    deps.mig = std::move(mig).value();
  }
  tessera::node::Agent agent(config, std::move(deps));
  if (auto s = agent.Start(); !s.ok()) {
    log::Error("cannot start", {{"error", s.error().message}});
    return 1;
  }

  int received = 0;
  sigwait(&signals, &received);
  log::Info("stopping", {{"signal", received}});
  agent.Stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return Run(argc, argv);
}
