#include "scheduler/config.h"

#include <gtest/gtest.h>

namespace tessera::scheduler {
namespace {

TEST(ConfigTest, DefaultsAreValidAndHelpListsEveryGroup) {
  EXPECT_TRUE(SchedulerConfig{}.Validate().ok());
  std::string help = ConfigKeysHelp();
  for (const char* key :
       {"schedulerName", "resources.gpuMemory", "defaults.cores", "policy.node", "reservationTimeoutSeconds",
        "server.webhookPort", "kube.qps", "leaderElection.enabled"}) {
    EXPECT_NE(help.find(key), std::string::npos) << key;
  }
}

TEST(ConfigTest, YamlSetsNestedKeys) {
  SchedulerConfig c;
  ASSERT_TRUE(ApplyConfigYaml("schedulerName: s2\n"
                              "resources:\n  gpuMemory: example.com/vmem\n"
                              "defaults:\n  cores: 25\n  memoryPercentage: 50\n"
                              "policy:\n  node: spread\n  gpu: binpack\n"
                              "reservationTimeoutSeconds: 30\n"
                              "leaderElection:\n  enabled: false\n",
                              "test.yaml", c)
                  .ok());
  EXPECT_EQ(c.scheduler_name, "s2");
  EXPECT_EQ(c.resources.gpu_memory_name, "example.com/vmem");
  EXPECT_EQ(c.resources.default_cores, 25);
  EXPECT_EQ(c.resources.default_memory_percent, 50);
  EXPECT_EQ(c.node_policy, "spread");
  EXPECT_EQ(c.gpu_policy, "binpack");
  EXPECT_EQ(c.reservation_timeout, std::chrono::seconds(30));
  EXPECT_FALSE(c.leader_elect);
  EXPECT_TRUE(c.Validate().ok());
}

TEST(ConfigTest, BadInputNamesTheKey) {
  SchedulerConfig c;
  auto s = ApplyConfigYaml("server:\n  prot: 1\n", "f.yaml", c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("server.prot"), std::string::npos) << s.error().message;
  s = ApplyConfigYaml("defaults:\n  cores: lots\n", "f.yaml", c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("defaults.cores"), std::string::npos);
  s = ApplyConfigYaml("{{{", "f.yaml", c);
  EXPECT_FALSE(s.ok());

  SchedulerConfig v;
  v.resources.default_cores = 150;
  EXPECT_FALSE(v.Validate().ok());
  v = SchedulerConfig{};
  v.gpu_policy = "random";
  ASSERT_FALSE(v.Validate().ok());
  EXPECT_NE(v.Validate().error().message.find("policy.gpu"), std::string::npos);
  v = SchedulerConfig{};
  v.reservation_timeout = std::chrono::seconds(5);  // below the 10 s API timeout
  EXPECT_FALSE(v.Validate().ok());
  v = SchedulerConfig{};
  v.tls_cert_file = "c.pem";
  EXPECT_FALSE(v.Validate().ok());
}

TEST(ConfigTest, PoliciesDefaultToTesseraAndTakeHamisLevelValues) {
  SchedulerConfig c;
  EXPECT_EQ(c.node_policy, "tessera");
  EXPECT_EQ(c.gpu_policy, "");
  EXPECT_TRUE(c.Validate().ok());
  EXPECT_NE(ConfigKeysHelp().find("policy.node (string, default tessera)"), std::string::npos);
  // HAMi's values, one level per key, and core's names for the node level.
  for (const char* node : {"tessera", "binpack", "spread", "node-binpack", "gpu-spread"}) {
    for (const char* gpu : {"", "binpack", "spread", "gpu-binpack"}) {
      c.node_policy = node;
      c.gpu_policy = gpu;
      EXPECT_TRUE(c.Validate().ok()) << node << " " << gpu;
    }
  }
  EXPECT_EQ(*CoreNodePolicyName("binpack"), "node-binpack");
  EXPECT_EQ(*CoreNodePolicyName("spread"), "node-spread");
  EXPECT_EQ(*CoreNodePolicyName("tessera"), "tessera");
  EXPECT_EQ(*GpuOrderOf("spread"), core::GpuOrder::kSpread);
  EXPECT_FALSE(GpuOrderOf("")->has_value());
  // Bad values name the key and list the valid ones.
  c = SchedulerConfig{};
  c.node_policy = "random";
  ASSERT_FALSE(c.Validate().ok());
  EXPECT_NE(c.Validate().error().message.find("policy.node: 'random' is not a node policy (tessera, binpack"),
            std::string::npos)
      << c.Validate().error().message;
  c = SchedulerConfig{};
  c.gpu_policy = "tessera";  // the node policy's own choice is "" (unset)
  ASSERT_FALSE(c.Validate().ok());
  EXPECT_NE(c.Validate().error().message.find("policy.gpu"), std::string::npos);
}

TEST(ConfigTest, InventoryStaleSecondsDefaultsTo120AndZeroSwitchesItOff) {
  SchedulerConfig c;
  EXPECT_EQ(c.inventory_stale, std::chrono::seconds(120));
  EXPECT_NE(ConfigKeysHelp().find("inventoryStaleSeconds (seconds, default 120)"), std::string::npos)
      << ConfigKeysHelp();
  ASSERT_TRUE(ApplyConfigYaml("inventoryStaleSeconds: 300\n", "f.yaml", c).ok());
  EXPECT_EQ(c.inventory_stale, std::chrono::seconds(300));
  ASSERT_TRUE(ApplyConfigYaml("inventoryStaleSeconds: 0\n", "f.yaml", c).ok());
  EXPECT_EQ(c.inventory_stale, std::chrono::seconds(0));
  EXPECT_TRUE(c.Validate().ok());
  for (const char* bad : {"inventoryStaleSeconds: -5\n", "inventoryStaleSeconds: soon\n"}) {
    auto s = ApplyConfigYaml(bad, "f.yaml", c);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.error().message.find("inventoryStaleSeconds"), std::string::npos) << s.error().message;
  }
}

TEST(ConfigTest, TakeoverSettleDefaultsToTheApiTimeoutAndCanBeSetOrSwitchedOff) {
  SchedulerConfig c;
  EXPECT_EQ(c.TakeoverSettle(), c.api_timeout);
  ASSERT_TRUE(ApplyConfigYaml("kube:\n  timeoutSeconds: 4\n", "f.yaml", c).ok());
  EXPECT_EQ(c.TakeoverSettle(), std::chrono::seconds(4)) << "unset follows kube.timeoutSeconds";
  ASSERT_TRUE(ApplyConfigSetting("leaderElection.takeoverSettleSeconds", "2.5", "--set", c).ok());
  EXPECT_EQ(c.TakeoverSettle(), std::chrono::milliseconds(2500));
  ASSERT_TRUE(ApplyConfigSetting("leaderElection.takeoverSettleSeconds", "0", "--set", c).ok());
  EXPECT_EQ(c.TakeoverSettle(), std::chrono::milliseconds(0));
  EXPECT_TRUE(c.Validate().ok());
  for (const char* bad : {"-1", "later"}) {
    auto s = ApplyConfigSetting("leaderElection.takeoverSettleSeconds", bad, "--set", c);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.error().message.find("leaderElection.takeoverSettleSeconds"), std::string::npos)
        << s.error().message;
  }
  EXPECT_EQ(c.TakeoverSettle(), std::chrono::milliseconds(0)) << "a refused value changes nothing";
  EXPECT_NE(ConfigKeysHelp().find("leaderElection.takeoverSettleSeconds"), std::string::npos);
}

TEST(ConfigTest, GpuPreemptionIsOnByDefaultAndCanBeSwitchedOff) {
  SchedulerConfig c;
  EXPECT_TRUE(c.preemption.enabled);
  EXPECT_EQ(c.preemption.pod_retry, std::chrono::seconds(10));
  EXPECT_NE(ConfigKeysHelp().find("preemption.enabled"), std::string::npos);
  ASSERT_TRUE(ApplyConfigYaml("preemption: {enabled: false, podRetrySeconds: 3}\n", "test.yaml", c).ok());
  EXPECT_FALSE(c.preemption.enabled);
  EXPECT_EQ(c.preemption.pod_retry, std::chrono::seconds(3));
  auto zero = ApplyConfigYaml("preemption: {podRetrySeconds: 0}\n", "test.yaml", c);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("preemption.podRetrySeconds"), std::string::npos)
      << zero.error().message;
  EXPECT_EQ(c.preemption.pod_retry, std::chrono::seconds(3));
}

}  // namespace
}  // namespace tessera::scheduler
