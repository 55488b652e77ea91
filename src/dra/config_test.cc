#include "dra/config.h"

#include <gtest/gtest.h>

namespace tessera::dra {
namespace {

CommandLine Parse(std::vector<const char*> args, const std::string& node = "node-a") {
  args.insert(args.begin(), "tessera-dra");
  return ParseCommandLine(static_cast<int>(args.size()), args.data(), node);
}

TEST(DraConfigTest, DefaultsFollowTheKubeletsConventions) {
  auto c = Parse({});
  ASSERT_FALSE(c.exit_now) << c.output;
  EXPECT_EQ(c.config.RegistrationSocketPath(), "/var/lib/kubelet/plugins_registry/gpu.tessera.io-reg.sock");
  EXPECT_EQ(c.config.DraSocketPath(), "/var/lib/kubelet/plugins/gpu.tessera.io/dra.sock");
  EXPECT_EQ(c.config.StateDir(), "/var/lib/kubelet/plugins/gpu.tessera.io");
  EXPECT_EQ(c.config.PreloadFileHostPath(), "/usr/local/tessera/ld.so.preload");
  EXPECT_EQ(c.config.device_mode, DeviceMode::kVgpu);
}

TEST(DraConfigTest, BadInputNamesTheFlag) {
  const std::vector<std::pair<std::vector<const char*>, std::string>> cases = {
      {{"--driver-name", "GPU_Tessera"}, "--driver-name 'GPU_Tessera' is not a DNS subdomain"},
      {{"--cdi-dir", "cdi"}, "--cdi-dir must be an absolute path"},
      {{"--memory-step", "0"}, "--memory-step and --cores-step must be above zero"},
      {{"--memory-min", "1.5"}, "--memory-min is not a whole number"},
      {{"--cores-default", "lots"}, "--cores-default"},
      {{"--cores-default", "150"}, "--cores-default is above 100"},
      {{"--device-mode", "mig"}, "--device-mode"},
      {{"--resync-seconds", "0"}, "--resync-seconds must be at least 1"},
      {{"--log-level", "loud"}, "--log-level 'loud'"},
      {{"--mig-gpus", "0,,1"}, "--mig-gpus '0,,1' is not none, all or GPU indices"},
  };
  for (const auto& [args, error] : cases) {
    auto c = Parse(args);
    EXPECT_TRUE(c.exit_now);
    EXPECT_EQ(c.exit_code, 2);
    EXPECT_NE(c.output.find(error), std::string::npos) << c.output;
  }
  auto no_node = Parse({}, "");
  EXPECT_EQ(no_node.exit_code, 2);
  EXPECT_NE(no_node.output.find("set NODE_NAME or --node-name"), std::string::npos);
  auto help = Parse({"--help"});
  EXPECT_TRUE(help.exit_now);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--memory-default"), std::string::npos);
}

}  // namespace
}  // namespace tessera::dra
