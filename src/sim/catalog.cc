#include "sim/catalog.h"

#include <algorithm>
#include <cctype>

namespace tessera::sim {
namespace {

constexpr uint32_t kArchVolta = 5, kArchTuring = 6, kArchAmpere = 7, kArchAda = 8, kArchHopper = 9;

// NVML_GPU_INSTANCE_PROFILE_* enumerators.
constexpr uint32_t k1Slice = 0x0, k2Slice = 0x1, k3Slice = 0x2, k4Slice = 0x3, k7Slice = 0x4,
                   k1SliceRev1 = 0x7, k2SliceRev1 = 0x8, k1SliceRev2 = 0x9;

// What every GPU of one compute capability has: the SM's limits and the
// architecture NVML names.
struct SmArchitecture {
  uint32_t cc_major, cc_minor;
  uint32_t max_threads_per_sm, max_blocks_per_sm;
  uint32_t shared_mem_per_block_optin, shared_mem_per_sm;  // bytes
  uint32_t regs_per_sm;
  uint32_t nvml_architecture;  // NVML_DEVICE_ARCH_*
};
constexpr SmArchitecture kSmArchitectures[] = {
    {7, 0, 2048, 32, 98304, 98304, 65536, kArchVolta},     // GV100
    {7, 5, 1024, 16, 65536, 65536, 65536, kArchTuring},    // TU104
    {8, 0, 2048, 32, 166912, 167936, 65536, kArchAmpere},  // GA100
    {8, 9, 1536, 24, 101376, 102400, 65536, kArchAda},     // AD104
    {9, 0, 2048, 32, 232448, 233472, 65536, kArchHopper},  // GH100
};

// One product: the figures of its data sheet. `cc` names its SmArchitecture
// (80 = 8.0). Its MIG slices follow from its MIG profiles (none: no MIG).
struct Product {
  const char* key;
  const char* name;
  uint32_t cc;
  uint64_t memory_mib;
  uint32_t sm_count, l2_mib, bus_bits, sm_mhz, mem_mhz, power_w, pci_device_id, async_engines, nvlinks;
};
constexpr Product kProducts[] = {
    {"A100-40GB", "NVIDIA A100-SXM4-40GB", 80, 40960, 108, 40, 5120, 1410, 1215, 400, 0x20B010DE, 3, 12},
    {"A100-80GB", "NVIDIA A100-SXM4-80GB", 80, 81920, 108, 40, 5120, 1410, 1593, 400, 0x20B210DE, 3, 12},
    {"H100-80GB", "NVIDIA H100 80GB HBM3", 90, 81559, 132, 50, 5120, 1980, 2619, 700, 0x233010DE, 3, 18},
    {"H200-141GB", "NVIDIA H200", 90, 143771, 132, 60, 6144, 1980, 3201, 700, 0x233510DE, 3, 18},
    {"A30", "NVIDIA A30", 80, 24576, 56, 24, 3072, 1440, 1215, 165, 0x20B710DE, 2, 4},
    {"L4", "NVIDIA L4", 89, 23034, 58, 48, 192, 2040, 6251, 72, 0x27B810DE, 2, 0},
    {"T4", "Tesla T4", 75, 15360, 40, 4, 256, 1590, 5001, 70, 0x1EB810DE, 3, 0},
    {"V100", "Tesla V100-SXM2-32GB", 70, 32768, 80, 6, 4096, 1530, 877, 300, 0x1DB510DE, 6, 6},
};

// The GPU-instance profiles of a 7-compute/8-memory-slice part (A100, H100,
// H200), from the MIG user guide: the geometry is the same on all of them; the
// chip decides the SMs and media engines of each profile, the product its
// memory (name suffixes and sizes of 1, 2, 4 and 8 memory slices).
// SMs per profile: sm[0] for the 1g profiles, sm[1] for the 1g profile with two
// memory slices (the A100's 14, but 26 on the GH100, as nvidia-smi mig -lgip
// reports on an H100 80GB), then 2g, 3g, 4g and 7g. Media engines (copy
// engines, NVDEC, JPEG, OFA): the A100's are in the guide's A100 table; GH100
// instances carry one NVDEC and one JPEG per compute slice and the 7g has 8
// copy engines (-lgip on an H100).
enum class Media { kAmpere, kHopper };
struct SevenSliceChip {
  uint32_t cc;
  uint32_t sm[6];
  Media media;
};
constexpr SevenSliceChip kSevenSliceChips[] = {
    {80, {14, 14, 28, 42, 56, 98}, Media::kAmpere},   // GA100
    {90, {16, 26, 32, 60, 64, 132}, Media::kHopper},  // GH100
};
struct SevenSliceMemory {
  const char* key;
  const char* name[4];
  uint64_t mib[4];
};
constexpr SevenSliceMemory kSevenSliceMemory[] = {
    {"A100-40GB", {"5gb", "10gb", "20gb", "40gb"}, {4864, 9984, 20096, 40448}},
    {"A100-80GB", {"10gb", "20gb", "40gb", "80gb"}, {9728, 19968, 40192, 80640}},
    {"H100-80GB", {"10gb", "20gb", "40gb", "80gb"}, {9984, 20096, 40448, 81152}},
    {"H200-141GB", {"18gb", "35gb", "71gb", "141gb"}, {16384, 33280, 71488, 143360}},
};

std::vector<MigProfile> SevenSliceProfiles(const SevenSliceChip& c, const SevenSliceMemory& m) {
  auto n = [&](const char* slices, int memory) { return std::string(slices) + "." + m.name[memory]; };
  const bool h = c.media == Media::kHopper;
  // {copy engines, decoders, jpegs, ofas} per profile.
  return {
      {k1Slice,
       19,
       n("1g", 0),
       1,
       1,
       7,
       c.sm[0],
       m.mib[0],
       1,
       h ? 1u : 0u,
       h ? 1u : 0u,
       0,
       {0, 1, 2, 3, 4, 5, 6}},
      {k1SliceRev1, 20, n("1g", 0) + "+me", 1, 1, 1, c.sm[0], m.mib[0], 1, 1, 1, 1, {0, 1, 2, 3, 4, 5, 6}},
      {k1SliceRev2, 15, n("1g", 1), 1, 2, 4, c.sm[1], m.mib[1], 1, 1, h ? 1u : 0u, 0, {0, 2, 4, 6}},
      {k2Slice, 14, n("2g", 1), 2, 2, 3, c.sm[2], m.mib[1], 2, h ? 2u : 1u, h ? 2u : 0u, 0, {0, 2, 4}},
      {k3Slice, 9, n("3g", 2), 3, 4, 2, c.sm[3], m.mib[2], 3, h ? 3u : 2u, h ? 3u : 0u, 0, {0, 4}},
      {k4Slice, 5, n("4g", 2), 4, 4, 1, c.sm[4], m.mib[2], 4, h ? 4u : 2u, h ? 4u : 0u, 0, {0}},
      {k7Slice, 0, n("7g", 3), 7, 8, 1, c.sm[5], m.mib[3], h ? 8u : 7u, h ? 7u : 5u, h ? 7u : 1u, 1, {0}},
  };
}

// The A30's (4 compute and 4 memory slices), from the MIG user guide.
std::vector<MigProfile> A30Profiles() {
  return {
      {k1Slice, 14, "1g.6gb", 1, 1, 4, 14, 5952, 1, 0, 0, 0, {0, 1, 2, 3}},
      {k1SliceRev1, 21, "1g.6gb+me", 1, 1, 1, 14, 5952, 1, 1, 1, 1, {0, 1, 2, 3}},
      {k2Slice, 5, "2g.12gb", 2, 2, 2, 28, 11968, 2, 2, 0, 0, {0, 2}},
      {k2SliceRev1, 6, "2g.12gb+me", 2, 2, 1, 28, 11968, 2, 2, 1, 1, {0, 2}},
      {k4Slice, 0, "4g.24gb", 4, 4, 1, 56, 24064, 4, 4, 1, 1, {0}},
  };
}

std::vector<MigProfile> MigProfilesOf(const Product& p) {
  for (const SevenSliceMemory& m : kSevenSliceMemory) {
    if (p.key != std::string(m.key)) continue;
    for (const SevenSliceChip& c : kSevenSliceChips) {
      if (c.cc == p.cc) return SevenSliceProfiles(c, m);
    }
  }
  return p.key == std::string("A30") ? A30Profiles() : std::vector<MigProfile>{};
}

std::vector<GpuModel> BuildCatalog() {
  std::vector<GpuModel> catalog;
  for (const Product& p : kProducts) {
    const SmArchitecture* sm = nullptr;
    for (const SmArchitecture& a : kSmArchitectures) {
      if (a.cc_major * 10 + a.cc_minor == p.cc) sm = &a;
    }
    std::vector<MigProfile> mig = MigProfilesOf(p);
    uint32_t memory_slices = 0, compute_slices = 0;  // the largest profile's
    for (const MigProfile& m : mig) {
      memory_slices = std::max(memory_slices, m.memory_slices);
      compute_slices = std::max(compute_slices, m.compute_slices);
    }
    catalog.push_back({p.key,
                       p.name,
                       p.memory_mib,
                       p.sm_count,
                       sm->cc_major,
                       sm->cc_minor,
                       sm->max_threads_per_sm,
                       sm->max_blocks_per_sm,
                       sm->shared_mem_per_block_optin,
                       sm->shared_mem_per_sm,
                       sm->regs_per_sm,
                       p.l2_mib << 20,
                       p.bus_bits,
                       p.sm_mhz,
                       p.mem_mhz,
                       p.power_w,
                       p.pci_device_id,
                       sm->nvml_architecture,
                       p.async_engines,
                       p.nvlinks,
                       memory_slices,
                       compute_slices,
                       std::move(mig)});
  }
  return catalog;
}

const std::vector<GpuModel>& Catalog() {
  static const std::vector<GpuModel> catalog = BuildCatalog();
  return catalog;
}

std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

const GpuModel* FindModel(const std::string& key) {
  const std::string k = Lower(key);
  for (const GpuModel& m : Catalog()) {
    if (Lower(m.key) == k || Lower(m.name) == k) return &m;
  }
  // Common aliases.
  if (k == "v100-32gb") return FindModel("V100");
  if (k == "h200" || k == "h200-141g") return FindModel("H200-141GB");
  if (k == "a30-24gb") return FindModel("A30");
  if (k == "l4-24gb") return FindModel("L4");
  if (k == "t4-16gb") return FindModel("T4");
  return nullptr;
}

std::vector<std::string> ModelKeys() {
  std::vector<std::string> keys;
  for (const GpuModel& m : Catalog()) keys.push_back(m.key);
  return keys;
}

const MigProfile* FindMigProfileByEnum(const GpuModel& model, uint32_t nvml_profile) {
  for (const MigProfile& p : model.mig_profiles) {
    if (p.nvml_profile == nvml_profile) return &p;
  }
  return nullptr;
}

const MigProfile* FindMigProfileById(const GpuModel& model, uint32_t id) {
  for (const MigProfile& p : model.mig_profiles) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

uint32_t ComputeInstanceSmCount(const GpuModel& model, const MigProfile& gpu_instance, uint32_t slices) {
  if (slices >= gpu_instance.compute_slices) return gpu_instance.sm_count;
  // The first (plain) GPU-instance profile with that many compute slices.
  for (const MigProfile& p : model.mig_profiles) {
    if (p.compute_slices == slices) return std::min(p.sm_count, gpu_instance.sm_count);
  }
  return gpu_instance.sm_count * slices / gpu_instance.compute_slices;
}

}  // namespace tessera::sim
