// The allocator stand-in against the published allocation rules, one rule at
// a time, with devices shaped like the ones tessera will publish.
#include "dra/allocator.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::testing::dra {
namespace {

constexpr const char* kDriver = "gpu.tessera.io";
constexpr const char* kNode = "node-a";

// ---- objects as the API server holds them ----------------------------------

Json DeviceClass(const std::string& name, const std::vector<std::string>& selectors, Json config = nullptr) {
  Json spec = {{"selectors", Json::array()}};
  for (const auto& s : selectors) spec["selectors"].push_back({{"cel", {{"expression", s}}}});
  if (!config.is_null()) spec["config"] = config;
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "DeviceClass"},
          {"metadata", {{"name", name}}},
          {"spec", spec}};
}

// The class tessera's shared GPUs would use.
Json GpuClass(Json config = nullptr) {
  return DeviceClass(
      "gpu.tessera.io",
      {"device.driver == 'gpu.tessera.io' && device.attributes['gpu.tessera.io'].type == 'vgpu'"}, config);
}

// A shared GPU: memory and cores with request policies.
Json SharedGpu(const std::string& name, const std::string& memory = "80Gi",
               const std::string& product = "A100") {
  return {{"name", name},
          {"allowMultipleAllocations", true},
          {"attributes",
           {{"type", {{"string", "vgpu"}}},
            {"productName", {{"string", product}}},
            {"uuid", {{"string", "GPU-" + name}}}}},
          {"capacity",
           {{"memory",
             {{"value", memory},
              {"requestPolicy",
               {{"default", "1Gi"}, {"validRange", {{"min", "1Gi"}, {"max", memory}, {"step", "1Gi"}}}}}}},
            {"cores",
             {{"value", "100"},
              {"requestPolicy",
               {{"default", "100"}, {"validRange", {{"min", "1"}, {"max", "100"}, {"step", "1"}}}}}}}}}};
}

// A dedicated (whole) GPU.
Json WholeGpu(const std::string& name, const std::string& product = "A100") {
  return {{"name", name},
          {"attributes", {{"type", {{"string", "vgpu"}}}, {"productName", {{"string", product}}}}},
          {"capacity", {{"memory", {{"value", "80Gi"}}}}}};
}

Json Slice(const std::string& name, Json devices, const std::string& node = kNode, int64_t generation = 1,
           int64_t count = 1, const std::string& pool = kNode) {
  Json spec = {{"driver", kDriver},
               {"pool", {{"name", pool}, {"generation", generation}, {"resourceSliceCount", count}}},
               {"devices", devices}};
  if (!node.empty()) spec["nodeName"] = node;
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", name}}},
          {"spec", spec}};
}

Json Request(const std::string& name, Json exactly) {
  return {{"name", name}, {"exactly", exactly}};
}

Json Exactly(const std::string& device_class = "gpu.tessera.io", int64_t count = 1, Json capacity = nullptr,
             std::vector<std::string> selectors = {}) {
  Json out = {{"deviceClassName", device_class}, {"allocationMode", "ExactCount"}, {"count", count}};
  if (!capacity.is_null()) out["capacity"] = {{"requests", capacity}};
  for (const auto& s : selectors) out["selectors"].push_back({{"cel", {{"expression", s}}}});
  return out;
}

Json Claim(const std::string& name, Json requests, Json extra = Json::object()) {
  Json devices = {{"requests", requests}};
  for (const auto& [k, v] : extra.items()) devices[k] = v;
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"name", name}, {"namespace", "team"}, {"uid", "uid-" + name}}},
          {"spec", {{"devices", devices}}}};
}

// A claim `name` asking for one device of the GPU class, the commonest case.
Json OneDeviceClaim(const std::string& name) {
  return Claim(name, Json::array({Request("gpu", Exactly())}));
}

// A one-GPU claim requesting `memory` of the device's capacity (no request
// when null).
Json MemoryClaim(const char* memory) {
  Json capacity = memory ? Json{{"memory", memory}} : Json(nullptr);
  return Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 1, capacity))}));
}

// A claim that already holds devices (its status.allocation).
Json Allocated(const std::string& name, Json results) {
  Json claim = Claim(name, Json::array({Request("gpu", Exactly())}));
  claim["status"] = {{"allocation", {{"devices", {{"results", results}}}}}};
  return claim;
}

Json Holds(const std::string& device, Json consumed = nullptr, const std::string& share = "") {
  Json result = {{"request", "gpu"}, {"driver", kDriver}, {"pool", kNode}, {"device", device}};
  if (!share.empty()) result["shareID"] = share;
  if (!consumed.is_null()) result["consumedCapacity"] = consumed;
  return result;
}

AllocatorOptions CountingShareIds() {
  AllocatorOptions options;
  auto next = std::make_shared<int>(0);
  options.share_id = [next] { return "share-" + std::to_string(++*next); };
  return options;
}

// Allocates one claim; fails the test (and returns null) when it is refused.
Json AllocateOne(const ClusterState& state, const Json& claim, const std::string& node = kNode) {
  Allocator allocator(state, CountingShareIds());
  auto result = allocator.AllocateOnNode(node, {claim});
  EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().Describe());
  return result.ok() ? (*result)[0] : Json();
}

AllocationFailure Refusal(const ClusterState& state, const std::vector<Json>& claims,
                          const std::string& node = kNode) {
  Allocator allocator(state, CountingShareIds());
  auto result = allocator.AllocateOnNode(node, claims);
  EXPECT_FALSE(result.ok()) << (result.ok() ? Json(*result).dump() : "");
  return result.ok() ? AllocationFailure{} : result.error();
}

std::vector<std::string> DevicesOf(const Json& allocation) {
  std::vector<std::string> out;
  for (const Json& r : allocation["devices"]["results"]) out.push_back(r["device"].get<std::string>());
  return out;
}

// ---- devices, classes and selectors ------------------------------------------

TEST(AllocatorTest, AllocatesADeviceOfTheClassOnTheNode) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  state.resource_slices = {Slice("s-a", {WholeGpu("gpu-0")}),
                           Slice("s-b", {WholeGpu("gpu-9")}, "node-b", 1, 1, "node-b")};
  Json allocation = AllocateOne(state, OneDeviceClaim("c"));
  ASSERT_EQ(allocation["devices"]["results"].size(), 1u);
  const Json& result = allocation["devices"]["results"][0];
  EXPECT_EQ(result, (Json{{"request", "gpu"}, {"driver", kDriver}, {"pool", kNode}, {"device", "gpu-0"}}));
  EXPECT_EQ(
      allocation["nodeSelector"],
      Json::parse(
          R"({"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["node-a"]}]}]})"));
  EXPECT_FALSE(allocation["devices"].contains("config"));
}

TEST(AllocatorTest, ClassAndRequestSelectorsBothApply) {
  ClusterState state;
  state.device_classes = {GpuClass(), DeviceClass("other", {"device.driver == 'other.example.com'"})};
  Json small = SharedGpu("gpu-0", "40Gi", "A100");
  Json big = SharedGpu("gpu-1", "80Gi", "H100");
  Json foreign = WholeGpu("gpu-2");
  foreign["attributes"]["type"] = {{"string", "mig"}};  // not of the class
  state.resource_slices = {Slice("s", {foreign, small, big})};
  Json claim = Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 1, nullptr,
                                                              {"device.capacity['gpu.tessera.io'].memory."
                                                               "compareTo(quantity('64Gi')) >= 0"}))}));
  EXPECT_EQ(DevicesOf(AllocateOne(state, claim)), std::vector<std::string>{"gpu-1"});
  claim =
      Claim("c", Json::array({Request(
                     "gpu", Exactly("gpu.tessera.io", 1, nullptr,
                                    {"device.attributes['gpu.tessera.io'].productName.startsWith('A1')"}))}));
  EXPECT_EQ(DevicesOf(AllocateOne(state, claim)), std::vector<std::string>{"gpu-0"});
  // The other class selects nothing here.
  auto failure = Refusal(state, {Claim("c", Json::array({Request("gpu", Exactly("other"))}))});
  EXPECT_EQ(failure.kind, AllocationFailure::Kind::kUnsatisfiable);
  EXPECT_TRUE(failure.Mentions(
      "device gpu.tessera.io/node-a/gpu-0 not selected by the selectors of device class other"))
      << failure.Describe();
  EXPECT_TRUE(failure.Mentions("claim team/c, request gpu: 0 device(s) fit, 1 needed")) << failure.Describe();
}

TEST(AllocatorTest, ExactCountTakesDistinctDevices) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  state.resource_slices = {Slice("s", {WholeGpu("gpu-0"), WholeGpu("gpu-1")})};
  Json allocation =
      AllocateOne(state, Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 2))})));
  EXPECT_EQ(DevicesOf(allocation), (std::vector<std::string>{"gpu-0", "gpu-1"}));
  auto failure = Refusal(state, {Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 3))}))});
  EXPECT_TRUE(failure.Mentions("2 device(s) fit, 3 needed")) << failure.Describe();
}

TEST(AllocatorTest, AllocationModeAllTakesEveryMatchingDevice) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  state.resource_slices = {Slice("s", {WholeGpu("gpu-0"), WholeGpu("gpu-1"), WholeGpu("gpu-2", "H100")})};
  Json all = {
      {"deviceClassName", "gpu.tessera.io"},
      {"allocationMode", "All"},
      {"selectors",
       Json::array(
           {{{"cel", {{"expression", "device.attributes['gpu.tessera.io'].productName == 'A100'"}}}}})}};
  Json claim = Claim("c", Json::array({Request("gpu", all)}));
  EXPECT_EQ(DevicesOf(AllocateOne(state, claim)), (std::vector<std::string>{"gpu-0", "gpu-1"}));

  // One of them taken: "all" cannot be had.
  state.resource_claims = {Allocated("old", Json::array({Holds("gpu-1")}))};
  auto failure = Refusal(state, {claim});
  EXPECT_TRUE(failure.Mentions("device gpu.tessera.io/node-a/gpu-1 allocated to claim team/old"))
      << failure.Describe();

  // Nothing matches: All needs at least one device.
  all["selectors"][0]["cel"]["expression"] = "device.attributes['gpu.tessera.io'].productName == 'V100'";
  state.resource_claims.clear();
  failure = Refusal(state, {Claim("c", Json::array({Request("gpu", all)}))});
  EXPECT_TRUE(failure.Mentions("asks for all devices and none matches")) << failure.Describe();

  // An incomplete pool makes "all" unknowable: the claim is refused outright.
  state.resource_slices = {Slice("s", {WholeGpu("gpu-0")}, kNode, 1, 2)};
  failure = Refusal(state, {claim});
  EXPECT_EQ(failure.kind, AllocationFailure::Kind::kInvalid);
  EXPECT_TRUE(failure.Mentions(
      "asks for all devices, but resource pool gpu.tessera.io/node-a is currently being updated"))
      << failure.Describe();
}

TEST(AllocatorTest, AnAllocatedDeviceIsNotGivenTwice) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  state.resource_slices = {Slice("s", {WholeGpu("gpu-0"), WholeGpu("gpu-1")})};
  state.resource_claims = {Allocated("old", Json::array({Holds("gpu-0")}))};
  Json claim = OneDeviceClaim("c");
  EXPECT_EQ(DevicesOf(AllocateOne(state, claim)), std::vector<std::string>{"gpu-1"});
  state.resource_claims.push_back(Allocated("older", Json::array({Holds("gpu-1")})));
  auto failure = Refusal(state, {claim});
  EXPECT_TRUE(failure.Mentions("gpu-0 allocated to claim team/old")) << failure.Describe();
  EXPECT_TRUE(failure.Mentions("gpu-1 allocated to claim team/older")) << failure.Describe();
  // Admin-access results hold nothing.
  state.resource_claims = {Allocated("admin", Json::array({Holds("gpu-0")}))};
  state.resource_claims[0]["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = true;
  EXPECT_EQ(DevicesOf(AllocateOne(state, claim)), std::vector<std::string>{"gpu-0"});
}

TEST(AllocatorTest, ThePodsClaimsAreAllocatedTogether) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  state.resource_slices = {Slice("s", {WholeGpu("gpu-0"), WholeGpu("gpu-1")})};
  Allocator allocator(state);
  auto both = allocator.AllocateOnNode(kNode, {OneDeviceClaim("a"), OneDeviceClaim("b")});
  ASSERT_TRUE(both.ok()) << both.error().Describe();
  EXPECT_EQ(DevicesOf((*both)[0]), std::vector<std::string>{"gpu-0"});
  EXPECT_EQ(DevicesOf((*both)[1]), std::vector<std::string>{"gpu-1"});
  auto three =
      allocator.AllocateOnNode(kNode, {OneDeviceClaim("a"), OneDeviceClaim("b"), OneDeviceClaim("c")});
  ASSERT_FALSE(three.ok());
  EXPECT_TRUE(three.error().Mentions("each request fits on its own but not together"))
      << three.error().Describe();
}

TEST(AllocatorTest, TaintedDevicesNeedATolerationWhichTheResultRecords) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  Json sick = WholeGpu("gpu-0");
  sick["taints"] = Json::array({{{"key", "tessera.io/xid"}, {"value", "79"}, {"effect", "NoSchedule"}}});
  Json noted = WholeGpu("gpu-1");
  noted["taints"] = Json::array({{{"key", "tessera.io/note"}, {"effect", "None"}}});  // does not block
  state.resource_slices = {Slice("s", {sick})};
  Json plain = OneDeviceClaim("c");
  auto failure = Refusal(state, {plain});
  EXPECT_TRUE(failure.Mentions("tainted tessera.io/xid=79:NoSchedule and the request does not tolerate it"))
      << failure.Describe();

  Json tolerant = Exactly();
  tolerant["tolerations"] = Json::array({{{"key", "tessera.io/xid"}, {"operator", "Exists"}}});
  Json allocation = AllocateOne(state, Claim("c", Json::array({Request("gpu", tolerant)})));
  EXPECT_EQ(allocation["devices"]["results"][0]["tolerations"], tolerant["tolerations"]);

  Json wrong_value = Exactly();
  wrong_value["tolerations"] =
      Json::array({{{"key", "tessera.io/xid"}, {"operator", "Equal"}, {"value", "48"}}});
  Refusal(state, {Claim("c", Json::array({Request("gpu", wrong_value)}))});

  state.resource_slices = {Slice("s", {noted})};
  EXPECT_EQ(DevicesOf(AllocateOne(state, plain)), std::vector<std::string>{"gpu-1"});
}

TEST(AllocatorTest, FirstAvailableTakesTheFirstSubrequestThatFits) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  state.resource_slices = {Slice("s", {WholeGpu("gpu-0", "A100")})};
  Json request = {
      {"name", "gpu"},
      {"firstAvailable",
       Json::array({{{"name", "big"},
                     {"deviceClassName", "gpu.tessera.io"},
                     {"selectors",
                      Json::array({{{"cel",
                                     {{"expression",
                                       "device.attributes['gpu.tessera.io'].productName == 'H100'"}}}}})}},
                    {{"name", "any"}, {"deviceClassName", "gpu.tessera.io"}}})}};
  Json config = Json::array({{{"requests", Json::array({"gpu/any"})},
                              {"opaque", {{"driver", kDriver}, {"parameters", {{"mode", "shared"}}}}}}});
  Json allocation = AllocateOne(state, Claim("c", Json::array({request}), {{"config", config}}));
  EXPECT_EQ(allocation["devices"]["results"][0]["request"], "gpu/any");
  ASSERT_TRUE(allocation["devices"].contains("config"));
  EXPECT_EQ(allocation["devices"]["config"][0]["source"], "FromClaim");
}

TEST(AllocatorTest, MatchAndDistinctAttributeConstraints) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  state.resource_slices = {
      Slice("s", {WholeGpu("gpu-0", "A100"), WholeGpu("gpu-1", "H100"), WholeGpu("gpu-2", "H100")})};
  Json two = Json::array({Request("a", Exactly()), Request("b", Exactly())});
  Json same =
      Claim("c", two, {{"constraints", Json::array({{{"matchAttribute", "gpu.tessera.io/productName"}}})}});
  // gpu-0 then gpu-1 differ; the search moves on to gpu-1 and gpu-2.
  EXPECT_EQ(DevicesOf(AllocateOne(state, same)), (std::vector<std::string>{"gpu-1", "gpu-2"}));
  Json different = Claim(
      "c", two,
      {{"constraints",
        Json::array({{{"distinctAttribute", "gpu.tessera.io/productName"}, {"requests", {"a", "b"}}}})}});
  EXPECT_EQ(DevicesOf(AllocateOne(state, different)), (std::vector<std::string>{"gpu-0", "gpu-1"}));
  Json missing =
      Claim("c", two, {{"constraints", Json::array({{{"matchAttribute", "gpu.tessera.io/uuid"}}})}});
  Refusal(state, {missing});
}

TEST(AllocatorTest, OnlyTheNodesSlicesCountAndTheNodeSelectorSaysSo) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  Json network_slice = Slice("shared", {WholeGpu("gpu-net")}, "", 1, 1, "fabric");
  network_slice["spec"]["allNodes"] = true;
  state.resource_slices = {Slice("b", {WholeGpu("gpu-b")}, "node-b", 1, 1, "node-b"), network_slice};
  Json allocation = AllocateOne(state, OneDeviceClaim("c"));
  EXPECT_EQ(DevicesOf(allocation), std::vector<std::string>{"gpu-net"});
  EXPECT_FALSE(allocation.contains("nodeSelector"));  // usable anywhere

  Json rack = Slice("rack", {WholeGpu("gpu-r")}, "", 1, 1, "rack-1");
  rack["spec"]["nodeSelector"] = Json::parse(
      R"({"nodeSelectorTerms":[{"matchExpressions":[{"key":"rack","operator":"In","values":["r1"]}]}]})");
  state.resource_slices = {rack};
  Json node = {{"metadata", {{"name", kNode}, {"labels", {{"rack", "r1"}}}}}};
  Allocator allocator(state);
  auto on_rack = allocator.Allocate(node, {OneDeviceClaim("c")});
  ASSERT_TRUE(on_rack.ok()) << on_rack.error().Describe();
  EXPECT_EQ((*on_rack)[0]["nodeSelector"], rack["spec"]["nodeSelector"]);
  node["metadata"]["labels"]["rack"] = "r2";
  EXPECT_FALSE(allocator.Allocate(node, {OneDeviceClaim("c")}).ok());

  // perDeviceNodeSelection: each device names its node.
  Json per_device = Slice("pd", {WholeGpu("gpu-x"), WholeGpu("gpu-y")}, "", 1, 1, "pd");
  per_device["spec"]["perDeviceNodeSelection"] = true;
  per_device["spec"]["devices"][0]["nodeName"] = "node-b";
  per_device["spec"]["devices"][1]["nodeName"] = kNode;
  state.resource_slices = {per_device};
  allocation = AllocateOne(state, OneDeviceClaim("c"));
  EXPECT_EQ(DevicesOf(allocation), std::vector<std::string>{"gpu-y"});
  EXPECT_TRUE(allocation.contains("nodeSelector"));
}

TEST(AllocatorTest, OnlyTheNewestGenerationOfAPoolCounts) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  state.resource_slices = {Slice("old", {WholeGpu("gpu-old")}, kNode, 1),
                           Slice("new", {WholeGpu("gpu-new")}, kNode, 2)};
  EXPECT_EQ(DevicesOf(AllocateOne(state, OneDeviceClaim("c"))), std::vector<std::string>{"gpu-new"});
}

TEST(AllocatorTest, IncompleteAndInvalidPoolsAreNotAllocatedFrom) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  Json claim = OneDeviceClaim("c");
  state.resource_slices = {Slice("s1", {WholeGpu("gpu-0")}, kNode, 3, 2)};
  auto failure = Refusal(state, {claim});
  EXPECT_TRUE(
      failure.Mentions("resource pool gpu.tessera.io/node-a is incomplete (1 of 2 slices of generation 3)"))
      << failure.Describe();

  state.resource_slices = {Slice("s1", {WholeGpu("gpu-0")}, kNode, 1, 2),
                           Slice("s2", {WholeGpu("gpu-0")}, kNode, 1, 2)};
  failure = Refusal(state, {claim});
  EXPECT_TRUE(failure.Mentions("is invalid: duplicate device name gpu-0")) << failure.Describe();
}

TEST(AllocatorTest, ConfigFromTheClassThenFromTheClaim) {
  ClusterState state;
  Json class_config =
      Json::array({{{"opaque", {{"driver", kDriver}, {"parameters", {{"computePolicy", "force"}}}}}}});
  state.device_classes = {GpuClass(class_config)};
  state.resource_slices = {Slice("s", {WholeGpu("gpu-0"), WholeGpu("gpu-1")})};
  Json claim_config = Json::array({{{"opaque", {{"driver", kDriver}, {"parameters", {{"priority", 1}}}}}}});
  Json claim =
      Claim("c", Json::array({Request("a", Exactly()), Request("b", Exactly())}), {{"config", claim_config}});
  Json allocation = AllocateOne(state, claim);
  ASSERT_EQ(allocation["devices"]["config"].size(), 2u);
  // The class's config applies to both requests, so "requests" is left out.
  EXPECT_EQ(allocation["devices"]["config"][0],
            (Json{{"source", "FromClass"}, {"opaque", class_config[0]["opaque"]}}));
  EXPECT_EQ(allocation["devices"]["config"][1],
            (Json{{"source", "FromClaim"}, {"opaque", claim_config[0]["opaque"]}}));
}

// ---- consumable capacity ----------------------------------------------------------

TEST(AllocatorTest, ASharedDeviceGetsAShareIdAndItsConsumedCapacity) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  state.resource_slices = {Slice("s", {SharedGpu("gpu-0")})};
  Json claim = Claim(
      "c",
      Json::array({Request("gpu", Exactly("gpu.tessera.io", 1, {{"memory", "10Gi"}, {"cores", "30"}}))}));
  Json allocation = AllocateOne(state, claim);
  EXPECT_EQ(allocation["devices"]["results"][0],
            (Json{{"request", "gpu"},
                  {"driver", kDriver},
                  {"pool", kNode},
                  {"device", "gpu-0"},
                  {"shareID", "share-1"},
                  {"consumedCapacity", {{"memory", "10Gi"}, {"cores", "30"}}}}));
}

TEST(AllocatorTest, ClaimsShareADeviceUntilItsCapacityIsUsedUp) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  state.resource_slices = {Slice("s", {SharedGpu("gpu-0")})};
  state.resource_claims = {
      Allocated("first", Json::array({Holds("gpu-0", {{"memory", "70Gi"}, {"cores", "60"}}, "a")})),
      Allocated("second", Json::array({Holds("gpu-0", {{"memory", "1Gi"}, {"cores", "10"}}, "b")}))};
  auto claim = [](const char* memory, const char* cores) {
    return Claim(
        "c",
        Json::array({Request("gpu", Exactly("gpu.tessera.io", 1, {{"memory", memory}, {"cores", cores}}))}));
  };
  EXPECT_EQ(DevicesOf(AllocateOne(state, claim("9Gi", "30"))), std::vector<std::string>{"gpu-0"});
  auto failure = Refusal(state, {claim("10Gi", "30")});
  EXPECT_TRUE(
      failure.Mentions("capacity memory: 10Gi requested (consumes 10Gi), 71Gi of 80Gi already consumed"))
      << failure.Describe();
  failure = Refusal(state, {claim("1Gi", "31")});
  EXPECT_TRUE(failure.Mentions("capacity cores: 31 requested (consumes 31), 70 of 100 already consumed"))
      << failure.Describe();
  // Two claims of one pod count against each other too.
  state.resource_claims.clear();
  Allocator allocator(state);
  EXPECT_FALSE(allocator.AllocateOnNode(kNode, {claim("50Gi", "10"), claim("40Gi", "10")}).ok());
  EXPECT_TRUE(allocator.AllocateOnNode(kNode, {claim("40Gi", "10"), claim("40Gi", "10")}).ok());
}

struct Rounding {
  const char* requested;  // nullptr: no request
  const char* consumed;   // nullptr: the device does not fit
};

TEST(AllocatorTest, ValidRangeRoundsUpToMinThenToTheNextStep) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  Json gpu = SharedGpu("gpu-0");
  gpu["capacity"]["memory"]["requestPolicy"] = {
      {"default", "4Gi"}, {"validRange", {{"min", "2Gi"}, {"max", "64Gi"}, {"step", "2Gi"}}}};
  state.resource_slices = {Slice("s", {gpu})};
  const std::vector<Rounding> cases = {
      {"1Gi", "2Gi"},      // below min: min
      {"2Gi", "2Gi"},      // min itself
      {"3Gi", "4Gi"},      // between steps: the next step
      {"4Gi", "4Gi"},      // on a step
      {"5000Mi", "6Gi"},   // 4.88Gi -> 6Gi
      {"64Gi", "64Gi"},    // max
      {"63Gi", "64Gi"},    // rounds up to max
      {"65Gi", nullptr},   // above max: not allocatable
      {"100Gi", nullptr},  // far above
      {nullptr, "4Gi"},    // no request: the default
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.requested ? c.requested : "(none)");
    Json claim = MemoryClaim(c.requested);
    if (c.consumed == nullptr) {
      auto failure = Refusal(state, {claim});
      EXPECT_TRUE(failure.Mentions("is above the request policy's maximum 64Gi")) << failure.Describe();
      continue;
    }
    Json allocation = AllocateOne(state, claim);
    EXPECT_EQ(allocation["devices"]["results"][0]["consumedCapacity"]["memory"], c.consumed);
  }
}

TEST(AllocatorTest, ValidRangeWithoutStepOrMaxAndFractionalRequests) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  Json gpu = SharedGpu("gpu-0");
  gpu["capacity"]["memory"]["requestPolicy"] = {{"validRange", {{"min", "1Gi"}}}};
  gpu["capacity"]["cores"]["requestPolicy"] = {{"validRange", {{"min", "1"}, {"step", "1"}}}};
  state.resource_slices = {Slice("s", {gpu})};
  Json allocation = AllocateOne(
      state, Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 1,
                                                            {{"memory", "1500Mi"}, {"cores", "2500m"}}))})));
  const Json& consumed = allocation["devices"]["results"][0]["consumedCapacity"];
  EXPECT_EQ(consumed["memory"], "1500Mi");  // no step: as requested
  EXPECT_EQ(consumed["cores"], "3");        // 2.5 -> whole units -> 3
  // No default and no request: the whole capacity.
  allocation = AllocateOne(state, OneDeviceClaim("c"));
  EXPECT_EQ(allocation["devices"]["results"][0]["consumedCapacity"],
            (Json{{"memory", "80Gi"}, {"cores", "100"}}));
}

TEST(AllocatorTest, ValidValuesRoundUpToTheSmallestValidValue) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  Json gpu = SharedGpu("gpu-0");
  gpu["capacity"]["memory"]["requestPolicy"] = {{"default", "10Gi"},
                                                {"validValues", {"10Gi", "20Gi", "40Gi"}}};
  state.resource_slices = {Slice("s", {gpu})};
  const std::vector<Rounding> cases = {{"1Gi", "10Gi"},  {"10Gi", "10Gi"},  {"11Gi", "20Gi"},
                                       {"40Gi", "40Gi"}, {"41Gi", nullptr}, {nullptr, "10Gi"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.requested ? c.requested : "(none)");
    Json claim = MemoryClaim(c.requested);
    if (c.consumed == nullptr) {
      auto failure = Refusal(state, {claim});
      EXPECT_TRUE(failure.Mentions("41Gi is not one of the valid values [10Gi, 20Gi, 40Gi]"))
          << failure.Describe();
      continue;
    }
    EXPECT_EQ(AllocateOne(state, claim)["devices"]["results"][0]["consumedCapacity"]["memory"], c.consumed);
  }
}

TEST(AllocatorTest, WithoutAPolicyTheRequestIsTakenAsIsAndNoRequestTakesAll) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  Json gpu = SharedGpu("gpu-0");
  gpu["capacity"] = {{"memory", {{"value", "80Gi"}}}};
  state.resource_slices = {Slice("s", {gpu})};
  Json some = Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 1, {{"memory", "3000Mi"}}))}));
  EXPECT_EQ(AllocateOne(state, some)["devices"]["results"][0]["consumedCapacity"]["memory"], "3000Mi");
  Json whole = OneDeviceClaim("c");
  EXPECT_EQ(AllocateOne(state, whole)["devices"]["results"][0]["consumedCapacity"]["memory"], "80Gi");
  // After a request that takes it all, nothing is left to share.
  state.resource_claims = {Allocated("all", Json::array({Holds("gpu-0", {{"memory", "80Gi"}}, "x")}))};
  auto failure = Refusal(state, {some});
  EXPECT_TRUE(failure.Mentions("80Gi of 80Gi already consumed")) << failure.Describe();
}

TEST(AllocatorTest, CapacityNamesResolveWithOrWithoutTheDriversDomain) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  Json gpu = SharedGpu("gpu-0");
  gpu["capacity"]["gpu.tessera.io/bandwidth"] = {{"value", "100G"}};
  state.resource_slices = {Slice("s", {gpu})};
  Json allocation = AllocateOne(
      state, Claim("c", Json::array({Request(
                            "gpu", Exactly("gpu.tessera.io", 1,
                                           {{"gpu.tessera.io/memory", "8Gi"}, {"bandwidth", "10G"}}))})));
  const Json& consumed = allocation["devices"]["results"][0]["consumedCapacity"];
  EXPECT_EQ(consumed["memory"], "8Gi");                    // the device's spelling
  EXPECT_EQ(consumed["gpu.tessera.io/bandwidth"], "10G");  // likewise
  EXPECT_EQ(consumed["cores"], "100");                     // default
  // A capacity the device does not have: not this device.
  auto failure = Refusal(
      state, {Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 1, {{"nvlinks", "1"}}))}))});
  EXPECT_TRUE(failure.Mentions("has no capacity nvlinks")) << failure.Describe();
  // One capacity asked for twice, under both names: an error.
  failure = Refusal(
      state,
      {Claim("c",
             Json::array({Request("gpu", Exactly("gpu.tessera.io", 1,
                                                 {{"memory", "1Gi"}, {"gpu.tessera.io/memory", "2Gi"}}))}))});
  EXPECT_EQ(failure.kind, AllocationFailure::Kind::kInvalid);
  EXPECT_TRUE(failure.Mentions("requested both as")) << failure.Describe();
}

TEST(AllocatorTest, ADedicatedDeviceChecksTheRequestButRecordsNoShare) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  state.resource_slices = {Slice("s", {WholeGpu("gpu-0")})};
  Json allocation = AllocateOne(
      state, Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 1, {{"memory", "40Gi"}}))})));
  EXPECT_FALSE(allocation["devices"]["results"][0].contains("shareID"));
  EXPECT_FALSE(allocation["devices"]["results"][0].contains("consumedCapacity"));
  auto failure = Refusal(
      state, {Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 1, {{"memory", "81Gi"}}))}))});
  EXPECT_TRUE(failure.Mentions("0 of 80Gi already consumed")) << failure.Describe();
}

TEST(AllocatorTest, ASharedDeviceWithoutCapacitiesIsSharedWithoutLimit) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  Json gpu = SharedGpu("gpu-0");
  gpu.erase("capacity");
  state.resource_slices = {Slice("s", {gpu})};
  for (int i = 0; i < 5; ++i) {
    state.resource_claims.push_back(
        Allocated("c" + std::to_string(i), Json::array({Holds("gpu-0", nullptr, "s" + std::to_string(i))})));
  }
  Json allocation = AllocateOne(state, OneDeviceClaim("c"));
  EXPECT_EQ(allocation["devices"]["results"][0]["shareID"], "share-1");
  EXPECT_FALSE(allocation["devices"]["results"][0].contains("consumedCapacity"));
}

TEST(AllocatorTest, ARequestTakesDistinctDevicesButRequestsMayShareOne) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  state.resource_slices = {Slice("s", {SharedGpu("gpu-0")})};
  Json two_of_one =
      Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 2, {{"memory", "1Gi"}}))}));
  Refusal(state, {two_of_one});
  Json two_requests = Claim(
      "c", Json::array({Request("a", Exactly("gpu.tessera.io", 1, {{"memory", "1Gi"}, {"cores", "10"}})),
                        Request("b", Exactly("gpu.tessera.io", 1, {{"memory", "1Gi"}, {"cores", "10"}}))}));
  Json allocation = AllocateOne(state, two_requests);
  EXPECT_EQ(DevicesOf(allocation), (std::vector<std::string>{"gpu-0", "gpu-0"}));
  EXPECT_EQ(allocation["devices"]["results"][0]["shareID"], "share-1");
  EXPECT_EQ(allocation["devices"]["results"][1]["shareID"], "share-2");
}

TEST(AllocatorTest, ModeChangesKeepOldAllocationsExclusive) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  Json claim = Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 1, {{"memory", "1Gi"}}))}));
  // Dedicated before, shareable now: stays the old claim's until released.
  state.resource_slices = {Slice("s", {SharedGpu("gpu-0")})};
  state.resource_claims = {Allocated("old", Json::array({Holds("gpu-0")}))};
  EXPECT_TRUE(Refusal(state, {claim}).Mentions("allocated to claim team/old"));
  // Shared before, dedicated now: no new allocations.
  state.resource_slices = {Slice("s", {WholeGpu("gpu-0")})};
  state.resource_claims = {Allocated("old", Json::array({Holds("gpu-0", {{"memory", "1Gi"}}, "x")}))};
  EXPECT_TRUE(Refusal(state, {claim}).Mentions("shared by other claims and not multi-allocatable now"));
}

// ---- partitionable devices ------------------------------------------------------

// An 80Gi GPU with 8 memory slices: the whole GPU consumes everything, a
// 3g.40gb partition 40Gi and four slices at its placement.
Json Counters() {
  Json counters = {{"memory", {{"value", "80Gi"}}}};
  for (int i = 0; i < 8; ++i) counters["memory-slice-" + std::to_string(i)] = {{"value", "1"}};
  return Json::array({{{"name", "gpu-0-counter-set"}, {"counters", counters}}});
}

Json Partition(const std::string& name, const std::string& memory, int first_slice, int slices,
               bool shared = false) {
  Json counters = {{"memory", {{"value", memory}}}};
  for (int i = first_slice; i < first_slice + slices; ++i)
    counters["memory-slice-" + std::to_string(i)] = {{"value", "1"}};
  Json device = {
      {"name", name},
      {"attributes", {{"type", {{"string", "vgpu"}}}}},
      {"capacity", {{"memory", {{"value", memory}}}}},
      {"consumesCounters", Json::array({{{"counterSet", "gpu-0-counter-set"}, {"counters", counters}}})}};
  if (shared) device["allowMultipleAllocations"] = true;
  return device;
}

ClusterState PartitionedGpu(bool separate_counter_slice) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  Json devices = Json::array({Partition("gpu-0", "80Gi", 0, 8), Partition("gpu-0-mig-3g40gb-0", "40Gi", 0, 4),
                              Partition("gpu-0-mig-3g40gb-4", "40Gi", 4, 4),
                              Partition("gpu-0-mig-4g40gb-0", "40Gi", 0, 4)});
  if (separate_counter_slice) {
    // 1.35 and later: counters in a slice of their own, same pool.
    Json counters = Slice("counters", Json::array(), kNode, 1, 2);
    counters["spec"].erase("devices");
    counters["spec"]["sharedCounters"] = Counters();
    state.resource_slices = {counters, Slice("devices", devices, kNode, 1, 2)};
  } else {
    Json slice = Slice("s", devices);
    slice["spec"]["sharedCounters"] = Counters();
    state.resource_slices = {slice};
  }
  return state;
}

TEST(AllocatorTest, CountersAreNeverOverConsumed) {
  for (bool separate : {false, true}) {
    SCOPED_TRACE(separate ? "counters in their own slice" : "counters beside the devices");
    ClusterState state = PartitionedGpu(separate);
    // A partition is allocated: the whole GPU and the overlapping 4g no longer fit.
    state.resource_claims = {Allocated("mig", Json::array({Holds("gpu-0-mig-3g40gb-0")}))};
    Json any = OneDeviceClaim("c");
    EXPECT_EQ(DevicesOf(AllocateOne(state, any)), std::vector<std::string>{"gpu-0-mig-3g40gb-4"});
    auto failure = Refusal(state, {Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 2))}))});
    EXPECT_TRUE(failure.Mentions(
        "gpu-0 counter memory of counter set gpu-0-counter-set: needs 80Gi, 40Gi of 80Gi left"))
        << failure.Describe();
    EXPECT_TRUE(failure.Mentions(
        "gpu-0-mig-4g40gb-0 counter memory-slice-0 of counter set gpu-0-counter-set: needs 1, 0 of 1 left"))
        << failure.Describe();

    // In one run: two partitions fit, a third does not.
    state.resource_claims.clear();
    Allocator allocator(state);
    auto two = allocator.AllocateOnNode(kNode, {OneDeviceClaim("a"), OneDeviceClaim("b")});
    ASSERT_TRUE(two.ok()) << two.error().Describe();
    // The whole GPU first (it comes first), then nothing else fits beside it:
    // the search backtracks to two partitions.
    EXPECT_EQ(DevicesOf((*two)[0]), std::vector<std::string>{"gpu-0-mig-3g40gb-0"});
    EXPECT_EQ(DevicesOf((*two)[1]), std::vector<std::string>{"gpu-0-mig-3g40gb-4"});
    EXPECT_FALSE(
        allocator.AllocateOnNode(kNode, {OneDeviceClaim("a"), OneDeviceClaim("b"), OneDeviceClaim("c")})
            .ok());
  }
}

TEST(AllocatorTest, ASharedPartitionConsumesItsCountersOnce) {
  ClusterState state = PartitionedGpu(false);
  state.resource_slices[0]["spec"]["devices"][1] =
      Partition("gpu-0-mig-3g40gb-0", "40Gi", 0, 4, /*shared=*/true);
  state.resource_slices[0]["spec"]["devices"][1]["capacity"]["memory"]["requestPolicy"] = {
      {"default", "10Gi"}, {"validRange", {{"min", "1Gi"}, {"step", "1Gi"}}}};
  state.resource_claims = {
      Allocated("one", Json::array({Holds("gpu-0-mig-3g40gb-0", {{"memory", "10Gi"}}, "x")})),
      Allocated("two", Json::array({Holds("gpu-0-mig-3g40gb-4")}))};
  // Another share of the shared partition: its counters are already counted.
  Json share = Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 1, {{"memory", "20Gi"}}))}));
  Json allocation = AllocateOne(state, share);
  EXPECT_EQ(DevicesOf(allocation), std::vector<std::string>{"gpu-0-mig-3g40gb-0"});
  EXPECT_EQ(allocation["devices"]["results"][0]["consumedCapacity"]["memory"], "20Gi");
}

TEST(AllocatorTest, ACounterThatDoesNotExistMakesThePoolInvalid) {
  ClusterState state = PartitionedGpu(false);
  state.resource_slices[0]["spec"]["devices"][0]["consumesCounters"][0]["counterSet"] = "gpu-7-counter-set";
  auto failure = Refusal(state, {OneDeviceClaim("c")});
  EXPECT_TRUE(
      failure.Mentions("is invalid: device gpu-0 consumes from unknown counter set gpu-7-counter-set"))
      << failure.Describe();
  // A separate counter slice that has not arrived: the pool is incomplete.
  state = PartitionedGpu(true);
  state.resource_slices.erase(state.resource_slices.begin());
  failure = Refusal(state, {OneDeviceClaim("c")});
  EXPECT_TRUE(failure.Mentions("is incomplete (1 of 2 slices")) << failure.Describe();
}

// ---- claims that cannot be allocated anywhere --------------------------------------

TEST(AllocatorTest, InvalidClaimsAndClassesAreRefusedWithTheirReason) {
  ClusterState state;
  state.device_classes = {GpuClass(), DeviceClass("broken", {"device.driver =="}),
                          DeviceClass("strict", {"device.attributes['gpu.tessera.io'].uuid == 'x'"})};
  state.resource_slices = {Slice("s", {WholeGpu("gpu-0")})};
  struct Case {
    Json claim;
    const char* says;
  };
  Json admin = Exactly();
  admin["adminAccess"] = true;
  Json already = OneDeviceClaim("c");
  already["status"] = {{"allocation", {{"devices", {{"results", Json::array()}}}}}};
  const std::vector<Case> cases = {
      {Claim("c", Json::array({Request("gpu", Exactly("missing"))})),
       "could not retrieve device class missing: not found"},
      {Claim("c", Json::array({Request("gpu", Exactly("broken"))})),
       "class broken: selector #0: CEL compile error"},
      {Claim("c", Json::array({Request("gpu", Exactly("strict"))})),
       "class strict: selector #0 on device gpu.tessera.io/node-a/gpu-0: CEL runtime error: no such key: "
       "uuid"},
      {Claim("c", Json::array({Request(
                      "gpu", Exactly("gpu.tessera.io", 1, nullptr, {"device.driver.reverse() == 'x'"}))})),
       "claim team/c: selector #0: CEL compile error"},
      {Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 0))})), "count must be at least 1"},
      {Claim("c", Json::array({Request("gpu", admin)})),
       "adminAccess is outside what this allocator stand-in covers"},
      {Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 1, {{"memory", "lots"}}))})),
       "capacity.requests memory: quantity \"lots\""},
      {Claim("c", Json::array({{{"name", "gpu"}}})), "neither exactly nor firstAvailable is set"},
      {already, "claim team/c is already allocated"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.says);
    auto failure = Refusal(state, {c.claim});
    EXPECT_EQ(failure.kind, AllocationFailure::Kind::kInvalid);
    EXPECT_TRUE(failure.Mentions(c.says)) << failure.Describe();
  }
}

TEST(AllocatorTest, AClaimGetsAtMost32Devices) {
  ClusterState state;
  state.device_classes = {GpuClass()};
  Json devices = Json::array();
  for (int i = 0; i < 40; ++i) devices.push_back(WholeGpu("gpu-" + std::to_string(i)));
  state.resource_slices = {Slice("s", devices)};
  EXPECT_EQ(
      DevicesOf(AllocateOne(state, Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 32))}))))
          .size(),
      32u);
  Refusal(state, {Claim("c", Json::array({Request("gpu", Exactly("gpu.tessera.io", 33))}))});
}

TEST(AllocatorTest, ShareIdsAreFreshUuidsByDefault) {
  const std::string a = RandomUuid(), b = RandomUuid();
  EXPECT_NE(a, b);
  ASSERT_EQ(a.size(), 36u);
  EXPECT_EQ(a[14], '4');
  EXPECT_NE(std::string("89ab").find(a[19]), std::string::npos);
}

}  // namespace
}  // namespace tessera::testing::dra
