#include "scheduler/quota_watch.h"

#include <gtest/gtest.h>

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;

Json Quota(const std::string& ns, const std::string& name, const Json& hard) {
  return {{"apiVersion", "v1"},
          {"kind", "ResourceQuota"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"resourceVersion", "7"}}},
          {"spec", {{"hard", hard}}}};
}

TEST(GpuMemoryQuotaIndexTest, KnowsWhichNamespacesLimitGpuMemory) {
  GpuMemoryQuotaIndex index("nvidia.com/gpumem");
  EXPECT_EQ(index.quota_key(), "requests.nvidia.com/gpumem");
  index.Upsert(Quota("team", "b-quota", {{"requests.nvidia.com/gpumem", "40000"}}));
  index.Upsert(Quota("team", "a-quota", {{"requests.nvidia.com/gpumem", "1000"}, {"pods", "10"}}));
  index.Upsert(Quota("team", "cpu", {{"requests.cpu", "8"}}));
  // Other resources, or GPU memory under a name quota does not take, limit nothing here.
  index.Upsert(Quota("other", "cores", {{"requests.nvidia.com/gpucores", "200"}, {"pods", "4"}}));
  index.Upsert(Quota("empty", "none", Json::object()));
  NamespaceQuota team = index.Lookup("team");
  EXPECT_TRUE(team.unknown.empty()) << team.unknown;
  EXPECT_EQ(team.quotas, (std::vector<std::string>{"a-quota", "b-quota"}));
  EXPECT_TRUE(index.Lookup("other").quotas.empty());
  EXPECT_TRUE(index.Lookup("empty").quotas.empty());
  EXPECT_TRUE(index.Lookup("nowhere").quotas.empty());
  // An update that drops the key, and a delete.
  index.Upsert(Quota("team", "b-quota", {{"pods", "3"}}));
  EXPECT_EQ(index.Lookup("team").quotas, (std::vector<std::string>{"a-quota"}));
  index.Delete(Quota("team", "a-quota", Json::object()));
  EXPECT_TRUE(index.Lookup("team").quotas.empty());
  index.Delete(Quota("nowhere", "x", Json::object()));  // unknown: nothing happens
  // The resource name is the config's.
  GpuMemoryQuotaIndex renamed("example.com/vmem");
  renamed.Upsert(Quota("team", "q", {{"requests.nvidia.com/gpumem", "1"}}));
  renamed.Upsert(Quota("lab", "q", {{"requests.example.com/vmem", "1"}}));
  EXPECT_TRUE(renamed.Lookup("team").quotas.empty());
  EXPECT_EQ(renamed.Lookup("lab").quotas, (std::vector<std::string>{"q"}));
}

TEST(GpuMemoryQuotaIndexTest, AnUnreadableQuotaMakesOnlyItsNamespaceUnknownUntilFixed) {
  GpuMemoryQuotaIndex index("nvidia.com/gpumem");
  index.Upsert(Quota("lab", "gpu", {{"requests.nvidia.com/gpumem", "1000"}}));
  Json hard_string = Quota("team", "broken", Json::object());
  hard_string["spec"]["hard"] = "requests.nvidia.com/gpumem=1000";
  index.Upsert(hard_string);
  NamespaceQuota team = index.Lookup("team");
  EXPECT_EQ(team.unknown, "ResourceQuota \"broken\" cannot be read: spec.hard is not an object");
  EXPECT_EQ(index.Lookup("lab").quotas, (std::vector<std::string>{"gpu"}));
  EXPECT_TRUE(index.Lookup("lab").unknown.empty());
  Json spec_array = Quota("team", "worse", Json::object());
  spec_array["spec"] = Json::array();
  index.Upsert(spec_array);
  EXPECT_NE(
      index.Lookup("team").unknown.find("ResourceQuota \"worse\" cannot be read: spec is not an object"),
      std::string::npos);
  Json nameless = Quota("ops", "", Json::object());
  index.Upsert(nameless);
  EXPECT_NE(index.Lookup("ops").unknown.find("no metadata.name"), std::string::npos);
  // A quota without spec (or without hard) is readable and limits nothing.
  Json no_spec = Quota("plain", "q", Json::object());
  no_spec.erase("spec");
  index.Upsert(no_spec);
  EXPECT_TRUE(index.Lookup("plain").unknown.empty());
  // Fixed, or deleted: known again.
  index.Upsert(Quota("team", "broken", {{"requests.nvidia.com/gpumem", "1000"}}));
  index.Delete(spec_array);
  team = index.Lookup("team");
  EXPECT_TRUE(team.unknown.empty()) << team.unknown;
  EXPECT_EQ(team.quotas, (std::vector<std::string>{"broken"}));
  // Not even an object: no crash, and no namespace it could be in.
  index.Upsert(Json("garbage"));
  index.Upsert(Json::array());
  EXPECT_TRUE(index.Lookup("team").unknown.empty());
}

}  // namespace
}  // namespace tessera::scheduler
