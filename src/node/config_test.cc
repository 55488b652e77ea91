#include "node/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <yaml-cpp/yaml.h>

#include "base/testing.h"

namespace tessera::node {
namespace {

namespace fs = std::filesystem;

class ConfigTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  CommandLine Parse(std::vector<std::string> args, const std::string& node_name = "") {
    std::vector<const char*> argv = {"tessera-node"};
    for (auto& a : args) argv.push_back(a.c_str());
    return ParseCommandLine(static_cast<int>(argv.size()), argv.data(), node_name);
  }

  ::tessera::testing::TempDir tmp_{"tn-config"};
  const std::string dir_ = tmp_.path();
};

TEST_F(ConfigTest, DefaultsAreValidAndMatchTheKubeletConventions) {
  NodeConfig config;
  EXPECT_TRUE(Validate(config).ok());
  EXPECT_EQ(config.KubeletSocketPath(), "/var/lib/kubelet/device-plugins/kubelet.sock");
  EXPECT_EQ(config.PluginSocketName(), "tessera-nvidia.com-gpu.sock");
  EXPECT_EQ(config.RegionFileContainerPath(), "/tmp/tessera/vgpu.region");
  EXPECT_EQ(config.PreloadFileHostPath(), "/usr/local/tessera/ld.so.preload");
}

TEST_F(ConfigTest, FileThenFlagsThenNodeEntry) {
  std::string file = Write("config.yaml",
                           "split_count: 4\nmemory_scaling: 2\nresource_name: example.com/vgpu\n"
                           "visible_devices: device-ids\nld_so_preload: false\nunplaced_pods: whole-gpu\n");
  std::string nodes = Write("nodes.yaml",
                            "nodes:\n  gpu-7:\n    split_count: 6\n    disable_core_limit: true\n"
                            "  gpu-8:\n    memory_scaling: 3\n");
  auto parsed = Parse({"--config", file, "--memory-scaling", "1.5", "--node-config-file", nodes}, "gpu-7");
  ASSERT_FALSE(parsed.exit_now) << parsed.output;
  const NodeConfig& c = parsed.config;
  EXPECT_EQ(c.resource_name, "example.com/vgpu");  // file
  EXPECT_DOUBLE_EQ(c.memory_scaling, 1.5);         // flag over file
  EXPECT_EQ(c.split_count, 6);                     // node entry over file
  EXPECT_TRUE(c.disable_core_limit);               // node entry
  EXPECT_FALSE(c.ld_so_preload);                   // file
  EXPECT_EQ(c.visible_devices, VisibleDevicesMode::kDeviceIds);
  EXPECT_EQ(c.unplaced_pods, UnplacedPodsPolicy::kWholeGpu);
  EXPECT_EQ(c.node_name, "gpu-7");

  // Another node's entry does not apply; the flag picks the node over NODE_NAME.
  parsed = Parse({"--config", file, "--node-config-file", nodes, "--node-name", "gpu-8"}, "gpu-7");
  ASSERT_FALSE(parsed.exit_now) << parsed.output;
  EXPECT_EQ(parsed.config.split_count, 4);
  EXPECT_DOUBLE_EQ(parsed.config.memory_scaling, 3.0);
}

TEST_F(ConfigTest, AnEmptyOverridesFileChangesNothing) {
  for (const char* text : {"", "nodes:\n", "nodes: {}\n"}) {
    auto parsed = Parse({"--node-config-file", Write("nodes.yaml", text)}, "gpu-1");
    ASSERT_FALSE(parsed.exit_now) << text << ": " << parsed.output;
    EXPECT_EQ(parsed.config.split_count, 10);
  }
}

TEST_F(ConfigTest, HelpDocumentsEveryKey) {
  auto parsed = Parse({"--help"});
  ASSERT_TRUE(parsed.exit_now);
  EXPECT_EQ(parsed.exit_code, 0);
  for (const char* flag :
       {"--split-count", "--memory-scaling", "--core-scaling", "--disable-core-limit", "--resource-name",
        "--plugin-dir", "--libvgpu-host-path", "--region-host-dir", "--ld-so-preload", "--node-config-file",
        "--visible-devices", "--pre-start-required", "--unplaced-pods"}) {
    EXPECT_NE(parsed.output.find(flag), std::string::npos) << flag;
  }
}

TEST_F(ConfigTest, EveryKindOfFlagReachesItsField) {
  auto parsed = Parse({"--kubernetes", "false", "--ld-so-preload=false", "--pre-start-required",
                       "--metrics-port", "0", "--visible-devices", "all", "--mig-strategy", "single",
                       "--log-level", "debug", "--pod-resources-socket", "", "--heartbeat-seconds", "7"});
  ASSERT_FALSE(parsed.exit_now) << parsed.output;
  const NodeConfig& c = parsed.config;
  EXPECT_FALSE(c.kubernetes);
  EXPECT_FALSE(c.ld_so_preload);
  EXPECT_TRUE(c.pre_start_required);
  EXPECT_EQ(c.metrics_port, 0);
  EXPECT_EQ(c.visible_devices, VisibleDevicesMode::kAll);
  EXPECT_EQ(c.unplaced_pods, UnplacedPodsPolicy::kRefuse);  // not given: the default
  EXPECT_EQ(c.mig_strategy, "single");
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_EQ(c.pod_resources_socket, "");
  EXPECT_EQ(c.heartbeat_seconds, 7);
}

TEST_F(ConfigTest, TheOverridesFileHelpAndErrorNameTheSameKeys) {
  const std::string keys =
      "split_count, memory_scaling, core_scaling, disable_core_limit, ld_so_preload, active_oom_killer, "
      "memory_tolerance_mib, mig_dynamic_gpus, sharing, nvidia_config_file, nvidia_config_default";
  auto parsed =
      Parse({"--node-config-file", Write("nodes.yaml", "nodes:\n  gpu-1:\n    kubernetes: false\n")});
  ASSERT_TRUE(parsed.exit_now);
  EXPECT_NE(parsed.output.find("key 'kubernetes' cannot be overridden per node (allowed: " + keys + ")"),
            std::string::npos)
      << parsed.output;
  auto help = Parse({"--help"}).output;
  EXPECT_NE(help.find("split_count: .., memory_scaling: .., core_scaling: .., disable_core_limit: .., "
                      "ld_so_preload: .., active_oom_killer: .., memory_tolerance_mib: .."),
            std::string::npos)
      << help;
}

TEST_F(ConfigTest, IntegerKeysAcceptTheirRangeAndNothingOutsideIt) {
  struct Range {
    std::string key;
    int min, max;
  };
  for (const Range& r :
       {Range{"split_count", 1, 1024}, Range{"kubelet_poll_ms", 10, 60000},
        Range{"heartbeat_seconds", 1, 3600}, Range{"monitor_interval_ms", 100, 60000},
        Range{"metrics_port", 0, 65535}, Range{"region_grace_seconds", 0, 604800},
        Range{"memory_tolerance_mib", 0, 1048576}, Range{"compute_tolerance_percent", 0, 100},
        Range{"compute_window_passes", 1, 100}}) {
    std::string flag = "--" + r.key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    for (int ok : {r.min, r.max}) {
      auto parsed = Parse({flag, std::to_string(ok)});
      EXPECT_FALSE(parsed.exit_now) << flag << " " << ok << ": " << parsed.output;
    }
    for (int bad : {r.min - 1, r.max + 1}) {
      auto parsed = Parse({flag, std::to_string(bad)});
      EXPECT_EQ(parsed.exit_code, 2) << flag << " " << bad;
      const std::string expected =
          r.key + " must be between " + std::to_string(r.min) + " and " + std::to_string(r.max);
      EXPECT_NE(parsed.output.find(expected), std::string::npos) << parsed.output;
      EXPECT_NE(parsed.output.find("got " + std::to_string(bad)), std::string::npos) << parsed.output;
    }
  }
}

TEST_F(ConfigTest, PathKeysMustBeAbsolute) {
  for (std::string key : {"plugin_dir", "libvgpu_host_path", "libvgpu_container_path", "region_host_dir",
                          "region_container_dir", "pod_resources_socket", "dra_region_dir"}) {
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    auto parsed = Parse({flag, "relative/path"});
    EXPECT_EQ(parsed.exit_code, 2) << flag;
    EXPECT_NE(parsed.output.find(key + " must be an absolute path, got 'relative/path'"), std::string::npos)
        << parsed.output;
  }
}

struct BadCase {
  std::vector<std::string> args;
  std::string yaml;       // written to a config file and passed with --config when not empty
  std::string node_yaml;  // written to a node overrides file when not empty
  std::string expected;   // a piece of the message
};

TEST_F(ConfigTest, BadConfigurationFailsWithExitCode2AndAMessageNamingTheProblem) {
  std::vector<BadCase> cases = {
      {{"--split-count", "0"}, "", "", "split_count must be between 1 and 1024"},
      {{"--split-count", "ten"}, "", "", "--split-count"},
      {{"--memory-scaling", "-1"}, "", "", "memory_scaling"},
      {{"--core-scaling", "0"}, "", "", "core_scaling"},
      {{"--resource-name", "gpu"}, "", "", "resource_name 'gpu'"},
      {{"--resource-name", "kubernetes.io/gpu"}, "", "", "reserved"},
      {{"--plugin-dir", "relative/dir"}, "", "", "plugin_dir must be an absolute path"},
      {{"--visible-devices", "some"}, "", "", "--visible-devices"},
      {{"--unplaced-pods", "allow"}, "", "", "--unplaced-pods"},
      {{}, "unplaced_pods: allow\n", "", "'unplaced_pods' must be refuse or whole-gpu"},
      {{"--no-such-flag"}, "", "", "--no-such-flag"},
      {{}, "split_cont: 4\n", "", "unknown key 'split_cont'"},
      {{}, "split_count: many\n", "", "'split_count' must be an integer"},
      {{}, "split_count: [1, 2]\n", "", "'split_count' must be an integer"},
      {{}, "visible_devices: maybe\n", "", "'visible_devices' must be webhook, device-ids or all"},
      {{}, "split_count: 4\n  bad indent: [\n", "", "not valid YAML"},
      {{}, "log_level: verbose\n", "", "log_level 'verbose' must be trace, debug, info, warn or error"},
      {{"--log-level", "verbose"}, "", "", "--log-level"},
      {{}, "compute_enforcement: always\n", "", "compute_enforcement 'always' must be report or kill"},
      {{"--compute-enforcement", "always"}, "", "", "--compute-enforcement"},
      {{"--mig-strategy", "some"}, "", "", "--mig-strategy"},
      {{"--metrics-address", ""}, "", "", "metrics_address must not be empty"},
      {{"--nvml-library", ""}, "", "", "nvml_library must not be empty"},
      {{}, "memory_scaling: 101\n", "", "memory_scaling must be > 0 and <= 100"},
      {{"--pod-resources-socket", "/" + std::string(120, 'x')}, "", "", "too long for a unix socket path"},
      {{"--region-host-dir", "/var/lib/x", "--dra-region-dir", "/var/lib/x/"},
       "",
       "",
       "dra_region_dir must not be region_host_dir"},
      {{"--device-plugin=false", "--dra-region-dir", ""},
       "",
       "",
       "device_plugin false (the enforcement-only"},
      {{"--plugin-dir", "/" + std::string(100, 'x')}, "", "", "plugin_dir '/xxx"},
      {{}, "kubernetes: maybe\n", "", "'kubernetes' must be true or false"},
      {{"--kubernetes", "maybe"}, "", "", "--kubernetes"},
      {{}, "", "nodes:\n  gpu-1:\n    plugin_dir: /x\n", "cannot be overridden per node"},
      {{}, "", "nodes:\n  gpu-2:\n    split_count: 0\n", "node 'gpu-2'"},
      {{}, "", "gpu-1:\n  split_count: 2\n", "expected 'nodes:'"},
      {{"--config", "/nonexistent/tessera.yaml"}, "", "", "cannot read '/nonexistent/tessera.yaml'"},
      {{"--node-config-file", "/nonexistent/nodes.yaml"}, "", "", "cannot read '/nonexistent/nodes.yaml'"},
  };
  for (auto& c : cases) {
    auto args = c.args;
    if (!c.yaml.empty()) {
      args.push_back("--config");
      args.push_back(Write("bad.yaml", c.yaml));
    }
    if (!c.node_yaml.empty()) {
      args.push_back("--node-config-file");
      args.push_back(Write("nodes.yaml", c.node_yaml));
    }
    auto parsed = Parse(args, "gpu-1");
    std::string label = c.expected;
    EXPECT_TRUE(parsed.exit_now) << label;
    EXPECT_EQ(parsed.exit_code, 2) << label;
    EXPECT_NE(parsed.output.find(c.expected), std::string::npos)
        << "expected '" << c.expected << "' in: " << parsed.output;
  }
}

}  // namespace
}  // namespace tessera::node

namespace tessera::node {
namespace {

// The shipped ConfigMap (deploy/node/config.yaml) must hold a configuration the
// agent accepts: a manifest that fails at start on every node is caught here.
TEST(DeployedConfigTest, TheShippedConfigMapIsValid) {
  YAML::Node config_map = YAML::LoadFile(std::string(TESSERA_SOURCE_DIR) + "/deploy/node/config.yaml");
  NodeConfig config;
  config.node_name = "gpu-node-7";
  auto applied = ApplyYaml(config_map["data"]["node.yaml"].as<std::string>(), "node.yaml", config);
  ASSERT_TRUE(applied.ok()) << applied.error().message;
  EXPECT_TRUE(Validate(config).ok());

  ::tessera::testing::TempDir dir("tn-deploy");
  config.node_config_file = dir.Path("nodes.yaml");
  std::ofstream(config.node_config_file) << config_map["data"]["nodes.yaml"].as<std::string>();
  auto overrides = ApplyNodeOverrides(config);
  EXPECT_TRUE(overrides.ok()) << overrides.error().message;
}

}  // namespace
}  // namespace tessera::node

namespace tessera::node {
namespace {

// 'sharing' may be written as a YAML list in a file and per node, or as flow
// text on the command line; mig rules land in the MIG keys.
TEST(SharingConfigTest, ListInFileFlagAndNodeEntry) {
  ::tessera::testing::TempDir tmp{"tn-sharing"};
  const std::string file = tmp.Path("config.yaml");
  std::ofstream(file)
      << "resource_name: tessera.io/vgpu\nsharing:\n- gpus: \"1\"\n  mode: timeslice\n  replicas: 4\n"
         "- {gpus: [0], mode: mig}\nmig_layout_file: /etc/mig.yaml\n";
  const std::string nodes = tmp.Path("nodes.yaml");
  std::ofstream(nodes) << "nodes:\n  gpu-9:\n    sharing:\n    - {gpus: all, mode: exclusive}\n";
  auto parse = [](std::vector<std::string> args, const std::string& node) {
    std::vector<const char*> argv = {"tessera-node"};
    for (auto& a : args) argv.push_back(a.c_str());
    return ParseCommandLine(static_cast<int>(argv.size()), argv.data(), node);
  };
  auto parsed = parse({"--config", file}, "gpu-1");
  ASSERT_FALSE(parsed.exit_now) << parsed.output;
  EXPECT_NE(parsed.config.sharing.find("timeslice"), std::string::npos) << parsed.config.sharing;
  EXPECT_EQ(parsed.config.mig_gpus, "0");  // the mig rule, folded

  auto node = parse({"--config", file, "--node-config-file", nodes}, "gpu-9");
  ASSERT_FALSE(node.exit_now) << node.output;
  EXPECT_NE(node.config.sharing.find("exclusive"), std::string::npos) << node.config.sharing;

  auto flag =
      parse({"--sharing", "[{gpus: \"0\", mode: timeslice, replicas: 2, rename_by_default: true}]"}, "");
  ASSERT_FALSE(flag.exit_now) << flag.output;

  auto bad = parse({"--sharing", "[{gpus: all, mode: timeslice, replicas: 0}]"}, "");
  ASSERT_TRUE(bad.exit_now);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("sharing[0].replicas must be at least 1"), std::string::npos) << bad.output;

  auto relative = parse({"--nvidia-config-file", "nvidia.yaml"}, "");
  ASSERT_TRUE(relative.exit_now);
  EXPECT_NE(relative.output.find("nvidia_config_file must be an absolute path"), std::string::npos);

  auto twice = parse(
      {"--mig-layout-file", "/m.yaml", "--mig-gpus", "1", "--sharing", "[{gpus: \"0\", mode: mig}]"}, "");
  ASSERT_TRUE(twice.exit_now);
  EXPECT_NE(twice.output.find("mig_gpus is '1'"), std::string::npos) << twice.output;
}

}  // namespace
}  // namespace tessera::node
