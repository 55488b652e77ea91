#include "core/mig/layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <sstream>

#include "base/files.h"

namespace tessera::core::mig {
namespace {

using ::testing::HasSubstr;

std::string SampleDir() {
  const char* env = std::getenv("TESSERA_MIG_PARTED_DIR");
  return env != nullptr ? env : TESSERA_MIG_PARTED_DIR;
}

const Model& Get(const char* key) {
  return *FindModel(key);
}

// A node of `n` GPUs of `model`, as NVML would describe them.
std::vector<NodeGpu> Node(const Model& model, int n) {
  std::vector<NodeGpu> gpus;
  for (int i = 0; i < n; ++i) {
    NodeGpu g;
    g.index = i;
    g.identity = {"NVIDIA " + model.key, model.Whole().memory_mib + 512, model.pci_device_ids.front()};
    gpus.push_back(g);
  }
  return gpus;
}

LayoutFile Parse(const std::string& yaml) {
  Result<LayoutFile> f = ParseLayout(yaml, "test.yaml");
  EXPECT_TRUE(f.ok()) << f.error().message;
  return f.ok() ? *f : LayoutFile{};
}

std::string ParseError(const std::string& yaml) {
  Result<LayoutFile> f = ParseLayout(yaml, "bad.yaml");
  return f.ok() ? "parsed" : f.error().message;
}

// The configurations of a sample file each model takes as a whole, from the
// file's own comments ("# A100-40GB, A800-40GB", ...) and the profile tables;
// those naming a device-filter no entry of which matches the model leave its
// GPUs alone; every other configuration names a profile the model lacks.
struct Expectation {
  const char* model;
  std::set<std::string> apply;
  std::set<std::string> leave;
};

// The A100-80GB's and the H100-80GB's profiles have the same names, so the
// default file's configurations apply to both alike.
const std::set<std::string> kEightyGbConfigs = {
    "all-disabled", "all-enabled", "all-1g.10gb", "all-1g.10gb.me", "all-1g.20gb",
    "all-2g.20gb",  "all-3g.40gb", "all-4g.40gb", "all-7g.80gb",    "all-balanced"};

const std::vector<Expectation> kDefaultFile = {
    {"A30-24GB",
     {"all-disabled", "all-enabled", "all-1g.6gb", "all-1g.6gb.me", "all-2g.12gb", "all-2g.12gb.me",
      "all-4g.24gb", "all-balanced"},
     {"all-1g.10gb", "all-1g.35gb"}},
    {"A100-40GB",
     {"all-disabled", "all-enabled", "all-1g.5gb", "all-1g.5gb.me", "all-2g.10gb", "all-3g.20gb",
      "all-4g.20gb", "all-7g.40gb", "all-1g.10gb", "all-balanced"},
     {"all-1g.35gb"}},
    {"A100-80GB", kEightyGbConfigs, {"all-1g.35gb"}},
    {"H100-80GB", kEightyGbConfigs, {"all-1g.35gb"}},
    {"H200-141GB",
     {"all-disabled", "all-enabled", "all-1g.18gb", "all-1g.18gb.me", "all-1g.35gb", "all-2g.35gb",
      "all-3g.71gb", "all-4g.71gb", "all-7g.141gb", "all-balanced"},
     {"all-1g.10gb"}},
};

const std::vector<Expectation> kExampleFile = {
    {"A30-24GB", {"all-disabled", "all-enabled"}, {}},
    {"A100-40GB",
     {"all-disabled", "all-enabled", "all-1g.5gb", "all-1g.5gb.me", "all-1g.10gb", "all-2g.10gb",
      "all-3g.20gb", "all-balanced", "custom-config"},
     {}},
    {"A100-80GB", {"all-disabled", "all-enabled", "all-1g.10gb"}, {}},
    {"H100-80GB", {"all-disabled", "all-enabled", "all-1g.10gb"}, {}},
    {"H200-141GB", {"all-disabled", "all-enabled"}, {}},
};

// The configuration names of a file, counted from its text (two-space
// indented keys), independently of the parser.
std::set<std::string> ConfigNamesInText(const std::string& text) {
  std::set<std::string> names;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
    // "  all-1g.10gb:": two spaces, a key without spaces, a colon, nothing after.
    if (line.size() < 4 || line.compare(0, 2, "  ") != 0 || line[2] == ' ' || line[2] == '#' ||
        line[2] == '-' || line.back() != ':')
      continue;
    const std::string key = line.substr(2, line.size() - 3);
    if (key.find_first_of(" :") == std::string::npos) names.insert(key);
  }
  return names;
}

void CheckSampleFile(const std::string& name, const std::vector<Expectation>& expectations) {
  Result<std::string> text = files::Read(SampleDir() + "/" + name);
  ASSERT_TRUE(text.ok()) << text.error().message;
  Result<LayoutFile> file = ParseLayout(*text, name);
  ASSERT_TRUE(file.ok()) << file.error().message;
  std::set<std::string> parsed;
  for (const auto& [config, entries] : file->configs) parsed.insert(config);
  ASSERT_EQ(parsed, ConfigNamesInText(*text));

  for (const Expectation& x : expectations) {
    const Model& model = Get(x.model);
    const std::vector<NodeGpu> node = Node(model, 8);
    int applied = 0;
    for (const auto& [config, entries] : file->configs) {
      SCOPED_TRACE(name + " " + config + " on " + model.key);
      Result<NodePlan> plan = ResolveLayout(*file, config, node);
      ASSERT_TRUE(plan.ok()) << plan.error().message;
      ASSERT_EQ(plan->plans.size() + plan->failures.size(), node.size());
      if (x.apply.count(config) != 0) {
        ++applied;
        EXPECT_TRUE(plan->failures.empty()) << plan->failures.front().error.message;
        for (const GpuPlan& gpu : plan->plans) {
          ASSERT_GE(gpu.entry, 0);
          const LayoutEntry& entry = entries[static_cast<size_t>(gpu.entry)];
          EXPECT_EQ(gpu.action, entry.mig_enabled ? GpuAction::kEnable : GpuAction::kDisable);
          EXPECT_EQ(gpu.model, model.key);
          EXPECT_TRUE(CheckInstances(model, gpu.instances).ok());
          // Exactly the entry's instances.
          std::map<std::string, int> want, got;
          for (const auto& [profile, n] : entry.mig_devices) {
            if (n > 0) want[profile] = n;
          }
          for (const Instance& in : gpu.instances) ++got[in.profile];
          EXPECT_EQ(got, want);
        }
      } else if (x.leave.count(config) != 0) {
        EXPECT_TRUE(plan->failures.empty());
        for (const GpuPlan& gpu : plan->plans) EXPECT_EQ(gpu.action, GpuAction::kLeave);
      } else {
        ASSERT_FALSE(plan->failures.empty());
        for (const GpuFailure& f : plan->failures) {
          EXPECT_THAT(f.error.message, HasSubstr("does not exist on " + model.key));
          EXPECT_THAT(f.error.message, HasSubstr("'" + config + "'"));
        }
      }
    }
    EXPECT_EQ(applied, static_cast<int>(x.apply.size())) << "a configuration expected to apply is missing";
  }
}

TEST(MigLayout, EveryConfigurationOfMigPartedsDefaultFile) {
  CheckSampleFile("config-default.yaml", kDefaultFile);
}

TEST(MigLayout, EveryConfigurationOfMigPartedsExampleFile) {
  CheckSampleFile("config.yaml", kExampleFile);
}

TEST(MigLayout, CustomConfigurationSelectsGpusByIndex) {
  Result<std::string> text = files::Read(SampleDir() + "/config.yaml");
  ASSERT_TRUE(text.ok());
  LayoutFile file = Parse(*text);
  Result<NodePlan> plan = ResolveLayout(file, "custom-config", Node(Get("A100-40GB"), 8));
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->plans.size(), 8u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(plan->plans[i].action, GpuAction::kDisable);
  EXPECT_EQ(plan->plans[4].instances.size(), 7u);
  EXPECT_EQ(plan->plans[5].instances,
            (std::vector<Instance>{{"2g.10gb", 0}, {"2g.10gb", 2}, {"2g.10gb", 4}}));
  EXPECT_EQ(plan->plans[6].instances, (std::vector<Instance>{{"3g.20gb", 0}, {"3g.20gb", 4}}));
  EXPECT_EQ(plan->plans[7].instances.size(), 4u);

  // A node with fewer GPUs than the entries name: refused as a whole.
  Result<NodePlan> small = ResolveLayout(file, "custom-config", Node(Get("A100-40GB"), 4));
  ASSERT_FALSE(small.ok());
  EXPECT_THAT(small.error().message, HasSubstr("names GPU 4, which this node does not have"));
}

TEST(MigLayout, UnknownConfigurationNameIsAnErrorListingTheNames) {
  LayoutFile file = Parse("version: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: false}]\n");
  Result<NodePlan> plan = ResolveLayout(file, "all-3g.40gb", Node(Get("A100-80GB"), 1));
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.error().message, HasSubstr("no MIG configuration 'all-3g.40gb' in test.yaml (it has: a)"));
}

TEST(MigLayout, LayoutsTheGeometryCannotHoldFailForThatGpuOnly) {
  LayoutFile file = Parse(R"(version: v1
mig-configs:
  too-many:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 8}
  overlap:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2, "1g.10gb": 1}
  compute:
    - devices: all
      mig-enabled: true
      mig-devices: {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}
  ci-profile:
    - devices: all
      mig-enabled: true
      mig-devices: {"1c.3g.40gb": 1}
  mixed-node:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
)");
  auto failure = [&](const char* config) {
    Result<NodePlan> plan = ResolveLayout(file, config, Node(Get("A100-80GB"), 1));
    EXPECT_TRUE(plan.ok());
    return plan->failures.empty() ? std::string("no failure") : plan->failures[0].error.message;
  };
  EXPECT_THAT(failure("too-many"), HasSubstr("8 x 1g.10gb is more than the 7 instance(s)"));
  EXPECT_THAT(failure("overlap"), HasSubstr("do not fit the placements of a A100-80GB"));
  EXPECT_THAT(failure("compute"), HasSubstr("need 8 compute slices; a A100-80GB has 7"));
  EXPECT_THAT(failure("ci-profile"), HasSubstr("is a compute-instance profile"));
  EXPECT_THAT(failure("too-many"),
              HasSubstr("GPU 0 (NVIDIA A100-80GB), MIG configuration 'too-many' entry 0"));

  // One GPU failing does not stop the others: an A30 cannot hold 3g.40gb.
  std::vector<NodeGpu> node = Node(Get("A100-80GB"), 1);
  node.push_back(Node(Get("A30-24GB"), 1)[0]);
  node[1].index = 1;
  Result<NodePlan> plan = ResolveLayout(file, "mixed-node", node);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->plans.size(), 1u);
  EXPECT_EQ(plan->plans[0].index, 0);
  ASSERT_EQ(plan->failures.size(), 1u);
  EXPECT_EQ(plan->failures[0].index, 1);
  EXPECT_THAT(plan->failures[0].error.message, HasSubstr("'3g.40gb' does not exist on A30-24GB"));
}

TEST(MigLayout, GpusWithoutMig) {
  LayoutFile file = Parse(R"(version: v1
mig-configs:
  all:
    - devices: all
      mig-enabled: true
      mig-devices: {}
  by-index:
    - devices: [0]
      mig-enabled: true
      mig-devices: {}
)");
  std::vector<NodeGpu> t4(1);
  t4[0].identity = {"Tesla T4", 15360, 0x1EB810DE};
  t4[0].mig_capable = false;
  Result<NodePlan> all = ResolveLayout(file, "all", t4);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->plans.size(), 1u);
  EXPECT_EQ(all->plans[0].action, GpuAction::kLeave);
  EXPECT_EQ(all->plans[0].note, "not MIG-capable");
  Result<NodePlan> indexed = ResolveLayout(file, "by-index", t4);
  ASSERT_TRUE(indexed.ok());
  ASSERT_EQ(indexed->failures.size(), 1u);
  EXPECT_THAT(indexed->failures[0].error.message, HasSubstr("MIG asked of a GPU that has no MIG"));

  // MIG-capable, but no table: an error naming the GPU.
  std::vector<NodeGpu> b200(1);
  b200[0].identity = {"NVIDIA B200", 183359, 0x290110DE};
  Result<NodePlan> unknown = ResolveLayout(file, "all", b200);
  ASSERT_TRUE(unknown.ok());
  ASSERT_EQ(unknown->failures.size(), 1u);
  EXPECT_THAT(unknown->failures[0].error.message, HasSubstr("no MIG table for this model"));
}

TEST(MigLayout, TheLastSelectingEntryDecidesAndFiltersTakeShortIds) {
  LayoutFile file = Parse(R"(version: v1
mig-configs:
  c:
    - devices: all
      mig-enabled: false
    - device-filter: "0x20B2"
      devices: [1]
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
    - device-filter: ["0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
)");
  Result<NodePlan> plan = ResolveLayout(file, "c", Node(Get("A100-80GB"), 2));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->plans[0].action, GpuAction::kDisable);
  EXPECT_EQ(plan->plans[0].entry, 0);
  EXPECT_EQ(plan->plans[1].action, GpuAction::kEnable);
  EXPECT_EQ(plan->plans[1].entry, 1);
  EXPECT_EQ(plan->plans[1].instances, (std::vector<Instance>{{"7g.80gb", 0}}));
}

TEST(MigLayout, BadFilesAreRefusedNamingTheKeyAndLine) {
  EXPECT_THAT(ParseError("mig-configs:\n  a: [{devices: all, mig-enabled: false}]\n"),
              HasSubstr("missing 'version: v1'"));
  EXPECT_THAT(ParseError("version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n"),
              HasSubstr("bad.yaml:1: version: must be v1"));
  EXPECT_THAT(
      ParseError("version: v1\nmig-configs:\n  a:\n    - devices: some\n      mig-enabled: false\n"),
      HasSubstr("bad.yaml:4: mig-configs.a[0].devices: must be 'all' or a list of GPU indices, got 'some'"));
  EXPECT_THAT(ParseError("version: v1\nmig-configs:\n  a: [{devices: [0, x], mig-enabled: false}]\n"),
              HasSubstr("the element 'x'"));
  EXPECT_THAT(ParseError("version: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: yes}]\n"),
              HasSubstr("mig-configs.a[0].mig-enabled: must be true or false, got 'yes'"));
  EXPECT_THAT(ParseError("version: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: true}]\n"),
              HasSubstr("missing 'mig-devices'"));
  EXPECT_THAT(ParseError("version: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: false, "
                         "mig-devices: {1g.10gb: 1}}]\n"),
              HasSubstr("lists mig-devices although mig-enabled is false"));
  EXPECT_THAT(ParseError("version: v1\nmig-configs:\n  a: [{mig-enabled: false}]\n"),
              HasSubstr("missing required key 'devices'"));
  EXPECT_THAT(
      ParseError("version: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: false, colour: red}]\n"),
      HasSubstr("unknown key 'colour'"));
  EXPECT_THAT(ParseError("version: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: true, "
                         "mig-devices: {big: 1}}]\n"),
              HasSubstr("'big' is not a MIG profile name"));
  EXPECT_THAT(ParseError("version: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: true, "
                         "mig-devices: {1g.10gb: -1}}]\n"),
              HasSubstr("mig-devices.1g.10gb: must be a count from 0 to 64, got '-1'"));
  EXPECT_THAT(
      ParseError(
          "version: v1\nmig-configs:\n  a: [{device-filter: H100, devices: all, mig-enabled: false}]\n"),
      HasSubstr("must be a PCI device id like '0x20B010DE', got 'H100'"));
  EXPECT_THAT(ParseError("version: v1\nmig-configs:\n  a: []\n"),
              HasSubstr("must be a non-empty list of entries"));
  EXPECT_THAT(ParseError("version: v1\nmig-configs: {}\n"), HasSubstr("mig-configs: must be a mapping"));
  EXPECT_THAT(ParseError("version: v1\nextra: 1\nmig-configs:\n  a: [{devices: all, mig-enabled: false}]\n"),
              HasSubstr("extra: unknown key"));
  EXPECT_THAT(ParseError("version: v1\nmig-configs: [unclosed\n"), HasSubstr("not YAML"));
  EXPECT_THAT(ParseError("- just a list\n"), HasSubstr("must be a mapping"));
}

TEST(MigLayout, PackingKeepsTheCurrentInstancesSoReapplyingChangesNothing) {
  const Model& m = Get("A100-80GB");
  const std::vector<std::pair<std::string, int>> balanced = {{"1g.10gb", 2}, {"2g.20gb", 1}, {"3g.40gb", 1}};
  // Without a hint the packer tries the big profiles low first.
  Result<std::vector<Instance>> fresh = PackInstances(m, balanced);
  ASSERT_TRUE(fresh.ok());
  // (3g.40gb@0 leaves no pair of 1g starts beside a 2g, so the 3g goes to 4.)
  EXPECT_EQ(*fresh, (std::vector<Instance>{{"2g.20gb", 0}, {"1g.10gb", 2}, {"1g.10gb", 3}, {"3g.40gb", 4}}));
  EXPECT_TRUE(CheckInstances(m, *fresh).ok());
  // An arrangement made elsewhere (by nvidia-smi, or an earlier plan) is kept.
  const std::vector<Instance> current = {{"1g.10gb", 0}, {"1g.10gb", 1}, {"2g.20gb", 2}, {"3g.40gb", 4}};
  Result<std::vector<Instance>> again = PackInstances(m, balanced, current);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, current);
  std::vector<ExistingInstance> existing;
  for (const Instance& in : current) existing.push_back({in, true, 0});
  InstanceDiff diff = DiffInstances(m, *again, existing);
  EXPECT_EQ(diff.keep.size(), 4u);
  EXPECT_TRUE(diff.create.empty());
  EXPECT_TRUE(diff.destroy.empty());
  EXPECT_TRUE(diff.complete());
}

TEST(MigLayout, DiffNeverDestroysAnInstanceInUse) {
  const Model& m = Get("A100-80GB");
  // Now: 3g@0 (in use), 3g@4 (idle). Wanted: seven 1g.
  std::vector<ExistingInstance> existing = {{{"3g.40gb", 0}, true, 1}, {{"3g.40gb", 4}, false, 2}};
  std::vector<Instance> wanted;
  for (uint32_t s = 0; s < 7; ++s) wanted.push_back({"1g.10gb", s});
  InstanceDiff diff = DiffInstances(m, wanted, existing);
  ASSERT_EQ(diff.blocked.size(), 1u);
  EXPECT_EQ(diff.blocked[0].gpu_instance_id, 1u);
  ASSERT_EQ(diff.destroy.size(), 1u);
  EXPECT_EQ(diff.destroy[0].instance, (Instance{"3g.40gb", 4}));
  // 1g@4..6 can be made beside the blocked 3g@0; 1g@0..3 must wait for it.
  EXPECT_EQ(diff.create, (std::vector<Instance>{{"1g.10gb", 4}, {"1g.10gb", 5}, {"1g.10gb", 6}}));
  EXPECT_EQ(diff.deferred.size(), 4u);
  EXPECT_FALSE(diff.complete());
  // Once it is free, the rest follows.
  existing[0].in_use = false;
  InstanceDiff later = DiffInstances(m, wanted, existing);
  EXPECT_EQ(later.destroy.size(), 2u);
  EXPECT_EQ(later.create.size(), 7u);
  EXPECT_TRUE(later.complete());
}

}  // namespace
}  // namespace tessera::core::mig
