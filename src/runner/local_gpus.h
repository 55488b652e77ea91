// LocalGpus: the GPUs of this machine for `tessera run`, `tessera ps`,
// `tessera smi` and `tessera demo` — from the NVIDIA driver's NVML when there is
// one, otherwise (or with --sim) from tessera's simulated GPU.
//
// Simulated mode sets TESSERA_SIM_GPUS (and keeps TESSERA_SIM_STATE) in this
// process before loading the simulated NVML, and hands the same variables to
// the jobs it starts, so every `tessera run` on the machine and every job
// sees one shared set of simulated GPUs.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "core/device.h"
#include "host/nvml_api.h"
#include "host/nvml_mig.h"

namespace tessera::runner {

// Where tessera's own files are, derived from the running executable
// (<prefix>/bin/tessera) unless overridden by environment variables.
struct InstallPaths {
  std::string bin_dir;      // directory of the tessera executable
  std::string libvgpu;      // $TESSERA_LIBVGPU or <prefix>/lib/libvgpu.so
  std::string sim_lib_dir;  // $TESSERA_SIM_LIB_DIR or <prefix>/lib/sim
};
InstallPaths DiscoverInstallPaths();

struct LocalGpuOptions {
  std::optional<std::string> sim_spec;  // --sim: always simulate, with this TESSERA_SIM_GPUS spec
  std::string default_sim_spec = "2xA100-80GB";
};

struct LocalGpus {
  bool simulated = false;
  std::string nvml_library;     // the NVML the GPUs came from (a name or the simulated one's path)
  std::string sim_spec;         // when simulated
  std::vector<core::Gpu> gpus;  // physical GPUs, by NVML index
  // One line for the user when the simulated GPU stands in for a missing driver.
  std::string note;
  // Environment a job needs to reach the same GPUs (simulated mode: the sim's
  // library dir on LD_LIBRARY_PATH, TESSERA_SIM_GPUS, TESSERA_SIM_STATE).
  std::map<std::string, std::string> job_env;
  std::map<std::string, std::string> job_path_env;
};

// Discovers the GPUs. Errors when NVML fails on a machine that has it, or the
// simulated GPU cannot be started (the message says why and what to do).
Result<LocalGpus> OpenLocalGpus(const LocalGpuOptions& options, const InstallPaths& paths);

// MIG through the NVML `local` came from (host/nvml_mig.h).
struct LocalMig {
  std::unique_ptr<host::NvmlLibrary> library;
  std::unique_ptr<host::MigDriver> driver;  // declared after `library`: destroyed before it
};
// Errors when the library lacks the MIG entry points (a driver older than R450).
Result<LocalMig> OpenLocalMig(const LocalGpus& local);

}  // namespace tessera::runner
