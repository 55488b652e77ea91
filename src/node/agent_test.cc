#include "node/agent.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/testing.h"
#include "node/testing.h"

namespace tessera::node {
namespace {

namespace fs = std::filesystem;

TEST(AgentTest, OfferAppliesMemoryScalingAndSplitCount) {
  NodeConfig config;
  config.memory_scaling = 1.5;
  config.split_count = 7;
  core::Gpu gpu;
  gpu.uuid = "GPU-a";
  gpu.memory_mib = 40960;
  auto offered = ApplyOffer(config, {gpu});
  ASSERT_EQ(offered.size(), 1u);
  EXPECT_EQ(offered[0].memory_mib, 61440);
  EXPECT_EQ(offered[0].slots, 7);
  EXPECT_EQ(offered[0].cores, 100);

  config.core_scaling = 1.5;  // compute oversubscribed
  EXPECT_EQ(ApplyOffer(config, {gpu})[0].cores, 150);

  config.memory_scaling = 0.9;  // keep some memory back
  EXPECT_EQ(ApplyOffer(config, {gpu})[0].memory_mib, 36864);
}

TEST(AgentTest, PreloadFileNamesLibvgpuInsideTheContainer) {
  ::tessera::testing::TempDir tmp("tn-agent");
  const std::string dir = tmp.path();
  NodeConfig config;
  config.libvgpu_host_path = dir + "/libvgpu.so";
  config.libvgpu_container_path = "/opt/tessera/libvgpu.so";
  std::ofstream(dir + "/ld.so.preload") << "stale content from an older version\nsecond line\n";

  ASSERT_TRUE(WritePreloadFile(config).ok());
  std::ifstream in(dir + "/ld.so.preload");
  std::string content((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(content, "/opt/tessera/libvgpu.so\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1) << "no temp file left";

  config.libvgpu_host_path = dir + "/missing-dir/libvgpu.so";
  auto status = WritePreloadFile(config);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find(dir + "/missing-dir/ld.so.preload"), std::string::npos)
      << status.error().message;
}

TEST(AgentTest, StartFailsClearlyWhenDiscoveryFails) {
  class BrokenInventory final : public host::InventorySource {
   public:
    Result<std::vector<core::Gpu>> Discover() override { return Error{"nvmlInit failed: driver not loaded"}; }
    Status StartHealthWatch(HealthCallback) override { return Status::Ok(); }
    void StopHealthWatch() override {}
    Result<std::vector<host::GpuSample>> Sample() override { return Error{"not discovered"}; }
  };
  NodeConfig config;
  Agent agent(config, std::make_unique<BrokenInventory>());
  auto status = agent.Start();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().message, "GPU discovery: nvmlInit failed: driver not loaded");
}

// The enforcement-only role beside tessera-dra (device_plugin: false): no
// plugin socket is served (so nothing registers with the kubelet); with the
// default, the socket is there.
TEST(AgentTest, WithoutTheDevicePluginNoSocketIsServed) {
  for (bool device_plugin : {true, false}) {
    SCOPED_TRACE(device_plugin ? "device_plugin" : "enforcement only");
    ::tessera::testing::TempDir tmp("tn-agent");
    NodeConfig config;
    config.plugin_dir = tmp.path();
    config.kubelet_poll_ms = 10;
    config.ld_so_preload = false;
    config.region_host_dir = tmp.path() + "/regions";
    config.dra_region_dir = tmp.path() + "/dra-regions";
    config.kubernetes = false;
    config.metrics_port = 0;
    config.pod_resources_socket = "";
    config.device_plugin = device_plugin;
    Agent agent(config,
                std::make_unique<host::StaticInventory>(std::vector<core::Gpu>{TestA100("GPU-0", 0)}));
    ASSERT_TRUE(agent.Start().ok());
    EXPECT_EQ(fs::exists(config.PluginSocketPath()), device_plugin);
    agent.Stop();
  }
}

}  // namespace
}  // namespace tessera::node
