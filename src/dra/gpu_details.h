// GpuDetails: what tessera-dra publishes about a GPU beyond the inventory
// (src/host's NvmlInventory): architecture, PCI bus ID, compute capability,
// driver and CUDA versions. Read through NVML like the inventory, by index.
//
// Thread-safety: plain values and functions.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"

namespace tessera::dra {

struct GpuDetails {
  std::string uuid;
  std::string architecture;        // "Ampere"; "" = unknown
  std::string pci_bus_id;          // "0000:3b:00.0" (lower case); "" = unknown
  std::string compute_capability;  // "8.0"; "" = unknown
  bool operator==(const GpuDetails&) const = default;
};

struct SystemDetails {
  std::string driver_version;       // as NVML prints it, "550.54.15"
  std::string cuda_driver_version;  // "12.4"
  std::vector<GpuDetails> gpus;
};

// Loads `nvml_library` (dlopen) and reads the details; an entry point the
// library lacks leaves its field empty.
Result<SystemDetails> ReadSystemDetails(const std::string& nvml_library);

// NVIDIA's "535.104.05" as a semantic version ("535.104.5"); "" when it is
// not one to three dot-separated numbers.
std::string ToSemver(const std::string& version);

}  // namespace tessera::dra
