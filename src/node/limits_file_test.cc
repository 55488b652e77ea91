#include "node/limits_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "base/files.h"
#include "base/testing.h"
#include "core/allocation_codec.h"
#include "vgpu/config.h"

namespace tessera::node {
namespace {

namespace fs = std::filesystem;

constexpr const char* kGpu = "GPU-11111111-2222-3333-4444-555555555555";
constexpr const char* kRegion = "aaaaaaaa-0000-4000-8000-000000000001";

core::PodAllocation TwoContainers() {
  return core::PodAllocation{"node-a",
                             {{"main", {{kGpu, 1000, 30}}, false}, {"side", {{kGpu, 2000, 0}}, false}}};
}

TEST(LimitsFile, HoldsTheOneContainerAndLibvgpuReadsIt) {
  auto text = core::EncodeContainerLimits(TwoContainers(), "side");
  ASSERT_TRUE(text.ok()) << text.error().message;
  std::vector<vgpu::DeviceGrant> grants;
  std::string error;
  ASSERT_TRUE(vgpu::parse_limits(text->c_str(), &grants, &error)) << error << "\n" << *text;
  ASSERT_EQ(grants.size(), 1u);
  EXPECT_EQ(grants[0].uuid, kGpu);
  EXPECT_EQ(grants[0].memory_bytes, 2000ull << 20);
}

TEST(LimitsFile, AContainerWithoutASliceHasNoFile) {
  EXPECT_FALSE(core::EncodeContainerLimits(TwoContainers(), "other").ok());
  core::PodAllocation mig{"node-a", {{"main", {{kGpu, 10240, 0, "1g.10gb", 0}}, false}}};
  EXPECT_FALSE(core::EncodeContainerLimits(mig, "main").ok());
}

class WriteLimitsTest : public ::testing::Test {
 protected:
  RegionDir Owned(const std::string& pod, const std::string& container) {
    RegionDir dir;
    dir.name = kRegion;
    dir.owner = ContainerRef{"ml", pod, container};
    return dir;
  }
  NodeAllocations Allocations() { return NodeAllocations{{{"ml", "train", "uid-1", TwoContainers()}}, {}}; }
  std::string File() { return root_ + "/" + kRegion + ".limits/limits.json"; }

  ::tessera::testing::TempDir tmp_{"tn-limits"};
  const std::string root_ = tmp_.path();
};

TEST_F(WriteLimitsTest, WritesOnceTheOwnerIsKnownAndAgainOnlyWhenItChanges) {
  std::string dir;
  ASSERT_TRUE(MakeLimitsDirectory(root_, kRegion, dir).ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);

  RegionDir unowned = Owned("train", "main");
  unowned.owner.reset();
  EXPECT_EQ(WriteContainerLimits(root_, {unowned}, Allocations()), 0);
  EXPECT_FALSE(fs::exists(File()));
  EXPECT_EQ(WriteContainerLimits(root_, {Owned("other-pod", "main")}, Allocations()), 0);
  EXPECT_FALSE(fs::exists(File()));

  EXPECT_EQ(WriteContainerLimits(root_, {Owned("train", "main")}, Allocations()), 1);
  auto text = files::Read(File());
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, *EncodeContainerLimits(TwoContainers(), "main"));
  EXPECT_EQ(WriteContainerLimits(root_, {Owned("train", "main")}, Allocations()), 0);  // unchanged

  // Changed under the agent (it is the agent's file, but nothing else may
  // decide it): written again at the next pass.
  ASSERT_TRUE(files::ReplaceAtomically(File(), "{}").ok());
  EXPECT_EQ(WriteContainerLimits(root_, {Owned("train", "main")}, Allocations()), 1);
  EXPECT_EQ(*files::Read(File()), *text);
}

TEST_F(WriteLimitsTest, APodTesseraDidNotPlaceGetsTheNodesPolicy) {
  std::string dir;
  ASSERT_TRUE(MakeLimitsDirectory(root_, kRegion, dir).ok());
  RegionDir region = Owned("legacy", "main");
  region.record = RegionRecord{"nvidia.com/gpu", {std::string(kGpu) + "::0", std::string(kGpu) + "::1"}, 1};
  const std::vector<UnplacedPod> unplaced{{"ml", "legacy", "uid-2"}};
  EXPECT_EQ(WriteContainerLimits(root_, {region}, Allocations(), unplaced, UnplacedPodsPolicy::kRefuse), 1);
  EXPECT_EQ(*files::Read(File()), R"({"version":1,"unplaced":"refuse"})");
  EXPECT_EQ(WriteContainerLimits(root_, {region}, Allocations(), unplaced, UnplacedPodsPolicy::kWholeGpu), 1);
  const std::string whole = *files::Read(File());
  EXPECT_EQ(whole, std::string(R"({"version":1,"unplaced":"whole-gpu","gpus":[")") + kGpu + "\"]}");
  // libvgpu reads it.
  std::vector<vgpu::DeviceGrant> grants;
  std::string error;
  vgpu::UnplacedPolicy policy = vgpu::UnplacedPolicy::kUnset;
  ASSERT_TRUE(vgpu::parse_limits(whole.c_str(), &grants, &error, &policy)) << error;
  EXPECT_EQ(policy, vgpu::UnplacedPolicy::kWholeGpu);
  ASSERT_EQ(grants.size(), 1u);
  EXPECT_EQ(grants[0].uuid, kGpu);
}

TEST_F(WriteLimitsTest, ARegionWithoutALimitsDirectoryIsLeftAlone) {
  EXPECT_EQ(WriteContainerLimits(root_, {Owned("train", "main")}, Allocations()), 0);
  EXPECT_FALSE(fs::exists(root_ + "/" + kRegion + ".limits"));
}

TEST_F(WriteLimitsTest, CleanUpRemovesTheLimitsDirectoryWithItsRegion) {
  fs::create_directories(root_ + "/" + kRegion);
  ASSERT_TRUE(WriteRegionRecord(root_, kRegion, RegionRecord{"nvidia.com/gpu", {"GPU-1::0"}, 1}).ok());
  std::string dir;
  ASSERT_TRUE(MakeLimitsDirectory(root_, kRegion, dir).ok());
  RegionCatalog catalog(root_, "vgpu.region");
  auto dirs = catalog.Scan();
  ASSERT_TRUE(dirs.ok());
  ASSERT_EQ(dirs->size(), 1u);  // the limits directory is not a region
  EXPECT_EQ(catalog.CleanUp(*dirs, 300).size(), 1u);
  EXPECT_FALSE(fs::exists(dir));
}

}  // namespace
}  // namespace tessera::node
