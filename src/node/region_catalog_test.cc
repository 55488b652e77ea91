#include "node/region_catalog.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/clock.h"
#include "base/testing.h"
#include "vgpu/region.h"

namespace tessera::node {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

constexpr const char* kA = "aaaaaaaa-0000-4000-8000-000000000001";
constexpr const char* kB = "bbbbbbbb-0000-4000-8000-000000000002";
constexpr const char* kC = "cccccccc-0000-4000-8000-000000000003";
constexpr const char* kD = "dddddddd-0000-4000-8000-000000000004";

class RegionCatalogTest : public ::testing::Test {
 protected:
  void MakeDir(const std::string& name, std::optional<RegionRecord> record) {
    fs::create_directories(root_ + "/" + name);
    if (record) {
      ASSERT_TRUE(WriteRegionRecord(root_, name, *record).ok());
    }
  }
  static RegionRecord Record(std::vector<std::string> ids, int64_t created) {
    return RegionRecord{"nvidia.com/gpu", std::move(ids), created};
  }

  ::tessera::testing::TempDir tmp_{"tn-catalog"};
  const std::string root_ = tmp_.path();
  FakeClock clock_{Clock::Wall{} + std::chrono::seconds(1'000'000)};
  const int64_t now_ = clock_.WallUnixSeconds();
};

TEST(RegionRecordTest, RoundTripsAndRefusesAnythingElse) {
  RegionRecord record{"nvidia.com/gpu", {"GPU-1::0", "GPU-2::3"}, 1763900000};
  auto decoded = DecodeRegionRecord(EncodeRegionRecord(record));
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(*decoded, record);

  for (const char* bad : {"", "[]", "{}", R"({"version":2,"resource":"r","deviceIds":[],"createdUnix":1})",
                          R"({"version":1,"resource":5,"deviceIds":[],"createdUnix":1})",
                          R"({"version":1,"resource":"r","deviceIds":[1],"createdUnix":1})",
                          R"({"version":1,"resource":"r","deviceIds":[],"createdUnix":"soon"})",
                          R"({"version":1,"resource":"r","deviceIds":[])"}) {
    EXPECT_FALSE(DecodeRegionRecord(bad).ok()) << bad;
  }
}

TEST(RegionRecordTest, OnlyUuidShapedNamesAreRegionDirectories) {
  EXPECT_TRUE(IsRegionDirName(kA));
  EXPECT_FALSE(IsRegionDirName("region-1"));
  EXPECT_FALSE(IsRegionDirName("aaaaaaaa-0000-4000-8000-00000000000"));
  EXPECT_FALSE(IsRegionDirName("aaaaaaaa_0000-4000-8000-000000000001"));
  EXPECT_FALSE(IsRegionDirName("gggggggg-0000-4000-8000-000000000001"));
}

TEST_F(RegionCatalogTest, ScanReadsRecordsAndRegionsAndRefusesCorruptOnes) {
  // A: a region in use by this very process (it holds its slot's lock).
  MakeDir(kA, Record({"GPU-1::0"}, 100));
  vgpu::SharedRegion region;
  char error[256] = {};
  ASSERT_TRUE(region.open_file((root_ + "/" + kA + "/vgpu.region").c_str(), error, sizeof error)) << error;
  ASSERT_TRUE(region.claim_slot());
  int device = region.find_or_add_device("GPU-1", 2048ull << 20);
  ASSERT_GE(device, 0);
  ASSERT_TRUE(region.reserve(device, 300ull << 20).ok);
  // B: no process has used CUDA yet.
  MakeDir(kB, Record({"GPU-1::1"}, 100));
  // C: a file that is not a region.
  MakeDir(kC, Record({"GPU-1::2"}, 100));
  std::ofstream(root_ + "/" + kC + "/vgpu.region") << "not a region";
  // D: no record.
  MakeDir(kD, std::nullopt);
  // Not region directories: another name, and a symlink shaped like one.
  fs::create_directories(root_ + "/lost+found");
  fs::create_directory_symlink("/tmp", root_ + "/eeeeeeee-0000-4000-8000-000000000005");

  RegionCatalog catalog(root_, "vgpu.region");
  auto dirs = catalog.Scan();
  ASSERT_TRUE(dirs.ok()) << dirs.error().message;
  ASSERT_EQ(dirs->size(), 4u);

  const RegionDir& a = (*dirs)[0];
  EXPECT_EQ(a.name, kA);
  ASSERT_TRUE(a.record.has_value());
  EXPECT_THAT(a.record->device_ids, ElementsAre("GPU-1::0"));
  ASSERT_TRUE(a.region.has_value()) << a.region_error;
  ASSERT_EQ(a.region->devices.size(), 1u);
  EXPECT_EQ(a.region->devices[0].uuid, "GPU-1");
  EXPECT_EQ(a.region->devices[0].memory_limit_bytes, 2048ull << 20);
  EXPECT_EQ(a.region->devices[0].memory_used_bytes, 300ull << 20);
  ASSERT_EQ(a.region->processes.size(), 1u);
  EXPECT_EQ(a.region->processes[0].pid, static_cast<uint32_t>(::getpid()));

  EXPECT_TRUE((*dirs)[1].region_missing);
  EXPECT_TRUE((*dirs)[1].region_error.empty());
  EXPECT_FALSE((*dirs)[2].region.has_value());
  EXPECT_NE((*dirs)[2].region_error.find("refused"), std::string::npos) << (*dirs)[2].region_error;
  EXPECT_FALSE((*dirs)[3].record.has_value());
  EXPECT_NE((*dirs)[3].record_error.find("no record"), std::string::npos);

  // The corrupt file was not touched.
  std::ifstream in(root_ + "/" + kC + "/vgpu.region");
  std::string content((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(content, "not a region");
}

TEST_F(RegionCatalogTest, AMissingRootIsAnEmptyCatalog) {
  RegionCatalog catalog(root_ + "/not-yet", "vgpu.region");
  auto dirs = catalog.Scan();
  ASSERT_TRUE(dirs.ok());
  EXPECT_TRUE(dirs->empty());
}

TEST_F(RegionCatalogTest, TheNewestRecordWithTheContainersDeviceIdsOwnsIt) {
  MakeDir(kA, Record({"GPU-1::0", "GPU-2::0"}, 100));  // an earlier pod's, same devices
  MakeDir(kB, Record({"GPU-2::0", "GPU-1::0"}, 200));  // the current pod's (order does not matter)
  MakeDir(kC, Record({"GPU-1::1"}, 300));              // nobody's any more
  MakeDir(kD, std::nullopt);
  RegionCatalog catalog(root_, "vgpu.region");
  auto dirs = catalog.Scan();
  ASSERT_TRUE(dirs.ok());
  std::vector<ContainerDevices> listed = {
      {"default", "train", "main", "nvidia.com/gpu", {"GPU-1::0", "GPU-2::0"}},
      {"default", "other", "main", "example.com/thing", {"GPU-1::1"}},  // another resource
  };
  AssignOwners(*dirs, listed, "nvidia.com/gpu");
  EXPECT_FALSE((*dirs)[0].owner.has_value());
  ASSERT_TRUE((*dirs)[1].owner.has_value());
  EXPECT_EQ(*(*dirs)[1].owner, (ContainerRef{"default", "train", "main"}));
  EXPECT_FALSE((*dirs)[2].owner.has_value());
  EXPECT_FALSE((*dirs)[3].owner.has_value());
}

TEST_F(RegionCatalogTest, CleanUpRemovesOnlyUnownedRecordedRegionsPastTheGrace) {
  MakeDir(kA, Record({"GPU-1::0"}, now_ - 1000));  // owned
  MakeDir(kB, Record({"GPU-1::1"}, now_ - 1000));  // gone: removed
  MakeDir(kC, Record({"GPU-1::2"}, now_ - 10));    // too young to judge
  MakeDir(kD, std::nullopt);                       // cannot be attributed: kept
  // What a container may leave in its directory is removed without following it.
  std::ofstream(root_ + "/outside") << "keep me";
  fs::create_symlink(root_ + "/outside", root_ + "/" + kB + "/link");
  fs::create_directories(root_ + "/" + kB + "/sub");

  RegionCatalog catalog(root_, "vgpu.region", &clock_);
  auto dirs = catalog.Scan();
  ASSERT_TRUE(dirs.ok());
  AssignOwners(*dirs, {{"ns", "p", "c", "nvidia.com/gpu", {"GPU-1::0"}}}, "nvidia.com/gpu");
  auto removed = catalog.CleanUp(*dirs, 300);
  EXPECT_THAT(removed, ElementsAre(kB));
  EXPECT_FALSE(fs::exists(root_ + "/" + kB));
  EXPECT_FALSE(fs::exists(root_ + "/" + std::string(kB) + ".json"));
  EXPECT_TRUE(fs::exists(root_ + "/outside"));
  for (const char* kept : {kA, kC, kD}) EXPECT_TRUE(fs::exists(root_ + "/" + kept)) << kept;
  EXPECT_TRUE(fs::exists(root_ + "/" + std::string(kA) + ".json"));

  // Later, once the young one is past the grace period and still unowned.
  clock_.Advance(std::chrono::seconds(1000));
  dirs = catalog.Scan();
  ASSERT_TRUE(dirs.ok());
  AssignOwners(*dirs, {{"ns", "p", "c", "nvidia.com/gpu", {"GPU-1::0"}}}, "nvidia.com/gpu");
  EXPECT_THAT(catalog.CleanUp(*dirs, 300), ElementsAre(kC));
}

TEST_F(RegionCatalogTest, CleanUpRemovesWhatAnAllocateKilledPartWayLeft) {
  // Allocate writes the record, then the directories. Killed in between: a
  // record whose directory was never made (the limits directory maybe made).
  ASSERT_TRUE(WriteRegionRecord(root_, kA, Record({"GPU-1::0"}, now_ - 1000)).ok());
  fs::create_directories(root_ + "/" + std::string(kA) + ".limits");
  // The same, too young to judge: an Allocate may be making it right now.
  ASSERT_TRUE(WriteRegionRecord(root_, kB, Record({"GPU-1::1"}, now_ - 10)).ok());
  // Killed while writing the record: the temp file of an earlier process.
  // This process's own is a write under way.
  const std::string dead_temp = root_ + "/" + std::string(kC) + ".json.tmp.999999999";
  const std::string own_temp = root_ + "/" + std::string(kC) + ".json.tmp." + std::to_string(::getpid());
  std::ofstream(dead_temp) << "{\"version\":";
  std::ofstream(own_temp) << "{\"version\":";
  MakeDir(kD, std::nullopt);  // a directory without a record cannot be attributed: kept

  RegionCatalog catalog(root_, "vgpu.region", &clock_);
  auto dirs = catalog.Scan();
  ASSERT_TRUE(dirs.ok());
  AssignOwners(*dirs, {}, "nvidia.com/gpu");
  EXPECT_TRUE(catalog.CleanUp(*dirs, 300).empty()) << "no region directory went";
  EXPECT_FALSE(fs::exists(root_ + "/" + std::string(kA) + ".json"));
  EXPECT_FALSE(fs::exists(root_ + "/" + std::string(kA) + ".limits"));
  EXPECT_TRUE(fs::exists(root_ + "/" + std::string(kB) + ".json"));
  EXPECT_FALSE(fs::exists(dead_temp));
  EXPECT_TRUE(fs::exists(own_temp));
  EXPECT_TRUE(fs::exists(root_ + "/" + std::string(kD)));

  clock_.Advance(std::chrono::seconds(1000));
  dirs = catalog.Scan();
  ASSERT_TRUE(dirs.ok());
  catalog.CleanUp(*dirs, 300);
  EXPECT_FALSE(fs::exists(root_ + "/" + std::string(kB) + ".json")) << "past the grace period";
}

// An Allocate slower than the grace period (a loaded host): its record is
// already "old" while the kubelet still waits for the answer naming the
// region. The grace counts from the answer instead.
TEST_F(RegionCatalogTest, CleanUpKeepsTheRegionsOfAnAllocateInFlightUntilTheGraceAfterItsAnswer) {
  RegionsInFlight in_flight(&clock_);
  RegionCatalog catalog(root_, "vgpu.region", &clock_, &in_flight);
  auto clean = [&] {
    auto dirs = catalog.Scan();
    EXPECT_TRUE(dirs.ok());
    AssignOwners(*dirs, {}, "nvidia.com/gpu");
    return catalog.CleanUp(*dirs, 300);
  };
  {
    RegionsInFlight::Request request(&in_flight);
    // Named, record written, directory not made yet.
    request.Add(kA);
    ASSERT_TRUE(WriteRegionRecord(root_, kA, Record({"GPU-1::0"}, now_ - 1000)).ok());
    // A region made long ago by a request that ended long ago: not protected.
    MakeDir(kB, Record({"GPU-1::1"}, now_ - 1000));
    EXPECT_THAT(clean(), ElementsAre(kB));
    EXPECT_TRUE(fs::exists(root_ + "/" + std::string(kA) + ".json")) << "the record of a running Allocate";
    // The directory is made; the request still runs.
    fs::create_directories(root_ + "/" + std::string(kA));
    EXPECT_TRUE(clean().empty());
  }
  // Answered: kept for the grace after the answer, then removed (no
  // container claimed it).
  clock_.Advance(std::chrono::seconds(299));
  EXPECT_TRUE(clean().empty());
  clock_.Advance(std::chrono::seconds(1));
  EXPECT_THAT(clean(), ElementsAre(kA));
}

TEST(RegionsInFlightTest, ProtectsWhileRunningAndForTheGraceAfterwardsOnly) {
  FakeClock clock;
  RegionsInFlight in_flight(&clock);
  EXPECT_FALSE(in_flight.Protects("r1", 10));
  {
    RegionsInFlight::Request request(&in_flight);
    request.Add("r1");
    request.Add("r2");
    clock.Advance(std::chrono::hours(1));
    EXPECT_TRUE(in_flight.Protects("r1", 10)) << "running, however long";
    EXPECT_TRUE(in_flight.Protects("r2", 10));
  }
  EXPECT_TRUE(in_flight.Protects("r1", 10));
  clock.Advance(std::chrono::seconds(9));
  EXPECT_TRUE(in_flight.Protects("r2", 10));
  clock.Advance(std::chrono::seconds(1));
  EXPECT_FALSE(in_flight.Protects("r1", 10));
  EXPECT_FALSE(in_flight.Protects("r2", 10));
  // A request without a registry tracks nothing.
  RegionsInFlight::Request untracked(nullptr);
  untracked.Add("r3");
  EXPECT_FALSE(in_flight.Protects("r3", 10));
}

}  // namespace
}  // namespace tessera::node
