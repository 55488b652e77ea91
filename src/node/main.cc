// tessera-node: the tessera agent on each GPU node (a DaemonSet). See
// docs/node.md for deployment and every configuration key.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <iostream>

#include "node/agent.h"
#include "node/config.h"
#include "node/nvml_inventory.h"

namespace {

int Run(int argc, char** argv) {
  const char* node_name = std::getenv("NODE_NAME");
  auto command_line = tessera::node::ParseCommandLine(argc, argv, node_name ? node_name : "");
  if (command_line.exit_now) {
    (command_line.exit_code == 0 ? std::cout : std::cerr) << command_line.output << std::endl;
    return command_line.exit_code;
  }
  const auto& config = command_line.config;
  spdlog::info(
      "tessera-node starting: resource {}, split count {}, memory scaling {}, plugin dir {}, node '{}'",
      config.resource_name, config.split_count, config.memory_scaling, config.plugin_dir, config.node_name);

  // Signals are taken synchronously by this thread; block them before any
  // other thread exists so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto library = tessera::node::NvmlLibrary::Load(config.nvml_library);
  if (!library.ok()) {
    spdlog::error("{}", library.error().message);
    return 1;
  }
  const tessera::node::NvmlApi& api = (*library)->api();
  auto inventory = std::make_unique<tessera::node::NvmlInventory>(api, std::move(library).value());
  tessera::node::Agent agent(config, std::move(inventory));
  if (auto s = agent.Start(); !s.ok()) {
    spdlog::error("{}", s.error().message);
    return 1;
  }

  int received = 0;
  sigwait(&signals, &received);
  spdlog::info("signal {} received; stopping", received);
  agent.Stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return Run(argc, argv);
}
