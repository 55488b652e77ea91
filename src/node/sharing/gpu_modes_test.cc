#include "node/sharing/gpu_modes.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "node/sharing/labels.h"

namespace tessera::node::sharing {
namespace {

using core::SharingMode;

std::string Uuid(int i) {
  return "GPU-0000000" + std::to_string(i) + "-0000-0000-0000-000000000000";
}

std::vector<core::Gpu> Gpus(int n, const std::string& model = "NVIDIA A100-SXM4-80GB") {
  std::vector<core::Gpu> gpus;
  for (int i = 0; i < n; ++i) {
    core::Gpu gpu;
    gpu.uuid = Uuid(i);
    gpu.index = i;
    gpu.model = model;
    gpu.memory_mib = 81920;
    gpu.mig_capable = true;
    gpus.push_back(gpu);
  }
  return gpus;
}

NvidiaConfig Nvidia(const std::string& text) {
  auto parsed = ParseNvidiaConfig(text, "nvidia.yaml");
  EXPECT_TRUE(parsed.ok()) << (parsed.ok() ? "" : parsed.error().message);
  return parsed.ok() ? *parsed : NvidiaConfig{};
}

ModeAssignment MustAssign(const NodeConfig& config, const std::vector<core::Gpu>& gpus,
                          const NvidiaConfig* nvidia = nullptr) {
  auto assigned = AssignModes(config, gpus, nvidia);
  EXPECT_TRUE(assigned.ok()) << (assigned.ok() ? "" : assigned.error().message);
  return assigned.ok() ? *assigned : ModeAssignment{};
}

int Advertised(const ModeAssignment& modes, const std::string& resource) {
  int n = 0;
  for (const auto& gpu : modes.gpus) n += gpu.resource_name == resource ? gpu.replicas : 0;
  return n;
}

// NVIDIA's README: 10 replicas on a node with 8 GPUs are 80 nvidia.com/gpu,
// and GFD's labels say time-slicing with 10 replicas.
TEST(GpuModesTest, NvidiaReadmeTimeSlicingOnEightGpus) {
  const auto gpus = Gpus(8);
  const NvidiaConfig nvidia = Nvidia(
      "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
      "    - name: nvidia.com/gpu\n      replicas: 10\n");
  const ModeAssignment modes = MustAssign(NodeConfig{}, gpus, &nvidia);
  EXPECT_EQ(Advertised(modes, "nvidia.com/gpu"), 80);
  for (const auto& gpu : modes.gpus) {
    EXPECT_EQ(gpu.mode, SharingMode::kTimeslice);
    EXPECT_FALSE(gpu.renamed);
    EXPECT_EQ(gpu.source, "nvidia_config_file sharing.timeSlicing.resources[0]");
  }
  auto labels = SharingLabels(modes, gpus);
  EXPECT_EQ(labels[kSharingStrategyLabel], "time-slicing");
  EXPECT_EQ(labels[kReplicasLabel], "10");
  EXPECT_EQ(labels[kMpsCapableLabel], "false");
  EXPECT_EQ(labels.count(kProductLabel), 0u);  // not renamed: GFD's product label is left alone
  EXPECT_EQ(labels[kSharingModesLabel], "timeslice");
}

TEST(GpuModesTest, NvidiaReadmeRenamedAndMps) {
  const auto gpus = Gpus(8);
  const NvidiaConfig renamed = Nvidia(
      "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
      "    - name: nvidia.com/gpu\n      replicas: 10\n");
  const ModeAssignment modes = MustAssign(NodeConfig{}, gpus, &renamed);
  EXPECT_EQ(Advertised(modes, "nvidia.com/gpu.shared"), 80);
  EXPECT_EQ(Advertised(modes, "nvidia.com/gpu"), 0);
  auto labels = SharingLabels(modes, gpus);
  EXPECT_EQ(labels[kProductLabel], "NVIDIA-A100-SXM4-80GB-SHARED");

  const NvidiaConfig mps = Nvidia(
      "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 10\n");
  const ModeAssignment mps_modes = MustAssign(NodeConfig{}, gpus, &mps);
  EXPECT_EQ(Advertised(mps_modes, "nvidia.com/gpu"), 80);
  for (const auto& gpu : mps_modes.gpus) {
    EXPECT_EQ(gpu.mode, SharingMode::kMps);
    EXPECT_EQ(gpu.mps_active_thread_percentage, 10);  // "the same fraction (1/10)"
    EXPECT_EQ(gpu.mps_pinned_memory_mib, 8192);
    EXPECT_TRUE(gpu.fail_requests_greater_than_one);
  }
  auto mps_labels = SharingLabels(mps_modes, gpus);
  EXPECT_EQ(mps_labels[kSharingStrategyLabel], "mps");
  EXPECT_EQ(mps_labels[kMpsCapableLabel], "true");
}

// One node, a GPU in each mode, selected by index, UUID and model.
TEST(GpuModesTest, RulesSelectByIndexUuidAndModel) {
  auto gpus = Gpus(4);
  gpus[3].model = "Tesla T4";
  NodeConfig config;
  config.sharing =
      "[{gpus: \"0\", mode: exclusive},"
      " {gpus: " +
      Uuid(1) +
      ", mode: timeslice, replicas: 4, rename_by_default: true,"
      "  memory_split: equal},"
      " {gpus: Tesla-T4, mode: mps, replicas: 2, mps_active_thread_percentage: 30,"
      "  resource: nvidia.com/gpu.mps}]";
  const ModeAssignment modes = MustAssign(config, gpus);
  ASSERT_EQ(modes.gpus.size(), 4u);
  EXPECT_EQ(modes.gpus[0].mode, SharingMode::kExclusive);
  EXPECT_EQ(modes.gpus[0].resource_name, "nvidia.com/gpu");
  EXPECT_EQ(modes.gpus[1].mode, SharingMode::kTimeslice);
  EXPECT_EQ(modes.gpus[1].replicas, 4);
  EXPECT_EQ(modes.gpus[1].resource_name, "nvidia.com/gpu.shared");
  EXPECT_EQ(modes.gpus[1].memory_split, MemorySplit::kEqual);
  EXPECT_FALSE(modes.gpus[1].fail_requests_greater_than_one);
  EXPECT_EQ(modes.gpus[2].mode, SharingMode::kVgpu);
  EXPECT_EQ(modes.gpus[2].source, "default");
  EXPECT_EQ(modes.gpus[3].mode, SharingMode::kMps);
  EXPECT_EQ(modes.gpus[3].mps_active_thread_percentage, 30);
  EXPECT_EQ(modes.gpus[3].mps_pinned_memory_mib, 81920 / 2);
  EXPECT_EQ(modes.gpus[3].resource_name, "nvidia.com/gpu.mps");
  EXPECT_TRUE(modes.gpus[3].fail_requests_greater_than_one);  // NVIDIA's MPS default
}

// A rule selecting no GPU here is a note, not an error: one file serves many nodes.
TEST(GpuModesTest, SelectorWithoutGpuIsANote) {
  NodeConfig config;
  config.sharing = "[{gpus: \"NVIDIA H100\", mode: exclusive}, {gpus: \"7\", mode: exclusive}]";
  const ModeAssignment modes = MustAssign(config, Gpus(2));
  EXPECT_EQ(modes.notes.size(), 2u);
  EXPECT_EQ(modes.gpus[0].mode, SharingMode::kVgpu);
}

// NVIDIA's "all" yields to tessera's explicit rules; an explicit list does not.
TEST(GpuModesTest, NvidiaAllYieldsToRules) {
  NodeConfig config;
  config.resource_name = "tessera.io/vgpu";
  config.sharing = "[{gpus: \"0\", mode: vgpu}]";
  const NvidiaConfig nvidia = Nvidia("sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 3}]\n");
  const ModeAssignment modes = MustAssign(config, Gpus(3), &nvidia);
  EXPECT_EQ(modes.gpus[0].mode, SharingMode::kVgpu);
  EXPECT_EQ(modes.gpus[1].mode, SharingMode::kTimeslice);
  EXPECT_EQ(modes.gpus[2].mode, SharingMode::kTimeslice);
  EXPECT_EQ(modes.ReplicaResources().at("nvidia.com/gpu").size(), 2u);

  const NvidiaConfig listed =
      Nvidia("sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 3, devices: [0]}]\n");
  auto refused = AssignModes(config, Gpus(3), &listed);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("GPU 0"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("a GPU is in one mode"), std::string::npos);
}

TEST(GpuModesTest, MigKeysAreModes) {
  NodeConfig config;
  config.mig_layout_file = "/etc/tessera/mig.yaml";
  config.mig_gpus = "0";
  config.mig_dynamic_gpus = "1";
  config.resource_name = "tessera.io/vgpu";
  config.sharing = "[{gpus: \"2\", mode: timeslice, replicas: 2}]";
  const ModeAssignment modes = MustAssign(config, Gpus(3));
  EXPECT_EQ(modes.gpus[0].mode, SharingMode::kMigStatic);
  EXPECT_EQ(modes.gpus[0].source, "mig_gpus");
  EXPECT_EQ(modes.gpus[1].mode, SharingMode::kMigDynamic);
  EXPECT_EQ(modes.gpus[2].mode, SharingMode::kTimeslice);
}

TEST(GpuModesTest, FoldMigRulesIntoTheMigKeys) {
  NodeConfig config;
  config.mig_layout_file = "/etc/tessera/mig.yaml";
  config.sharing = "[{gpus: [0, 2], mode: mig}, {gpus: \"1\", mode: mig-dynamic}]";
  ASSERT_TRUE(FoldMigRules(config).ok());
  EXPECT_EQ(config.mig_gpus, "0,2");
  EXPECT_EQ(config.mig_dynamic_gpus, "1");
  // The same again is fine (the keys now say what the rules say).
  EXPECT_TRUE(FoldMigRules(config).ok());

  NodeConfig both;
  both.mig_layout_file = "/etc/tessera/mig.yaml";
  both.mig_gpus = "3";
  both.sharing = "[{gpus: \"0\", mode: mig}]";
  auto folded = FoldMigRules(both);
  ASSERT_FALSE(folded.ok());
  EXPECT_NE(folded.error().message.find("mig_gpus is '3'"), std::string::npos) << folded.error().message;
}

TEST(GpuModesTest, RuleParsing) {
  auto rules = ParseSharingRules(
      "- {gpus: all, mode: timeslice, replicas: 4, resource: example.com/ts, fail_requests_greater_than_one: "
      "true}\n"
      "- {gpus: [0, GPU-x], mode: mps}\n");
  ASSERT_TRUE(rules.ok()) << rules.error().message;
  ASSERT_EQ(rules->size(), 2u);
  EXPECT_EQ((*rules)[0].resource, "example.com/ts");
  EXPECT_EQ((*rules)[0].fail_requests_greater_than_one, true);
  EXPECT_EQ((*rules)[1].gpus, "0,GPU-x");
  EXPECT_EQ((*rules)[1].replicas, 0);
  EXPECT_TRUE(ParseSharingRules("").ok());
  EXPECT_TRUE(ParseSharingRules("[]").ok());
}

// Each bad rule is refused naming the entry and key.
TEST(GpuModesTest, BadRules) {
  struct Case {
    const char* text;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"{gpus: all}", "sharing must be a list"},
      {"[{mode: vgpu}]", "sharing[0].gpus is missing"},
      {"[{gpus: all}]", "sharing[0].mode is missing"},
      {"[{gpus: all, mode: shared}]",
       "sharing[0].mode must be vgpu, exclusive, timeslice, mps, mig or mig-dynamic"},
      {"[{gpus: all, mode: timeslice}]", "sharing[0].replicas must be at least 1 for mode timeslice"},
      {"[{gpus: all, mode: timeslice, replicas: 0}]", "must be at least 1"},
      {"[{gpus: all, mode: timeslice, replicas: 2000}]", "sharing[0].replicas must be between 0 and 1024"},
      {"[{gpus: all, mode: timeslice, replicas: many}]", "sharing[0].replicas must be an integer"},
      {"[{gpus: all, mode: vgpu, replicas: 2}]",
       "sharing[0].replicas applies to mode timeslice and mps only"},
      {"[{gpus: all, mode: exclusive, memory_split: equal}]", "memory_split applies to mode timeslice only"},
      {"[{gpus: all, mode: timeslice, replicas: 2, memory_split: half}]",
       "memory_split must be none or equal"},
      {"[{gpus: all, mode: mps, replicas: 2, mps_active_thread_percentage: 0}]",
       "mps_active_thread_percentage must be between 1 and 100"},
      {"[{gpus: all, mode: mps, replicas: 2, mps_active_thread_percentage: 101}]", "between 1 and 100"},
      {"[{gpus: all, mode: timeslice, replicas: 2, mps_active_thread_percentage: 50}]",
       "mps_active_thread_percentage applies to mode mps only"},
      {"[{gpus: all, mode: mps, mps_pinned_memory_mib: 100}]",
       "sizes NVIDIA-style MPS replicas: set replicas"},
      {"[{gpus: all, mode: timeslice, replicas: 2, resource: gpu}]", "must be '<domain>/<name>'"},
      {"[{gpus: all, mode: timeslice, replicas: 2, resource: a.b/c, rename_by_default: true}]",
       "resource and rename_by_default both"},
      {"[{gpus: all, mode: timeslice, replicas: 2, rename_by_default: yes}]", "must be true or false"},
      {"[{gpus: all, mode: vgpu, color: red}]", "sharing[0]: unknown key 'color'"},
      {"[{gpus: \"\", mode: vgpu}]", "sharing[0].gpus must name GPUs"},
      {"[{gpus: \"99999\", mode: vgpu}]", "is too large"},
      {"[{gpus: Tesla-T4, mode: mig}]", "selects GPUs by index or all"},
      {"[{gpus: [[0]], mode: vgpu}]", "sharing[0].gpus[0] must be a single value"},
      {"[{gpus: all, mode: vgpu}", "not valid YAML"},
  };
  for (const auto& c : cases) {
    auto rules = ParseSharingRules(c.text);
    ASSERT_FALSE(rules.ok()) << c.text;
    EXPECT_NE(rules.error().message.find(c.expect), std::string::npos)
        << c.text << " -> " << rules.error().message;
  }
}

// Each conflict AssignModes finds is refused naming where both sides come from.
TEST(GpuModesTest, Conflicts) {
  struct Case {
    std::function<void(NodeConfig&)> set;
    const char* nvidia;  // "" = none
    const char* expect;
  };
  const std::vector<Case> cases = {
      {[](NodeConfig& c) { c.sharing = "[{gpus: \"0,1\", mode: exclusive}, {gpus: \"1\", mode: vgpu}]"; }, "",
       "GPU 1 ("
       "GPU-00000001-0000-0000-0000-000000000000) is selected by sharing[0] (exclusive) and by sharing[1] "
       "(vgpu)"},
      // Replicas under the name the vGPU devices use: one plugin per resource name.
      {[](NodeConfig& c) { c.sharing = "[{gpus: \"1\", mode: timeslice, replicas: 4}]"; }, "",
       "would be advertised as nvidia.com/gpu, which the devices of GPU(s) 0 are advertised as"},
      {[](NodeConfig&) {},
       "sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2, devices: [1]}]\n",
       "rename the replicas"},
      // One name, two modes.
      {[](NodeConfig& c) {
         c.sharing =
             "[{gpus: \"0\", mode: timeslice, replicas: 2, resource: example.com/s},"
             " {gpus: \"1\", mode: mps, replicas: 2, resource: example.com/s}]";
       },
       "", "one resource name, one mode"},
      // MPS on a GPU in MIG mode.
      {[](NodeConfig& c) {
         c.mig_dynamic_gpus = "0";
         c.resource_name = "tessera.io/vgpu";
         c.sharing = "[{gpus: \"0\", mode: mps, replicas: 2}]";
       },
       "", "is selected by mig_dynamic_gpus (mig-dynamic) and by sharing[0] (mps)"},
      {[](NodeConfig& c) {
         c.sharing = "[{gpus: all, mode: mps, replicas: 2, mps_pinned_memory_mib: 90000}]";
       },
       "", "mps_pinned_memory_mib 90000 is more than the 81920 MiB of GPU 0"},
      {[](NodeConfig& c) { c.resource_name = "tessera.io/vgpu"; },
       "sharing:\n  timeSlicing:\n    resources: [{name: mig-1g.10gb, replicas: 2}]\n",
       "tessera does not time-slice MIG devices"},
      {[](NodeConfig& c) { c.resource_name = "tessera.io/vgpu"; },
       "sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2, devices: [\"0:0\"]}]\n",
       "devices names MIG device '0:0'"},
      {[](NodeConfig& c) {
         c.mig_layout_file = "/m.yaml";
         c.mig_gpus = "0";
         c.mig_strategy = "single";
         c.resource_name = "tessera.io/vgpu";
         c.sharing = "[{gpus: \"1\", mode: timeslice, replicas: 2}, {gpus: \"0\", mode: vgpu}]";
       },
       "", "is selected by mig_gpus (mig) and by sharing[1] (vgpu)"},
  };
  for (const auto& c : cases) {
    NodeConfig config;
    c.set(config);
    NvidiaConfig nvidia;
    if (*c.nvidia != '\0') nvidia = Nvidia(c.nvidia);
    auto assigned = AssignModes(config, Gpus(2), *c.nvidia != '\0' ? &nvidia : nullptr);
    ASSERT_FALSE(assigned.ok()) << c.expect;
    EXPECT_NE(assigned.error().message.find(c.expect), std::string::npos) << assigned.error().message;
  }
}

// Replicas under nvidia.com/gpu are fine when no GPU of the node is a vGPU one.
TEST(GpuModesTest, ReplicasMayTakeTheDefaultNameWhenNothingElseDoes) {
  NodeConfig config;
  config.sharing = "[{gpus: all, mode: timeslice, replicas: 3}]";
  const ModeAssignment modes = MustAssign(config, Gpus(2));
  EXPECT_EQ(Advertised(modes, "nvidia.com/gpu"), 6);
}

TEST(GpuModesTest, ValidateSharingSettingsNamesTheKey) {
  NodeConfig config;
  config.nvidia_config_file = "nvidia.yaml";
  auto s = ValidateSharingSettings(config);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("nvidia_config_file must be an absolute path"), std::string::npos);
  NodeConfig mig;
  mig.sharing = "[{gpus: \"0\", mode: mig}]";
  s = ValidateSharingSettings(mig);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("set mig_layout_file"), std::string::npos);
}

}  // namespace
}  // namespace tessera::node::sharing
