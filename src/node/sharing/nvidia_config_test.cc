#include "node/sharing/nvidia_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::node::sharing {
namespace {

NvidiaConfig MustParse(const std::string& text) {
  auto parsed = ParseNvidiaConfig(text, "config.yaml");
  EXPECT_TRUE(parsed.ok()) << (parsed.ok() ? "" : parsed.error().message);
  return parsed.ok() ? *parsed : NvidiaConfig{};
}

// NVIDIA's README, "With CUDA Time-Slicing": 10 replicas of nvidia.com/gpu.
TEST(NvidiaConfigTest, ReadmeTimeSlicing) {
  const NvidiaConfig config = MustParse(R"(version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 10
)");
  EXPECT_EQ(config.strategy, NvidiaSharingStrategy::kTimeSlicing);
  EXPECT_STREQ(NvidiaSharingStrategyName(config.strategy), "time-slicing");
  EXPECT_FALSE(config.sharing.rename_by_default);
  EXPECT_FALSE(config.sharing.fail_requests_greater_than_one);  // NVIDIA's default for time-slicing
  ASSERT_EQ(config.sharing.resources.size(), 1u);
  const auto& resource = config.sharing.resources[0];
  EXPECT_EQ(resource.name, "nvidia.com/gpu");
  EXPECT_EQ(resource.AdvertisedName(), "nvidia.com/gpu");
  EXPECT_EQ(resource.replicas, 10);
  EXPECT_EQ(resource.devices.kind, NvidiaDeviceSelection::Kind::kAll);  // devices default to all
}

// renameByDefault: advertised as <name>.shared.
TEST(NvidiaConfigTest, ReadmeRenameByDefault) {
  const NvidiaConfig config = MustParse(R"(version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 10
)");
  ASSERT_EQ(config.sharing.resources.size(), 1u);
  EXPECT_EQ(config.sharing.resources[0].AdvertisedName(), "nvidia.com/gpu.shared");
  EXPECT_TRUE(config.sharing.fail_requests_greater_than_one);
}

// NVIDIA's README, "With CUDA MPS": failRequestsGreaterThanOne stays true unless set.
TEST(NvidiaConfigTest, ReadmeMps) {
  const NvidiaConfig config = MustParse(R"(version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 10
)");
  EXPECT_EQ(config.strategy, NvidiaSharingStrategy::kMps);
  EXPECT_TRUE(config.sharing.fail_requests_greater_than_one);
  const NvidiaConfig relaxed = MustParse(R"(sharing:
  mps:
    failRequestsGreaterThanOne: false
    resources: [{name: gpu, replicas: 2}]
)");
  EXPECT_FALSE(relaxed.sharing.fail_requests_greater_than_one);
  EXPECT_EQ(relaxed.sharing.resources[0].name, "nvidia.com/gpu");  // "gpu" is nvidia.com/gpu
}

TEST(NvidiaConfigTest, FlagsAndOtherKeysAreAcceptedAndListed) {
  const NvidiaConfig config = MustParse(R"({"version": "v1",
  "flags": {"migStrategy": "single", "failOnInitError": true, "plugin": {"deviceListStrategy": "envvar"}},
  "resources": {"gpus": [{"pattern": "*", "name": "gpu"}]},
  "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}})");
  EXPECT_EQ(config.mig_strategy, "single");
  EXPECT_EQ(config.ignored, (std::vector<std::string>{"flags.failOnInitError", "flags.plugin", "resources"}));
  EXPECT_EQ(config.strategy, NvidiaSharingStrategy::kTimeSlicing);
}

TEST(NvidiaConfigTest, EmptyFileAndNoSharingMeanNone) {
  EXPECT_EQ(MustParse("").strategy, NvidiaSharingStrategy::kNone);
  EXPECT_EQ(MustParse("version: v1\nflags: {migStrategy: none}\n").strategy, NvidiaSharingStrategy::kNone);
}

TEST(NvidiaConfigTest, DeviceSelections) {
  const NvidiaConfig config = MustParse(R"(sharing:
  timeSlicing:
    resources:
    - {name: nvidia.com/gpu, replicas: 2, devices: [0, "2", "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763"]}
    - {name: nvidia.com/gpu, replicas: 4, devices: ["1"], rename: gpu.four}
    - {name: nvidia.com/mig-1g.10gb, replicas: 3, devices: 2}
)");
  ASSERT_EQ(config.sharing.resources.size(), 3u);
  EXPECT_EQ(config.sharing.resources[0].devices.list,
            (std::vector<std::string>{"0", "2", "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763"}));
  EXPECT_EQ(config.sharing.resources[1].AdvertisedName(), "nvidia.com/gpu.four");
  EXPECT_EQ(config.sharing.resources[2].devices.kind, NvidiaDeviceSelection::Kind::kCount);
  EXPECT_EQ(config.sharing.resources[2].devices.count, 2);
  EXPECT_TRUE(IsMigDeviceRef("0:1"));
  EXPECT_TRUE(IsMigDeviceRef("MIG-GPU-b1028956-cfa2-0990-bf4a-5da9abb51763/3/0"));
  EXPECT_FALSE(IsMigDeviceRef("GPU-b1028956-cfa2-0990-bf4a-5da9abb51763"));
}

// Each input NVIDIA's plugin refuses (and each tessera adds) is refused with
// a message that says why.
TEST(NvidiaConfigTest, BadInputs) {
  struct Case {
    const char* text;
    const char* expect;  // in the message
  };
  const std::string ts = "sharing:\n  timeSlicing:\n    resources:\n";
  const std::vector<Case> cases = {
      {"version: v2\n", "unknown version: v2"},
      {"- a\n- b\n", "expected a mapping"},
      {"version: [v1\n", "not valid YAML"},
      {"sharing:\n  timeSlicing: {}\n", "sharing.timeSlicing: no resources specified"},
      {"sharing:\n  timeSlicing:\n    resources: []\n", "no resources specified"},
      {"sharing:\n  mps:\n    renameByDefault: true\n", "sharing.mps: no resources specified"},
      {"sharing: [1]\n", "sharing must be a mapping"},
      {"sharing:\n  timeSlicing:\n    renameByDefault: maybe\n    resources: [{name: gpu, replicas: 2}]\n",
       "renameByDefault must be true or false"},
      {"sharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: 1\n    resources: [{name: gpu, replicas: "
       "2}]\n",
       "failRequestsGreaterThanOne must be true or false"},
      {"sharing:\n  timeSlicing:\n    resources: [{replicas: 2}]\n",
       "resources[0]: no resource name specified"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: gpu}]\n", "resources[0]: no replicas specified"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 1}]\n",
       "number of replicas must be >= 2"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 0}]\n",
       "number of replicas must be >= 2"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: -3}]\n",
       "number of replicas must be >= 2"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: two}]\n",
       "replicas must be an integer"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: GPU, replicas: 2}]\n",
       "incorrect format for resource name 'nvidia.com/GPU'"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: example.com/gpu, replicas: 2}]\n",
       "incorrect format for resource name"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: nvidia.com/fpga, replicas: 2}]\n",
       "time-slicing shares only nvidia.com/gpu and the MIG resources"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2, rename: Shared}]\n",
       "rename: incorrect format for resource name"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2, devices: some}]\n",
       "devices set as 'some' but the only valid string input is 'all'"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2, devices: 0}]\n",
       "devices set as '0' but a count of devices must be > 0"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2, devices: [first]}]\n",
       "unsupported type for device in devices list: 'first'"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2, devices: [GPU-123]}]\n",
       "unsupported type for device in devices list"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2, devices: {a: 1}}]\n",
       "unrecognized type for devices spec"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2}]\n  mps:\n    resources: [{name: "
       "gpu, "
       "replicas: 2}]\n",
       "sharing.timeSlicing and sharing.mps are both set"},
      {"sharing:\n  mps:\n    resources: [{name: nvidia.com/mig-1g.10gb, replicas: 2}]\n",
       "MPS shares only nvidia.com/gpu"},
      {"sharing:\n  mps:\n    resources: [{name: gpu, replicas: 2, devices: [\"0:1\"]}]\n",
       "sharing with MPS is not supported on devices with MIG enabled"},
      {"flags: {migStrategy: mixed}\nsharing:\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n",
       "using --mig-strategy=mixed is not supported with MPS"},
      {"flags: {migStrategy: all}\n", "invalid --mig-strategy option: all"},
      // Overlapping selections of one resource (NVIDIA ignores devices; tessera honours them).
      {"sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2}, {name: gpu, replicas: 4}]\n",
       "resources[1] and sharing.timeSlicing.resources[0] both select all devices"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2, devices: [0, 1]}, {name: gpu, "
       "replicas: 4, "
       "devices: [\"1\"]}]\n",
       "both select device '1'"},
      {"sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2, devices: 2}, {name: gpu, "
       "replicas: 4, "
       "devices: [1]}]\n",
       "both select GPU 1"},
  };
  for (const auto& c : cases) {
    auto parsed = ParseNvidiaConfig(c.text, "config.yaml");
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_NE(parsed.error().message.find(c.expect), std::string::npos)
        << "input:\n"
        << c.text << "message: " << parsed.error().message;
    EXPECT_EQ(parsed.error().message.rfind("config.yaml: ", 0), 0u) << parsed.error().message;
  }
}

// Different resources may select the same GPU index: a MIG resource's "0" is not the GPU's.
TEST(NvidiaConfigTest, DifferentResourcesDoNotOverlap) {
  const NvidiaConfig config = MustParse(R"(sharing:
  timeSlicing:
    resources:
    - {name: gpu, replicas: 2}
    - {name: mig-1g.10gb, replicas: 2}
)");
  EXPECT_EQ(config.sharing.resources.size(), 2u);
}

}  // namespace
}  // namespace tessera::node::sharing
