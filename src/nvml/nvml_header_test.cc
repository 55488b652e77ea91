// nvml.h declares the real NVML ABI: these layouts are what libnvidia-ml.so.1
// reads and writes, so a mismatch corrupts a client's memory.
#include <nvml.h>

#include <gtest/gtest.h>

#include <cstddef>

extern "C" unsigned int tessera_nvml_header_c_memory_v2_version(void);

namespace {

static_assert(sizeof(nvmlReturn_t) == 4);
static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(sizeof(nvmlMemory_v2_t) == 40);
static_assert(offsetof(nvmlMemory_v2_t, total) == 8);
static_assert(offsetof(nvmlMemory_v2_t, used) == 32);
static_assert(sizeof(nvmlPciInfo_t) == 68);
static_assert(offsetof(nvmlPciInfo_t, domain) == 16);
static_assert(offsetof(nvmlPciInfo_t, busId) == 36);
static_assert(sizeof(nvmlUtilization_t) == 8);
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16);
static_assert(sizeof(nvmlProcessInfo_v2_t) == 24);
static_assert(sizeof(nvmlProcessInfo_t) == 24);
static_assert(offsetof(nvmlProcessInfo_t, gpuInstanceId) == 16);
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32);
static_assert(offsetof(nvmlProcessUtilizationSample_t, timeStamp) == 8);
static_assert(offsetof(nvmlProcessUtilizationSample_t, smUtil) == 16);
static_assert(sizeof(nvmlSample_t) == 16);
static_assert(sizeof(nvmlEventData_t) == 32);
static_assert(offsetof(nvmlEventData_t, eventData) == 16);
static_assert(sizeof(nvmlGpuInstanceProfileInfo_t) == 48);
static_assert(offsetof(nvmlGpuInstanceProfileInfo_t, memorySizeMB) == 40);
static_assert(sizeof(nvmlGpuInstanceProfileInfo_v2_t) == 152);
static_assert(offsetof(nvmlGpuInstanceProfileInfo_v2_t, memorySizeMB) == 48);
static_assert(offsetof(nvmlGpuInstanceProfileInfo_v2_t, name) == 56);
static_assert(sizeof(nvmlGpuInstanceProfileInfo_v3_t) == 152);
static_assert(offsetof(nvmlGpuInstanceProfileInfo_v3_t, memorySizeMB) == 40);
static_assert(offsetof(nvmlGpuInstanceProfileInfo_v3_t, name) == 48);
static_assert(offsetof(nvmlGpuInstanceProfileInfo_v3_t, capabilities) == 144);
static_assert(sizeof(nvmlGpuInstanceInfo_t) == 24);
static_assert(sizeof(nvmlComputeInstanceProfileInfo_t) == 36);
static_assert(sizeof(nvmlComputeInstanceProfileInfo_v2_t) == 136);
static_assert(sizeof(nvmlComputeInstanceProfileInfo_v3_t) == 140);
static_assert(offsetof(nvmlComputeInstanceProfileInfo_v3_t, name) == 40);
static_assert(offsetof(nvmlComputeInstanceProfileInfo_v3_t, capabilities) == 136);
static_assert(sizeof(nvmlComputeInstanceInfo_t) == 32);

TEST(NvmlHeader, VersionedStructConstantsEncodeSizeAndVersion) {
  EXPECT_EQ(nvmlMemory_v2, (2u << 24) | 40u);
  EXPECT_EQ(nvmlGpuInstanceProfileInfo_v2, (2u << 24) | 152u);
  EXPECT_EQ(nvmlComputeInstanceProfileInfo_v2, (2u << 24) | 136u);
  // v3 replaces v2's isP2pSupported with a capabilities word after the name.
  EXPECT_EQ(nvmlGpuInstanceProfileInfo_v3, (3u << 24) | 152u);
  EXPECT_EQ(nvmlComputeInstanceProfileInfo_v3, (3u << 24) | 140u);
  EXPECT_EQ(tessera_nvml_header_c_memory_v2_version(), nvmlMemory_v2);
}

#define TESSERA_STRINGIFY_IMPL(x) #x
#define TESSERA_STRINGIFY(x) TESSERA_STRINGIFY_IMPL(x)

TEST(NvmlHeader, UnversionedNamesMapToCurrentAbi) {
  // Old source calling nvmlInit() must reach the current ABI entry point, as with NVIDIA's header.
  EXPECT_STREQ(TESSERA_STRINGIFY(nvmlInit), "nvmlInit_v2");
  EXPECT_STREQ(TESSERA_STRINGIFY(nvmlDeviceGetCount), "nvmlDeviceGetCount_v2");
  EXPECT_STREQ(TESSERA_STRINGIFY(nvmlDeviceGetComputeRunningProcesses),
               "nvmlDeviceGetComputeRunningProcesses_v3");
}

}  // namespace
