#include "node/device_state.h"

#include <gtest/gtest.h>

namespace tessera::node {
namespace {

core::Gpu MakeGpu(const std::string& uuid, int index) {
  core::Gpu gpu;
  gpu.uuid = uuid;
  gpu.index = index;
  return gpu;
}

TEST(DeviceIdTest, RoundTripsUuidAndReplica) {
  std::string id = MakeDeviceId("GPU-1234", 7);
  EXPECT_EQ(id, "GPU-1234::7");
  auto parsed = ParseDeviceId(id);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->gpu_uuid, "GPU-1234");
  EXPECT_EQ(parsed->replica, 7);
}

TEST(DeviceIdTest, RejectsMalformedIds) {
  for (const char* bad : {"GPU-1234", "GPU-1234::", "::3", "GPU-1234::x", "GPU-1234::-1", "GPU-1234::3x"}) {
    auto parsed = ParseDeviceId(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.error().message.find(bad), std::string::npos) << parsed.error().message;
  }
}

TEST(DeviceStateTest, HealthChangeMovesTheVersionOnlyWhenSomethingChanged) {
  DeviceState state;
  state.SetGpus({MakeGpu("GPU-a", 0), MakeGpu("GPU-b", 1)});
  uint64_t v0 = state.Get().version;

  EXPECT_TRUE(state.SetHealth("GPU-b", false));
  auto snapshot = state.Get();
  EXPECT_GT(snapshot.version, v0);
  EXPECT_TRUE(snapshot.gpus[0].healthy);
  EXPECT_FALSE(snapshot.gpus[1].healthy);

  EXPECT_FALSE(state.SetHealth("GPU-b", false));    // already unhealthy
  EXPECT_FALSE(state.SetHealth("GPU-zzz", false));  // not ours
  EXPECT_EQ(state.Get().version, snapshot.version);
}

TEST(DeviceStateTest, WaitForChangeReturnsTheNewVersion) {
  DeviceState state;
  state.SetGpus({MakeGpu("GPU-a", 0)});
  uint64_t seen = state.Get().version;
  std::thread writer([&] { state.SetHealth("GPU-a", false); });
  uint64_t now = seen;
  while (now == seen) now = state.WaitForChange(seen, std::chrono::milliseconds(100));
  writer.join();
  EXPECT_NE(now, seen);
  EXPECT_FALSE(state.Get().gpus[0].healthy);
}

}  // namespace
}  // namespace tessera::node
