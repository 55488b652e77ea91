// Per-namespace quotas on GPU memory and cores (issue 18 item 3): a
// ResourceQuota on requests.nvidia.com/gpumem and requests.nvidia.com/gpucores
// counts what tessera's webhook wrote into the pod, and a pod that would take
// its namespace over the quota is refused at admission, the quota named.
//
// The API-server stand-in runs ResourceQuota admission on pod creation, as
// kube-apiserver does after the mutating webhooks; it does not call webhooks
// itself, so this test does what the API server would: it sends the
// AdmissionReview to tessera-scheduler's /mutate, applies the JSONPatch it
// answers, and creates the patched pod.
#include "fixture.h"

namespace tessera::scheduler::it {
namespace {

std::string Base64Decode(const std::string& in) {
  static const std::string kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int bits = 0;
  uint32_t acc = 0;
  for (char c : in) {
    const size_t v = kAlphabet.find(c);
    if (v == std::string::npos) continue;  // '=' padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

class QuotaTest : public SchedulerIntegrationTest {
 protected:
  void SetUp() override {
    SchedulerIntegrationTest::SetUp();
    SchedulerConfig config = Config();
    config.resources.default_memory_mib = 4000;  // what the webhook writes for a pod that gives no memory
    config.resources.default_cores = 30;
    scheduler_ = StartScheduler(config);
    ASSERT_TRUE(
        server_->CreateObject("nodes", scheduler::testing::NodeWithGpus("gpu-node", 1, 4, 40000)).ok());
    ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().nodes == 1; }));
  }

  // A pod asking `limits` in namespace `ns`.
  static Json PodAsking(const std::string& ns, const std::string& name, const Json& limits) {
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}, {"namespace", ns}}},
            {"spec",
             {{"containers", {{{"name", "app"}, {"image", "cuda"}, {"resources", {{"limits", limits}}}}}}}}};
  }

  // The pod as tessera's mutating webhook leaves it.
  Json Mutated(const Json& pod) {
    httplib::Client http("127.0.0.1", scheduler_->port());
    http.set_connection_timeout(5);
    http.set_read_timeout(30);
    Json review = {
        {"apiVersion", "admission.k8s.io/v1"},
        {"kind", "AdmissionReview"},
        {"request", {{"uid", "u-" + pod["metadata"]["name"].get<std::string>()}, {"object", pod}}}};
    auto answer = http.Post("/mutate", review.dump(), "application/json");
    EXPECT_TRUE(answer && answer->status == 200);
    if (!answer) return pod;
    Json response = Json::parse(answer->body)["response"];
    EXPECT_EQ(response["allowed"], true) << response.dump();
    if (!response.contains("patch")) return pod;
    return pod.patch(Json::parse(Base64Decode(response["patch"].get<std::string>())));
  }

  void AddQuota(const std::string& ns, const std::string& name, const Json& hard) {
    auto r = server_->CreateObject("resourcequotas", {{"apiVersion", "v1"},
                                                      {"kind", "ResourceQuota"},
                                                      {"metadata", {{"name", name}, {"namespace", ns}}},
                                                      {"spec", {{"hard", hard}}}});
    ASSERT_TRUE(r.ok()) << r.error().message;
  }

  // POSTs the pod as a client would; {HTTP status, body}.
  std::pair<int, Json> Create(const Json& pod) {
    httplib::Client http("127.0.0.1", server_->port());
    http.set_connection_timeout(5);
    const std::string ns = pod["metadata"]["namespace"];
    auto res = http.Post("/api/v1/namespaces/" + ns + "/pods", pod.dump(), "application/json");
    if (!res) return {0, Json()};
    return {res->status, Json::parse(res->body, nullptr, false)};
  }
};

TEST_F(QuotaTest, TheQuotaCountsWhatTheWebhookWroteAndRefusesThePodOverIt) {
  AddQuota("team", "gpu-quota",
           {{"requests.nvidia.com/gpumem", "10000"}, {"requests.nvidia.com/gpucores", "300"}});
  // The pod names only a count: the webhook fills in the default memory and
  // cores, and those are what the quota counts.
  const Json asked = PodAsking("team", "p0", {{"nvidia.com/gpu", "1"}});
  const Json p0 = Mutated(asked);
  ASSERT_EQ(p0["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"], "4000") << p0.dump();
  ASSERT_EQ(p0["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"], "30");
  EXPECT_EQ(Create(p0).first, 201);
  Json p1 = Mutated(PodAsking("team", "p1", {{"nvidia.com/gpu", "1"}}));
  EXPECT_EQ(Create(p1).first, 201);
  // 8000 MiB used: another 4000 would make 12000 of 10000.
  Json p2 = Mutated(PodAsking("team", "p2", {{"nvidia.com/gpu", "1"}}));
  auto [status, body] = Create(p2);
  EXPECT_EQ(status, 403);
  EXPECT_EQ(body["reason"], "Forbidden");
  EXPECT_EQ(
      body["message"],
      "pods \"p2\" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpumem=4000, "
      "used: requests.nvidia.com/gpumem=8000, limited: requests.nvidia.com/gpumem=10000");
  EXPECT_FALSE(server_->GetObject("pods", "team", "p2").has_value()) << "a refused pod is not stored";
  // A pod that fits what is left is admitted; a finished pod frees its share.
  Json small = Mutated(PodAsking("team", "small", {{"nvidia.com/gpumem", "2000"}}));
  EXPECT_EQ(Create(small).first, 201);
  Json done = *server_->GetObject("pods", "team", "p0");
  done["status"]["phase"] = "Succeeded";
  httplib::Client http("127.0.0.1", server_->port());
  ASSERT_EQ(http.Put("/api/v1/namespaces/team/pods/p0/status", done.dump(), "application/json")->status, 200);
  p2["metadata"]["name"] = "p2-again";
  EXPECT_EQ(Create(p2).first, 201);
  // Other namespaces are not limited by it.
  EXPECT_EQ(Create(Mutated(PodAsking("other", "big", {{"nvidia.com/gpumem", "30000"}}))).first, 201);
  // Without the webhook the default memory would not be written, and the
  // quota would count nothing of it: what it counts is the webhook's output.
  EXPECT_FALSE(asked["spec"]["containers"][0]["resources"]["limits"].contains("nvidia.com/gpumem"));
}

TEST_F(QuotaTest, CoresAreCountedAsWrittenAndTheRefusalListsOnlyWhatIsExceeded) {
  AddQuota("team", "cores",
           {{"requests.nvidia.com/gpucores", "100"}, {"requests.nvidia.com/gpumem", "100000"}});
  // Kubernetes sums an extended resource as each container writes it: cores
  // (and MiB) are per vGPU, so a pod of two 30 % vGPUs counts 30, not 60
  // (docs/scheduler.md, "Quotas").
  EXPECT_EQ(Create(Mutated(PodAsking("team", "a", {{"nvidia.com/gpucores", "60"}}))).first, 201);
  auto [status, body] = Create(Mutated(PodAsking("team", "b", {{"nvidia.com/gpucores", "50"}})));
  EXPECT_EQ(status, 403);
  EXPECT_EQ(
      body["message"],
      "pods \"b\" is forbidden: exceeded quota: cores, requested: requests.nvidia.com/gpucores=50, used: "
      "requests.nvidia.com/gpucores=60, limited: requests.nvidia.com/gpucores=100");
  EXPECT_EQ(Create(Mutated(PodAsking("team", "c", {{"nvidia.com/gpucores", "40"}}))).first, 201);
}

TEST_F(QuotaTest, AQuotaOnTheBareExtendedResourceNameIsInvalid) {
  // Kubernetes takes quota on extended resources only as requests.<name>.
  auto r = server_->CreateObject("resourcequotas", {{"apiVersion", "v1"},
                                                    {"kind", "ResourceQuota"},
                                                    {"metadata", {{"name", "bare"}, {"namespace", "team"}}},
                                                    {"spec", {{"hard", {{"nvidia.com/gpumem", "1000"}}}}}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(
      r.error().message.find("spec.hard[nvidia.com/gpumem]: Invalid value: \"nvidia.com/gpumem\": must be "
                             "a standard resource for quota"),
      std::string::npos)
      << r.error().message;
  EXPECT_EQ(Create(Mutated(PodAsking("team", "free", {{"nvidia.com/gpumem", "1000"}}))).first, 201);
}

}  // namespace
}  // namespace tessera::scheduler::it
