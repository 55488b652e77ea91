// MIG partitions as partitionable devices (KEP-4815): on the GPUs named by
// --mig-gpus, tessera-dra publishes every GPU instance the GPU could hold —
// each profile at each of its placements — as a device of its own, and lets
// the scheduler keep them apart with counters:
//
//  - one CounterSet per GPU, "gpu-<index>-counter-set", with a counter
//    "memory-slice-<k>" of 1 per memory slice and "compute-slices" (7 on an
//    A100);
//  - a device "gpu-<index>-mig-<profile without dots>-<profile id>-<start>"
//    (NVIDIA's DRA driver's naming) consumes the memory slices of its
//    placement and its compute slices, so overlapping placements and more
//    compute than the GPU has are never allocated together;
//  - attributes: type "mig", profile, parentUUID, parentIndex and the
//    parent's product, architecture and versions; capacities memory (bytes)
//    and multiprocessors.
// "+me" profiles are left out (one per GPU, media engines only). MIG devices
// are not shared: a claim gets a whole instance, which NodePrepareResources
// creates (GPU instance + one compute instance spanning it) and
// NodeUnprepareResources destroys. On such a GPU tessera-dra owns every
// instance: instances no prepared claim holds are destroyed at start.
//
// Thread-safety: pure functions, except SelectMigGpus (the driver's calls).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "core/device.h"
#include "core/mig/geometry.h"
#include "host/nvml_mig.h"

namespace tessera::dra {

struct MigGpu {
  int index = 0;
  std::string uuid;
  const core::mig::Model* model = nullptr;
};

struct MigDeviceRef {
  int gpu_index = 0;
  uint32_t profile_id = 0;
  uint32_t start = 0;
};

std::string CounterSetName(int gpu_index);
std::string MigDeviceName(int gpu_index, const core::mig::Profile& profile, uint32_t start);
// The GPU, profile ID and start a MIG device name names; nullopt for other names.
std::optional<MigDeviceRef> ParseMigDeviceName(const std::string& name);

// The counter set and the devices of one MIG GPU. `parent_attributes` are
// the attributes its whole-GPU device would have (product, versions, ...).
nlohmann::json MigCounterSet(const MigGpu& gpu);
std::vector<nlohmann::json> MigDevices(const MigGpu& gpu, const nlohmann::json& parent_attributes);

// --mig-gpus: "none", "all" or GPU indices ("0,2"). The indices named; for
// "all" every GPU of `gpus` that is MIG-capable.
Result<std::vector<int>> ParseMigGpus(const std::string& text, const std::vector<core::Gpu>& gpus);

// The MIG GPUs to publish: each selected GPU's model (core/mig tables), with
// MIG mode turned on where it is off. A GPU whose mode change waits for a
// reset (A100) is left out until then, with an error logged by the caller
// through `skipped`.
Result<std::vector<MigGpu>> SelectMigGpus(const std::string& selection, const std::vector<core::Gpu>& gpus,
                                          host::MigDriver& driver, std::vector<std::string>* skipped);

}  // namespace tessera::dra
