#include "node/mps/mps_gpus.h"

#include <gtest/gtest.h>

namespace tessera::node::mps {
namespace {

sharing::GpuMode Mode(const std::string& uuid, int index, core::SharingMode mode, int replicas, int pct = 0,
                      int64_t mib = 0) {
  sharing::GpuMode m;
  m.uuid = uuid;
  m.index = index;
  m.mode = mode;
  m.replicas = replicas;
  m.mps_active_thread_percentage = pct;
  m.mps_pinned_memory_mib = mib;
  return m;
}

TEST(MpsGpusOfTest, ReplicasGiveOneReplicasShareSizedGpusGiveTheWholeGpu) {
  std::vector<core::Gpu> discovered(4);
  for (int i = 0; i < 4; ++i) {
    discovered[i].uuid = "GPU-" + std::to_string(i);
    discovered[i].index = i;
    discovered[i].memory_mib = 81920;
  }
  sharing::ModeAssignment modes;
  modes.gpus = {
      Mode("GPU-0", 0, core::SharingMode::kVgpu, 0), Mode("GPU-1", 1, core::SharingMode::kMps, 4, 25, 20480),
      Mode("GPU-2", 2, core::SharingMode::kMps, 0), Mode("GPU-3", 3, core::SharingMode::kTimeslice, 4)};
  const auto gpus = MpsGpusOf(modes, discovered);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].uuid, "GPU-1");
  EXPECT_EQ(gpus[0].index, 1);
  EXPECT_EQ(gpus[0].memory_mib, 81920);
  EXPECT_EQ(gpus[0].default_active_thread_percentage, 25);
  EXPECT_EQ(gpus[0].default_pinned_memory_mib, 20480);
  EXPECT_EQ(gpus[1].uuid, "GPU-2");
  EXPECT_EQ(gpus[1].default_active_thread_percentage, 100);
  EXPECT_EQ(gpus[1].default_pinned_memory_mib, 0);
  // Unresolved shares fall back to the equal split.
  modes.gpus = {Mode("GPU-1", 1, core::SharingMode::kMps, 3)};
  const auto split = MpsGpusOf(modes, discovered);
  ASSERT_EQ(split.size(), 1u);
  EXPECT_EQ(split[0].default_active_thread_percentage, 33);
  EXPECT_EQ(split[0].default_pinned_memory_mib, 27306);
}

}  // namespace
}  // namespace tessera::node::mps
