// The simulated GPU machine a test's processes run on (src/sim, docs/sim.md):
// which GPUs it has (TESSERA_SIM_GPUS or TESSERA_SIM_CONFIG), where their shared state lives
// (TESSERA_SIM_STATE: every process given the same directory sees the same
// GPUs, memory and processes) and where the simulator's libcuda.so.1 and
// libnvidia-ml.so.1 are found (LD_LIBRARY_PATH).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "testing/process.h"

namespace tessera::testing {

struct SimGpu {
  std::string gpus = "2xA100-80GB";
  std::string state_dir{};
  // The directory holding the simulator's libraries; empty leaves
  // LD_LIBRARY_PATH alone (a program that loads NVML by path, such as
  // tessera-node with --nvml-library).
  std::string lib_dir{};
  // A TESSERA_SIM_CONFIG (YAML text: models, MIG mode, ...); when not empty it
  // describes the machine instead of `gpus`.
  std::string config{};

  // The variables that put a process on this machine.
  Env Environment() const;
  // Sets them in this process, for in-process NVML/CUDA calls and for the
  // children that inherit the environment; unsets whichever of
  // TESSERA_SIM_GPUS / TESSERA_SIM_CONFIG it does not use, so an inherited one
  // does not describe another machine.
  void Export() const;
};

// A command run as a container's process is under libvgpu (docs/vgpu.md): none
// of this process's environment, only `gpu`'s variables, PATH=/usr/bin:/bin,
// the region file (TESSERA_REGION = `region`), libvgpu's warnings
// (LIBCUDA_LOG_LEVEL=2) and, when `libvgpu` is not empty, LD_PRELOAD of it.
// The caller adds limits and the like to `env` and chooses the output.
Command ContainerCommand(const SimGpu& gpu, std::vector<std::string> argv, const std::string& region,
                         const std::string& libvgpu);

// Starts `command` on `gpu`: the machine's variables, then `command.env` over
// them (so a test may override one).
pid_t SpawnOnSimGpu(const SimGpu& gpu, Command command);

}  // namespace tessera::testing
