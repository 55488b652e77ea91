#include "core/mig/geometry.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace tessera::core::mig {
namespace {

// NVML_GPU_INSTANCE_PROFILE_* (nvml.h).
constexpr uint32_t k1Slice = 0x0, k2Slice = 0x1, k3Slice = 0x2, k4Slice = 0x3, k7Slice = 0x4,
                   k1SliceRev1 = 0x7, k2SliceRev1 = 0x8, k1SliceRev2 = 0x9;

// Starts on the 8-memory-slice parts (A100, H100, H200), nvidia-smi mig -lgipp.
const std::vector<uint32_t> kEvery1{0, 1, 2, 3, 4, 5, 6}, kEven1gTwoSlice{0, 2, 4, 6}, kEven2g{0, 2, 4},
    kHalves{0, 4}, kZero{0};
// Starts on the A30 (4 memory slices).
const std::vector<uint32_t> kA30Every{0, 1, 2, 3}, kA30Halves{0, 2};

// The models, one row each: key, memory slices, compute slices, whether a
// MIG mode change waits for a GPU reset, PCI device ids.
struct ModelRow {
  const char* key;
  uint32_t memory_slices, compute_slices;
  bool mode_change_needs_reset;
  std::vector<uint32_t> pci_device_ids;
};
const ModelRow kModelRows[] = {
    {"A30-24GB", 4, 4, true, {0x20B710DE}},
    // SXM4, PCIe; A800-40GB.
    {"A100-40GB", 8, 7, true, {0x20B010DE, 0x20B110DE, 0x20F110DE, 0x20F610DE}},
    // SXM4, PCIe; A800-80GB.
    {"A100-80GB", 8, 7, true, {0x20B210DE, 0x20B510DE, 0x20F310DE, 0x20F510DE}},
    // SXM5, PCIe; H800.
    {"H100-80GB", 8, 7, false, {0x233010DE, 0x233110DE, 0x232210DE, 0x232410DE}},
    // SXM, NVL.
    {"H200-141GB", 8, 7, false, {0x233510DE, 0x233B10DE}},
};

// The profiles, one row each, grouped by model and ascending by size within
// a model: model key, name, id, NVML index, compute slices, memory slices,
// instance limit, SMs, MiB, copy engines, NVDEC, JPEG, OFA, starts, inferred.
// MiB are the -lgip GiB figures times 1024, to the 64 MiB the printed two
// decimals pin down (19.62 GiB -> 20096 MiB = 19.625 GiB).
struct ProfileRow {
  const char* model;
  const char* name;
  uint32_t id, nvml_index, compute_slices, memory_slices, max_instances, sm_count;
  uint64_t memory_mib;
  uint32_t copy_engines, decoders, jpegs, ofas;
  const std::vector<uint32_t>& starts;
  bool inferred;
};
const ProfileRow kProfileRows[] = {
    // A30-24GB: reference kubernetes-interfaces.md §7.5 and anchors D.1 (-lgip /
    // -lgipp); 2g.12gb+me's starts inferred from 2g.12gb's.
    {"A30-24GB", "1g.6gb", 14, k1Slice, 1, 1, 4, 14, 5952, 1, 0, 0, 0, kA30Every, false},
    {"A30-24GB", "1g.6gb+me", 21, k1SliceRev1, 1, 1, 1, 14, 5952, 1, 1, 1, 1, kA30Every, false},
    {"A30-24GB", "2g.12gb", 5, k2Slice, 2, 2, 2, 28, 11968, 2, 2, 0, 0, kA30Halves, false},
    {"A30-24GB", "2g.12gb+me", 6, k2SliceRev1, 2, 2, 1, 28, 11968, 2, 2, 1, 1, kA30Halves, true},
    {"A30-24GB", "4g.24gb", 0, k4Slice, 4, 4, 1, 56, 24064, 4, 4, 1, 1, kZero, false},
    // A100-40GB: §7.1 and D.1 (1g.10gb = 9.75 GiB).
    {"A100-40GB", "1g.5gb", 19, k1Slice, 1, 1, 7, 14, 4864, 1, 0, 0, 0, kEvery1, false},
    {"A100-40GB", "1g.5gb+me", 20, k1SliceRev1, 1, 1, 1, 14, 4864, 1, 1, 1, 1, kEvery1, false},
    {"A100-40GB", "1g.10gb", 15, k1SliceRev2, 1, 2, 4, 14, 9984, 1, 1, 0, 0, kEven1gTwoSlice, false},
    {"A100-40GB", "2g.10gb", 14, k2Slice, 2, 2, 3, 28, 9984, 2, 1, 0, 0, kEven2g, false},
    {"A100-40GB", "3g.20gb", 9, k3Slice, 3, 4, 2, 42, 20096, 3, 2, 0, 0, kHalves, false},
    {"A100-40GB", "4g.20gb", 5, k4Slice, 4, 4, 1, 56, 20096, 4, 2, 0, 0, kZero, false},
    {"A100-40GB", "7g.40gb", 0, k7Slice, 7, 8, 1, 98, 40448, 7, 5, 1, 1, kZero, false},
    // A100-80GB: §7.2; placements as the A100-40GB's (same GA100 layout,
    // inferred by the reference).
    {"A100-80GB", "1g.10gb", 19, k1Slice, 1, 1, 7, 14, 9728, 1, 0, 0, 0, kEvery1, true},
    {"A100-80GB", "1g.10gb+me", 20, k1SliceRev1, 1, 1, 1, 14, 9728, 1, 1, 1, 1, kEvery1, true},
    {"A100-80GB", "1g.20gb", 15, k1SliceRev2, 1, 2, 4, 14, 19968, 1, 1, 0, 0, kEven1gTwoSlice, true},
    {"A100-80GB", "2g.20gb", 14, k2Slice, 2, 2, 3, 28, 19968, 2, 1, 0, 0, kEven2g, true},
    {"A100-80GB", "3g.40gb", 9, k3Slice, 3, 4, 2, 42, 40192, 3, 2, 0, 0, kHalves, true},
    {"A100-80GB", "4g.40gb", 5, k4Slice, 4, 4, 1, 56, 40192, 4, 2, 0, 0, kZero, true},
    {"A100-80GB", "7g.80gb", 0, k7Slice, 7, 8, 1, 98, 80640, 7, 5, 1, 1, kZero, true},
    // H100-80GB: §7.3 (-lgip and -lgipp).
    {"H100-80GB", "1g.10gb", 19, k1Slice, 1, 1, 7, 16, 9984, 1, 1, 1, 0, kEvery1, false},
    {"H100-80GB", "1g.10gb+me", 20, k1SliceRev1, 1, 1, 1, 16, 9984, 1, 1, 1, 1, kEvery1, false},
    {"H100-80GB", "1g.20gb", 15, k1SliceRev2, 1, 2, 4, 26, 20096, 1, 1, 1, 0, kEven1gTwoSlice, false},
    {"H100-80GB", "2g.20gb", 14, k2Slice, 2, 2, 3, 32, 20096, 2, 2, 2, 0, kEven2g, false},
    {"H100-80GB", "3g.40gb", 9, k3Slice, 3, 4, 2, 60, 40448, 3, 3, 3, 0, kHalves, false},
    {"H100-80GB", "4g.40gb", 5, k4Slice, 4, 4, 1, 64, 40448, 4, 4, 4, 0, kZero, false},
    {"H100-80GB", "7g.80gb", 0, k7Slice, 7, 8, 1, 132, 81152, 8, 7, 7, 1, kZero, false},
    // H200-141GB: §7.4 and D.1. Confirmed: the ids of 1g.18gb, 1g.18gb+me,
    // 2g.35gb and 7g.141gb and their sizes; every placement, the other ids and
    // 1g.35gb's / 4g.71gb's SMs and memory are the GH100 layout's (inferred),
    // 3g.71gb's 69.8 GiB a user report.
    {"H200-141GB", "1g.18gb", 19, k1Slice, 1, 1, 7, 16, 16384, 1, 1, 1, 0, kEvery1, true},
    {"H200-141GB", "1g.18gb+me", 20, k1SliceRev1, 1, 1, 1, 16, 16384, 1, 1, 1, 1, kEvery1, true},
    {"H200-141GB", "1g.35gb", 15, k1SliceRev2, 1, 2, 4, 26, 33280, 1, 1, 1, 0, kEven1gTwoSlice, true},
    {"H200-141GB", "2g.35gb", 14, k2Slice, 2, 2, 3, 32, 33280, 2, 2, 2, 0, kEven2g, true},
    {"H200-141GB", "3g.71gb", 9, k3Slice, 3, 4, 2, 60, 71488, 3, 3, 3, 0, kHalves, true},
    {"H200-141GB", "4g.71gb", 5, k4Slice, 4, 4, 1, 64, 71488, 4, 4, 4, 0, kZero, true},
    {"H200-141GB", "7g.141gb", 0, k7Slice, 7, 8, 1, 132, 143360, 8, 7, 7, 1, kZero, true},
};

std::vector<Model> BuildModels() {
  std::vector<Model> models;
  for (const ModelRow& m : kModelRows) {
    Model model{m.key, m.memory_slices, m.compute_slices, m.mode_change_needs_reset, m.pci_device_ids, {}};
    for (const ProfileRow& p : kProfileRows) {
      if (model.key != p.model) continue;
      const std::string name = p.name;
      model.profiles.push_back(Profile{name, p.id, p.nvml_index, p.compute_slices, p.memory_slices,
                                       p.max_instances, p.sm_count, p.memory_mib, p.copy_engines, p.decoders,
                                       p.jpegs, p.ofas, p.starts, name.find("+me") != std::string::npos,
                                       p.inferred});
    }
    models.push_back(std::move(model));
  }
  return models;
}

const std::vector<Model>& Table() {
  static const std::vector<Model> models = BuildModels();
  return models;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// Whether `token` occurs in `name` as a whole word: not preceded by a letter or
// digit (so "GH200" is not an "H200") nor followed by a digit.
bool HasToken(std::string_view name, std::string_view token) {
  for (size_t at = name.find(token); at != std::string_view::npos; at = name.find(token, at + 1)) {
    const bool left = at == 0 || !std::isalnum(static_cast<unsigned char>(name[at - 1]));
    const size_t end = at + token.size();
    const bool right = end == name.size() || !std::isdigit(static_cast<unsigned char>(name[end]));
    if (left && right) return true;
  }
  return false;
}

}  // namespace

const Profile* Model::FindProfile(std::string_view name) const {
  for (const Profile& p : profiles) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string Model::ProfileNames() const {
  std::string out;
  for (const Profile& p : profiles) out += (out.empty() ? "" : ", ") + p.name;
  return out;
}

const Profile& Model::Whole() const {
  return profiles.back();
}

std::span<const Model> Models() {
  return Table();
}

const Model* FindModel(std::string_view key) {
  const std::string k = Lower(key);
  for (const Model& m : Table()) {
    if (Lower(m.key) == k) return &m;
  }
  return nullptr;
}

Result<const Model*> RecogniseModel(const GpuIdentity& gpu) {
  if (gpu.pci_device_id != 0) {
    for (const Model& m : Table()) {
      if (std::find(m.pci_device_ids.begin(), m.pci_device_ids.end(), gpu.pci_device_id) !=
          m.pci_device_ids.end())
        return &m;
    }
  }
  const double gib = static_cast<double>(gpu.memory_mib) / 1024.0;
  const std::string what = "GPU '" + gpu.name + "' (" + std::to_string(gpu.memory_mib) + " MiB)";
  // Family tokens as NVML names the products ("NVIDIA A100-SXM4-80GB", "NVIDIA
  // A100 80GB PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA H200 NVL", "NVIDIA A30").
  if (HasToken(gpu.name, "A30")) {
    if (gib > 25) return Error{what + ": an A30 with more than 24 GB has no MIG table"};
    return FindModel("A30-24GB");
  }
  if (HasToken(gpu.name, "A100") || HasToken(gpu.name, "A800")) {
    // 40 GB parts report ~39.4-40 GiB, 80 GB parts ~79-80 GiB.
    if (gib < 30) return Error{what + ": an A100 with under 30 GiB has no MIG table"};
    return FindModel(gib < 60 ? "A100-40GB" : "A100-80GB");
  }
  if (HasToken(gpu.name, "H100") || HasToken(gpu.name, "H800")) {
    if (gib < 70 || gib > 82)
      return Error{what + ": only the 80 GB H100 has a MIG table (the 94 GB NVL and 96 GB parts " +
                   "have other profiles)"};
    return FindModel("H100-80GB");
  }
  if (HasToken(gpu.name, "H200")) {
    if (gib < 130 || gib > 145) return Error{what + ": only the 141 GB H200 has a MIG table"};
    return FindModel("H200-141GB");
  }
  return Error{what + ": no MIG table for this model (tessera has tables for A30-24GB, A100-40GB, " +
               "A100-80GB, H100-80GB and H200-141GB)"};
}

uint32_t SliceMask(const Model& model, const Instance& instance) {
  const Profile* p = model.FindProfile(instance.profile);
  if (p == nullptr) return 0;
  return ((1u << p->memory_slices) - 1u) << instance.start;
}

std::string Describe(const Instance& instance) {
  return instance.profile + "@" + std::to_string(instance.start);
}

Status CheckInstances(const Model& model, std::span<const Instance> instances) {
  uint32_t used = 0, compute = 0;
  std::map<std::string, uint32_t> counts;
  for (const Instance& in : instances) {
    const Profile* p = model.FindProfile(in.profile);
    if (p == nullptr)
      return Error{"profile '" + in.profile + "' does not exist on " + model.key +
                   " (its profiles: " + model.ProfileNames() + ")"};
    if (std::find(p->starts.begin(), p->starts.end(), in.start) == p->starts.end())
      return Error{Describe(in) + ": " + p->name + " cannot start at memory slice " +
                   std::to_string(in.start) + " on " + model.key};
    const uint32_t mask = SliceMask(model, in);
    if ((used & mask) != 0) return Error{Describe(in) + ": overlaps another instance's memory slices"};
    used |= mask;
    compute += p->compute_slices;
    if (compute > model.compute_slices)
      return Error{Describe(in) + ": more than the " + std::to_string(model.compute_slices) +
                   " compute slices of " + model.key};
    if (++counts[p->name] > p->max_instances)
      return Error{Describe(in) + ": more than " + std::to_string(p->max_instances) + " instance(s) of " +
                   p->name};
  }
  return Status::Ok();
}

bool CanAdd(const Model& model, std::span<const Instance> existing, const Instance& candidate) {
  std::vector<Instance> all(existing.begin(), existing.end());
  all.push_back(candidate);
  return CheckInstances(model, all).ok();
}

}  // namespace tessera::core::mig
