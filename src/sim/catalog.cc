#include "sim/catalog.h"

#include <algorithm>
#include <cctype>

namespace tessera::sim {
namespace {

constexpr uint32_t kArchVolta = 5, kArchTuring = 6, kArchAmpere = 7, kArchAda = 8, kArchHopper = 9;

// NVML_GPU_INSTANCE_PROFILE_* enumerators.
constexpr uint32_t k1Slice = 0x0, k2Slice = 0x1, k3Slice = 0x2, k4Slice = 0x3, k7Slice = 0x4,
                   k1SliceRev1 = 0x7, k2SliceRev1 = 0x8, k1SliceRev2 = 0x9;

// Profiles of a 7-compute/8-memory-slice part (A100, H100, H200), from the MIG
// user guide: name suffixes and memory sizes differ by product, geometry does not.
// SMs per profile: `sm1` for the 1g profiles, `sm1_wide` for the 1g profile with
// two memory slices (the A100's 14, but 26 on the GH100, as nvidia-smi mig
// -lgip reports on an H100 80GB). Media engines (copy engines, NVDEC, JPEG, OFA):
// the A100's are in the guide's A100 table; GH100 instances carry one NVDEC and
// one JPEG per compute slice and the 7g has 8 copy engines (-lgip on an H100).
enum class Media { kAmpere, kHopper };
std::vector<MigProfile> SevenSliceProfiles(const char* mem1, const char* mem2, const char* mem4,
                                           const char* mem8, uint64_t mib1, uint64_t mib2, uint64_t mib4,
                                           uint64_t mib8, uint32_t sm1, uint32_t sm1_wide, uint32_t sm2,
                                           uint32_t sm3, uint32_t sm4, uint32_t sm7, Media media) {
  auto n = [](const char* g, const char* m) { return std::string(g) + "." + m; };
  const bool h = media == Media::kHopper;
  // {copy engines, decoders, jpegs, ofas} per profile.
  return {
      {k1Slice, 19, n("1g", mem1), 1, 1, 7, sm1, mib1, 1, h ? 1u : 0u, h ? 1u : 0u, 0, {0, 1, 2, 3, 4, 5, 6}},
      {k1SliceRev1, 20, n("1g", mem1) + "+me", 1, 1, 1, sm1, mib1, 1, 1, 1, 1, {0, 1, 2, 3, 4, 5, 6}},
      {k1SliceRev2, 15, n("1g", mem2), 1, 2, 4, sm1_wide, mib2, 1, 1, h ? 1u : 0u, 0, {0, 2, 4, 6}},
      {k2Slice, 14, n("2g", mem2), 2, 2, 3, sm2, mib2, 2, h ? 2u : 1u, h ? 2u : 0u, 0, {0, 2, 4}},
      {k3Slice, 9, n("3g", mem4), 3, 4, 2, sm3, mib4, 3, h ? 3u : 2u, h ? 3u : 0u, 0, {0, 4}},
      {k4Slice, 5, n("4g", mem4), 4, 4, 1, sm4, mib4, 4, h ? 4u : 2u, h ? 4u : 0u, 0, {0}},
      {k7Slice, 0, n("7g", mem8), 7, 8, 1, sm7, mib8, h ? 8u : 7u, h ? 7u : 5u, h ? 7u : 1u, 1, {0}},
  };
}

std::vector<GpuModel> BuildCatalog() {
  std::vector<GpuModel> c;
  // key, name, MiB, SMs, cc, thr/SM, blk/SM, smem/blk optin, smem/SM, regs/SM, L2, bus, clk, memclk,
  // power W, PCI id, arch, async engines, NVLinks, MIG memory slices, MIG compute slices.
  c.push_back({"A100-40GB",
               "NVIDIA A100-SXM4-40GB",
               40960,
               108,
               8,
               0,
               2048,
               32,
               166912,
               167936,
               65536,
               41943040,
               5120,
               1410,
               1215,
               400,
               0x20B010DE,
               kArchAmpere,
               3,
               12,
               8,
               7,
               SevenSliceProfiles("5gb", "10gb", "20gb", "40gb", 4864, 9856, 19968, 40192, 14, 14, 28, 42, 56,
                                  98, Media::kAmpere)});
  c.push_back({"A100-80GB",
               "NVIDIA A100-SXM4-80GB",
               81920,
               108,
               8,
               0,
               2048,
               32,
               166912,
               167936,
               65536,
               41943040,
               5120,
               1410,
               1593,
               400,
               0x20B210DE,
               kArchAmpere,
               3,
               12,
               8,
               7,
               SevenSliceProfiles("10gb", "20gb", "40gb", "80gb", 9728, 19968, 40448, 80384, 14, 14, 28, 42,
                                  56, 98, Media::kAmpere)});
  c.push_back({"H100-80GB",
               "NVIDIA H100 80GB HBM3",
               81559,
               132,
               9,
               0,
               2048,
               32,
               232448,
               233472,
               65536,
               52428800,
               5120,
               1980,
               2619,
               700,
               0x233010DE,
               kArchHopper,
               3,
               18,
               8,
               7,
               SevenSliceProfiles("10gb", "20gb", "40gb", "80gb", 9984, 20096, 40448, 81152, 16, 26, 32, 60,
                                  64, 132, Media::kHopper)});
  c.push_back({"H200-141GB",
               "NVIDIA H200",
               143771,
               132,
               9,
               0,
               2048,
               32,
               232448,
               233472,
               65536,
               62914560,
               6144,
               1980,
               3201,
               700,
               0x233510DE,
               kArchHopper,
               3,
               18,
               8,
               7,
               SevenSliceProfiles("18gb", "35gb", "71gb", "141gb", 17920, 34816, 70400, 140544, 16, 26, 32,
                                  60, 64, 132, Media::kHopper)});
  GpuModel a30{"A30",      "NVIDIA A30", 24576, 56,       8,    0,    2048, 32,
               166912,     167936,       65536, 25165824, 3072, 1440, 1215, 165,
               0x20B710DE, kArchAmpere,  2,     4,        4,    4,    {}};
  a30.mig_profiles = {
      {k1Slice, 14, "1g.6gb", 1, 1, 4, 14, 5836, 1, 0, 0, 0, {0, 1, 2, 3}},
      {k1SliceRev1, 21, "1g.6gb+me", 1, 1, 1, 14, 5836, 1, 1, 1, 1, {0, 1, 2, 3}},
      {k2Slice, 5, "2g.12gb", 2, 2, 2, 28, 11904, 2, 2, 0, 0, {0, 2}},
      {k2SliceRev1, 6, "2g.12gb+me", 2, 2, 1, 28, 11904, 2, 2, 1, 1, {0, 2}},
      {k4Slice, 0, "4g.24gb", 4, 4, 1, 56, 24064, 4, 4, 1, 1, {0}},
  };
  c.push_back(a30);
  c.push_back({"L4", "NVIDIA L4", 23034, 58, 8,          9,        1536, 24, 101376, 102400, 65536, 50331648,
               192,  2040,        6251,  72, 0x27B810DE, kArchAda, 2,    0,  0,      0,      {}});
  c.push_back({"T4", "Tesla T4", 15360, 40, 7,          5,           1024, 16, 65536, 65536, 65536, 4194304,
               256,  1590,       5001,  70, 0x1EB810DE, kArchTuring, 3,    0,  0,     0,     {}});
  c.push_back({"V100",     "Tesla V100-SXM2-32GB",
               32768,      80,
               7,          0,
               2048,       32,
               98304,      98304,
               65536,      6291456,
               4096,       1530,
               877,        300,
               0x1DB510DE, kArchVolta,
               6,          6,
               0,          0,
               {}});
  return c;
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
