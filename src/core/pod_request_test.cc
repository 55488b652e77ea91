#include "core/pod_request.h"

#include <gtest/gtest.h>

#include <cctype>
#include <functional>
#include <string>

namespace tessera::core {
namespace {

using nlohmann::json;

// A pod with one app container "app" whose limits are `limits`.
json PodWithLimits(json limits) {
  return json{
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", "p"}, {"namespace", "default"}}},
      {"spec", {{"containers", json::array({{{"name", "app"}, {"resources", {{"limits", limits}}}}})}}}};
}

ContainerRequest Req(const std::string& name, int gpus, int64_t mem, std::optional<int> pct, int cores,
                     std::optional<int> priority = std::nullopt) {
  return ContainerRequest{name, gpus, mem, pct, cores, priority};
}

TEST(DerivePodRequestTest, FullRequest) {
  auto r = DerivePodRequest(PodWithLimits({{"nvidia.com/gpu", "2"},
                                           {"nvidia.com/gpumem", "3000"},
                                           {"nvidia.com/gpucores", "30"},
                                           {"nvidia.com/priority", "1"},
                                           {"cpu", "2"}}),
                            ResourceConfig{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->containers.size(), 1u);
  EXPECT_EQ(r->containers[0], Req("app", 2, 3000, std::nullopt, 30, 1));
  EXPECT_TRUE(r->init_containers.empty());
  EXPECT_EQ(r->cpu_milli, 0);  // host resources are kube-scheduler's
}

TEST(DerivePodRequestTest, PriorityIsKeptAsGivenAndAbsentWhenNotGiven) {
  // 0 is a priority (the highest), not "none": the webhook passes it on.
  auto high = DerivePodRequest(PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "0"}}), {});
  ASSERT_TRUE(high.ok()) << high.error().message;
  EXPECT_EQ(high->containers[0].priority, std::optional<int>(0));
  auto none = DerivePodRequest(PodWithLimits({{"nvidia.com/gpu", "1"}}), {});
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_EQ(none->containers[0].priority, std::nullopt);
}

TEST(DerivePodRequestTest, QuantityFormsAndJsonIntegers) {
  auto r = DerivePodRequest(
      PodWithLimits({{"nvidia.com/gpu", 1}, {"nvidia.com/gpumem", "3k"}, {"nvidia.com/gpucores", "1e1"}}),
      ResourceConfig{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0], Req("app", 1, 3000, std::nullopt, 10));
}

TEST(DerivePodRequestTest, NoGpuContainerIsNotAnError) {
  auto r = DerivePodRequest(PodWithLimits({{"cpu", "1"}, {"memory", "1Gi"}}), ResourceConfig{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->containers.empty());
  EXPECT_TRUE(r->init_containers.empty());
  EXPECT_FALSE(AsksForTesseraResources(PodWithLimits({{"cpu", "1"}}), ResourceConfig{}));

  json no_resources = {{"spec", {{"containers", json::array({{{"name", "app"}}})}}}};
  r = DerivePodRequest(no_resources, ResourceConfig{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->containers.empty());
}

TEST(DerivePodRequestTest, ZeroCountAloneAsksForNothing) {
  auto r = DerivePodRequest(PodWithLimits({{"nvidia.com/gpu", "0"}}), ResourceConfig{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->containers.empty());
  EXPECT_FALSE(AsksForTesseraResources(PodWithLimits({{"nvidia.com/gpu", "0"}}), ResourceConfig{}));
}

TEST(DerivePodRequestTest, DefaultsWhenOnlyMemoryOrCoresGiven) {
  ResourceConfig config;
  auto r = DerivePodRequest(PodWithLimits({{"nvidia.com/gpumem", "2000"}}), config);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0], Req("app", 1, 2000, std::nullopt, 0));

  config.default_gpu_count = 2;
  config.default_cores = 25;
  r = DerivePodRequest(PodWithLimits({{"nvidia.com/gpumem-percentage", "50"}}), config);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0], Req("app", 2, 0, 50, 25));

  // Count only: whole GPU memory, default cores.
  r = DerivePodRequest(PodWithLimits({{"nvidia.com/gpu", "1"}}), ResourceConfig{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0], (Req("app", 1, 0, std::nullopt, 0)));
}

TEST(DerivePodRequestTest, DefaultMemoryAppliesWhenNeitherMemoryNorPercentGiven) {
  ResourceConfig config;
  config.default_memory_mib = 4096;
  config.default_memory_percent = 50;  // default_memory_mib wins
  auto r = DerivePodRequest(PodWithLimits({{"nvidia.com/gpu", "1"}}), config);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0], (Req("app", 1, 4096, std::nullopt, 0)));
  // Explicit 0 MiB means "not given": the default applies, as in HAMi.
  r = DerivePodRequest(PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "0"}}), config);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0].memory_mib, 4096);
  // An explicit percentage is kept and the default memory not added.
  r = DerivePodRequest(PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "10"}}),
                       config);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0], Req("app", 1, 0, 10, 0));

  config.default_memory_mib = 0;
  r = DerivePodRequest(PodWithLimits({{"nvidia.com/gpu", "1"}}), config);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0], (Req("app", 1, 0, 50, 0)));
}

TEST(DerivePodRequestTest, ExclusiveCores) {
  auto r = DerivePodRequest(PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "100"}}),
                            ResourceConfig{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0].cores, 100);
}

TEST(DerivePodRequestTest, RequestsAreTheFallbackForLimits) {
  json pod = PodWithLimits({{"nvidia.com/gpu", "1"}});
  pod["spec"]["containers"][0]["resources"]["requests"] = {{"nvidia.com/gpu", "1"},
                                                           {"nvidia.com/gpumem", "1024"}};
  auto r = DerivePodRequest(pod, ResourceConfig{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0], Req("app", 1, 1024, std::nullopt, 0));

  json only_requests = {
      {"spec",
       {{"containers",
         json::array({{{"name", "c"}, {"resources", {{"requests", {{"nvidia.com/gpucores", "20"}}}}}}})}}}};
  r = DerivePodRequest(only_requests, ResourceConfig{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0], Req("c", 1, 0, std::nullopt, 20));
}

TEST(DerivePodRequestTest, InitContainersAreSeparate) {
  json pod = PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}});
  pod["spec"]["initContainers"] =
      json::array({{{"name", "warmup"},
                    {"resources", {{"limits", {{"nvidia.com/gpu", "2"}, {"nvidia.com/gpucores", "50"}}}}}},
                   {{"name", "plain"}}});
  pod["spec"]["containers"].push_back({{"name", "sidecar"}, {"resources", {{"limits", {{"cpu", "100m"}}}}}});
  auto r = DerivePodRequest(pod, ResourceConfig{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->containers.size(), 1u);
  EXPECT_EQ(r->containers[0], Req("app", 1, 1000, std::nullopt, 0));
  ASSERT_EQ(r->init_containers.size(), 1u);
  EXPECT_EQ(r->init_containers[0], Req("warmup", 2, 0, std::nullopt, 50));
}

TEST(DerivePodRequestTest, ConfiguredResourceNames) {
  ResourceConfig config;
  config.gpu_count_name = "example.com/vgpu";
  config.gpu_memory_name = "example.com/vgpu-memory";
  auto r = DerivePodRequest(
      PodWithLimits({{"example.com/vgpu", "1"}, {"example.com/vgpu-memory", "512"}, {"nvidia.com/gpu", "3"}}),
      config);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0], Req("app", 1, 512, std::nullopt, 0));
}

TEST(DerivePodRequestTest, GpuFilterAnnotations) {
  json pod = PodWithLimits({{"nvidia.com/gpu", "1"}});
  pod["metadata"]["annotations"] = {
      {"nvidia.com/use-gputype", "A100, H100,,A100"},
      {"nvidia.com/nouse-gputype", "T4"},
      {"nvidia.com/use-gpuuuid", "GPU-1a2b3c4d-0000-1111-2222-333344445555"},
      {"nvidia.com/nouse-gpuuuid",
       "GPU-aaaaaaaa-0000-1111-2222-333344445555,MIG-bbbbbbbb-0000-1111-2222-333344445555"},
      {"unrelated", "x"}};
  auto r = DerivePodRequest(pod, ResourceConfig{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->filter.use_types, (std::vector<std::string>{"A100", "H100"}));
  EXPECT_EQ(r->filter.nouse_types, (std::vector<std::string>{"T4"}));
  EXPECT_EQ(r->filter.use_uuids, (std::vector<std::string>{"GPU-1a2b3c4d-0000-1111-2222-333344445555"}));
  EXPECT_EQ(r->filter.nouse_uuids.size(), 2u);
}

TEST(DerivePodRequestTest, AsksForTesseraResources) {
  ResourceConfig config;
  EXPECT_TRUE(AsksForTesseraResources(PodWithLimits({{"nvidia.com/gpumem", "100"}}), config));
  EXPECT_TRUE(AsksForTesseraResources(PodWithLimits({{"nvidia.com/gpu", "bogus"}}), config));
  EXPECT_TRUE(AsksForTesseraResources(PodWithLimits({{"nvidia.com/gpu", 1}}), config));
  EXPECT_FALSE(AsksForTesseraResources(PodWithLimits({{"nvidia.com/gpu", 0}}), config));
  EXPECT_FALSE(AsksForTesseraResources(json("not a pod"), config));
  // Zero in any resource but the count still asks (fuzz/regressions/pod_request):
  // derivation gives "gpumem: 0" alone a whole GPU and refuses "priority: 0"
  // alone, so the webhook must not wave such a pod through untouched.
  for (const char* name :
       {"nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage", "nvidia.com/priority"}) {
    json pod = PodWithLimits({{name, "0"}});
    EXPECT_TRUE(AsksForTesseraResources(pod, config)) << name;
    auto derived = DerivePodRequest(pod, config);
    EXPECT_TRUE(!derived.ok() || !derived->containers.empty()) << name;
  }
  json init_only = {
      {"spec",
       {{"containers", json::array({{{"name", "a"}}})},
        {"initContainers",
         json::array({{{"name", "i"}, {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}})}}}};
  EXPECT_TRUE(AsksForTesseraResources(init_only, config));
}

// Each rejection: the pod, and words the message must contain (container, field, hint).
struct RejectCase {
  std::string label;
  json pod;
  std::vector<std::string> message_parts;
};

class DerivePodRequestRejectTest : public testing::TestWithParam<RejectCase> {};

TEST_P(DerivePodRequestRejectTest, RejectsWithActionableReason) {
  const RejectCase& c = GetParam();
  auto r = DerivePodRequest(c.pod, ResourceConfig{});
  ASSERT_FALSE(r.ok()) << c.label << ": accepted";
  for (const std::string& part : c.message_parts) {
    EXPECT_NE(r.error().message.find(part), std::string::npos)
        << c.label << ": message lacks \"" << part << "\": " << r.error().message;
  }
  // DefaultedLimits fails exactly when derivation does.
  EXPECT_FALSE(DefaultedLimits(c.pod, ResourceConfig{}).ok()) << c.label;
}

json PodWithAnnotations(json annotations) {
  json pod = PodWithLimits({{"nvidia.com/gpu", "1"}});
  pod["metadata"]["annotations"] = annotations;
  return pod;
}

INSTANTIATE_TEST_SUITE_P(
    Rejections, DerivePodRequestRejectTest,
    testing::Values(
        RejectCase{"memory and percentage",
                   PodWithLimits({{"nvidia.com/gpumem", "1000"}, {"nvidia.com/gpumem-percentage", "50"}}),
                   {"container \"app\"", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "only one"}},
        RejectCase{"percentage 0",
                   PodWithLimits({{"nvidia.com/gpumem-percentage", "0"}}),
                   {"container \"app\"", "nvidia.com/gpumem-percentage is \"0\"", "1 to 100"}},
        RejectCase{"percentage 101",
                   PodWithLimits({{"nvidia.com/gpumem-percentage", "101"}}),
                   {"nvidia.com/gpumem-percentage is \"101\"", "1 to 100"}},
        RejectCase{
            "cores 101",
            PodWithLimits({{"nvidia.com/gpucores", "101"}}),
            {"container \"app\"", "nvidia.com/gpucores is \"101\"", "0 (no limit) to 100 (exclusive)"}},
        RejectCase{"cores negative",
                   PodWithLimits({{"nvidia.com/gpucores", "-1"}}),
                   {"nvidia.com/gpucores is \"-1\"", "must not be negative"}},
        RejectCase{
            "count 17", PodWithLimits({{"nvidia.com/gpu", "17"}}), {"nvidia.com/gpu is \"17\"", "1 to 16"}},
        RejectCase{"count fractional",
                   PodWithLimits({{"nvidia.com/gpu", "1.5"}}),
                   {"nvidia.com/gpu is \"1.5\"", "whole number"}},
        RejectCase{"count milli", PodWithLimits({{"nvidia.com/gpu", "500m"}}), {"500m", "whole number"}},
        RejectCase{"count negative", PodWithLimits({{"nvidia.com/gpu", "-1"}}), {"must not be negative"}},
        RejectCase{"count zero with memory",
                   PodWithLimits({{"nvidia.com/gpu", "0"}, {"nvidia.com/gpumem", "10"}}),
                   {"nvidia.com/gpu is \"0\"", "1 or more"}},
        RejectCase{
            "count zero with cores",
            PodWithLimits({{"nvidia.com/gpu", "0"}, {"nvidia.com/gpucores", "30"}}),
            {"container \"app\"", "nvidia.com/gpu is \"0\" but the container also sets nvidia.com/gpucores",
             "1 or more", "or remove nvidia.com/gpucores"}},
        RejectCase{"count zero with percentage",
                   PodWithLimits({{"nvidia.com/gpu", "0"}, {"nvidia.com/gpumem-percentage", "50"}}),
                   {"nvidia.com/gpu is \"0\" but the container also sets nvidia.com/gpumem-percentage",
                    "1 or more"}},
        RejectCase{"count zero with priority",
                   PodWithLimits({{"nvidia.com/gpu", "0"}, {"nvidia.com/priority", "1"}}),
                   {"nvidia.com/gpu is \"0\" but the container also sets nvidia.com/priority", "1 or more"}},
        RejectCase{"count zero with memory and cores",
                   PodWithLimits(
                       {{"nvidia.com/gpu", "0"}, {"nvidia.com/gpumem", "10"}, {"nvidia.com/gpucores", "5"}}),
                   {"also sets nvidia.com/gpumem, nvidia.com/gpucores;"}},
        RejectCase{
            "memory over 1 TiB",
            PodWithLimits({{"nvidia.com/gpumem", "1048577"}}),
            {"container \"app\"", "nvidia.com/gpumem is \"1048577\"", "from 0 (whole GPU) to 1048576"}},
        RejectCase{"memory over 1 TiB as a JSON integer",
                   PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", 2000000}}),
                   {"nvidia.com/gpumem is \"2000000\"", "to 1048576"}},
        RejectCase{"memory 2Ti in bytes",
                   PodWithLimits({{"nvidia.com/gpumem", "2Ti"}}),
                   {"nvidia.com/gpumem is \"2Ti\"", "2Ti of memory is 2097152 MiB, outside that range"}},
        RejectCase{"priority above 2^31-1",
                   PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "2147483648"}}),
                   {"container \"app\"", "nvidia.com/priority is \"2147483648\"", "from 0 to 2147483647"}},
        RejectCase{"priority far above 2^31-1",
                   PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "1e12"}}),
                   {"nvidia.com/priority is \"1e12\"", "from 0 to 2147483647"}},
        RejectCase{
            "uuid in both filters",
            PodWithAnnotations({{"nvidia.com/use-gpuuuid",
                                 "GPU-1a2b3c4d-0000-1111-2222-333344445555,"
                                 "GPU-aaaaaaaa-0000-1111-2222-333344445555"},
                                {"nvidia.com/nouse-gpuuuid", "GPU-aaaaaaaa-0000-1111-2222-333344445555"}}),
            {"nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid",
             "\"GPU-aaaaaaaa-0000-1111-2222-333344445555\"", "remove it from one of them"}},
        RejectCase{
            "uuid in both filters, hex in another case",
            PodWithAnnotations({{"nvidia.com/use-gpuuuid", "GPU-AAAAAAAA-0000-1111-2222-333344445555"},
                                {"nvidia.com/nouse-gpuuuid", "GPU-aaaaaaaa-0000-1111-2222-333344445555"}}),
            {"nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid", "remove it from one of them"}},
        RejectCase{
            "type in both filters, another case",
            PodWithAnnotations({{"nvidia.com/use-gputype", "a100"}, {"nvidia.com/nouse-gputype", "A100"}}),
            {"nvidia.com/use-gputype", "nvidia.com/nouse-gputype", "\"a100\""}},
        RejectCase{"memory garbage",
                   PodWithLimits({{"nvidia.com/gpumem", "12Q"}}),
                   {"container \"app\"", "nvidia.com/gpumem", "unknown suffix \"Q\""}},
        RejectCase{"memory fractional",
                   PodWithLimits({{"nvidia.com/gpumem", "1.5"}}),
                   {"nvidia.com/gpumem is \"1.5\"", "whole number", "e.g. \"3000\""}},
        RejectCase{"memory in bytes",
                   PodWithLimits({{"nvidia.com/gpumem", "8Gi"}}),
                   {"nvidia.com/gpumem is \"8Gi\"", "write \"8192\""}},
        RejectCase{
            "memory negative", PodWithLimits({{"nvidia.com/gpumem", "-100"}}), {"must not be negative"}},
        RejectCase{"value not a string",
                   PodWithLimits({{"nvidia.com/gpumem", 1.5}}),
                   {"nvidia.com/gpumem is 1.5", "quantity string"}},
        RejectCase{"value is bool", PodWithLimits({{"nvidia.com/gpu", true}}), {"nvidia.com/gpu is true"}},
        RejectCase{"priority without gpu",
                   PodWithLimits({{"nvidia.com/priority", "1"}}),
                   {"nvidia.com/priority is set but the container asks for no GPU"}},
        RejectCase{"priority negative",
                   PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "-1"}}),
                   {"nvidia.com/priority is \"-1\""}},
        RejectCase{"limit and request differ",
                   [] {
                     json p = PodWithLimits({{"nvidia.com/gpu", "1"}});
                     p["spec"]["containers"][0]["resources"]["requests"] = {{"nvidia.com/gpu", "2"}};
                     return p;
                   }(),
                   {"nvidia.com/gpu has limit \"1\" but request \"2\""}},
        RejectCase{"init container named",
                   [] {
                     json p = PodWithLimits({{"cpu", "1"}});
                     p["spec"]["initContainers"] =
                         json::array({{{"name", "setup"},
                                       {"resources", {{"limits", {{"nvidia.com/gpucores", "200"}}}}}}});
                     return p;
                   }(),
                   {"init container \"setup\"", "nvidia.com/gpucores is \"200\""}},
        RejectCase{"limits not an object",
                   PodWithLimits("2"),
                   {"container \"app\"", "limits", "expected an object"}},
        RejectCase{"not an object", json::array(), {"expected a JSON object"}},
        RejectCase{"no spec", json{{"metadata", json::object()}}, {"spec is missing"}},
        RejectCase{
            "containers not array", json{{"spec", {{"containers", "x"}}}}, {"spec.containers", "array"}},
        RejectCase{"container without name",
                   json{{"spec", {{"containers", json::array({{{"resources", json::object()}}})}}}},
                   {"spec.containers[0]", "name"}},
        RejectCase{
            "type in both filters",
            PodWithAnnotations({{"nvidia.com/use-gputype", "A100"}, {"nvidia.com/nouse-gputype", "T4,A100"}}),
            {"nvidia.com/use-gputype", "nvidia.com/nouse-gputype", "\"A100\""}},
        RejectCase{"malformed uuid filter",
                   PodWithAnnotations({{"nvidia.com/use-gpuuuid", "GPU-123"}}),
                   {"annotation nvidia.com/use-gpuuuid", "\"GPU-123\" is malformed"}},
        RejectCase{"empty filter",
                   PodWithAnnotations({{"nvidia.com/nouse-gputype", " , "}}),
                   {"annotation nvidia.com/nouse-gputype", "names nothing"}},
        RejectCase{"filter not a string",
                   PodWithAnnotations({{"nvidia.com/use-gputype", 3}}),
                   {"annotation nvidia.com/use-gputype", "expected a string"}}),
    [](const testing::TestParamInfo<RejectCase>& param_info) {
      std::string name;
      for (char ch : param_info.param.label) name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
      return name;
    });

TEST(DefaultedLimitsTest, ListsWhatDerivationFilledIn) {
  ResourceConfig config;
  config.default_cores = 10;
  config.default_memory_mib = 2048;
  json pod = PodWithLimits({{"nvidia.com/gpucores", "30"}});
  pod["spec"]["containers"].push_back(
      {{"name", "full"},
       {"resources",
        {{"limits",
          {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "100"}, {"nvidia.com/gpucores", "5"}}}}}});
  pod["spec"]["initContainers"] =
      json::array({{{"name", "init"}, {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}});
  auto d = DefaultedLimits(pod, config);
  ASSERT_TRUE(d.ok()) << d.error().message;
  ASSERT_EQ(d->size(), 2u);  // "full" needs nothing
  EXPECT_EQ((*d)[0],
            (ContainerDefaults{false, 0, "app", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "2048"}}}));
  EXPECT_EQ((*d)[1], (ContainerDefaults{
                         true, 0, "init", {{"nvidia.com/gpumem", "2048"}, {"nvidia.com/gpucores", "10"}}}));

  // With the stock config, a count-only container needs nothing written back.
  auto none = DefaultedLimits(PodWithLimits({{"nvidia.com/gpu", "1"}}), ResourceConfig{});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());

  ResourceConfig pct;
  pct.default_memory_percent = 25;
  auto p = DefaultedLimits(PodWithLimits({{"nvidia.com/gpucores", "30"}}), pct);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->size(), 1u);
  EXPECT_EQ((*p)[0].limits_to_add, (std::vector<std::pair<std::string, std::string>>{
                                       {"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "25"}}));
}

TEST(ResourceConfigTest, ValidatesItself) {
  EXPECT_TRUE(ResourceConfig{}.Validate().ok());
  struct Case {
    std::function<void(ResourceConfig&)> change;
    std::string message_part;
  };
  for (const Case& c : std::vector<Case>{
           {[](ResourceConfig& r) { r.gpu_count_name = ""; }, "gpu_count_name is empty"},
           {[](ResourceConfig& r) { r.gpu_cores_name = r.gpu_memory_name; },
            "gpu_cores_name and gpu_memory_name"},
           {[](ResourceConfig& r) { r.default_memory_mib = -1; }, "default_memory_mib is -1"},
           {[](ResourceConfig& r) { r.default_memory_percent = 0; }, "default_memory_percent is 0"},
           {[](ResourceConfig& r) { r.default_memory_percent = 101; }, "1..100"},
           {[](ResourceConfig& r) { r.default_cores = 101; }, "default_cores is 101"},
           {[](ResourceConfig& r) { r.default_gpu_count = 0; }, "default_gpu_count is 0"},
           {[](ResourceConfig& r) { r.default_gpu_count = 17; }, "1..16"},
       }) {
    ResourceConfig config;
    c.change(config);
    Status s = config.Validate();
    ASSERT_FALSE(s.ok()) << c.message_part;
    EXPECT_NE(s.error().message.find(c.message_part), std::string::npos) << s.error().message;
  }
}

}  // namespace
}  // namespace tessera::core

namespace tessera::core {
namespace {

json WithAnnotation(json pod, const std::string& key, json value) {
  pod["metadata"]["annotations"][key] = std::move(value);
  return pod;
}

TEST(SharingModeRequestTest, MpsAliasesMakeAnMpsShareWithGibConverted) {
  auto r =
      DerivePodRequest(PodWithLimits({{"nvidia.com/mps-core", "50"}, {"nvidia.com/mps-memory", "8"}}), {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->containers.size(), 1u);
  const ContainerRequest& c = r->containers[0];
  EXPECT_EQ(c.share, ShareKind::kMps);
  EXPECT_EQ(c.gpus, 1) << "the default count";
  EXPECT_EQ(c.memory_mib, 8 * 1024);
  EXPECT_EQ(c.cores, 50);
  EXPECT_TRUE(AsksForTesseraResources(PodWithLimits({{"nvidia.com/mps-core", "50"}}), {}));
  EXPECT_TRUE(AsksForTesseraResources(PodWithLimits({{"nvidia.com/mps-memory", "8"}}), {}));
}

TEST(SharingModeRequestTest, TheMpsAnnotationMakesTesseraResourcesAnMpsShare) {
  json pod = WithAnnotation(
      PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4096"}, {"nvidia.com/gpucores", "30"}}),
      "nvidia.com/vgpu-mode", "MPS");
  auto r = DerivePodRequest(pod, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0].share, ShareKind::kMps);
  EXPECT_EQ(r->containers[0].memory_mib, 4096);
  EXPECT_EQ(r->containers[0].cores, 30);
}

TEST(SharingModeRequestTest, ExclusiveAnnotationAsksWholeGpus) {
  json pod = WithAnnotation(PodWithLimits({{"nvidia.com/gpu", "2"}}), "nvidia.com/vgpu-mode", "exclusive");
  auto r = DerivePodRequest(pod, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0].share, ShareKind::kExclusive);
  EXPECT_EQ(r->containers[0].cores, 100);
  EXPECT_EQ(r->containers[0].memory_mib, 0);
  // The webhook writes the cores it implies, and the pod derives the same again.
  auto defaults = DefaultedLimits(pod, {});
  ASSERT_TRUE(defaults.ok()) << defaults.error().message;
  ASSERT_EQ(defaults->size(), 1u);
  EXPECT_EQ((*defaults)[0].limits_to_add,
            (std::vector<std::pair<std::string, std::string>>{{"nvidia.com/gpucores", "100"}}));
}

TEST(SharingModeRequestTest, VgpuAnnotationsAndPlainCountsAreVgpuSlices) {
  for (const char* value : {"hami-core", "vgpu", "mig", "something-else"}) {
    auto r = DerivePodRequest(
        WithAnnotation(PodWithLimits({{"nvidia.com/gpu", "1"}}), "nvidia.com/vgpu-mode", value), {});
    ASSERT_TRUE(r.ok()) << value;
    EXPECT_EQ(r->containers[0].share, ShareKind::kVgpu) << value;
  }
  auto plain = DerivePodRequest(PodWithLimits({{"nvidia.com/gpu", "1"}}), {});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->containers[0].share, ShareKind::kVgpu);
}

TEST(SharingModeRequestTest, ReplicaResourcesAreNotTessera) {
  const json pod = PodWithLimits({{"nvidia.com/gpu.shared", "1"}});
  EXPECT_FALSE(AsksForTesseraResources(pod, {}));
  auto r = DerivePodRequest(pod, {});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->containers.empty());
}

TEST(SharingModeRequestTest, BadMpsRequestsAreRefusedWithTheReason) {
  const std::pair<json, const char*> cases[] = {
      {PodWithLimits({{"nvidia.com/mps-core", "0"}}),
       "nvidia.com/mps-core is \"0\"; it must be a whole percent"},
      {PodWithLimits({{"nvidia.com/mps-core", "101"}}), "nvidia.com/mps-core is \"101\""},
      {PodWithLimits({{"nvidia.com/mps-core", "50"}, {"nvidia.com/mps-memory", "0"}}),
       "nvidia.com/mps-memory is \"0\""},
      {PodWithLimits({{"nvidia.com/mps-core", "50"}, {"nvidia.com/mps-memory", "8Gi"}}),
       "for 8Gi write \"8\""},
      {PodWithLimits({{"nvidia.com/mps-core", "50"}, {"nvidia.com/mps-memory", "1.5"}}), "whole number"},
      {PodWithLimits({{"nvidia.com/mps-memory", "8"}}), "an MPS share needs its active-thread percentage"},
      {PodWithLimits({{"nvidia.com/gpu", "2"}, {"nvidia.com/mps-core", "50"}}),
       "an MPS share is on one GPU, but nvidia.com/gpu is \"2\""},
      {PodWithLimits({{"nvidia.com/mps-core", "50"}, {"nvidia.com/gpucores", "50"}}),
       "both nvidia.com/mps-core and nvidia.com/gpucores are set"},
      {PodWithLimits({{"nvidia.com/mps-memory", "8"}, {"nvidia.com/gpumem", "8192"}}),
       "both nvidia.com/mps-memory and nvidia.com/gpumem are set"},
      {PodWithLimits({{"nvidia.com/mps-memory", "8"}, {"nvidia.com/gpumem-percentage", "10"}}),
       "both nvidia.com/mps-memory and nvidia.com/gpumem-percentage are set"},
      {PodWithLimits({{"nvidia.com/gpu", "0"}, {"nvidia.com/mps-core", "50"}}),
       "also sets nvidia.com/mps-core"},
      {WithAnnotation(PodWithLimits({{"nvidia.com/mps-core", "50"}}), "nvidia.com/vgpu-mode", "exclusive"),
       "but the pod's nvidia.com/vgpu-mode is exclusive"},
      {WithAnnotation(PodWithLimits({{"nvidia.com/gpu", "1"}}), "nvidia.com/vgpu-mode", "mps"),
       "an MPS share needs its active-thread percentage"},
      {WithAnnotation(PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "50"}}),
                      "nvidia.com/vgpu-mode", "exclusive"),
       "nvidia.com/gpucores is \"50\"; remove it or set it to 100"},
      {WithAnnotation(PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}),
                      "nvidia.com/vgpu-mode", "exclusive"),
       "is exclusive, which gives whole GPUs, but the container sets nvidia.com/gpumem"},
  };
  for (const auto& [pod, says] : cases) {
    auto r = DerivePodRequest(pod, {});
    ASSERT_FALSE(r.ok()) << pod.dump();
    EXPECT_NE(r.error().message.find(says), std::string::npos) << r.error().message;
    EXPECT_FALSE(DefaultedLimits(pod, {}).ok()) << "fails exactly when derivation does";
  }
}

TEST(SharingModeRequestTest, DefaultsAreNotAddedBesideMpsAliases) {
  ResourceConfig config;
  config.default_memory_mib = 2048;
  config.default_cores = 20;
  const json pod = PodWithLimits({{"nvidia.com/mps-core", "50"}, {"nvidia.com/mps-memory", "8"}});
  auto defaults = DefaultedLimits(pod, config);
  ASSERT_TRUE(defaults.ok()) << defaults.error().message;
  ASSERT_EQ(defaults->size(), 1u);
  EXPECT_EQ((*defaults)[0].limits_to_add,
            (std::vector<std::pair<std::string, std::string>>{{"nvidia.com/gpu", "1"}}));
  // With the cores missing, the configured default gives the percentage.
  auto r = DerivePodRequest(PodWithLimits({{"nvidia.com/mps-memory", "8"}}), config);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0].cores, 20);
  EXPECT_EQ(r->containers[0].memory_mib, 8192);
}

TEST(SharingModeRequestTest, AliasNamesAreConfigurableAndChecked) {
  ResourceConfig config;
  config.mps_cores_name = "example.com/mps-threads";
  auto r = DerivePodRequest(PodWithLimits({{"example.com/mps-threads", "40"}}), config);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->containers[0].share, ShareKind::kMps);
  config.mps_memory_name = "nvidia.com/gpumem";
  auto refused = config.Validate();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("mps_memory_name and gpu_memory_name"), std::string::npos)
      << refused.error().message;
}

}  // namespace
}  // namespace tessera::core
