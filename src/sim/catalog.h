// The built-in catalog of simulated GPU models: real figures of the products
// (memory, SMs, compute capability, clocks, PCI ids) and, for MIG-capable
// models, their GPU-instance profiles with the geometry NVIDIA documents in the
// MIG user guide (memory slices, SMs, instance counts, placements).
//
// Pure data; thread-safe (immutable after static initialisation).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::sim {

// One MIG GPU-instance profile of a model.
struct MigProfile {
  uint32_t nvml_profile;    // NVML_GPU_INSTANCE_PROFILE_* enumerator (the `profile` argument)
  uint32_t id;              // profile id (nvmlGpuInstanceProfileInfo_t::id, nvidia-smi "ID")
  std::string name;         // "1g.5gb", "1g.5gb+me", ...
  uint32_t compute_slices;  // "g" count; also the compute-instance slice count
  uint32_t memory_slices;   // placement size in memory slices
  uint32_t max_instances;   // instanceCount
  uint32_t sm_count;
  uint64_t memory_mib;  // memorySizeMB
  uint32_t copy_engines;
  uint32_t decoders;
  uint32_t jpegs;
  uint32_t ofas;
  std::vector<uint32_t> placement_starts;  // valid start slices (size = memory_slices)
};

struct GpuModel {
  std::string key;      // catalog key, e.g. "A100-40GB"
  std::string name;     // product name as NVML/CUDA report it
  uint64_t memory_mib;  // total memory (NVML total)
  uint32_t sm_count;
  uint32_t cc_major, cc_minor;
  uint32_t max_threads_per_sm;
  uint32_t max_blocks_per_sm;
  uint32_t shared_mem_per_block_optin;  // bytes
  uint32_t shared_mem_per_sm;           // bytes
  uint32_t regs_per_sm;
  uint32_t l2_cache_bytes;
  uint32_t memory_bus_width;  // bits
  uint32_t sm_clock_mhz;      // max (boost) SM clock
  uint32_t mem_clock_mhz;     // max memory clock
  uint32_t power_limit_w;
  uint32_t pci_device_id;  // (device << 16) | 0x10DE
  uint32_t architecture;   // NVML_DEVICE_ARCH_*
  uint32_t async_engines;
  uint32_t nvlink_count;       // NVLink links per GPU (0 = PCIe only)
  uint32_t mig_memory_slices;  // 0 = not MIG capable
  uint32_t mig_compute_slices;
  std::vector<MigProfile> mig_profiles;
};

// The model with this key (case-insensitive; also accepts the product name),
// or nullptr.
const GpuModel* FindModel(const std::string& key);

// All catalog keys, in catalog order (for error messages and docs).
std::vector<std::string> ModelKeys();

// The profile of `model` with NVML enumerator `nvml_profile` or id `id`; nullptr if none.
const MigProfile* FindMigProfileByEnum(const GpuModel& model, uint32_t nvml_profile);
const MigProfile* FindMigProfileById(const GpuModel& model, uint32_t id);

// SMs of a compute instance of `slices` compute slices inside a GPU instance of
// profile `gpu_instance`: the whole instance's when it spans it, else those of
// the model's GPU-instance profile of that size (1c = 1g, 2c = 2g, ...), as the
// real driver reports them (on an H100: 16, 32, 60, 64 SMs; not 132 × slices / 7).
uint32_t ComputeInstanceSmCount(const GpuModel& model, const MigProfile& gpu_instance, uint32_t slices);

}  // namespace tessera::sim
