#include "kubectl/hami_allocation.h"

#include <gtest/gtest.h>

namespace tessera::kubectl {
namespace {

TEST(HamiAllocationTest, ReadsOneDevicePerContainer) {
  auto decoded = DecodeHamiAllocation("GPU-0fc3,NVIDIA,3000,30:;", {"cuda"});
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  ASSERT_EQ(decoded->size(), 1u);
  EXPECT_EQ((*decoded)[0].container, "cuda");
  ASSERT_EQ((*decoded)[0].devices.size(), 1u);
  EXPECT_EQ((*decoded)[0].devices[0], (core::DeviceSlice{"GPU-0fc3", 3000, 30}));
}

TEST(HamiAllocationTest, ReadsSeveralDevicesAndSkipsContainersWithout) {
  auto decoded = DecodeHamiAllocation(";GPU-a,NVIDIA,1000,0:GPU-b,NVIDIA,2000,50:;", {"sidecar", "main"});
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  ASSERT_EQ(decoded->size(), 1u);
  EXPECT_EQ((*decoded)[0].container, "main");
  EXPECT_EQ((*decoded)[0].devices, (std::vector<core::DeviceSlice>{{"GPU-a", 1000, 0}, {"GPU-b", 2000, 50}}));
}

TEST(HamiAllocationTest, NamesContainersPastTheSpecByIndex) {
  auto decoded = DecodeHamiAllocation("GPU-a,NVIDIA,1,1:;GPU-b,NVIDIA,1,1:;", {"only"});
  ASSERT_TRUE(decoded.ok());
  ASSERT_EQ(decoded->size(), 2u);
  EXPECT_EQ((*decoded)[1].container, "#1");
}

TEST(HamiAllocationTest, AnEmptyValueHasNoDevices) {
  auto decoded = DecodeHamiAllocation(";", {"a"});
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(decoded->empty());
}

TEST(HamiAllocationTest, RejectsMalformedEntriesNamingThem) {
  for (const char* bad : {"GPU-a,NVIDIA,3000:;", "GPU-a,NVIDIA,lots,30:;", "GPU-a,NVIDIA,3000,130:;",
                          ",NVIDIA,3000,30:;", "GPU-a,NVIDIA,-1,30:;"}) {
    auto decoded = DecodeHamiAllocation(bad, {"a"});
    ASSERT_FALSE(decoded.ok()) << bad;
    EXPECT_NE(decoded.error().message.find("container 0 device"), std::string::npos)
        << decoded.error().message;
  }
}

}  // namespace
}  // namespace tessera::kubectl
