#include "host/region_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "base/testing.h"
#include "vgpu/region.h"

namespace tessera::host {
namespace {

namespace fs = std::filesystem;

class RegionReaderTest : public ::testing::Test {
 protected:
  // A region that this process uses, as libvgpu in a container would.
  void OpenRegion(vgpu::SharedRegion& region, const std::string& path) {
    char error[256] = {};
    ASSERT_TRUE(region.open_file(path.c_str(), error, sizeof error)) << error;
    ASSERT_TRUE(region.claim_slot());
  }

  ::tessera::testing::TempDir tmp_{"th-region"};
  const std::string root_ = tmp_.path();
};

TEST_F(RegionReaderTest, ReadsTheDevicesAndTheLiveProcess) {
  const std::string path = root_ + "/vgpu.region";
  vgpu::SharedRegion region;
  ASSERT_NO_FATAL_FAILURE(OpenRegion(region, path));
  const int device = region.find_or_add_device("GPU-1", 2048ull << 20);
  ASSERT_GE(device, 0);
  ASSERT_TRUE(region.reserve(device, 300ull << 20).ok);

  bool missing = true;
  auto snapshot = ReadRegion(path, &missing);
  ASSERT_TRUE(snapshot.ok()) << snapshot.error().message;
  EXPECT_FALSE(missing);
  ASSERT_EQ(snapshot->devices.size(), 1u);
  const DeviceUsage* gpu = snapshot->Find("GPU-1");
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->memory_limit_bytes, 2048ull << 20);
  EXPECT_EQ(gpu->memory_used_bytes, 300ull << 20);
  EXPECT_EQ(snapshot->Find("GPU-2"), nullptr);
  ASSERT_EQ(snapshot->live_processes, 1);
  ASSERT_EQ(snapshot->processes.size(), 1u);
  EXPECT_EQ(snapshot->processes[0].pid, static_cast<uint32_t>(::getpid()));
  ASSERT_EQ(snapshot->processes[0].memory_used_bytes.size(), 1u);
  EXPECT_EQ(snapshot->processes[0].memory_used_bytes[0], 300ull << 20);
}

TEST_F(RegionReaderTest, AMissingFileIsAnErrorThatSaysSo) {
  bool missing = false;
  auto snapshot = ReadRegion(root_ + "/vgpu.region", &missing);
  ASSERT_FALSE(snapshot.ok());
  EXPECT_TRUE(missing);
  EXPECT_FALSE(snapshot.error().message.empty());
}

TEST_F(RegionReaderTest, AFileThatIsNotARegionIsRefusedAndLeftAlone) {
  const std::string path = root_ + "/vgpu.region";
  std::ofstream(path) << "not a region";
  bool missing = true;
  auto snapshot = ReadRegion(path, &missing);
  ASSERT_FALSE(snapshot.ok());
  EXPECT_FALSE(missing);
  EXPECT_NE(snapshot.error().message.find("refused"), std::string::npos) << snapshot.error().message;

  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "not a region");
}

TEST_F(RegionReaderTest, TheAgentGivesALiveSlotWithoutOneItsHostPidOnce) {
  const std::string path = root_ + "/vgpu.region";
  vgpu::SharedRegion region;
  ASSERT_NO_FATAL_FAILURE(OpenRegion(region, path));
  auto& slot = region.raw()->processes[region.slot_index()];
  slot.host_pid.store(0);  // as for a process in its own pid namespace
  const auto me = static_cast<uint32_t>(::getpid());

  auto written = RecordHostPids(path, {{me + 1, 777}});  // no slot has that container pid
  ASSERT_TRUE(written.ok()) << written.error().message;
  EXPECT_EQ(*written, 0);
  EXPECT_EQ(slot.host_pid.load(), 0u);

  written = RecordHostPids(path, {{me, 4242}});
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(*written, 1);
  EXPECT_EQ(slot.host_pid.load(), 4242u);
  auto snapshot = ReadRegion(path);
  ASSERT_TRUE(snapshot.ok());
  ASSERT_EQ(snapshot->processes.size(), 1u);
  EXPECT_EQ(snapshot->processes[0].host_pid, 4242u);

  // Never overwritten: libvgpu or an earlier pass already knew it.
  written = RecordHostPids(path, {{me, 9999}});
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(*written, 0);
  EXPECT_EQ(slot.host_pid.load(), 4242u);

  // A file that is not a region is refused and left as it is.
  std::ofstream(root_ + "/foreign") << "not a region";
  EXPECT_FALSE(RecordHostPids(root_ + "/foreign", {{me, 1}}).ok());
  std::ifstream in(root_ + "/foreign");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "not a region");
}

}  // namespace
}  // namespace tessera::host
