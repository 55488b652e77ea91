#include "dra/gpu_config.h"

#include <gtest/gtest.h>

namespace tessera::dra {
namespace {

using Json = nlohmann::json;

Json Base() {
  return {{"apiVersion", "tessera.io/v1alpha1"}, {"kind", "GpuConfig"}};
}

TEST(GpuConfigTest, ReadsEveryField) {
  Json p = Base();
  p["sharing"] = {{"strategy", "vGPU"}};
  p["computePolicy"] = "disable";
  p["priority"] = 1;
  p["oversubscription"] = true;
  auto c = ParseGpuConfig(p);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->compute_policy, "disable");
  EXPECT_EQ(c->priority, 1);
  EXPECT_EQ(c->oversubscription, true);
}

TEST(GpuConfigTest, LaterConfigOverridesOnlyWhatItSets) {
  GpuConfig a;
  a.compute_policy = "force";
  a.priority = 1;
  GpuConfig b;
  b.priority = 0;
  a.MergeFrom(b);
  EXPECT_EQ(a.compute_policy, "force");
  EXPECT_EQ(a.priority, 0);
}

TEST(GpuConfigTest, RefusesWithAnErrorNamingTheProblem) {
  const std::vector<std::pair<Json, std::string>> cases = {
      {Json::array(), "not an object"},
      {Json{{"kind", "GpuConfig"}}, "'apiVersion' is missing"},
      {Json{{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", "GpuConfig"}},
       "is not tessera.io/v1alpha1"},
      {Json{{"apiVersion", "tessera.io/v1alpha1"}, {"kind", "MigDeviceConfig"}}, "kind 'MigDeviceConfig'"},
      {[] {
         Json p = Base();
         p["sharing"] = {{"strategy", "MPS"}};
         return p;
       }(),
       "not supported by tessera-dra"},
      {[] {
         Json p = Base();
         p["sharing"] = {{"strategy", "vGPU"}, {"x", 1}};
         return p;
       }(),
       "'sharing.x'"},
      {[] {
         Json p = Base();
         p["computePolicy"] = "always";
         return p;
       }(),
       "not one of default, force, disable"},
      {[] {
         Json p = Base();
         p["priority"] = "high";
         return p;
       }(),
       "'priority' is not an integer"},
      {[] {
         Json p = Base();
         p["priority"] = 7;
         return p;
       }(),
       "priority 7 is not 0 (high) or 1 (low)"},
      {[] {
         Json p = Base();
         p["oversubscription"] = "yes";
         return p;
       }(),
       "not a boolean"},
      {[] {
         Json p = Base();
         p["memory"] = "1Gi";
         return p;
       }(),
       "unknown field 'memory'"},
  };
  for (const auto& [params, error] : cases) {
    auto c = ParseGpuConfig(params);
    ASSERT_FALSE(c.ok()) << params.dump();
    EXPECT_NE(c.error().message.find(error), std::string::npos) << c.error().message;
  }
}

}  // namespace
}  // namespace tessera::dra
