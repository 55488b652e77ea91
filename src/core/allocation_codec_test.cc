#include "core/allocation_codec.h"
#include "core/codec.h"
#include "core/testing.h"

#include <gtest/gtest.h>

#include <cctype>
#include <functional>
#include <string>
#include <vector>

namespace tessera::core {
namespace {

using nlohmann::json;

constexpr const char* kUuidA = "GPU-1a2b3c4d-0000-1111-2222-333344445555";
constexpr const char* kUuidB = "GPU-AAAAAAAA-0000-1111-2222-333344445555";
constexpr const char* kMig = "MIG-9f8e7d6c-0000-1111-2222-333344445555";

PodAllocation Sample() {
  PodAllocation a;
  a.node = "node-a";
  a.containers.push_back({"app", {{kUuidA, 3000, 30}, {kUuidB, 0, 100}}});
  a.containers.push_back({"sidecar", {{kUuidA, 512, 0}}});
  a.containers.push_back({"mig", {{kMig, 10240, 0}}});
  a.containers.push_back({"warmup", {{kUuidB, 2048, 50}}, /*init=*/true});
  return a;
}

TEST(AllocationCodecTest, RoundTripsThroughTextAndJson) {
  PodAllocation a = Sample();
  ExpectRoundTrip(a, EncodeAllocation, DecodeAllocation);

  auto j = AllocationToJson(a);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["version"], 1);
  EXPECT_EQ((*j)["containers"][0]["devices"][0]["memoryMiB"], 3000);
  EXPECT_EQ(*AllocationFromJson(*j), a);
  // "init" is written only for init containers.
  EXPECT_FALSE((*j)["containers"][0].contains("init"));
  EXPECT_EQ((*j)["containers"][3]["init"], true);
}

TEST(AllocationCodecTest, DecodesTheAgreedFormat) {
  auto a = DecodeAllocation(R"({"version": 1, "node": "node-a",
      "containers": [ {"name": "app", "devices": [ {"uuid": "GPU-1a2b3c4d-0000-1111-2222-333344445555",
                                                   "memoryMiB": 3000, "cores": 30} ]} ]})");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->node, "node-a");
  ASSERT_EQ(a->containers.size(), 1u);
  EXPECT_EQ(a->containers[0].container, "app");
  EXPECT_EQ(a->containers[0].devices[0], (DeviceSlice{kUuidA, 3000, 30}));
}

TEST(AllocationCodecTest, DynamicMigInstancesRoundTripAndAreChecked) {
  PodAllocation a;
  a.node = "node-a";
  DeviceSlice mig{kUuidA, 9728, 0};
  mig.mig_profile = "1g.10gb";
  mig.mig_start = 6;
  a.containers.push_back({"app", {mig}});
  a.containers.push_back({"side", {{kUuidB, 1000, 10}}});
  auto j = AllocationToJson(a);
  ASSERT_TRUE(j.ok()) << j.error().message;
  EXPECT_EQ((*j)["containers"][0]["devices"][0]["mig"], (json{{"profile", "1g.10gb"}, {"start", 6}}));
  EXPECT_FALSE((*j)["containers"][1]["devices"][0].contains("mig")) << "a vGPU slice keeps the agreed shape";
  auto back = DecodeAllocation(j->dump());
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, a);

  struct Case {
    const char* name;
    std::function<void(DeviceSlice&)> change;
    const char* says;
  };
  const Case encode_cases[] = {
      {"parent is a MIG device", [](DeviceSlice& d) { d.uuid = kMig; }, "names its parent GPU"},
      {"start", [](DeviceSlice& d) { d.mig_start = 8; }, "\"mig.start\" is 8"},
      {"profile too long", [](DeviceSlice& d) { d.mig_profile = std::string(40, 'g'); }, "\"mig.profile\""},
      {"start without profile",
       [](DeviceSlice& d) {
         d.mig_profile.clear();
         d.mig_start = 2;
       },
       "without a profile"},
  };
  for (const Case& c : encode_cases) {
    PodAllocation bad = a;
    c.change(bad.containers[0].devices[0]);
    auto refused = EncodeAllocation(bad);
    ASSERT_FALSE(refused.ok()) << c.name;
    EXPECT_NE(refused.error().message.find(c.says), std::string::npos)
        << c.name << ": " << refused.error().message;
  }
  const std::pair<json, const char*> decode_cases[] = {
      {json("1g.10gb"), "expected an object"},
      {json{{"start", 6}}, "\"profile\" is missing"},
      {json{{"profile", ""}, {"start", 6}}, "\"profile\" is empty"},
      {json{{"profile", "1g.10gb"}}, "\"start\" is missing"},
      {json{{"profile", "1g.10gb"}, {"start", -1}}, "\"start\""},
      {json{{"profile", "1g.10gb"}, {"start", "6"}}, "\"start\""},
  };
  for (const auto& [mig_member, says] : decode_cases) {
    json bad = *j;
    bad["containers"][0]["devices"][0]["mig"] = mig_member;
    auto refused = DecodeAllocation(bad.dump());
    ASSERT_FALSE(refused.ok()) << bad.dump();
    EXPECT_NE(refused.error().message.find(says), std::string::npos) << refused.error().message;
  }
}

TEST(AllocationCodecTest, IgnoresUnknownMembersForForwardCompatibility) {
  auto a = DecodeAllocation(R"({"version":1,"node":"n","future":{"x":1},
      "containers":[{"name":"app","extra":true,"devices":[{"uuid":"GPU-1a2b3c4d-0000-1111-2222-333344445555",
      "memoryMiB":1,"cores":0,"hint":"x"}]}]})");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->containers[0].devices[0].memory_mib, 1);
}

TEST(AllocationCodecTest, SelectsTheContainerEntry) {
  PodAllocation a = Sample();
  auto sidecar = SelectContainerAllocation(a, "sidecar");
  ASSERT_TRUE(sidecar.ok());
  EXPECT_EQ(sidecar->devices.size(), 1u);
  auto missing = SelectContainerAllocation(a, "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("no entry for container \"nope\""), std::string::npos);
  EXPECT_FALSE(SelectContainerAllocation(a, "").ok());

  PodAllocation one;
  one.node = "n";
  one.containers.push_back({"only", {{kUuidA, 1, 1}}});
  auto only = SelectContainerAllocation(one, "");
  ASSERT_TRUE(only.ok());
  EXPECT_EQ(only->container, "only");
  EXPECT_FALSE(SelectContainerAllocation(one, "other").ok());
}

class AllocationCorruptTest : public testing::TestWithParam<CorruptCase> {};

TEST_P(AllocationCorruptTest, RejectsWithReason) {
  ExpectRefused(GetParam(), "allocation", DecodeAllocation);
}

std::string Doc(const std::string& device) {
  return R"({"version":1,"node":"n","containers":[{"name":"app","devices":[)" + device + "]}]}";
}
const std::string kDev = R"({"uuid":"GPU-1a2b3c4d-0000-1111-2222-333344445555","memoryMiB":1,"cores":1})";

INSTANTIATE_TEST_SUITE_P(
    Payloads, AllocationCorruptTest,
    testing::Values(
        CorruptCase{"empty text", "", "not valid JSON"},
        CorruptCase{"truncated", Doc(kDev).substr(0, 40), "not valid JSON"},
        CorruptCase{"trailing garbage", Doc(kDev) + "x", "not valid JSON"},
        CorruptCase{"array", "[1,2]", "expected a JSON object"},
        CorruptCase{"string", "\"x\"", "expected a JSON object"},
        CorruptCase{"null", "null", "expected a JSON object"},
        CorruptCase{"no version", R"({"node":"n","containers":[]})", "\"version\" is missing"},
        CorruptCase{"version 2", R"({"version":2,"node":"n","containers":[]})", "unsupported version 2"},
        CorruptCase{"version string", R"({"version":"1","node":"n","containers":[]})",
                    "\"version\" is string"},
        CorruptCase{"version float", R"({"version":1.0,"node":"n","containers":[]})",
                    "\"version\" is a fractional"},
        CorruptCase{"no node", R"({"version":1,"containers":[]})", "\"node\" is missing"},
        CorruptCase{"node number", R"({"version":1,"node":5,"containers":[]})", "\"node\" is an integer"},
        CorruptCase{"empty node", R"({"version":1,"node":"","containers":[{"name":"a","devices":[]}]})",
                    "\"node\" is empty"},
        CorruptCase{"no containers", R"({"version":1,"node":"n"})", "\"containers\" is missing"},
        CorruptCase{"containers object", R"({"version":1,"node":"n","containers":{}})", "expected an array"},
        CorruptCase{"containers empty", R"({"version":1,"node":"n","containers":[]})",
                    "\"containers\" is empty"},
        CorruptCase{"container not object", R"({"version":1,"node":"n","containers":[3]})", "containers[0]"},
        CorruptCase{"container no name", R"({"version":1,"node":"n","containers":[{"devices":[]}]})",
                    "\"name\" is missing"},
        CorruptCase{"container empty name",
                    R"({"version":1,"node":"n","containers":[{"name":"","devices":[)" + kDev + "]}]}",
                    "\"name\" is empty"},
        CorruptCase{"no devices", R"({"version":1,"node":"n","containers":[{"name":"app"}]})",
                    "(\"app\"): \"devices\" is missing"},
        CorruptCase{"devices empty", Doc(""), "\"devices\" is empty"},
        CorruptCase{"duplicate container",
                    R"({"version":1,"node":"n","containers":[{"name":"a","devices":[)" + kDev +
                        R"(]},{"name":"a","devices":[)" + kDev + "]}]}",
                    "appears more than once"},
        CorruptCase{
            "init not bool",
            R"({"version":1,"node":"n","containers":[{"name":"a","init":1,"devices":[)" + kDev + "]}]}",
            "(\"a\"): \"init\" is number; expected true or false"},
        CorruptCase{"device not object", Doc("7"), "devices[0]: expected an object"},
        CorruptCase{"no uuid", Doc(R"({"memoryMiB":1,"cores":1})"), "\"uuid\" is missing"},
        CorruptCase{"empty uuid", Doc(R"({"uuid":"","memoryMiB":1,"cores":1})"), "uuid is empty"},
        CorruptCase{"malformed uuid", Doc(R"({"uuid":"GPU-xyz","memoryMiB":1,"cores":1})"),
                    "uuid \"GPU-xyz\" is malformed"},
        CorruptCase{"ordinal not uuid", Doc(R"({"uuid":"0","memoryMiB":1,"cores":1})"), "is malformed"},
        CorruptCase{"uuid short group",
                    Doc(R"({"uuid":"GPU-1a2b3c4-0000-1111-2222-333344445555","memoryMiB":1,"cores":1})"),
                    "is malformed"},
        CorruptCase{"duplicate uuid", Doc(kDev + "," + kDev), "appears twice in this container"},
        CorruptCase{"negative memory",
                    Doc(R"({"uuid":"GPU-1a2b3c4d-0000-1111-2222-333344445555","memoryMiB":-1,"cores":1})"),
                    "(\"app\").devices[0]: \"memoryMiB\" is -1"},
        CorruptCase{
            "memory string",
            Doc(R"({"uuid":"GPU-1a2b3c4d-0000-1111-2222-333344445555","memoryMiB":"3000","cores":1})"),
            "\"memoryMiB\" is string"},
        CorruptCase{
            "memory float",
            Doc(R"({"uuid":"GPU-1a2b3c4d-0000-1111-2222-333344445555","memoryMiB":3000.5,"cores":1})"),
            "\"memoryMiB\" is a fractional number"},
        CorruptCase{
            "memory huge",
            Doc(R"({"uuid":"GPU-1a2b3c4d-0000-1111-2222-333344445555","memoryMiB":18446744073709551615,"cores":1})"),
            "\"memoryMiB\" is 18446744073709551615"},
        CorruptCase{"no cores", Doc(R"({"uuid":"GPU-1a2b3c4d-0000-1111-2222-333344445555","memoryMiB":1})"),
                    "\"cores\" is missing"},
        CorruptCase{"cores 101",
                    Doc(R"({"uuid":"GPU-1a2b3c4d-0000-1111-2222-333344445555","memoryMiB":1,"cores":101})"),
                    "\"cores\" is 101; expected an integer from 0 to 100"},
        CorruptCase{"cores negative",
                    Doc(R"({"uuid":"GPU-1a2b3c4d-0000-1111-2222-333344445555","memoryMiB":1,"cores":-5})"),
                    "\"cores\" is -5"},
        CorruptCase{"cores bool",
                    Doc(R"({"uuid":"GPU-1a2b3c4d-0000-1111-2222-333344445555","memoryMiB":1,"cores":true})"),
                    "\"cores\" is boolean"}),
    CorruptCaseName);

TEST(AllocationCodecTest, EveryTruncationIsRejectedWithoutThrowing) {
  ExpectEveryTruncationRefused(*EncodeAllocation(Sample()), DecodeAllocation);
}

TEST(AllocationCodecTest, CorruptedBytesNeverThrow) {
  ExpectCorruptedBytesSafe(*EncodeAllocation(Sample()), {'\0', '"', '}', '-', '9', '\xff'}, DecodeAllocation,
                           ValidateAllocation);
}

TEST(AllocationCodecTest, EncodeRefusesInvalidAllocations) {
  PodAllocation a = Sample();
  a.containers[0].devices[0].cores = 150;
  auto text = EncodeAllocation(a);
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.error().message.find("\"cores\" is 150"), std::string::npos) << text.error().message;

  a = Sample();
  a.containers[1].devices[0].uuid = "GPU-0";
  EXPECT_FALSE(EncodeAllocation(a).ok());
  a = Sample();
  a.node.clear();
  EXPECT_FALSE(EncodeAllocation(a).ok());
}

TEST(AllocationCodecTest, RejectsOversizedText) {
  std::string big(kMaxPayloadBytes + 1, ' ');
  auto a = DecodeAllocation(big);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("bytes; at most"), std::string::npos) << a.error().message;
}

}  // namespace
}  // namespace tessera::core

namespace tessera::core {
namespace {

TEST(AllocationCodecMpsTest, AnMpsShareCarriesItsFlagBesideMemoryAndCores) {
  PodAllocation a;
  a.node = "node-a";
  DeviceSlice share{"GPU-1a2b3c4d-0000-1111-2222-333344445555", 8192, 50};
  share.mps = true;
  a.containers.push_back({"app", {share}});
  a.containers.push_back({"side", {{"GPU-AAAAAAAA-0000-1111-2222-333344445555", 1000, 10}}});
  auto j = AllocationToJson(a);
  ASSERT_TRUE(j.ok()) << j.error().message;
  EXPECT_EQ((*j)["containers"][0]["devices"][0],
            (json{{"uuid", share.uuid}, {"memoryMiB", 8192}, {"cores", 50}, {"mps", true}}));
  EXPECT_FALSE((*j)["containers"][1]["devices"][0].contains("mps")) << "a vGPU slice keeps the agreed shape";
  ExpectRoundTrip(a, EncodeAllocation, DecodeAllocation);
  // What a writer from before "mps" wrote reads as a vGPU slice.
  json old = *j;
  old["containers"][0]["devices"][0].erase("mps");
  auto back = DecodeAllocation(old.dump());
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_FALSE(back->containers[0].devices[0].mps);
  json explicit_false = *j;
  explicit_false["containers"][0]["devices"][0]["mps"] = false;
  ASSERT_TRUE(DecodeAllocation(explicit_false.dump()).ok());
}

TEST(AllocationCodecMpsTest, AnMpsShareOutsideItsRangesIsRefused) {
  struct Case {
    const char* name;
    std::function<void(DeviceSlice&)> change;
    const char* says;
  };
  const Case cases[] = {
      {"no memory", [](DeviceSlice& d) { d.memory_mib = 0; }, "\"memoryMiB\" is 0; expected 1"},
      {"no cores", [](DeviceSlice& d) { d.cores = 0; }, "\"cores\" is 0; expected 1"},
      {"mig too",
       [](DeviceSlice& d) {
         d.mig_profile = "1g.10gb";
         d.mig_start = 6;
       },
       "both \"mps\" and \"mig\""},
      {"a MIG device", [](DeviceSlice& d) { d.uuid = "MIG-9f8e7d6c-0000-1111-2222-333344445555"; },
       "an MPS share names its GPU"},
  };
  for (const Case& c : cases) {
    PodAllocation a;
    a.node = "node-a";
    DeviceSlice share{"GPU-1a2b3c4d-0000-1111-2222-333344445555", 8192, 50};
    share.mps = true;
    c.change(share);
    a.containers.push_back({"app", {share}});
    auto refused = EncodeAllocation(a);
    ASSERT_FALSE(refused.ok()) << c.name;
    EXPECT_NE(refused.error().message.find(c.says), std::string::npos)
        << c.name << ": " << refused.error().message;
  }
  for (const json& value : {json("true"), json(1), json::object(), json(nullptr)}) {
    json j = json::parse(R"({"version":1,"node":"n","containers":[{"name":"app","devices":[
        {"uuid":"GPU-1a2b3c4d-0000-1111-2222-333344445555","memoryMiB":8192,"cores":50}]}]})");
    j["containers"][0]["devices"][0]["mps"] = value;
    auto refused = DecodeAllocation(j.dump());
    ASSERT_FALSE(refused.ok()) << value.dump();
    EXPECT_NE(refused.error().message.find("\"mps\" is"), std::string::npos) << refused.error().message;
  }
}

}  // namespace
}  // namespace tessera::core
