#include "core/device.h"

#include <gtest/gtest.h>

namespace tessera::core {
namespace {

TEST(SharingModeTest, EveryNameParsesBackToItsMode) {
  const SharingMode all[] = {SharingMode::kVgpu, SharingMode::kExclusive, SharingMode::kTimeslice,
                             SharingMode::kMps,  SharingMode::kMigStatic, SharingMode::kMigDynamic};
  for (SharingMode mode : all)
    EXPECT_EQ(ParseSharingMode(SharingModeName(mode)), mode) << SharingModeName(mode);
  EXPECT_EQ(ParseSharingMode("mig"), SharingMode::kMigStatic);
  EXPECT_EQ(ParseSharingMode("timeslice"), SharingMode::kTimeslice);
}

TEST(SharingModeTest, OtherSpellingsAreRefused) {
  for (const char* bad : {"", "MPS", "none", "static", "dynamic", "time-slicing", "mig-static", " vgpu"}) {
    EXPECT_FALSE(ParseSharingMode(bad).has_value()) << "\"" << bad << "\"";
  }
}

TEST(SharingModeTest, OnlyVgpuGpusTakeSlices) {
  Gpu gpu;
  for (SharingMode mode : {SharingMode::kExclusive, SharingMode::kTimeslice, SharingMode::kMps,
                           SharingMode::kMigStatic, SharingMode::kMigDynamic}) {
    gpu.mode = mode;
    EXPECT_FALSE(gpu.usable()) << SharingModeName(mode);
  }
  gpu.mode = SharingMode::kVgpu;
  EXPECT_TRUE(gpu.usable());
  EXPECT_TRUE(IsMigMode(SharingMode::kMigStatic));
  EXPECT_TRUE(IsMigMode(SharingMode::kMigDynamic));
  EXPECT_FALSE(IsMigMode(SharingMode::kMps));
}

}  // namespace
}  // namespace tessera::core
