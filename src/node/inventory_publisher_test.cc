#include "node/inventory_publisher.h"

#include <gtest/gtest.h>

namespace tessera::node {
namespace {

core::Gpu Gpu(const std::string& model) {
  core::Gpu g;
  g.uuid = "GPU-aaaaaaaa-0000-0000-0000-00000000000" + std::to_string(model.size() % 10);
  g.model = model;
  g.memory_mib = 1000;
  return g;
}

TEST(LabelValueTest, ReplacesTruncatesAndTrims) {
  EXPECT_EQ(LabelValue("NVIDIA A100-SXM4-80GB"), "NVIDIA-A100-SXM4-80GB");
  EXPECT_EQ(LabelValue("Tesla T4 (rev 2)"), "Tesla-T4--rev-2");
  EXPECT_EQ(LabelValue("  _gpu_.  "), "gpu");
  EXPECT_EQ(LabelValue("()"), "");
  const std::string long_name = "A" + std::string(61, '.') + "-BC";  // 65 characters
  EXPECT_EQ(LabelValue(long_name), "A");                             // cut at 63, then trimmed
  EXPECT_EQ(LabelValue(std::string(70, 'x')).size(), 63u);
}

TEST(InventoryPublisherTest, TheInventoryCarriesTheGpusAndARfc3339Heartbeat) {
  const auto when = std::chrono::system_clock::time_point(std::chrono::seconds(1763900000)) +
                    std::chrono::milliseconds(750);
  auto inventory = BuildInventory("node-a", {Gpu("NVIDIA L4")}, when);
  EXPECT_EQ(inventory.node, "node-a");
  EXPECT_EQ(inventory.heartbeat, "2025-11-23T12:13:20Z");
  ASSERT_EQ(inventory.gpus.size(), 1u);
  EXPECT_TRUE(core::EncodeInventory(inventory).ok());
}

TEST(InventoryPublisherTest, LabelsNameTheProductAndCount) {
  auto labels = NodeLabels({Gpu("NVIDIA A100-SXM4-80GB"), Gpu("NVIDIA A100-SXM4-80GB")});
  EXPECT_EQ(labels.at(kGpuProductLabel), "NVIDIA-A100-SXM4-80GB");
  EXPECT_EQ(labels.at(kGpuCountLabel), "2");
  EXPECT_EQ(NodeLabels({Gpu("NVIDIA L4"), Gpu("Tesla T4")}).at(kGpuProductLabel), "mixed");
  auto none = NodeLabels({});
  EXPECT_FALSE(none.at(kGpuProductLabel).has_value()) << "a node without GPUs loses the product label";
  EXPECT_EQ(none.at(kGpuCountLabel), "0");
  // Label values are at most 63 characters and start and end alphanumeric.
  auto long_name = NodeLabels({Gpu("(" + std::string(80, 'x') + ")")}).at(kGpuProductLabel);
  ASSERT_TRUE(long_name.has_value());
  EXPECT_LE(long_name->size(), 63u);
  EXPECT_EQ(long_name->front(), 'x');
}

}  // namespace
}  // namespace tessera::node
