#include "node/mig/mig_inventory.h"

#include <gtest/gtest.h>

#include "core/inventory_codec.h"
#include "node/testing.h"

namespace tessera::node::mig {
namespace {

constexpr const char* kParent = "GPU-aaaaaaaa-0000-1111-2222-333344445555";
constexpr const char* kOther = "GPU-bbbbbbbb-0000-1111-2222-333344445555";

// An A100-80GB with MIG, as discovery reports it.
core::Gpu Discovered(const char* uuid, int index) {
  core::Gpu gpu = TestA100(uuid, index);
  gpu.sm_count = 108;
  gpu.mig_capable = true;
  return gpu;
}

MigDevice Device(const char* uuid, const char* parent, const char* profile, uint32_t start, uint32_t size,
                 const char* used_by = "") {
  MigDevice d;
  d.mig_uuid = uuid;
  d.parent_uuid = parent;
  d.profile = profile;
  d.start = start;
  d.size = size;
  d.memory_mib = size == 1 ? 9728 : 40192;
  d.sm_count = size == 1 ? 14 : 42;
  d.used_by = used_by;
  return d;
}

TEST(MigInventoryTest, EachGpuListsItsOwnDevicesByStartAndNoSlots) {
  const std::vector<MigDevice> devices = {
      Device("MIG-00000000-0000-0000-0000-000000000006", kParent, "1g.10gb", 6, 1, "ml/a/main"),
      Device("MIG-00000000-0000-0000-0000-000000000000", kParent, "3g.40gb", 0, 4),
      Device("MIG-00000000-0000-0000-0000-0000000000b0", kOther, "1g.10gb", 0, 1)};
  auto gpus = MigInventoryGpus({Discovered(kParent, 0), Discovered(kOther, 1)}, devices,
                               core::SharingMode::kMigStatic);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].mode, core::SharingMode::kMigStatic);
  EXPECT_EQ(gpus[0].slots, 0) << "no vGPU slices on a MIG GPU";
  ASSERT_EQ(gpus[0].mig_devices.size(), 2u);
  EXPECT_EQ(gpus[0].mig_devices[0].profile, "3g.40gb");
  EXPECT_EQ(gpus[0].mig_devices[0].size, 4);
  EXPECT_EQ(gpus[0].mig_devices[1].start, 6);
  EXPECT_EQ(gpus[0].mig_devices[1].used_by, "ml/a/main");
  ASSERT_EQ(gpus[1].mig_devices.size(), 1u);
  EXPECT_EQ(gpus[1].mig_devices[0].uuid, "MIG-00000000-0000-0000-0000-0000000000b0");

  // What the node publishes is a valid inventory.
  core::NodeInventory inv{"node-a", "2026-11-22T02:31:53Z", gpus};
  auto text = core::EncodeInventory(inv);
  ASSERT_TRUE(text.ok()) << text.error().message;
  auto back = core::DecodeInventory(*text);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->gpus, gpus);
}

TEST(MigInventoryTest, AGpuWaitingForItsModeIsListedInMigModeWithoutDevices) {
  auto gpus = MigInventoryGpus({Discovered(kParent, 0)}, {}, core::SharingMode::kMigDynamic);
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].mode, core::SharingMode::kMigDynamic);
  EXPECT_TRUE(gpus[0].mig_devices.empty());
  EXPECT_FALSE(gpus[0].usable());
}

}  // namespace
}  // namespace tessera::node::mig
