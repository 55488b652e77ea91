#include "testing/sim_gpu.h"

#include <stdlib.h>

#include "contract/container_contract.h"

namespace tessera::testing {

Env SimGpu::Environment() const {
  Env env = {{"TESSERA_SIM_STATE", state_dir}};
  if (config.empty()) {
    env["TESSERA_SIM_GPUS"] = gpus;
  } else {
    env["TESSERA_SIM_CONFIG"] = config;
  }
  if (!lib_dir.empty()) env["LD_LIBRARY_PATH"] = lib_dir;
  return env;
}

void SimGpu::Export() const {
  ::unsetenv(config.empty() ? "TESSERA_SIM_CONFIG" : "TESSERA_SIM_GPUS");
  for (const auto& [name, value] : Environment()) ::setenv(name.c_str(), value.c_str(), 1);
}

Command ContainerCommand(const SimGpu& gpu, std::vector<std::string> argv, const std::string& region,
                         const std::string& libvgpu) {
  Command command;
  command.argv = std::move(argv);
  command.clear_env = true;
  command.env = gpu.Environment();
  command.env["PATH"] = "/usr/bin:/bin";
  command.env[contract::kRegionEnv] = region;
  command.env["LIBCUDA_LOG_LEVEL"] = "2";
  if (!libvgpu.empty()) command.env["LD_PRELOAD"] = libvgpu;
  return command;
}

pid_t SpawnOnSimGpu(const SimGpu& gpu, Command command) {
  Env env = gpu.Environment();
  for (const auto& [name, value] : command.env) env[name] = value;
  command.env = std::move(env);
  return Spawn(command);
}

}  // namespace tessera::testing
