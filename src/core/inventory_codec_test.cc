#include "core/inventory_codec.h"
#include "core/testing.h"

#include <gtest/gtest.h>

#include <cctype>
#include <functional>
#include <string>

namespace tessera::core {
namespace {

constexpr const char* kA = "GPU-aaaaaaaa-0000-1111-2222-333344445555";
constexpr const char* kB = "GPU-bbbbbbbb-0000-1111-2222-333344445555";
constexpr const char* kC = "GPU-cccccccc-0000-1111-2222-333344445555";

NodeInventory Sample() {
  NodeInventory inv;
  inv.node = "node-a";
  inv.heartbeat = "2026-11-22T02:31:53Z";
  Gpu a = TestGpu(kA, "NVIDIA A100-SXM4-80GB", 81920, 10, /*numa_node=*/0);
  a.sm_count = 108;
  a.mig_capable = true;
  a.links = {{kB, LinkKind::kNvlink, 12}, {kC, LinkKind::kPcie, 1}};
  Gpu b = a;
  b.uuid = kB;
  b.index = 1;
  b.healthy = false;
  b.numa_node = -1;
  b.links = {{kA, LinkKind::kNvlink, 12}};
  Gpu c = TestGpu(kC, "Tesla T4", 15360, 4);
  c.index = 2;
  c.sm_count = 40;
  inv.gpus = {a, b, c};
  return inv;
}

TEST(InventoryCodecTest, RoundTrips) {
  ExpectRoundTrip(Sample(), EncodeInventory, DecodeInventory);
  NodeInventory empty;
  empty.node = "cpu-node";
  empty.heartbeat = "2026-11-22T02:31:53.5+01:00";
  ExpectRoundTrip(empty, EncodeInventory, DecodeInventory);
}

TEST(InventoryCodecTest, DecodesTheAgreedFormat) {
  auto inv = DecodeInventory(R"({"version":1,"node":"node-a","heartbeat":"2026-11-22T02:31:53Z","gpus":[
      {"uuid":"GPU-aaaaaaaa-0000-1111-2222-333344445555","index":0,"model":"NVIDIA H100","memoryMiB":81559,
       "smCount":132,"numaNode":1,"healthy":true,"slots":8,"migCapable":true,"links":[]}],"later":"ignored"})");
  ASSERT_TRUE(inv.ok()) << inv.error().message;
  ASSERT_EQ(inv->gpus.size(), 1u);
  EXPECT_EQ(inv->gpus[0].model, "NVIDIA H100");
  EXPECT_EQ(inv->gpus[0].memory_mib, 81559);
  EXPECT_EQ(inv->gpus[0].numa_node, 1);
  EXPECT_EQ(inv->gpus[0].slots, 8);
  EXPECT_EQ(inv->gpus[0].cores, 100) << "an inventory without \"cores\" offers 100 %";
}

TEST(InventoryCodecTest, ComputeOfferedRoundTripsAndIsChecked) {
  NodeInventory inv = Sample();
  inv.gpus[0].cores = 250;
  auto back = DecodeInventory(*EncodeInventory(inv));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->gpus[0].cores, 250);
  inv.gpus[0].cores = 0;
  auto refused = EncodeInventory(inv);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("\"cores\" is 0; expected 1 to 10000"), std::string::npos)
      << refused.error().message;
  for (const char* bad : {"0", "10001", "\"100\"", "1.5"}) {
    nlohmann::json j = *InventoryToJson(Sample());
    j["gpus"][0]["cores"] = nlohmann::json::parse(bad);
    EXPECT_FALSE(DecodeInventory(j.dump()).ok()) << bad;
  }
}

TEST(InventoryCodecTest, HeldByIsOptionalRoundTripsAndIsChecked) {
  NodeInventory inv = Sample();
  EXPECT_FALSE(InventoryToJson(inv)->at("gpus")[0].contains("heldBy")) << "absent while nothing holds it";
  inv.gpus[2].held_by = "ml/legacy-job";
  auto back = DecodeInventory(*EncodeInventory(inv));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->gpus[2].held_by, "ml/legacy-job");
  EXPECT_FALSE(back->gpus[2].usable());
  EXPECT_TRUE(back->gpus[0].usable());
  for (const char* bad : {"legacy-job", "/x", "ml/", ""}) {
    inv.gpus[2].held_by = bad;
    if (*bad == '\0') {
      EXPECT_TRUE(EncodeInventory(inv).ok());
      continue;
    }
    auto refused = EncodeInventory(inv);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.error().message.find("\"heldBy\""), std::string::npos) << refused.error().message;
  }
  nlohmann::json j = *InventoryToJson(Sample());
  j["gpus"][0]["heldBy"] = 7;
  EXPECT_FALSE(DecodeInventory(j.dump()).ok());
}

// The sample with GPU 0 in dynamic MIG mode holding two instances, one in use.
NodeInventory MigSample() {
  NodeInventory inv = Sample();
  Gpu& a = inv.gpus[0];
  a.mode = SharingMode::kMigDynamic;
  a.slots = 0;
  a.mig_devices = {
      {"MIG-11111111-2222-3333-4444-555555555555", "1g.10gb", 6, 1, 9728, 14, true, ""},
      {"MIG-66666666-2222-3333-4444-555555555555", "3g.40gb", 0, 4, 40192, 42, true, "ml/train-0/main"}};
  inv.gpus[1].mode = SharingMode::kMigStatic;  // in MIG mode with no instance yet
  return inv;
}

TEST(InventoryCodecTest, MigDevicesRoundTripUnderTheirParent) {
  NodeInventory inv = MigSample();
  const nlohmann::json j = *InventoryToJson(inv);
  EXPECT_FALSE(j["gpus"][2].contains("mig")) << "absent for a GPU not in MIG mode";
  EXPECT_EQ(j["gpus"][0]["mig"]["mode"], "dynamic");
  EXPECT_EQ(j["gpus"][1]["mig"]["mode"], "static");
  EXPECT_FALSE(j["gpus"][0]["mig"]["devices"][0].contains("usedBy")) << "absent while free";
  EXPECT_EQ(j["gpus"][0]["mig"]["devices"][1]["usedBy"], "ml/train-0/main");
  auto back = DecodeInventory(j.dump());
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, inv);
  EXPECT_FALSE(back->gpus[0].usable()) << "a GPU in MIG mode takes no vGPU slices";
  EXPECT_TRUE(back->gpus[2].usable());
}

TEST(InventoryCodecTest, AnInventoryWithoutMigReadsAsNotInMigMode) {
  auto inv = DecodeInventory(*EncodeInventory(Sample()));
  ASSERT_TRUE(inv.ok()) << inv.error().message;
  for (const Gpu& g : inv->gpus) {
    EXPECT_EQ(g.mode, SharingMode::kVgpu);
    EXPECT_TRUE(g.mig_devices.empty());
  }
}

// The sample with GPU 0 time-sliced into 4 replicas, GPU 1 exclusive and
// GPU 2 in MPS mode with shares sized by the scheduler.
NodeInventory ModesSample() {
  NodeInventory inv = Sample();
  inv.gpus[0].mode = SharingMode::kTimeslice;
  inv.gpus[0].replicas = 4;
  inv.gpus[0].slots = 0;
  inv.gpus[1].mode = SharingMode::kExclusive;
  inv.gpus[1].slots = 0;
  inv.gpus[2].mode = SharingMode::kMps;
  return inv;
}

TEST(InventoryCodecTest, EveryGpuCarriesItsModeAndReplicas) {
  const NodeInventory inv = ModesSample();
  const nlohmann::json j = *InventoryToJson(inv);
  EXPECT_EQ(j["gpus"][0]["mode"], "timeslice");
  EXPECT_EQ(j["gpus"][0]["replicas"], 4);
  EXPECT_EQ(j["gpus"][1]["mode"], "exclusive");
  EXPECT_FALSE(j["gpus"][1].contains("replicas")) << "only timeslice and mps GPUs advertise replicas";
  EXPECT_EQ(j["gpus"][2]["mode"], "mps");
  EXPECT_EQ(j["gpus"][2]["replicas"], 0);
  EXPECT_EQ(*InventoryToJson(Sample()), *InventoryToJson(Sample()));
  EXPECT_EQ((*InventoryToJson(Sample()))["gpus"][2]["mode"], "vgpu");
  ExpectRoundTrip(inv, EncodeInventory, DecodeInventory);
  ExpectRoundTrip(MigSample(), EncodeInventory, DecodeInventory);
  const nlohmann::json mig = *InventoryToJson(MigSample());
  EXPECT_EQ(mig["gpus"][0]["mode"], "mig-dynamic");
  EXPECT_EQ(mig["gpus"][0]["mig"]["mode"], "dynamic") << "kept for readers from before \"mode\"";
  EXPECT_EQ(mig["gpus"][1]["mode"], "mig");
  EXPECT_EQ(mig["gpus"][1]["mig"]["mode"], "static");
}

TEST(InventoryCodecTest, ReadsInventoriesOfAgentsFromBeforeTheMode) {
  // What an older agent wrote: no "mode", no "replicas"; MIG only as
  // "mig": {"mode": ...}.
  nlohmann::json j = *InventoryToJson(MigSample());
  for (nlohmann::json& g : j["gpus"]) {
    g.erase("mode");
    g.erase("replicas");
  }
  auto back = DecodeInventory(j.dump());
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->gpus[0].mode, SharingMode::kMigDynamic);
  EXPECT_EQ(back->gpus[1].mode, SharingMode::kMigStatic);
  EXPECT_EQ(back->gpus[2].mode, SharingMode::kVgpu);
  EXPECT_EQ(back->gpus[0].mig_devices.size(), 2u);
  EXPECT_EQ(*back, MigSample());
}

TEST(InventoryCodecTest, DecodeRefusesBadModes) {
  auto mutated = [](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json j = *InventoryToJson(MigSample());
    change(j);
    return j.dump();
  };
  const std::pair<std::string, const char*> cases[] = {
      {mutated([](nlohmann::json& j) { j["gpus"][2]["mode"] = "shared"; }),
       "\"mode\" is \"shared\"; expected one of vgpu, exclusive, timeslice, mps, mig or mig-dynamic"},
      {mutated([](nlohmann::json& j) { j["gpus"][2]["mode"] = 3; }), "\"mode\""},
      {mutated([](nlohmann::json& j) { j["gpus"][2]["mode"] = "mig"; }), "has no \"mig\" object"},
      {mutated([](nlohmann::json& j) { j["gpus"][0]["mode"] = "mig"; }), "they must agree"},
      {mutated([](nlohmann::json& j) { j["gpus"][0]["mode"] = "vgpu"; }), "they must agree"},
      {mutated([](nlohmann::json& j) { j["gpus"][2]["mode"] = "timeslice"; }),
       "\"replicas\" is 0; expected 1 (a time-sliced GPU advertises replicas)"},
      {mutated([](nlohmann::json& j) {
         j["gpus"][2]["mode"] = "timeslice";
         j["gpus"][2]["replicas"] = -2;
       }),
       "\"replicas\" is -2"},
      {mutated([](nlohmann::json& j) { j["gpus"][2]["replicas"] = 2; }),
       "\"replicas\" is 2 but the GPU is in vgpu mode"},
      {mutated([](nlohmann::json& j) {
         j["gpus"][2]["mode"] = "mps";
         j["gpus"][2]["replicas"] = "4";
       }),
       "\"replicas\""},
  };
  for (const auto& [text, says] : cases) {
    auto refused = DecodeInventory(text);
    ASSERT_FALSE(refused.ok()) << text;
    EXPECT_NE(refused.error().message.find(says), std::string::npos) << refused.error().message;
  }
}

TEST(InventoryCodecTest, EncodeRefusesReplicasOutsideTheirMode) {
  NodeInventory inv = ModesSample();
  inv.gpus[0].replicas = 0;
  EXPECT_FALSE(EncodeInventory(inv).ok()) << "a time-sliced GPU advertises at least one replica";
  inv = ModesSample();
  inv.gpus[1].replicas = 2;
  EXPECT_FALSE(EncodeInventory(inv).ok()) << "an exclusive GPU has no replicas";
  inv = ModesSample();
  inv.gpus[2].replicas = kMaxReplicas + 1;
  EXPECT_FALSE(EncodeInventory(inv).ok());
  inv = ModesSample();
  inv.gpus[2].mode = static_cast<SharingMode>(17);
  auto refused = EncodeInventory(inv);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("\"mode\" is not one of"), std::string::npos)
      << refused.error().message;
}

TEST(InventoryCodecTest, EncodeRefusesInvalidMigDevices) {
  struct Case {
    const char* name;
    std::function<void(NodeInventory&)> change;
    const char* says;
  };
  const Case cases[] = {
      {"not capable", [](NodeInventory& i) { i.gpus[0].mig_capable = false; }, "\"migCapable\" is false"},
      {"devices without mode",
       [](NodeInventory& i) {
         i.gpus[2].mig_devices = i.gpus[0].mig_devices;
         i.gpus[0].mig_devices.clear();
       },
       "not in MIG mode"},
      {"uuid", [](NodeInventory& i) { i.gpus[0].mig_devices[0].uuid = "GPU-1"; }, "\"MIG-...\""},
      {"duplicate uuid",
       [](NodeInventory& i) { i.gpus[0].mig_devices[1].uuid = i.gpus[0].mig_devices[0].uuid; },
       "more than once"},
      {"profile", [](NodeInventory& i) { i.gpus[0].mig_devices[0].profile = ""; }, "\"profile\""},
      {"start", [](NodeInventory& i) { i.gpus[0].mig_devices[0].start = 8; }, "\"start\" is 8"},
      {"size past the end", [](NodeInventory& i) { i.gpus[0].mig_devices[0].size = 3; }, "\"size\" is 3"},
      {"overlap", [](NodeInventory& i) { i.gpus[0].mig_devices[0].start = 3; }, "overlap"},
      {"memory", [](NodeInventory& i) { i.gpus[0].mig_devices[0].memory_mib = 90000; }, "\"memoryMiB\""},
      {"used by", [](NodeInventory& i) { i.gpus[0].mig_devices[0].used_by = "ml/pod"; }, "\"usedBy\""},
  };
  for (const Case& c : cases) {
    NodeInventory inv = MigSample();
    c.change(inv);
    auto refused = EncodeInventory(inv);
    ASSERT_FALSE(refused.ok()) << c.name;
    EXPECT_NE(refused.error().message.find(c.says), std::string::npos)
        << c.name << ": " << refused.error().message;
  }
}

TEST(InventoryCodecTest, DecodeRefusesMalformedMig) {
  auto mutated = [](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json j = *InventoryToJson(MigSample());
    change(j);
    return j.dump();
  };
  const std::pair<std::string, const char*> cases[] = {
      {mutated([](nlohmann::json& j) { j["gpus"][0]["mig"] = "dynamic"; }), "expected an object"},
      {mutated([](nlohmann::json& j) { j["gpus"][0]["mig"]["mode"] = "none"; }), "expected \"static\""},
      {mutated([](nlohmann::json& j) { j["gpus"][0]["mig"].erase("devices"); }), "\"devices\" is missing"},
      {mutated([](nlohmann::json& j) { j["gpus"][0]["mig"]["devices"][0].erase("start"); }),
       "\"start\" is missing"},
      {mutated([](nlohmann::json& j) { j["gpus"][0]["mig"]["devices"][0]["size"] = 0; }), "\"size\""},
      {mutated([](nlohmann::json& j) { j["gpus"][0]["mig"]["devices"][0]["usedBy"] = 3; }), "\"usedBy\""},
      {mutated([](nlohmann::json& j) { j["gpus"][0]["mig"]["devices"][0]["healthy"] = "yes"; }),
       "\"healthy\""},
  };
  for (const auto& [text, says] : cases) {
    auto refused = DecodeInventory(text);
    ASSERT_FALSE(refused.ok()) << text;
    EXPECT_NE(refused.error().message.find(says), std::string::npos) << refused.error().message;
  }
  ExpectEveryTruncationRefused(*EncodeInventory(MigSample()), DecodeInventory);
}

// The sample's JSON with one change applied, as text.
std::string Mutated(const std::function<void(nlohmann::json&)>& change) {
  nlohmann::json j = *InventoryToJson(Sample());
  change(j);
  return j.dump();
}

class InventoryCorruptTest : public testing::TestWithParam<CorruptCase> {};

TEST_P(InventoryCorruptTest, RejectsWithReason) {
  ExpectRefused(GetParam(), "inventory", DecodeInventory);
}

using J = nlohmann::json;

INSTANTIATE_TEST_SUITE_P(
    Payloads, InventoryCorruptTest,
    testing::Values(
        CorruptCase{"empty", "", "not valid JSON"}, CorruptCase{"not object", "[]", "expected a JSON object"},
        CorruptCase{"version 0", Mutated([](J& j) { j["version"] = 0; }), "unsupported version 0"},
        CorruptCase{"no version", Mutated([](J& j) { j.erase("version"); }), "\"version\" is missing"},
        CorruptCase{"node missing", Mutated([](J& j) { j.erase("node"); }), "\"node\" is missing"},
        CorruptCase{"node empty", Mutated([](J& j) { j["node"] = ""; }), "\"node\" is empty"},
        CorruptCase{"heartbeat missing", Mutated([](J& j) { j.erase("heartbeat"); }),
                    "\"heartbeat\" is missing"},
        CorruptCase{"heartbeat not rfc3339", Mutated([](J& j) { j["heartbeat"] = "yesterday"; }),
                    "\"heartbeat\" is \"yesterday\"; expected an RFC 3339 time"},
        CorruptCase{"heartbeat number", Mutated([](J& j) { j["heartbeat"] = 1763778713; }),
                    "expected a string"},
        CorruptCase{"gpus missing", Mutated([](J& j) { j.erase("gpus"); }), "\"gpus\" is missing"},
        CorruptCase{"gpus object", Mutated([](J& j) { j["gpus"] = J::object(); }), "expected an array"},
        CorruptCase{"gpu not object", Mutated([](J& j) { j["gpus"][1] = "x"; }),
                    "gpus[1]: expected an object"},
        CorruptCase{"uuid missing", Mutated([](J& j) { j["gpus"][0].erase("uuid"); }), "\"uuid\" is missing"},
        CorruptCase{"uuid empty", Mutated([](J& j) { j["gpus"][0]["uuid"] = ""; }), "uuid is empty"},
        CorruptCase{"uuid malformed", Mutated([](J& j) { j["gpus"][2]["uuid"] = "GPU-2"; }),
                    "gpus[2] (GPU-2): uuid \"GPU-2\" is malformed"},
        CorruptCase{"uuid duplicate", Mutated([](J& j) {
                      j["gpus"][2]["uuid"] = j["gpus"][1]["uuid"];
                      j["gpus"][0]["links"] = J::array();
                    }),
                    "uuid appears more than once"},
        CorruptCase{"index duplicate", Mutated([](J& j) { j["gpus"][2]["index"] = 0; }),
                    "\"index\" 0 is used by another GPU"},
        CorruptCase{"index negative", Mutated([](J& j) { j["gpus"][0]["index"] = -1; }), "\"index\" is -1"},
        CorruptCase{"model empty", Mutated([](J& j) { j["gpus"][0]["model"] = ""; }), "\"model\" is empty"},
        CorruptCase{"model number", Mutated([](J& j) { j["gpus"][0]["model"] = 100; }),
                    "\"model\" is an integer"},
        CorruptCase{"memory negative", Mutated([](J& j) { j["gpus"][0]["memoryMiB"] = -81920; }),
                    "(GPU-aaaaaaaa-0000-1111-2222-333344445555): \"memoryMiB\" is -81920"},
        CorruptCase{"memory string", Mutated([](J& j) { j["gpus"][0]["memoryMiB"] = "80Gi"; }),
                    "\"memoryMiB\" is string"},
        CorruptCase{"memory float", Mutated([](J& j) { j["gpus"][0]["memoryMiB"] = 1.5; }), "fractional"},
        CorruptCase{"sm negative", Mutated([](J& j) { j["gpus"][0]["smCount"] = -1; }), "\"smCount\" is -1"},
        CorruptCase{"numa -2", Mutated([](J& j) { j["gpus"][0]["numaNode"] = -2; }), "\"numaNode\" is -2"},
        CorruptCase{"healthy string", Mutated([](J& j) { j["gpus"][0]["healthy"] = "true"; }),
                    "\"healthy\" is string; expected true or false"},
        CorruptCase{"healthy missing", Mutated([](J& j) { j["gpus"][0].erase("healthy"); }),
                    "\"healthy\" is missing"},
        CorruptCase{"slots negative", Mutated([](J& j) { j["gpus"][0]["slots"] = -1; }), "\"slots\" is -1"},
        CorruptCase{"mig missing", Mutated([](J& j) { j["gpus"][0].erase("migCapable"); }),
                    "\"migCapable\" is missing"},
        CorruptCase{"links missing", Mutated([](J& j) { j["gpus"][2].erase("links"); }),
                    "\"links\" is missing"},
        CorruptCase{"link not object", Mutated([](J& j) { j["gpus"][0]["links"][0] = 1; }),
                    "links[0]: expected an object"},
        CorruptCase{"link kind", Mutated([](J& j) { j["gpus"][0]["links"][0]["kind"] = "infiniband"; }),
                    "\"kind\" is \"infiniband\"; expected \"nvlink\" or \"pcie\""},
        CorruptCase{"link lanes 0", Mutated([](J& j) { j["gpus"][0]["links"][0]["lanes"] = 0; }),
                    "\"lanes\" is 0"},
        CorruptCase{"link peer malformed", Mutated([](J& j) { j["gpus"][0]["links"][0]["peer"] = "1"; }),
                    "links[0]: peer: uuid \"1\" is malformed"},
        CorruptCase{"link to self", Mutated([](J& j) { j["gpus"][0]["links"][0]["peer"] = kA; }),
                    "is the GPU itself"},
        CorruptCase{"link to unknown", Mutated([](J& j) {
                      j["gpus"][0]["links"][0]["peer"] = "GPU-dddddddd-0000-1111-2222-333344445555";
                    }),
                    "is not a GPU of this inventory"},
        CorruptCase{"link duplicate",
                    Mutated([](J& j) { j["gpus"][0]["links"][1] = j["gpus"][0]["links"][0]; }),
                    "listed twice"}),
    CorruptCaseName);

TEST(InventoryCodecTest, EveryTruncationIsRejected) {
  ExpectEveryTruncationRefused(*EncodeInventory(Sample()), DecodeInventory);
}

TEST(InventoryCodecTest, CorruptedBytesNeverThrow) {
  ExpectCorruptedBytesSafe(*EncodeInventory(Sample()), {'\0', '"', ']', '-', '1', '\x80'}, DecodeInventory,
                           ValidateInventory);
}

TEST(InventoryCodecTest, EncodeRefusesInvalidInventories) {
  NodeInventory inv = Sample();
  inv.heartbeat = "now";
  EXPECT_FALSE(EncodeInventory(inv).ok());
  inv = Sample();
  inv.gpus[0].memory_mib = -1;
  auto text = EncodeInventory(inv);
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.error().message.find("\"memoryMiB\" is -1"), std::string::npos) << text.error().message;
  inv = Sample();
  inv.gpus[0].links[0].lanes = 0;
  EXPECT_FALSE(EncodeInventory(inv).ok());
}

}  // namespace
}  // namespace tessera::core
