// MIG geometry of the A30, A100-80GB and H200 as an ordinary NVML client sees
// it: every GPU-instance profile (id, slices, instance count, SMs, memory,
// media engines), its possible placements, and instances created and destroyed
// until each GPU is full, as NVIDIA's MIG user guide ("Supported MIG Profiles")
// describes them: the A30 has 4 compute and 4 memory slices, the A100 and H200
// 7 compute and 8 memory slices.
#include <nvml.h>

#include <string>
#include <vector>

#include "sim_test_util.h"

namespace {

nvmlDevice_t Handle(unsigned i) {
  nvmlDevice_t d = nullptr;
  SIM_OK(nvmlDeviceGetHandleByIndex(i, &d));
  return d;
}

struct Profile {
  unsigned profile;  // NVML_GPU_INSTANCE_PROFILE_*
  unsigned id;       // nvidia-smi mig -lgip "ID"
  const char* name;
  unsigned compute_slices, instances, sms;
  unsigned long long mib;
  unsigned ce, dec, jpeg, ofa;
  std::vector<unsigned> starts;  // possible placements (memory slices)
  unsigned size;                 // memory slices per placement
};

void CheckProfiles(const char* model, nvmlDevice_t dev, const std::vector<Profile>& table,
                   const std::vector<unsigned>& unsupported) {
  for (const Profile& p : table) {
    nvmlGpuInstanceProfileInfo_v2_t info{};
    info.version = nvmlGpuInstanceProfileInfo_v2;
    SIM_OK(nvmlDeviceGetGpuInstanceProfileInfoV(dev, p.profile, &info));
    if (info.id != p.id || std::string(info.name) != std::string("MIG ") + p.name) {
      std::fprintf(stderr, "%s profile %u: got id %u name '%s', want %u 'MIG %s'\n", model, p.profile,
                   info.id, info.name, p.id, p.name);
      ++simtest::Failures();
    }
    SIM_CHECK_EQ(info.sliceCount, p.compute_slices);
    SIM_CHECK_EQ(info.instanceCount, p.instances);
    SIM_CHECK_EQ(info.multiprocessorCount, p.sms);
    SIM_CHECK_EQ(info.memorySizeMB, p.mib);
    SIM_CHECK_EQ(info.copyEngineCount, p.ce);
    SIM_CHECK_EQ(info.decoderCount, p.dec);
    SIM_CHECK_EQ(info.jpegCount, p.jpeg);
    SIM_CHECK_EQ(info.ofaCount, p.ofa);
    if (info.multiprocessorCount != p.sms || info.copyEngineCount != p.ce || info.decoderCount != p.dec ||
        info.jpegCount != p.jpeg || info.ofaCount != p.ofa || info.memorySizeMB != p.mib) {
      std::fprintf(stderr, "  (%s %s)\n", model, p.name);
    }

    nvmlGpuInstancePlacement_t places[8];
    unsigned n = 8;
    SIM_OK(nvmlDeviceGetGpuInstancePossiblePlacements_v2(dev, p.id, places, &n));
    SIM_CHECK_EQ(n, p.starts.size());
    for (unsigned i = 0; i < n && i < p.starts.size(); ++i) {
      SIM_CHECK_EQ(places[i].start, p.starts[i]);
      SIM_CHECK_EQ(places[i].size, p.size);
    }
    // Nothing created yet: as many as the profile allows fit.
    unsigned capacity = 0;
    SIM_OK(nvmlDeviceGetGpuInstanceRemainingCapacity(dev, p.id, &capacity));
    SIM_CHECK_EQ(capacity, p.instances);
  }
  for (unsigned profile : unsupported) {
    nvmlGpuInstanceProfileInfo_t none{};
    SIM_CHECK_EQ(nvmlDeviceGetGpuInstanceProfileInfo(dev, profile, &none), NVML_ERROR_NOT_SUPPORTED);
  }
}

unsigned Capacity(nvmlDevice_t dev, unsigned id) {
  unsigned n = 99;
  SIM_OK(nvmlDeviceGetGpuInstanceRemainingCapacity(dev, id, &n));
  return n;
}

// Creates `count` instances of profile `id` (each must succeed, at the given
// placement starts in order when `starts` is not empty).
void Create(nvmlDevice_t dev, unsigned id, unsigned count, std::vector<nvmlGpuInstance_t>* out,
            const std::vector<unsigned>& starts = {}) {
  for (unsigned i = 0; i < count; ++i) {
    nvmlGpuInstance_t gi = nullptr;
    nvmlReturn_t r = nvmlDeviceCreateGpuInstance(dev, id, &gi);
    SIM_CHECK_EQ(r, NVML_SUCCESS);
    if (r != NVML_SUCCESS) {
      std::fprintf(stderr, "  creating profile id %u, instance %u of %u\n", id, i + 1, count);
      continue;
    }
    if (i < starts.size()) {
      nvmlGpuInstanceInfo_t info{};
      SIM_OK(nvmlGpuInstanceGetInfo(gi, &info));
      SIM_CHECK_EQ(info.placement.start, starts[i]);
      SIM_CHECK_EQ(info.profileId, id);
    }
    out->push_back(gi);
  }
}

void CannotCreate(nvmlDevice_t dev, unsigned id) {
  nvmlGpuInstance_t gi = nullptr;
  SIM_CHECK_EQ(nvmlDeviceCreateGpuInstance(dev, id, &gi), NVML_ERROR_INSUFFICIENT_RESOURCES);
  SIM_CHECK_EQ(Capacity(dev, id), 0u);
}

void DestroyAll(std::vector<nvmlGpuInstance_t>* gis) {
  for (nvmlGpuInstance_t gi : *gis) SIM_OK(nvmlGpuInstanceDestroy(gi));
  gis->clear();
}

// Compute-instance profiles of a GPU instance: {CI profile, count, SMs}; the
// rest of `all` must be unsupported.
void CheckComputeProfiles(nvmlGpuInstance_t gi, const std::vector<std::vector<unsigned>>& supported) {
  const unsigned all[] = {NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
                          NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
                          NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE};
  for (unsigned profile : all) {
    const std::vector<unsigned>* want = nullptr;
    for (const auto& s : supported) {
      if (s[0] == profile) want = &s;
    }
    nvmlComputeInstanceProfileInfo_t info{};
    nvmlReturn_t r = nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info);
    if (want == nullptr) {
      SIM_CHECK_EQ(r, NVML_ERROR_NOT_SUPPORTED);
      continue;
    }
    SIM_CHECK_EQ(r, NVML_SUCCESS);
    SIM_CHECK_EQ(info.instanceCount, (*want)[1]);
    SIM_CHECK_EQ(info.multiprocessorCount, (*want)[2]);
  }
}

void A30() {
  nvmlDevice_t a30 = Handle(0);
  // MIG user guide, A30-24GB: fractions of 4 memory / 4 compute slices.
  const std::vector<Profile> table = {
      {NVML_GPU_INSTANCE_PROFILE_1_SLICE, 14, "1g.6gb", 1, 4, 14, 5952, 1, 0, 0, 0, {0, 1, 2, 3}, 1},
      {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 21, "1g.6gb+me", 1, 1, 14, 5952, 1, 1, 1, 1, {0, 1, 2, 3}, 1},
      {NVML_GPU_INSTANCE_PROFILE_2_SLICE, 5, "2g.12gb", 2, 2, 28, 11968, 2, 2, 0, 0, {0, 2}, 2},
      {NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1, 6, "2g.12gb+me", 2, 1, 28, 11968, 2, 2, 1, 1, {0, 2}, 2},
      {NVML_GPU_INSTANCE_PROFILE_4_SLICE, 0, "4g.24gb", 4, 1, 56, 24064, 4, 4, 1, 1, {0}, 4},
  };
  CheckProfiles("A30", a30, table,
                {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, NVML_GPU_INSTANCE_PROFILE_3_SLICE,
                 NVML_GPU_INSTANCE_PROFILE_7_SLICE, NVML_GPU_INSTANCE_PROFILE_8_SLICE});
  std::vector<nvmlGpuInstance_t> gis;
  // Four 1g.6gb fill the GPU.
  Create(a30, 14, 4, &gis, {0, 1, 2, 3});
  CannotCreate(a30, 14);
  SIM_CHECK_EQ(Capacity(a30, 5), 0u);
  SIM_CHECK_EQ(Capacity(a30, 0), 0u);
  DestroyAll(&gis);
  SIM_CHECK_EQ(Capacity(a30, 14), 4u);
  // 2g.12gb + 2 x 1g.6gb.
  Create(a30, 5, 1, &gis, {0});
  SIM_CHECK_EQ(Capacity(a30, 14), 2u);
  SIM_CHECK_EQ(Capacity(a30, 5), 1u);
  Create(a30, 14, 2, &gis, {2, 3});
  CannotCreate(a30, 14);
  CannotCreate(a30, 5);
  DestroyAll(&gis);
  // A 2g placement must start on an even slice.
  nvmlGpuInstancePlacement_t odd{1, 2}, even{2, 2};
  nvmlGpuInstance_t gi = nullptr;
  SIM_CHECK(nvmlDeviceCreateGpuInstanceWithPlacement(a30, 5, &odd, &gi) != NVML_SUCCESS);
  SIM_OK(nvmlDeviceCreateGpuInstanceWithPlacement(a30, 5, &even, &gi));
  nvmlGpuInstanceInfo_t info{};
  SIM_OK(nvmlGpuInstanceGetInfo(gi, &info));
  SIM_CHECK(info.placement.start == 2 && info.placement.size == 2);
  SIM_CHECK_EQ(Capacity(a30, 0), 0u);
  SIM_OK(nvmlGpuInstanceDestroy(gi));
  // One +me instance of each size at most.
  Create(a30, 21, 1, &gis);
  CannotCreate(a30, 21);
  SIM_CHECK_EQ(Capacity(a30, 14), 3u);
  DestroyAll(&gis);
  // 4g.24gb takes everything; its compute instances: 1c x4, 2c x2, 4c (no 3c).
  Create(a30, 0, 1, &gis, {0});
  CannotCreate(a30, 14);
  CannotCreate(a30, 0);
  CheckComputeProfiles(gis[0], {{NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 4, 14},
                                {NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, 2, 28},
                                {NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, 1, 56}});
  std::vector<nvmlComputeInstance_t> cis(4);
  for (auto& ci : cis)
    SIM_OK(nvmlGpuInstanceCreateComputeInstance(gis[0], NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &ci));
  nvmlComputeInstance_t fifth;
  SIM_CHECK_EQ(nvmlGpuInstanceCreateComputeInstance(gis[0], NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &fifth),
               NVML_ERROR_INSUFFICIENT_RESOURCES);
  SIM_CHECK_EQ(nvmlGpuInstanceDestroy(gis[0]), NVML_ERROR_IN_USE);
  for (auto ci : cis) SIM_OK(nvmlComputeInstanceDestroy(ci));
  DestroyAll(&gis);
  SIM_CHECK_EQ(Capacity(a30, 14), 4u);
}

// The A100 and H100/H200 share one geometry: 7 compute, 8 memory slices.
// Profile ids (nvidia-smi mig -lgip): 19, 20 (+me), 15, 14, 9, 5, 0.
// `ci_sms`: SMs of a 1c, 2c, 3c, 4c and 7c compute instance in the 7g instance
// (those of the 1g, 2g, 3g, 4g and 7g GPU-instance profiles).
void SevenSliceFills(const char* model, nvmlDevice_t dev, const std::vector<unsigned>& ci_sms) {
  const int failures_before = simtest::Failures();
  std::vector<nvmlGpuInstance_t> gis;
  Create(dev, 19, 7, &gis, {0, 1, 2, 3, 4, 5, 6});  // seven 1g
  CannotCreate(dev, 19);
  CannotCreate(dev, 14);
  DestroyAll(&gis);
  Create(dev, 15, 4, &gis, {0, 2, 4, 6});  // four 1g with two memory slices use all 8
  CannotCreate(dev, 19);
  DestroyAll(&gis);
  Create(dev, 14, 3, &gis, {0, 2, 4});  // three 2g + one 1g
  Create(dev, 19, 1, &gis, {6});
  CannotCreate(dev, 19);
  DestroyAll(&gis);
  Create(dev, 5, 1, &gis, {0});  // 4g + 3g
  Create(dev, 9, 1, &gis, {4});
  CannotCreate(dev, 19);
  CannotCreate(dev, 9);
  DestroyAll(&gis);
  Create(dev, 9, 2, &gis, {0, 4});  // two 3g leave one compute slice, but no memory
  CannotCreate(dev, 19);
  DestroyAll(&gis);
  Create(dev, 0, 1, &gis, {0});  // 7g alone
  CannotCreate(dev, 19);
  CheckComputeProfiles(gis[0], {{NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 7, ci_sms[0]},
                                {NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, 3, ci_sms[1]},
                                {NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 2, ci_sms[2]},
                                {NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, 1, ci_sms[3]},
                                {NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE, 1, ci_sms[4]}});
  DestroyAll(&gis);
  // Inside a 3g instance: 1c and 2c compute instances have the SMs of 1g and 2g.
  Create(dev, 9, 1, &gis, {0});
  CheckComputeProfiles(gis[0], {{NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 3, ci_sms[0]},
                                {NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, 1, ci_sms[1]},
                                {NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 1, ci_sms[2]}});
  DestroyAll(&gis);
  SIM_CHECK_EQ(Capacity(dev, 19), 7u);
  if (simtest::Failures() != failures_before)
    std::fprintf(stderr, "  (the failures above are the %s's)\n", model);
}

const std::vector<unsigned> kSevenStarts1 = {0, 1, 2, 3, 4, 5, 6};

void A100_80GB() {
  nvmlDevice_t a100 = Handle(1);
  // MIG user guide, A100: the A100-SXM4-40GB table with the 80GB names.
  const std::vector<Profile> table = {
      {NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, "1g.10gb", 1, 7, 14, 9728, 1, 0, 0, 0, kSevenStarts1, 1},
      {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, "1g.10gb+me", 1, 1, 14, 9728, 1, 1, 1, 1, kSevenStarts1,
       1},
      {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, "1g.20gb", 1, 4, 14, 19968, 1, 1, 0, 0, {0, 2, 4, 6}, 2},
      {NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, "2g.20gb", 2, 3, 28, 19968, 2, 1, 0, 0, {0, 2, 4}, 2},
      {NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, "3g.40gb", 3, 2, 42, 40192, 3, 2, 0, 0, {0, 4}, 4},
      {NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, "4g.40gb", 4, 1, 56, 40192, 4, 2, 0, 0, {0}, 4},
      {NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, "7g.80gb", 7, 1, 98, 80640, 7, 5, 1, 1, {0}, 8},
  };
  CheckProfiles("A100-80GB", a100, table,
                {NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1, NVML_GPU_INSTANCE_PROFILE_8_SLICE});
  SevenSliceFills("A100-80GB", a100, {14, 28, 42, 56, 98});
}

void H200() {
  nvmlDevice_t h200 = Handle(2);
  // MIG user guide, H200 (GH100, like the H100): the H100 geometry with the
  // 141GB names. SMs and media engines as nvidia-smi mig -lgip reports them
  // on the GH100: 1g.18gb 16 SMs, the two-memory-slice 1g.35gb 26 SMs; Hopper
  // instances carry NVDEC + JPEG from 1g up, and the 7g has 8 copy engines.
  const std::vector<Profile> table = {
      {NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, "1g.18gb", 1, 7, 16, 16384, 1, 1, 1, 0, kSevenStarts1, 1},
      {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, "1g.18gb+me", 1, 1, 16, 16384, 1, 1, 1, 1, kSevenStarts1,
       1},
      {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, "1g.35gb", 1, 4, 26, 33280, 1, 1, 1, 0, {0, 2, 4, 6}, 2},
      {NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, "2g.35gb", 2, 3, 32, 33280, 2, 2, 2, 0, {0, 2, 4}, 2},
      {NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, "3g.71gb", 3, 2, 60, 71488, 3, 3, 3, 0, {0, 4}, 4},
      {NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, "4g.71gb", 4, 1, 64, 71488, 4, 4, 4, 0, {0}, 4},
      {NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, "7g.141gb", 7, 1, 132, 143360, 8, 7, 7, 1, {0}, 8},
  };
  CheckProfiles("H200", h200, table,
                {NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1, NVML_GPU_INSTANCE_PROFILE_8_SLICE});
  SevenSliceFills("H200", h200, {16, 32, 60, 64, 132});
}

}  // namespace

int main() {
  simtest::UseFreshState(nullptr, false);
  setenv("TESSERA_SIM_CONFIG", R"(
gpus:
  - model: A30
    mig: true
  - model: A100-80GB
    mig: true
  - model: H200-141GB
    mig: true
)",
         1);
  SIM_OK(nvmlInit());
  A30();
  A100_80GB();
  H200();
  SIM_OK(nvmlShutdown());
  return simtest::Finish("sim_mig_profiles_test");
}
