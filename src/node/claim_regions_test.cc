#include "node/claim_regions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "base/testing.h"
#include "core/allocation_codec.h"

namespace tessera::node {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1ull << 20;
constexpr const char* kClaim = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0";
constexpr const char* kOther = "11111111-2222-4333-8444-555555555555";
constexpr const char* kGpuA = "GPU-1a2b3c4d-0000-1111-2222-333344445555";
constexpr const char* kGpuB = "GPU-1a2b3c4d-0000-1111-2222-333344446666";

class ClaimRegionsTest : public ::testing::Test {
 protected:
  // What tessera-dra's prepare leaves: the region and the limits file.
  void Prepare(const std::string& uid, const std::string& entry, std::vector<core::DeviceSlice> slices) {
    fs::create_directories(root_ + "/" + uid);
    core::PodAllocation payload;
    payload.node = "node-a";
    payload.containers.push_back(core::ContainerAllocation{entry, std::move(slices)});
    auto encoded = core::EncodeAllocation(payload);
    ASSERT_TRUE(encoded.ok()) << encoded.error().message;
    WriteLimits(uid, *encoded);
  }
  void WriteLimits(const std::string& uid, const std::string& text) {
    tmp_.Write(uid + ".limits/limits.json", text);
  }

  ::tessera::testing::TempDir tmp_{"tn-claims"};
  const std::string root_ = tmp_.path();
};

TEST_F(ClaimRegionsTest, AMissingRootIsNoClaims) {
  auto dirs = ScanClaimRegions(root_ + "/absent", "vgpu.region");
  ASSERT_TRUE(dirs.ok());
  EXPECT_TRUE(dirs->empty());
}

TEST_F(ClaimRegionsTest, ReadsEachClaimsLimitsFromItsLimitsFile) {
  Prepare(kClaim, "claim:team/gpu-a", {{kGpuA, 10240, 30}, {kGpuB, 0, 0}});
  fs::create_directories(root_ + "/not-a-uid");  // left out
  auto dirs = ScanClaimRegions(root_, "vgpu.region");
  ASSERT_TRUE(dirs.ok()) << dirs.error().message;
  ASSERT_EQ(dirs->size(), 1u);
  const RegionDir& dir = (*dirs)[0];
  EXPECT_EQ(dir.name, kClaim);
  EXPECT_FALSE(dir.record.has_value());
  EXPECT_TRUE(dir.record_error.empty());
  EXPECT_TRUE(dir.region_missing);  // no CUDA process yet
  ASSERT_TRUE(dir.claim.has_value());
  EXPECT_EQ(dir.claim->error, "");
  EXPECT_EQ(dir.claim->claim, "team/gpu-a");
  EXPECT_EQ(dir.claim->memory_bytes.at(kGpuA), 10240 * kMiB);
  EXPECT_EQ(dir.claim->cores.at(kGpuA), 30);
  EXPECT_EQ(dir.claim->memory_bytes.at(kGpuB), 0u);  // whole GPU: no limit
}

// Each bad file is refused with a reason and no limits; the claim region is
// still listed (its processes are attributed and metered).
TEST_F(ClaimRegionsTest, ABadLimitsFileIsRefusedWithAReason) {
  struct Case {
    std::string text;  // "" = no file
    std::string expected;
  };
  core::PodAllocation two;
  two.node = "node-a";
  two.containers = {core::ContainerAllocation{"claim:a/b", {{kGpuA, 1, 1}}},
                    core::ContainerAllocation{"claim:a/c", {{kGpuA, 1, 1}}}};
  core::PodAllocation not_claim;
  not_claim.node = "node-a";
  not_claim.containers = {core::ContainerAllocation{"main", {{kGpuA, 1024, 10}}}};
  const std::vector<Case> cases = {
      {"", "cannot be read"},
      {"{\"node\":", ""},  // the codec's message
      {*core::EncodeAllocation(two), "not one entry named claim:<namespace>/<name>"},
      {*core::EncodeAllocation(not_claim), "not one entry named claim:<namespace>/<name>"},
  };
  for (const auto& c : cases) {
    fs::remove_all(root_);
    fs::create_directories(root_ + "/" + kClaim);
    fs::create_directories(root_ + "/" + kClaim + ".limits");
    if (!c.text.empty()) WriteLimits(kClaim, c.text);
    auto dirs = ScanClaimRegions(root_, "vgpu.region");
    ASSERT_TRUE(dirs.ok());
    ASSERT_EQ(dirs->size(), 1u);
    ASSERT_TRUE((*dirs)[0].claim.has_value());
    const ClaimLimits& limits = *(*dirs)[0].claim;
    EXPECT_THAT(limits.error, HasSubstr("limits.json")) << c.text;
    EXPECT_THAT(limits.error, HasSubstr(c.expected)) << c.text;
    EXPECT_TRUE(limits.memory_bytes.empty());
    EXPECT_TRUE(limits.cores.empty());
  }
}

// A limits directory that is a symlink is not tessera-dra's: refused.
TEST_F(ClaimRegionsTest, ALimitsDirectoryThatIsALinkIsRefused) {
  Prepare(kOther, "claim:team/gpu-b", {{kGpuA, 40960, 100}});
  fs::create_directories(root_ + "/" + kClaim);
  fs::create_directory_symlink(root_ + "/" + kOther + ".limits", root_ + "/" + kClaim + ".limits");
  ClaimLimits limits = ReadClaimLimits(root_, kClaim);
  EXPECT_THAT(limits.error, HasSubstr("no limits directory"));
  EXPECT_TRUE(limits.memory_bytes.empty());
}

TEST_F(ClaimRegionsTest, TheClaimUidOfATesseraCdiDevice) {
  EXPECT_EQ(ClaimUidOfCdiDevice(std::string("tessera.io/gpu=") + kClaim + "-gpu-0"), kClaim);
  EXPECT_EQ(ClaimUidOfCdiDevice(std::string("tessera.io/gpu=") + kClaim + "-gpu-1-share7"), kClaim);
  EXPECT_EQ(ClaimUidOfCdiDevice("nvidia.com/gpu=0"), "");
  EXPECT_EQ(ClaimUidOfCdiDevice(std::string("tessera.io/gpu=") + kClaim), "");  // no device part
  EXPECT_EQ(ClaimUidOfCdiDevice(std::string(kClaim) + "-gpu-0"), "");           // no kind
  EXPECT_EQ(ClaimUidOfCdiDevice("tessera.io/gpu=zzzzzzzz-2d3c-4b5a-4968-8776a5b4c3d2-gpu-0"), "");
}

TEST_F(ClaimRegionsTest, TheFirstContainerListingTheClaimsCdiDeviceOwnsIt) {
  std::vector<RegionDir> dirs(3);
  dirs[0].name = kClaim;
  dirs[0].claim = ClaimLimits{};
  dirs[1].name = kOther;
  dirs[1].claim = ClaimLimits{};
  dirs[1].owner = ContainerRef{"stale", "stale", "stale"};  // no container lists it now
  dirs[2].name = "own-region";                              // tessera-node's: left alone
  dirs[2].owner = ContainerRef{"ns", "pod", "c"};
  const std::string cdi = std::string("tessera.io/gpu=") + kClaim + "-gpu-0-s1";
  std::vector<ContainerDevices> containers = {
      {"ns", "plugin-pod", "c", "nvidia.com/gpu", {cdi}},  // a device ID, not a CDI device: ignored
      {"team", "trainer", "main", "", {}, {"other.io/x=1", cdi}},
      {"team", "trainer", "sidecar", "", {}, {cdi}},
  };
  AssignClaimOwners(dirs, containers);
  ASSERT_TRUE(dirs[0].owner.has_value());
  EXPECT_EQ(*dirs[0].owner, (ContainerRef{"team", "trainer", "main"}));
  EXPECT_FALSE(dirs[1].owner.has_value());
  EXPECT_EQ(*dirs[2].owner, (ContainerRef{"ns", "pod", "c"}));
}

}  // namespace
}  // namespace tessera::node
