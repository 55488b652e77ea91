#include "dra/container_claims.h"

#include <gtest/gtest.h>

#include <map>

namespace tessera::dra {
namespace {

using Json = nlohmann::json;

constexpr const char* kDriver = "gpu.tessera.io";

// A claim of namespace "team" with one result per (request, driver), reserved
// for `pods` (name -> UID).
Json Claim(const std::string& name, std::vector<std::pair<std::string, std::string>> results,
           std::map<std::string, std::string> pods = {{"p", "uid-p"}}) {
  Json r = Json::array();
  for (const auto& [request, driver] : results) {
    r.push_back({{"request", request}, {"driver", driver}, {"pool", "node-a"}, {"device", "gpu-0"}});
  }
  Json reserved = Json::array();
  for (const auto& [pod, uid] : pods) reserved.push_back({{"resource", "pods"}, {"name", pod}, {"uid", uid}});
  return {{"metadata", {{"namespace", "team"}, {"name", name}, {"uid", "uid-" + name}}},
          {"status", {{"allocation", {{"devices", {{"results", r}}}}}, {"reservedFor", reserved}}}};
}
Json TesseraClaim(const std::string& name, std::map<std::string, std::string> pods = {{"p", "uid-p"}}) {
  return Claim(name, {{"gpu", kDriver}}, std::move(pods));
}

Json Container(const std::string& name, std::vector<std::pair<std::string, std::string>> refs) {
  Json claims = Json::array();
  for (const auto& [pod_claim, request] : refs) {
    Json ref = {{"name", pod_claim}};
    if (!request.empty()) ref["request"] = request;
    claims.push_back(ref);
  }
  return {{"name", name}, {"image", "cuda"}, {"resources", {{"claims", claims}}}};
}

// A pod whose spec.resourceClaims entries name the claims directly
// (pod claim name == claim name).
Json Pod(const std::string& name, const std::string& uid, Json containers, std::vector<std::string> claims,
         Json init_containers = Json::array()) {
  Json entries = Json::array();
  for (const auto& c : claims) entries.push_back({{"name", c}, {"resourceClaimName", c}});
  return {{"metadata", {{"namespace", "team"}, {"name", name}, {"uid", uid}}},
          {"spec",
           {{"containers", containers}, {"initContainers", init_containers}, {"resourceClaims", entries}}}};
}

class ContainerClaimsTest : public ::testing::Test {
 protected:
  ContainerClaimCheck Check() {
    ContainerClaimCheck check;
    check.driver = kDriver;
    check.read_pod = [this](const std::string& ns, const std::string& name) -> Result<std::optional<Json>> {
      ++pod_reads_;
      if (pod_api_down_) return Error{"connection refused"};
      auto it = pods_.find(ns + "/" + name);
      if (it == pods_.end()) return std::optional<Json>();
      return std::optional<Json>(it->second);
    };
    check.read_claim = [this](const std::string& ns, const std::string& name) -> Result<std::optional<Json>> {
      auto it = claims_.find(ns + "/" + name);
      if (it == claims_.end()) return std::optional<Json>();
      return std::optional<Json>(it->second);
    };
    return check;
  }
  void AddPod(const Json& pod) { pods_["team/" + pod["metadata"]["name"].get<std::string>()] = pod; }
  void AddClaim(const Json& claim) {
    claims_["team/" + claim["metadata"]["name"].get<std::string>()] = claim;
  }
  Status CheckClaim(const std::string& name) {
    return CheckOneClaimPerContainer(claims_.at("team/" + name), Check());
  }

  std::map<std::string, Json> pods_;
  std::map<std::string, Json> claims_;
  bool pod_api_down_ = false;
  int pod_reads_ = 0;
};

TEST(ContainersWithClaimsTest, ResolvesDirectAndTemplateClaimsOfInitAndRegularContainers) {
  Json pod = {
      {"metadata", {{"name", "p"}}},
      {"spec",
       {{"resourceClaims", Json::array({{{"name", "shared"}, {"resourceClaimName", "team-gpu"}},
                                        {{"name", "own"}, {"resourceClaimTemplateName", "one-gpu"}},
                                        {{"name", "not-needed"}, {"resourceClaimTemplateName", "other"}}})},
        {"initContainers", Json::array({Container("setup", {{"own", ""}})})},
        {"containers", Json::array({Container("main", {{"shared", "gpu"}, {"own", ""}, {"not-needed", ""}}),
                                    Container("no-claims", {}), Container("unknown", {{"typo", ""}})})}}},
      {"status",
       {{"resourceClaimStatuses",
         Json::array({{{"name", "own"}, {"resourceClaimName", "p-own-x7k2q"}}, {{"name", "not-needed"}}})}}}};
  const std::vector<ContainerClaims> expected = {
      {"setup", true, {{"own", "p-own-x7k2q", ""}}},
      {"main", false, {{"shared", "team-gpu", "gpu"}, {"own", "p-own-x7k2q", ""}}},
  };
  EXPECT_EQ(ContainersWithClaims(pod), expected);
}

TEST(GetsDeviceOfTest, OnlyTheNamedRequestsResultsCount) {
  const Json claim = Claim("c", {{"gpu/a100", kDriver}, {"nic", "net.example.com"}});
  EXPECT_TRUE(GetsDeviceOf(claim, kDriver, ""));
  EXPECT_TRUE(GetsDeviceOf(claim, kDriver, "gpu")) << "a subrequest's result is its request's";
  EXPECT_FALSE(GetsDeviceOf(claim, kDriver, "nic"));
  EXPECT_FALSE(GetsDeviceOf(claim, "net.example.com", "gpu"));
  EXPECT_FALSE(GetsDeviceOf(Json::object(), kDriver, "")) << "not allocated";
}

TEST_F(ContainerClaimsTest, TwoDirectClaimsInOneContainerAreRefusedNamingPodContainerAndClaims) {
  AddClaim(TesseraClaim("a"));
  AddClaim(TesseraClaim("b"));
  AddPod(Pod("p", "uid-p", Json::array({Container("main", {{"a", ""}, {"b", ""}})}), {"a", "b"}));
  for (const char* name : {"a", "b"}) {
    const Status s = CheckClaim(name);
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_EQ(s.error().message,
              "pod team/p: container 'main' would get 2 claims of gpu.tessera.io (team/a, team/b), but a "
              "container may hold one: each mounts its limits at /run/tessera/limits, one would hide the "
              "other's; ask for the devices in one claim, or give each claim its own container");
  }
}

TEST_F(ContainerClaimsTest, ATemplateClaimBesideADirectOneIsRefused) {
  AddClaim(TesseraClaim("team-gpu"));
  AddClaim(TesseraClaim("p-own-x7k2q"));
  Json pod = Pod("p", "uid-p", Json::array({Container("main", {{"shared", ""}, {"own", ""}})}), {});
  pod["spec"]["resourceClaims"] = Json::array({{{"name", "shared"}, {"resourceClaimName", "team-gpu"}},
                                               {{"name", "own"}, {"resourceClaimTemplateName", "one-gpu"}}});
  AddPod(pod);
  // Before the resourceclaim controller wrote the generated name, the
  // kubelet cannot resolve it either.
  EXPECT_TRUE(CheckClaim("team-gpu").ok());
  pod["status"]["resourceClaimStatuses"] =
      Json::array({{{"name", "own"}, {"resourceClaimName", "p-own-x7k2q"}}});
  AddPod(pod);
  const Status s = CheckClaim("team-gpu");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("container 'main' would get 2 claims of gpu.tessera.io (team/p-own-x7k2q, "
                                   "team/team-gpu)"),
            std::string::npos)
      << s.error().message;
  EXPECT_FALSE(CheckClaim("p-own-x7k2q").ok());
}

TEST_F(ContainerClaimsTest, AnInitContainerWithTwoClaimsIsRefused) {
  AddClaim(TesseraClaim("a"));
  AddClaim(TesseraClaim("b"));
  AddPod(Pod("p", "uid-p", Json::array({Container("main", {{"a", ""}})}), {"a", "b"},
             Json::array({Container("warm-up", {{"a", ""}, {"b", ""}})})));
  const Status s = CheckClaim("a");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("pod team/p: init container 'warm-up' would get 2 claims"),
            std::string::npos)
      << s.error().message;
}

TEST_F(ContainerClaimsTest, OneClaimPerContainerIsFine) {
  AddClaim(TesseraClaim("a"));
  AddClaim(TesseraClaim("b"));
  // Two containers with one claim each; an init container and a container
  // with one each (they are different containers).
  AddPod(Pod("p", "uid-p", Json::array({Container("one", {{"a", ""}}), Container("two", {{"b", ""}})}),
             {"a", "b"}, Json::array({Container("init", {{"b", ""}})})));
  EXPECT_TRUE(CheckClaim("a").ok());
  EXPECT_TRUE(CheckClaim("b").ok());
}

TEST_F(ContainerClaimsTest, OneClaimSharedByTwoContainersIsFine) {
  AddClaim(TesseraClaim("a"));
  AddPod(
      Pod("p", "uid-p", Json::array({Container("one", {{"a", ""}}), Container("two", {{"a", ""}})}), {"a"}));
  EXPECT_TRUE(CheckClaim("a").ok());
}

TEST_F(ContainerClaimsTest, AnotherDriversClaimOrRequestBesideOursIsFine) {
  AddClaim(Claim("mixed", {{"gpu", kDriver}, {"nic", "net.example.com"}}));
  AddClaim(Claim("net", {{"nic", "net.example.com"}}));
  AddClaim(TesseraClaim("a"));
  // "a" with another driver's claim, and with the other driver's request of a
  // claim that also holds one of ours.
  AddPod(Pod("p", "uid-p", Json::array({Container("main", {{"a", ""}, {"net", ""}, {"mixed", "nic"}})}),
             {"a", "net", "mixed"}));
  EXPECT_TRUE(CheckClaim("a").ok());
  // The same container given the tessera request of "mixed" has two.
  AddPod(Pod("p", "uid-p", Json::array({Container("main", {{"a", ""}, {"mixed", "gpu"}})}), {"a", "mixed"}));
  EXPECT_FALSE(CheckClaim("a").ok());
  EXPECT_FALSE(CheckClaim("mixed").ok());
}

TEST_F(ContainerClaimsTest, ASharedClaimIsRefusedForAnyOfItsPodsAndNamesIt) {
  const std::map<std::string, std::string> both = {{"good", "uid-good"}, {"bad", "uid-bad"}};
  AddClaim(TesseraClaim("shared", both));
  AddClaim(TesseraClaim("b", {{"bad", "uid-bad"}}));
  AddPod(Pod("good", "uid-good", Json::array({Container("main", {{"shared", ""}})}), {"shared"}));
  AddPod(
      Pod("bad", "uid-bad", Json::array({Container("main", {{"shared", ""}, {"b", ""}})}), {"shared", "b"}));
  const Status s = CheckClaim("shared");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message.rfind("pod team/bad: container 'main'", 0), 0u) << s.error().message;
}

TEST_F(ContainerClaimsTest, APodThatIsGoneIsSkippedAnUnreadableOneIsRetried) {
  AddClaim(TesseraClaim("a", {{"gone", "uid-gone"}, {"renamed", "uid-old"}}));
  AddClaim(TesseraClaim("b"));
  // "renamed" is another pod under the reserved name now.
  AddPod(Pod("renamed", "uid-new", Json::array({Container("main", {{"a", ""}, {"b", ""}})}), {"a", "b"}));
  EXPECT_TRUE(CheckClaim("a").ok());
  EXPECT_EQ(pod_reads_, 2);

  pod_api_down_ = true;
  const Status s = CheckClaim("a");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("cannot read pod team/gone (the claim is reserved for it)"),
            std::string::npos)
      << s.error().message;
  EXPECT_NE(s.error().message.find("the kubelet calls again"), std::string::npos);
}

TEST_F(ContainerClaimsTest, NoReadStartsAfterTheDeadline) {
  AddClaim(TesseraClaim("a"));
  AddPod(Pod("p", "uid-p", Json::array({Container("main", {{"a", ""}})}), {"a"}));
  ContainerClaimCheck check = Check();
  check.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  const Status s = CheckOneClaimPerContainer(claims_.at("team/a"), check);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("before the call's deadline; the kubelet calls again"), std::string::npos);
  EXPECT_EQ(pod_reads_, 0);
}

TEST_F(ContainerClaimsTest, AClaimReservedForNoPodIsFine) {
  Json claim = TesseraClaim("a", {});
  claim["status"]["reservedFor"] =
      Json::array({{{"apiGroup", "example.com"}, {"resource", "jobs"}, {"name", "j"}}});
  AddClaim(claim);
  EXPECT_TRUE(CheckClaim("a").ok());
  EXPECT_EQ(pod_reads_, 0);
}

}  // namespace
}  // namespace tessera::dra
