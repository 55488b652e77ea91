#include "node/mig/mig_settings.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

namespace tessera::node::mig {
namespace {

TEST(MigSettingsTest, GpuSelection) {
  auto all = ParseMigGpus("all");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->Contains(5));
  auto some = ParseMigGpus("0,2");
  ASSERT_TRUE(some.ok());
  EXPECT_TRUE(some->Contains(2));
  EXPECT_FALSE(some->Contains(1));
  for (const char* bad : {"", "0,", "x", "1,-2", "0;1", "2000"}) {
    auto parsed = ParseMigGpus(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.error().message.find("mig_gpus"), std::string::npos);
  }
}

// Each bad setting is refused with a message naming the key.
TEST(MigSettingsTest, BadSettingsNameTheKey) {
  struct Case {
    std::function<void(NodeConfig&)> set;
    const char* key;
  };
  const std::vector<Case> cases = {
      {[](NodeConfig& c) { c.mig_strategy = "none"; }, "mig_strategy"},
      {[](NodeConfig& c) { c.mig_gpus = "first"; }, "mig_gpus"},
      {[](NodeConfig& c) { c.mig_retry_seconds = 0; }, "mig_retry_seconds"},
      {[](NodeConfig& c) { c.mig_layout_file = "layout.yaml"; }, "mig_layout_file"},
      {[](NodeConfig& c) { c.mig_config = "all-1g.10gb"; }, "mig_config"},
      {[](NodeConfig& c) { c.mig_dynamic_gpus = "some"; }, "mig_dynamic_gpus"},
      {[](NodeConfig& c) { c.mig_dynamic_gpus = ""; }, "mig_dynamic_gpus"},
      {[](NodeConfig& c) {
         c.mig_dynamic_gpus = "all";
         c.kubernetes = false;
       },
       "needs kubernetes"},
      // A GPU both in a layout and dynamic.
      {[](NodeConfig& c) {
         c.mig_layout_file = "/etc/tessera/mig.yaml";
         c.mig_dynamic_gpus = "1";
       },
       "mig_gpus is 'all'"},
      {[](NodeConfig& c) {
         c.mig_layout_file = "/etc/tessera/mig.yaml";
         c.mig_gpus = "0,1";
         c.mig_dynamic_gpus = "1,2";
       },
       "GPU 1 is in both mig_gpus"},
      {[](NodeConfig& c) {
         c.mig_layout_file = "/etc/tessera/mig.yaml";
         c.mig_gpus = "0";
         c.mig_dynamic_gpus = "all";
       },
       "mig_dynamic_gpus is 'all'"},
  };
  for (const auto& c : cases) {
    NodeConfig config;
    c.set(config);
    Status s = Validate(config);
    ASSERT_FALSE(s.ok()) << c.key;
    EXPECT_NE(s.error().message.find(c.key), std::string::npos) << s.error().message;
  }
  NodeConfig good;
  good.mig_layout_file = "/etc/tessera/mig.yaml";
  good.mig_config = "all-1g.10gb";
  good.mig_strategy = "single";
  good.mig_gpus = "0,1";
  EXPECT_TRUE(Validate(good).ok());
  good.mig_dynamic_gpus = "2,3";  // the layout's GPUs and the dynamic ones apart
  EXPECT_TRUE(Validate(good).ok());
}

TEST(MigSettingsTest, DynamicGpuSelection) {
  auto none = ParseMigDynamicGpus("none");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(none->Contains(0));
  auto all = ParseMigDynamicGpus("all");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->Contains(3));
  auto some = ParseMigDynamicGpus("1");
  ASSERT_TRUE(some.ok());
  EXPECT_TRUE(some->Contains(1));
  EXPECT_FALSE(some->Contains(0));
  EXPECT_EQ(NodeConfig{}.mig_dynamic_gpus, "none");
}

}  // namespace
}  // namespace tessera::node::mig
