#include "sim/device_list.h"

#include "sim/test_support.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

namespace tessera::sim {
namespace {

// Two A100-80GB and an H100; GPU 1 in MIG mode with two MIG devices.
class DeviceListTest : public StateDirTest {
 protected:
  void SetUp() override {
    StateDirTest::SetUp();
    auto s = SimState::Open(dir_, *ParseGpuList("2xA100-80GB,1xH100-80GB"), true);
    ASSERT_TRUE(s.ok());
    state_ = std::move(*s);
    GpuRecord& g = f().gpus[1];
    g.mig_mode = 1;
    for (int i = 0; i < 2; ++i) {
      g.gis[i].in_use = 1;
      g.gis[i].id = static_cast<uint32_t>(i + 1);
      g.gis[i].profile_id = 19;
      g.gis[i].cis[0] = ComputeInstanceRecord{1, 0, 0, 0, 1, 0};
    }
  }
  void TearDown() override {
    state_.reset();
    StateDirTest::TearDown();
  }
  StateFile& f() { return *state_->file(); }
  std::string MigUuid(int gi) {
    return MigDeviceUuid(f().gpus[1], f().gpus[1].gis[gi], f().gpus[1].gis[gi].cis[0]);
  }

  std::unique_ptr<SimState> state_;
};

TEST_F(DeviceListTest, ContainersSeeWhatTheRuntimeGivesThem) {
  EXPECT_EQ(ContainerDevices(f(), nullptr).size(), 3u);
  EXPECT_EQ(ContainerDevices(f(), "all").size(), 3u);
  EXPECT_TRUE(ContainerDevices(f(), "none").empty());
  EXPECT_TRUE(ContainerDevices(f(), "void").empty());
  EXPECT_TRUE(ContainerDevices(f(), "").empty());
  const auto some = ContainerDevices(f(), (std::string(f().gpus[2].uuid) + ",0,0,GPU-nope").c_str());
  ASSERT_EQ(some.size(), 2u);  // repeats and unknown entries skipped
  EXPECT_EQ(some[0], (DeviceRef{2, -1, -1}));
  EXPECT_EQ(some[1], (DeviceRef{0, -1, -1}));
  const auto mig = ContainerDevices(f(), MigUuid(1).c_str());
  ASSERT_EQ(mig.size(), 1u);
  EXPECT_EQ(mig[0], (DeviceRef{1, 1, 0}));
}

TEST_F(DeviceListTest, CudaOffersAMigGpuOnlyAsOneMigDevice) {
  const auto all = CudaDevices(f(), ContainerDevices(f(), nullptr), nullptr);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0], (DeviceRef{0, -1, -1}));
  EXPECT_EQ(all[1], (DeviceRef{1, 0, 0}));  // the first MIG device only
  EXPECT_EQ(all[2], (DeviceRef{2, -1, -1}));
  // CUDA_VISIBLE_DEVICES: indices into that, UUIDs, and the list ends at the
  // first entry that names nothing or repeats.
  const auto picked = CudaDevices(f(), ContainerDevices(f(), nullptr), ("2," + MigUuid(1) + ",9,0").c_str());
  ASSERT_EQ(picked.size(), 2u);
  EXPECT_EQ(picked[0], (DeviceRef{2, -1, -1}));
  EXPECT_EQ(picked[1], (DeviceRef{1, 1, 0}));
  const auto by_gpu_uuid = CudaDevices(f(), ContainerDevices(f(), nullptr), f().gpus[1].uuid);
  ASSERT_EQ(by_gpu_uuid.size(), 1u);
  EXPECT_EQ(by_gpu_uuid[0], (DeviceRef{1, 0, 0}));
  // Within a container, CUDA_VISIBLE_DEVICES cannot reach beyond it.
  const auto contained = ContainerDevices(f(), MigUuid(0).c_str());
  EXPECT_TRUE(CudaDevices(f(), contained, f().gpus[0].uuid).empty());
  EXPECT_EQ(CudaDevices(f(), contained, "0").size(), 1u);
}

}  // namespace
}  // namespace tessera::sim
