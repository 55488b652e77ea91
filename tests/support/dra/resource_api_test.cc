// The API-server stand-in's resource.k8s.io/v1 kinds, driven over REST and
// watch as a DRA driver and kube-scheduler drive a real server, and the
// scheduler stand-in writing allocations through them.
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>

#include "apiserver/fake_apiserver.h"
#include "dra/scheduler_standin.h"

namespace tessera::testing::dra {
namespace {

constexpr const char* kApi = "/apis/resource.k8s.io/v1";

class ResourceApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start().ok());
    client_ = std::make_unique<httplib::Client>(server_.url());
  }

  // Status code and parsed body.
  std::pair<int, Json> Call(const std::string& method, const std::string& path, const Json& body = nullptr) {
    auto send = [&]() -> httplib::Result {
      if (method == "POST") return client_->Post(path, body.dump(), "application/json");
      if (method == "PUT") return client_->Put(path, body.dump(), "application/json");
      if (method == "DELETE") return client_->Delete(path);
      return client_->Get(path);
    };
    httplib::Result response = send();
    if (!response) return {0, nullptr};
    return {response->status, Json::parse(response->body, nullptr, false)};
  }

  Json MustCreate(const std::string& path, const Json& object) {
    auto [status, body] = Call("POST", path, object);
    EXPECT_EQ(status, 201) << body.dump();
    return body;
  }

  static Json Slice(const std::string& name, const std::string& node, const std::string& driver) {
    return {{"metadata", {{"name", name}}},
            {"spec",
             {{"driver", driver},
              {"nodeName", node},
              {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
              {"devices",
               Json::array({{{"name", "gpu-0"},
                             {"allowMultipleAllocations", true},
                             {"attributes", {{"type", {{"string", "vgpu"}}}}},
                             {"capacity",
                              {{"memory",
                                {{"value", "80Gi"},
                                 {"requestPolicy",
                                  {{"default", "1Gi"},
                                   {"validRange", {{"min", "1Gi"}, {"max", "80Gi"}, {"step", "1Gi"}}}}}}},
                               {"cores",
                                {{"value", "100"},
                                 {"requestPolicy",
                                  {{"default", "100"},
                                   {"validRange", {{"min", "1"}, {"max", "100"}, {"step", "1"}}}}}}}}}}})}}}};
  }

  static Json GpuClass() {
    return {{"metadata", {{"name", "gpu.tessera.io"}}},
            {"spec",
             {{"selectors",
               Json::array(
                   {{{"cel",
                      {{"expression",
                        "device.driver == 'gpu.tessera.io' && device.attributes['gpu.tessera.io'].type == "
                        "'vgpu'"}}}}})}}}};
  }

  static Json ClaimSpec(const std::string& memory, const std::string& cores) {
    return {{"devices",
             {{"requests",
               Json::array({{{"name", "gpu"},
                             {"exactly",
                              {{"deviceClassName", "gpu.tessera.io"},
                               {"capacity", {{"requests", {{"memory", memory}, {"cores", cores}}}}}}}}})}}}};
  }

  static Json Claim(const std::string& name, const std::string& memory, const std::string& cores) {
    return {{"metadata", {{"name", name}}}, {"spec", ClaimSpec(memory, cores)}};
  }

  FakeApiServer server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ResourceApiTest, DeviceClassesAndResourceSlicesAreClusterScoped) {
  Json created = MustCreate(std::string(kApi) + "/deviceclasses", GpuClass());
  EXPECT_EQ(created["kind"], "DeviceClass");
  EXPECT_EQ(created["apiVersion"], "resource.k8s.io/v1");
  EXPECT_FALSE(created["metadata"].contains("namespace"));
  EXPECT_EQ(Call("GET", std::string(kApi) + "/deviceclasses/gpu.tessera.io").first, 200);
  // No namespaced path for a cluster-scoped kind.
  EXPECT_EQ(Call("POST", std::string(kApi) + "/namespaces/team/deviceclasses", GpuClass()).first, 404);

  MustCreate(std::string(kApi) + "/resourceslices", Slice("a-gpu", "node-a", "gpu.tessera.io"));
  MustCreate(std::string(kApi) + "/resourceslices", Slice("b-gpu", "node-b", "gpu.tessera.io"));
  MustCreate(std::string(kApi) + "/resourceslices", Slice("a-nic", "node-a", "nic.example.com"));
  auto [status, list] = Call("GET", std::string(kApi) + "/resourceslices");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(list["kind"], "ResourceSliceList");
  EXPECT_EQ(list["items"].size(), 3u);
}

TEST_F(ResourceApiTest, ResourceSlicesTakeTheServersFieldSelectors) {
  MustCreate(std::string(kApi) + "/resourceslices", Slice("a-gpu", "node-a", "gpu.tessera.io"));
  MustCreate(std::string(kApi) + "/resourceslices", Slice("b-gpu", "node-b", "gpu.tessera.io"));
  MustCreate(std::string(kApi) + "/resourceslices", Slice("a-nic", "node-a", "nic.example.com"));
  auto names = [&](const std::string& selector) {
    auto [status, list] = Call("GET", std::string(kApi) + "/resourceslices?fieldSelector=" + selector);
    std::vector<std::string> out;
    EXPECT_EQ(status, 200) << list.dump();
    for (const Json& item : list["items"]) out.push_back(item["metadata"]["name"].get<std::string>());
    return out;
  };
  EXPECT_EQ(names("spec.nodeName%3Dnode-a"), (std::vector<std::string>{"a-gpu", "a-nic"}));
  EXPECT_EQ(names("spec.driver%3Dgpu.tessera.io"), (std::vector<std::string>{"a-gpu", "b-gpu"}));
  EXPECT_EQ(names("spec.nodeName%3Dnode-a%2Cspec.driver%3Dgpu.tessera.io"),
            std::vector<std::string>{"a-gpu"});
  EXPECT_EQ(names("spec.driver%21%3Dgpu.tessera.io"), std::vector<std::string>{"a-nic"});
  // Not a 1.34 field selector for slices.
  auto [status, body] =
      Call("GET", std::string(kApi) + "/resourceslices?fieldSelector=spec.pool.name%3Dnode-a");
  EXPECT_EQ(status, 400);
  EXPECT_NE(body["message"].get<std::string>().find("field label not supported: spec.pool.name"),
            std::string::npos);
}

TEST_F(ResourceApiTest, ClaimsAreNamespacedAndTheirStatusGoesThroughTheSubresource) {
  const std::string claims = std::string(kApi) + "/namespaces/team/resourceclaims";
  Json with_status = Claim("c1", "10Gi", "30");
  with_status["status"] = {{"allocation", {{"devices", {{"results", Json::array()}}}}}};
  Json created = MustCreate(claims, with_status);
  EXPECT_EQ(created["metadata"]["namespace"], "team");
  EXPECT_FALSE(created.contains("status"));  // dropped on create, as the real server does

  // The status subresource sets the allocation; an update of the claim keeps it.
  Json claim = created;
  claim["status"] = {{"allocation", {{"devices", {{"results", Json::array({{{"request", "gpu"}}})}}}}}};
  auto [status_code, with_allocation] = Call("PUT", claims + "/c1/status", claim);
  ASSERT_EQ(status_code, 200) << with_allocation.dump();
  Json relabelled = with_allocation;
  relabelled["metadata"]["labels"] = {{"x", "y"}};
  relabelled.erase("status");
  auto [update_code, updated] = Call("PUT", claims + "/c1", relabelled);
  ASSERT_EQ(update_code, 200);
  EXPECT_EQ(updated["status"], with_allocation["status"]);
  // A stale resourceVersion is a conflict.
  EXPECT_EQ(Call("PUT", claims + "/c1/status", claim).first, 409);

  // Listed per namespace and across namespaces.
  MustCreate(std::string(kApi) + "/namespaces/other/resourceclaims", Claim("c2", "1Gi", "1"));
  EXPECT_EQ(Call("GET", claims).second["items"].size(), 1u);
  EXPECT_EQ(Call("GET", std::string(kApi) + "/resourceclaims").second["items"].size(), 2u);
  EXPECT_EQ(Call("GET", std::string(kApi) + "/namespaces/other/resourceclaims/c1").first, 404);

  // Templates are namespaced too.
  Json claim_template = {{"metadata", {{"name", "gpu-10g"}}}, {"spec", {{"spec", ClaimSpec("10Gi", "30")}}}};
  Json stored = MustCreate(std::string(kApi) + "/namespaces/team/resourceclaimtemplates", claim_template);
  EXPECT_EQ(stored["kind"], "ResourceClaimTemplate");
  EXPECT_EQ(Call("POST", std::string(kApi) + "/resourceclaimtemplates", claim_template).first, 405);
}

TEST_F(ResourceApiTest, ClaimChangesAreWatched) {
  const std::string claims = std::string(kApi) + "/namespaces/team/resourceclaims";
  const uint64_t start = server_.CurrentResourceVersion();
  Json created = MustCreate(claims, Claim("c1", "10Gi", "30"));
  created["status"] = {{"reservedFor", Json::array({{{"resource", "pods"}, {"name", "p"}, {"uid", "u"}}})}};
  ASSERT_EQ(Call("PUT", claims + "/c1/status", created).first, 200);
  ASSERT_EQ(Call("DELETE", claims + "/c1").first, 200);
  auto response =
      client_->Get(claims + "?watch=true&timeoutSeconds=1&resourceVersion=" + std::to_string(start));
  ASSERT_TRUE(response);
  std::vector<std::string> types;
  size_t from = 0;
  for (size_t end; (end = response->body.find('\n', from)) != std::string::npos; from = end + 1) {
    Json event = Json::parse(response->body.substr(from, end - from));
    types.push_back(event["type"].get<std::string>());
    EXPECT_EQ(event["object"]["kind"], "ResourceClaim");
  }
  EXPECT_EQ(types, (std::vector<std::string>{"ADDED", "MODIFIED", "DELETED"}));
}

TEST_F(ResourceApiTest, TheSchedulerStandInAllocatesAndReservesThroughTheApi) {
  MustCreate(std::string(kApi) + "/deviceclasses", GpuClass());
  MustCreate(std::string(kApi) + "/resourceslices", Slice("a-gpu", "node-a", "gpu.tessera.io"));
  const std::string claims = std::string(kApi) + "/namespaces/team/resourceclaims";
  MustCreate(claims, Claim("first", "60Gi", "50"));
  MustCreate(claims, Claim("second", "30Gi", "50"));

  DraSchedulerStandIn::Options options;
  options.api_url = server_.url();
  DraSchedulerStandIn scheduler(options);
  auto written = scheduler.ScheduleOnNode("team", {"first"}, "node-a", {"pod-1", "uid-pod-1"});
  ASSERT_TRUE(written.ok()) << written.error().Describe();

  Json stored = *server_.GetObject("resourceclaims", "team", "first");
  EXPECT_EQ(stored["metadata"]["finalizers"], Json::array({"resource.kubernetes.io/delete-protection"}));
  const Json result = stored["status"]["allocation"]["devices"]["results"][0];
  EXPECT_EQ(result["device"], "gpu-0");
  EXPECT_EQ(result["consumedCapacity"], (Json{{"memory", "60Gi"}, {"cores", "50"}}));
  EXPECT_EQ(result["shareID"].get<std::string>().size(), 36u);
  EXPECT_EQ(stored["status"]["reservedFor"],
            Json::array({{{"resource", "pods"}, {"name", "pod-1"}, {"uid", "uid-pod-1"}}}));
  EXPECT_EQ(
      stored["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0],
      "node-a");

  // The second claim does not fit beside the first (90Gi > 80Gi) and nothing changes.
  auto refused = scheduler.ScheduleOnNode("team", {"second"}, "node-a", {"pod-2", "uid-pod-2"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, AllocationFailure::Kind::kUnsatisfiable);
  EXPECT_TRUE(refused.error().Mentions("60Gi of 80Gi already consumed")) << refused.error().Describe();
  EXPECT_FALSE(server_.GetObject("resourceclaims", "team", "second")->contains("status"));

  // A second pod using the first claim is only added to reservedFor.
  auto shared = scheduler.ScheduleOnNode("team", {"first"}, "node-a", {"pod-3", "uid-pod-3"});
  ASSERT_TRUE(shared.ok()) << shared.error().Describe();
  stored = *server_.GetObject("resourceclaims", "team", "first");
  EXPECT_EQ(stored["status"]["reservedFor"].size(), 2u);
  EXPECT_EQ(stored["status"]["allocation"]["devices"]["results"][0]["shareID"], result["shareID"]);
}

TEST_F(ResourceApiTest, AClaimFromATemplateIsOwnedByThePod) {
  MustCreate(std::string(kApi) + "/deviceclasses", GpuClass());
  MustCreate(std::string(kApi) + "/resourceslices", Slice("a-gpu", "node-a", "gpu.tessera.io"));
  Json claim_template = {
      {"metadata", {{"name", "gpu-10g"}, {"namespace", "team"}}},
      {"spec", {{"metadata", {{"labels", {{"app", "train"}}}}}, {"spec", ClaimSpec("10Gi", "30")}}}};
  Json pod = {{"metadata", {{"name", "trainer"}, {"namespace", "team"}, {"uid", "uid-trainer"}}}};
  Json claim = DraSchedulerStandIn::ClaimFromTemplate(claim_template, pod, "gpu");
  EXPECT_EQ(claim["metadata"]["generateName"], "trainer-gpu-");
  EXPECT_EQ(claim["metadata"]["labels"]["app"], "train");
  EXPECT_EQ(claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"], "gpu");
  EXPECT_EQ(claim["metadata"]["ownerReferences"][0]["uid"], "uid-trainer");
  EXPECT_EQ(claim["metadata"]["ownerReferences"][0]["controller"], true);

  Json created = MustCreate(std::string(kApi) + "/namespaces/team/resourceclaims", claim);
  const std::string name = created["metadata"]["name"].get<std::string>();
  EXPECT_EQ(name.rfind("trainer-gpu-", 0), 0u);
  DraSchedulerStandIn::Options options;
  options.api_url = server_.url();
  DraSchedulerStandIn scheduler(options);
  auto written = scheduler.ScheduleOnNode("team", {name}, "node-a", {"trainer", "uid-trainer"});
  ASSERT_TRUE(written.ok()) << written.error().Describe();
  EXPECT_EQ((*written)[0]["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["memory"],
            "10Gi");
}

TEST_F(ResourceApiTest, APodsClaimsAreScheduledFromItsSpecAndStatus) {
  MustCreate(std::string(kApi) + "/deviceclasses", GpuClass());
  MustCreate(std::string(kApi) + "/resourceslices", Slice("a-gpu", "node-a", "gpu.tessera.io"));
  const std::string claims = std::string(kApi) + "/namespaces/team/resourceclaims";
  MustCreate(claims, Claim("shared", "10Gi", "10"));
  MustCreate(claims, Claim("trainer-own-x7k2q", "10Gi", "10"));
  const Json pod = {
      {"metadata", {{"name", "trainer"}, {"namespace", "team"}, {"uid", "uid-trainer"}}},
      {"spec",
       {{"resourceClaims", Json::array({{{"name", "team"}, {"resourceClaimName", "shared"}},
                                        {{"name", "again"}, {"resourceClaimName", "shared"}},
                                        {{"name", "own"}, {"resourceClaimTemplateName", "gpu-10g"}},
                                        {{"name", "unneeded"}, {"resourceClaimTemplateName", "other"}}})},
        {"containers",
         Json::array(
             {{{"name", "main"},
               {"resources", {{"claims", Json::array({{{"name", "team"}}, {{"name", "own"}}})}}}}})}}},
      {"status",
       {{"resourceClaimStatuses", Json::array({{{"name", "own"}, {"resourceClaimName", "trainer-own-x7k2q"}},
                                               {{"name", "unneeded"}}})}}}};
  EXPECT_EQ(DraSchedulerStandIn::ClaimNamesOf(pod),
            (std::vector<std::string>{"shared", "trainer-own-x7k2q"}));

  DraSchedulerStandIn::Options options;
  options.api_url = server_.url();
  DraSchedulerStandIn scheduler(options);
  auto written = scheduler.SchedulePod(pod, "node-a");
  ASSERT_TRUE(written.ok()) << written.error().Describe();
  for (const char* name : {"shared", "trainer-own-x7k2q"}) {
    EXPECT_EQ(server_.GetObject("resourceclaims", "team", name)->at("status")["reservedFor"],
              Json::array({{{"resource", "pods"}, {"name", "trainer"}, {"uid", "uid-trainer"}}}))
        << name;
  }
}

TEST_F(ResourceApiTest, AnUnreachableOrFailingServerIsAnApiFailure) {
  server_.AddFault({Fault::Kind::kStatus, "PUT", "/status", Fault::Applies::kAll, 500, {}, 1});
  MustCreate(std::string(kApi) + "/deviceclasses", GpuClass());
  MustCreate(std::string(kApi) + "/resourceslices", Slice("a-gpu", "node-a", "gpu.tessera.io"));
  MustCreate(std::string(kApi) + "/namespaces/team/resourceclaims", Claim("c", "1Gi", "1"));
  DraSchedulerStandIn::Options options;
  options.api_url = server_.url();
  DraSchedulerStandIn scheduler(options);
  auto failed = scheduler.ScheduleOnNode("team", {"c"}, "node-a", {"p", "u"});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().kind, AllocationFailure::Kind::kApi);
  EXPECT_TRUE(failed.error().Mentions("HTTP 500")) << failed.error().Describe();
  // The finalizer went in before the failing status write; no allocation did.
  Json stored = *server_.GetObject("resourceclaims", "team", "c");
  EXPECT_FALSE(stored.contains("status"));
  EXPECT_EQ(stored["metadata"]["finalizers"].size(), 1u);

  auto missing = scheduler.ScheduleOnNode("team", {"nope"}, "node-a", {"p", "u"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, AllocationFailure::Kind::kApi);
  EXPECT_TRUE(missing.error().Mentions("HTTP 404")) << missing.error().Describe();
}

}  // namespace
}  // namespace tessera::testing::dra
