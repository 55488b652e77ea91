#include "testing/sim_gpu.h"

#include <stdlib.h>

namespace tessera::testing {

Env SimGpu::Environment() const {
  Env env = {{"TESSERA_SIM_GPUS", gpus}, {"TESSERA_SIM_STATE", state_dir}};
  if (!lib_dir.empty()) env["LD_LIBRARY_PATH"] = lib_dir;
  return env;
}

void SimGpu::Export() const {
  for (const auto& [name, value] : Environment()) ::setenv(name.c_str(), value.c_str(), 1);
}

pid_t SpawnOnSimGpu(const SimGpu& gpu, Command command) {
  Env env = gpu.Environment();
  for (const auto& [name, value] : command.env) env[name] = value;
  command.env = std::move(env);
  return Spawn(command);
}

}  // namespace tessera::testing
