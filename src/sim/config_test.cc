#include "sim/config.h"

#include <gtest/gtest.h>

namespace tessera::sim {
namespace {

TEST(SimConfig, ParsesCountTimesModel) {
  auto c = ParseGpuList("2xH100-80GB");
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_EQ(c->gpus.size(), 2u);
  EXPECT_EQ(c->gpus[0].model->name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(c->gpus[1].memory_mib, 81559u);
  EXPECT_EQ(c->gpus[0].sm_count, 132u);
  // NVLink-capable models of one kind are connected to each other.
  ASSERT_EQ(c->nvlinks.size(), 1u);
}

TEST(SimConfig, ParsesMixedList) {
  auto c = ParseGpuList("A100-40GB, A100-80GB,1xL4");
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_EQ(c->gpus.size(), 3u);
  EXPECT_EQ(c->gpus[2].model->key, "L4");
  EXPECT_TRUE(c->nvlinks.empty());
}

TEST(SimConfig, RejectsUnknownModelNamingTheKnownOnes) {
  auto c = ParseGpuList("2xB300");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("B300"), std::string::npos);
  EXPECT_NE(c.error().message.find("H100-80GB"), std::string::npos);
}

TEST(SimConfig, ParsesYaml) {
  auto c = ParseYamlConfig(R"(
gpus:
  - model: A100-80GB
    count: 2
    mig: true
    numa_node: 1
  - model: T4
    memory_mib: 8000
nvlink:
  - [0, 1, 12]
context_overhead_mib: 0
copy_bandwidth_mb_per_s: 1000
default_kernel_us: 20
)");
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_EQ(c->gpus.size(), 3u);
  EXPECT_TRUE(c->gpus[0].mig_enabled);
  EXPECT_EQ(c->gpus[1].numa_node, 1);
  EXPECT_EQ(c->gpus[2].memory_mib, 8000u);
  ASSERT_EQ(c->nvlinks.size(), 1u);
  EXPECT_EQ(c->nvlinks[0].links, 12);
  EXPECT_EQ(c->context_overhead_mib, 0u);
  EXPECT_EQ(c->default_kernel_ns, 20000u);
}

TEST(SimConfig, YamlRejectsMigOnModelsWithoutIt) {
  auto c = ParseYamlConfig("gpus:\n  - model: T4\n    mig: true\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("MIG"), std::string::npos);
}

TEST(SimConfig, ManagedOversubscriptionIsOffUnlessAskedAndPartOfTheCanonicalForm) {
  auto off = ParseYamlConfig("gpus:\n  - model: A100-80GB\n");
  auto on = ParseYamlConfig("gpus:\n  - model: A100-80GB\nmanaged_oversubscription: true\n");
  ASSERT_TRUE(off.ok() && on.ok());
  EXPECT_FALSE(off->managed_oversubscription);
  EXPECT_TRUE(on->managed_oversubscription);
  EXPECT_NE(off->Canonical(), on->Canonical());
  EXPECT_EQ(off->Canonical().find("managed"), std::string::npos);  // states made before the key still match
}

TEST(SimConfig, CanonicalFormDistinguishesConfigs) {
  EXPECT_EQ(ParseGpuList("2xA30")->Canonical(), ParseGpuList("A30,A30")->Canonical());
  EXPECT_NE(ParseGpuList("2xA30")->Canonical(), ParseGpuList("1xA30")->Canonical());
}

TEST(SimCatalog, MigGeometryOfA100_40GB) {
  const GpuModel* m = FindModel("A100-40GB");
  ASSERT_NE(m, nullptr);
  const MigProfile* one = FindMigProfileByEnum(*m, 0);  // NVML_GPU_INSTANCE_PROFILE_1_SLICE
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(one->name, "1g.5gb");
  EXPECT_EQ(one->max_instances, 7u);
  EXPECT_EQ(FindMigProfileById(*m, 0)->name, "7g.40gb");
  EXPECT_EQ(FindMigProfileById(*m, 9)->name, "3g.20gb");
  EXPECT_EQ(FindMigProfileById(*m, 9)->max_instances, 2u);
  EXPECT_EQ(FindMigProfileById(*m, 14)->max_instances, 3u);
  EXPECT_EQ(FindModel("T4")->mig_profiles.size(), 0u);
}

}  // namespace
}  // namespace tessera::sim
