#include "core/mig/geometry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tessera::core::mig {
namespace {

using ::testing::HasSubstr;

const Model& Get(const char* key) {
  const Model* m = FindModel(key);
  EXPECT_NE(m, nullptr) << key;
  return *m;
}

TEST(MigGeometry, TablesAreConsistent) {
  ASSERT_EQ(Models().size(), 5u);
  for (const Model& m : Models()) {
    SCOPED_TRACE(m.key);
    // Every row of the profile table found its model: 5 profiles on the A30, 7 elsewhere.
    EXPECT_EQ(m.profiles.size(), m.memory_slices == 4 ? 5u : 7u);
    EXPECT_EQ(m.Whole().memory_slices, m.memory_slices);
    EXPECT_EQ(m.Whole().compute_slices, m.compute_slices);
    for (size_t i = 0; i < m.profiles.size(); ++i) {
      const Profile& p = m.profiles[i];
      SCOPED_TRACE(p.name);
      EXPECT_FALSE(p.starts.empty());
      for (uint32_t s : p.starts) EXPECT_LE(s + p.memory_slices, m.memory_slices);
      EXPECT_LE(p.max_instances, p.starts.size());
      EXPECT_LE(p.memory_mib, m.Whole().memory_mib);
      EXPECT_LE(p.sm_count, m.Whole().sm_count);
      // The name says the compute slices: "3g.40gb" has 3.
      EXPECT_EQ(p.name.substr(0, p.name.find('g')), std::to_string(p.compute_slices));
      if (i > 0) {
        const Profile& q = m.profiles[i - 1];
        EXPECT_LE(q.memory_slices * 8 + q.compute_slices, p.memory_slices * 8 + p.compute_slices);
      }
    }
  }
}

TEST(MigGeometry, PublishedFiguresOfTheA100_80GB) {
  const Model& m = Get("A100-80GB");
  const Profile* p = m.FindProfile("3g.40gb");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->id, 9u);
  EXPECT_EQ(p->sm_count, 42u);
  EXPECT_EQ(p->memory_mib, 40192u);  // 39.25 GiB
  EXPECT_EQ(p->starts, (std::vector<uint32_t>{0, 4}));
  EXPECT_EQ(m.FindProfile("1g.10gb")->max_instances, 7u);
  EXPECT_EQ(m.FindProfile("1g.5gb"), nullptr);
  EXPECT_TRUE(m.mode_change_needs_reset);
  EXPECT_FALSE(Get("H100-80GB").mode_change_needs_reset);
}

TEST(MigGeometry, SevenSmallInstancesFillAnA100AndAnEighthDoesNot) {
  const Model& m = Get("A100-80GB");
  std::vector<Instance> seven;
  for (uint32_t s = 0; s < 7; ++s) seven.push_back({"1g.10gb", s});
  EXPECT_TRUE(CheckInstances(m, seven).ok());
  for (const Profile& p : m.profiles) {
    for (uint32_t s : p.starts) EXPECT_FALSE(CanAdd(m, seven, {p.name, s})) << p.name << "@" << s;
  }
}

TEST(MigGeometry, RulesNameTheOffendingInstance) {
  const Model& m = Get("A100-80GB");
  Status overlap = CheckInstances(m, std::vector<Instance>{{"3g.40gb", 4}, {"1g.10gb", 6}});
  ASSERT_FALSE(overlap.ok());
  EXPECT_THAT(overlap.error().message, HasSubstr("1g.10gb@6: overlaps"));

  Status start = CheckInstances(m, std::vector<Instance>{{"1g.10gb", 7}});
  ASSERT_FALSE(start.ok());
  EXPECT_THAT(start.error().message, HasSubstr("cannot start at memory slice 7"));

  Status unknown = CheckInstances(m, std::vector<Instance>{{"1g.5gb", 0}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.error().message, HasSubstr("'1g.5gb' does not exist on A100-80GB"));

  Status limit = CheckInstances(m, std::vector<Instance>{{"1g.10gb+me", 0}, {"1g.10gb+me", 1}});
  ASSERT_FALSE(limit.ok());
  EXPECT_THAT(limit.error().message, HasSubstr("more than 1 instance(s) of 1g.10gb+me"));

  // 4g + 3g take all 8 memory and 7 compute slices.
  EXPECT_TRUE(CheckInstances(m, std::vector<Instance>{{"4g.40gb", 0}, {"3g.40gb", 4}}).ok());
}

TEST(MigGeometry, A30HasFourSlices) {
  const Model& m = Get("A30-24GB");
  EXPECT_TRUE(CheckInstances(m, std::vector<Instance>{{"2g.12gb", 0}, {"1g.6gb", 2}, {"1g.6gb", 3}}).ok());
  EXPECT_FALSE(CanAdd(m, std::vector<Instance>{{"2g.12gb", 0}}, {"2g.12gb", 1}));
  EXPECT_FALSE(CheckInstances(m, std::vector<Instance>{{"1g.6gb", 4}}).ok());
}

TEST(MigGeometry, RecognisesModelsByNameMemoryAndPciId) {
  auto key = [](GpuIdentity g) {
    auto r = RecogniseModel(g);
    return r.ok() ? (*r)->key : "error: " + r.error().message;
  };
  EXPECT_EQ(key({"NVIDIA A100-SXM4-40GB", 40960, 0}), "A100-40GB");
  EXPECT_EQ(key({"NVIDIA A100-PCIE-40GB", 40536, 0}), "A100-40GB");
  EXPECT_EQ(key({"NVIDIA A100-SXM4-80GB", 81920, 0}), "A100-80GB");
  EXPECT_EQ(key({"NVIDIA A100 80GB PCIe", 81920, 0}), "A100-80GB");
  EXPECT_EQ(key({"NVIDIA H100 80GB HBM3", 81559, 0}), "H100-80GB");
  EXPECT_EQ(key({"NVIDIA H200", 143771, 0}), "H200-141GB");
  EXPECT_EQ(key({"NVIDIA H200 NVL", 143771, 0}), "H200-141GB");
  EXPECT_EQ(key({"NVIDIA A30", 24576, 0}), "A30-24GB");
  // The PCI id decides over the name (mig-parted's device-filter ids).
  EXPECT_EQ(key({"some name", 0, 0x20B510DE}), "A100-80GB");
  EXPECT_EQ(key({"NVIDIA H100 NVL", 95830, 0}).substr(0, 6), "error:");
  EXPECT_THAT(key({"NVIDIA H100 NVL", 95830, 0}), HasSubstr("only the 80 GB H100"));
  EXPECT_THAT(key({"NVIDIA GH200 480GB", 97871, 0}), HasSubstr("no MIG table for this model"));
  EXPECT_THAT(key({"Tesla T4", 15360, 0}), HasSubstr("GPU 'Tesla T4' (15360 MiB)"));
}

}  // namespace
}  // namespace tessera::core::mig
