// Configuration of the simulated GPUs: which devices exist and how the
// simulated driver behaves. Read from the environment by the first process
// that creates a state directory, then fixed for the state's lifetime (see
// docs/sim.md).
//
//   TESSERA_SIM_GPUS="2xH100-80GB"            count x model, comma separated
//   TESSERA_SIM_GPUS="A100-40GB,A100-80GB"
//   TESSERA_SIM_CONFIG=/path/to/sim.yaml      (or the YAML text itself)
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "sim/catalog.h"

namespace tessera::sim {

struct SimGpuConfig {
  const GpuModel* model = nullptr;
  uint64_t memory_mib = 0;  // defaults to the model's
  uint32_t sm_count = 0;    // defaults to the model's
  int numa_node = 0;
  bool mig_enabled = false;
  std::string uuid;  // empty: derived deterministically from the config
};

struct NvlinkPair {
  int a = 0;
  int b = 0;
  int links = 1;
};

struct SimConfig {
  std::vector<SimGpuConfig> gpus;
  std::vector<NvlinkPair> nvlinks;
  uint64_t context_overhead_mib = 300;       // device memory each process's first context costs
  uint64_t copy_bandwidth_mb_per_s = 25000;  // host<->device copies (PCIe-like)
  uint64_t default_kernel_ns = 10000;        // duration of kernels not named sim_busy*
  // Managed memory may exceed what the device has free: the part that does not
  // fit stays in host memory (as unified memory oversubscription does on Linux).
  bool managed_oversubscription = false;
  uint32_t driver_version = 13000;  // cuDriverGetVersion
  std::string driver_version_string = "580.82.07";

  // A canonical one-line description; two configs are the same iff equal.
  std::string Canonical() const;
};

// Parses "2xH100-80GB", "A100-40GB,A100-80GB", "2xA100-40GB,1xL4".
Result<SimConfig> ParseGpuList(const std::string& list);

// Parses the YAML form (see docs/sim.md).
Result<SimConfig> ParseYamlConfig(const std::string& yaml_text);

// The configuration the environment asks for: TESSERA_SIM_CONFIG, else
// TESSERA_SIM_GPUS, else the default (one A100-40GB). `explicit_out` tells
// whether the environment asked for anything.
Result<SimConfig> ConfigFromEnvironment(bool* explicit_out);

}  // namespace tessera::sim
