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
//
// QuotaPercentageTest: in a namespace with a quota on requests.nvidia.com/gpumem
// the webhook rewrites gpumem-percentage (and the whole GPU) into the MiB the
// pod is then allocated, so the quota counts it (webhook.h).
#include "core/allocation_codec.h"
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

// The API-server stand-in and the helpers; each test starts its scheduler.
class QuotaFixture : public SchedulerIntegrationTest {
 protected:
  // A pod asking `limits` in namespace `ns`.
  static Json PodAsking(const std::string& ns, const std::string& name, const Json& limits) {
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}, {"namespace", ns}}},
            {"spec",
             {{"containers", {{{"name", "app"}, {"image", "cuda"}, {"resources", {{"limits", limits}}}}}}}}};
  }

  // What tessera's mutating webhook answers for `pod`, as the API server
  // asks it (request.namespace set): allowed, the denial's message, and the
  // pod as the patch leaves it.
  struct Admission {
    bool allowed = false;
    std::string message;
    Json pod;
  };
  Admission Admit(const Json& pod) {
    httplib::Client http("127.0.0.1", scheduler_->port());
    http.set_connection_timeout(5);
    http.set_read_timeout(30);
    Json review = {{"apiVersion", "admission.k8s.io/v1"},
                   {"kind", "AdmissionReview"},
                   {"request",
                    {{"uid", "u-" + pod["metadata"]["name"].get<std::string>()},
                     {"namespace", pod["metadata"]["namespace"]},
                     {"object", pod}}}};
    auto answer = http.Post("/mutate", review.dump(), "application/json");
    EXPECT_TRUE(answer && answer->status == 200);
    if (!answer) return {false, "no answer", pod};
    Json response = Json::parse(answer->body)["response"];
    Admission out{response.value("allowed", false), "", pod};
    if (!out.allowed) out.message = response["status"].value("message", "");
    if (response.contains("patch"))
      out.pod = pod.patch(Json::parse(Base64Decode(response["patch"].get<std::string>())));
    return out;
  }

  // The pod as tessera's mutating webhook leaves it (it must be admitted).
  Json Mutated(const Json& pod) {
    Admission a = Admit(pod);
    EXPECT_TRUE(a.allowed) << a.message;
    return a.pod;
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

class QuotaTest : public QuotaFixture {
 protected:
  void SetUp() override {
    QuotaFixture::SetUp();
    SchedulerConfig config = Config();
    config.resources.default_memory_mib = 4000;  // what the webhook writes for a pod that gives no memory
    config.resources.default_cores = 30;
    scheduler_ = StartScheduler(config);
    ASSERT_TRUE(
        server_->CreateObject("nodes", scheduler::testing::NodeWithGpus("gpu-node", 1, 4, 40000)).ok());
    ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().nodes == 1; }));
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

// Percentages and the whole GPU in a namespace with a quota on GPU memory.
// The scheduler runs with cores 30 by default and no default memory (a pod
// that gives no memory asks the whole GPU), over a node of two 15109 MiB T4s:
// 33 % of one is 4985.97 MiB, which the fit rounds down to 4985.
class QuotaPercentageTest : public QuotaFixture {
 protected:
  static constexpr const char* kPercent = "nvidia.com/gpumem-percentage";

  void StartScheduling() {
    ASSERT_TRUE(
        server_
            ->CreateObject("nodes", scheduler::testing::NodeWithGpus("t4-node", 1, 2, 15109, 10, "Tesla T4"))
            .ok());
    SchedulerConfig config = Config();
    config.resources.default_cores = 30;
    scheduler_ = StartScheduler(config);
    ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().nodes == 1; }));
  }

  // Whether the webhook rewrites a percentage in `ns` (its quota watch has
  // seen the namespace's quota on GPU memory): a probe pinned to the T4s.
  bool RewritesIn(const std::string& ns) {
    Json probe = PodAsking(ns, "probe", {{kPercent, "10"}});
    probe["metadata"]["annotations"] = {{"nvidia.com/use-gputype", "T4"}};
    Admission a = Admit(probe);
    return a.allowed && a.pod["spec"]["containers"][0]["resources"]["limits"].contains("nvidia.com/gpumem");
  }

  // Creates `pod` (as the webhook left it), schedules it through the extender
  // on `nodes`, and returns the MiB its allocation gives its one device (-1
  // when any step fails).
  int64_t CreateAndBind(const Json& pod, const std::vector<std::string>& nodes) {
    auto [status, created] = Create(pod);
    EXPECT_EQ(status, 201) << created.dump();
    if (status != 201) return -1;
    Attempt attempt = ScheduleOnce(scheduler_->port(), created, nodes);
    EXPECT_EQ(attempt.outcome, Outcome::kBound) << attempt.message;
    auto bound = server_->GetObject("pods", pod["metadata"]["namespace"], pod["metadata"]["name"]);
    if (!bound) return -1;
    auto text = (*bound)["metadata"]["annotations"].value("tessera.io/allocation", "");
    auto allocation = core::DecodeAllocation(text);
    EXPECT_TRUE(allocation.ok()) << text;
    if (!allocation.ok() || allocation->containers.size() != 1 ||
        allocation->containers[0].devices.size() != 1)
      return -1;
    return allocation->containers[0].devices[0].memory_mib;
  }

  static Json LimitsOf(const Json& pod) { return pod["spec"]["containers"][0]["resources"]["limits"]; }
};

TEST_F(QuotaPercentageTest, APercentageIsCountedAtTheMiBItIsAllocatedAndRefusedOverTheQuota) {
  StartScheduling();
  AddQuota("team", "gpu-quota", {{"requests.nvidia.com/gpumem", "12000"}});
  ASSERT_TRUE(WaitFor([&] { return RewritesIn("team"); }));
  const Json p0 = Mutated(PodAsking("team", "p0", {{kPercent, "33"}}));
  EXPECT_EQ(LimitsOf(p0)["nvidia.com/gpumem"], "4985") << p0.dump();
  EXPECT_FALSE(LimitsOf(p0).contains(kPercent)) << p0.dump();
  // What it is allocated is what was written, and what the percentage itself
  // gets in a namespace without a quota (where it stays a percentage).
  EXPECT_EQ(CreateAndBind(p0, {"t4-node"}), 4985);
  const Json reference = Mutated(PodAsking("other", "reference", {{kPercent, "33"}}));
  ASSERT_EQ(LimitsOf(reference)[kPercent], "33") << reference.dump();
  EXPECT_FALSE(LimitsOf(reference).contains("nvidia.com/gpumem"));
  EXPECT_EQ(CreateAndBind(reference, {"t4-node"}), 4985);
  // The quota counts it: 4985 + 4985 fit 12000, a third does not.
  EXPECT_EQ(Create(Mutated(PodAsking("team", "p1", {{kPercent, "33"}}))).first, 201);
  auto [status, body] = Create(Mutated(PodAsking("team", "p2", {{kPercent, "33"}})));
  EXPECT_EQ(status, 403);
  EXPECT_EQ(
      body["message"],
      "pods \"p2\" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpumem=4985, "
      "used: requests.nvidia.com/gpumem=9970, limited: requests.nvidia.com/gpumem=12000");
  EXPECT_FALSE(server_->GetObject("pods", "team", "p2").has_value());
  // The whole GPU (no memory given) is counted as the GPU's MiB.
  const Json whole = Mutated(PodAsking("team", "whole", {{"nvidia.com/gpu", "1"}}));
  EXPECT_EQ(LimitsOf(whole)["nvidia.com/gpumem"], "15109") << whole.dump();
  auto [whole_status, whole_body] = Create(whole);
  EXPECT_EQ(whole_status, 403);
  EXPECT_NE(whole_body["message"].get<std::string>().find(
                "exceeded quota: gpu-quota, requested: requests.nvidia.com/gpumem=15109"),
            std::string::npos)
      << whole_body.dump();
}

TEST_F(QuotaPercentageTest, GpusOfDifferentSizesRefuseThePercentageUnlessATypeIsPinned) {
  StartScheduling();
  ASSERT_TRUE(server_
                  ->CreateObject("nodes", scheduler::testing::NodeWithGpus("a100-node", 2, 1, 40960, 10,
                                                                           "NVIDIA A100-SXM4-40GB"))
                  .ok());
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().nodes == 2; }));
  AddQuota("team", "gpu-quota", {{"requests.nvidia.com/gpumem", "100000"}});
  ASSERT_TRUE(WaitFor([&] { return RewritesIn("team"); }));
  const Admission refused = Admit(PodAsking("team", "p", {{kPercent, "50"}}));
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.message,
            "tessera: container \"app\": namespace \"team\" has ResourceQuota \"gpu-quota\" on "
            "requests.nvidia.com/gpumem, which counts nvidia.com/gpumem in MiB, but the container asks "
            "nvidia.com/gpumem-percentage 50, which is 50 % of GPUs of different sizes it could land on "
            "(7554 MiB on \"Tesla T4\", 20480 MiB on \"NVIDIA A100-SXM4-40GB\"); ask nvidia.com/gpumem in "
            "MiB, or pin one GPU type with nvidia.com/use-gputype");
  // Pinned to the A100s: one size, and that is what it gets there.
  Json pinned = PodAsking("team", "pinned", {{kPercent, "50"}});
  pinned["metadata"]["annotations"] = {{"nvidia.com/use-gputype", "A100"}};
  const Json mutated = Mutated(pinned);
  EXPECT_EQ(LimitsOf(mutated)["nvidia.com/gpumem"], "20480") << mutated.dump();
  EXPECT_EQ(CreateAndBind(mutated, {"t4-node", "a100-node"}), 20480);
  EXPECT_EQ(server_->GetObject("pods", "team", "pinned").value()["spec"]["nodeName"], "a100-node");
  // Without the quota the same pod keeps its percentage and is admitted.
  const Admission elsewhere = Admit(PodAsking("other", "p", {{kPercent, "50"}}));
  EXPECT_TRUE(elsewhere.allowed) << elsewhere.message;
  EXPECT_EQ(LimitsOf(elsewhere.pod)[kPercent], "50");
}

TEST_F(QuotaPercentageTest, ANamespaceWithoutAGpuMemoryQuotaKeepsThePercentage) {
  StartScheduling();
  AddQuota("team", "cpu-only", {{"requests.cpu", "8"}, {"requests.nvidia.com/gpucores", "300"}});
  // A quota on GPU memory elsewhere, created after: once it is seen, so is team's.
  AddQuota("lab", "gpu-quota", {{"requests.nvidia.com/gpumem", "10000"}});
  ASSERT_TRUE(WaitFor([&] { return RewritesIn("lab"); }));
  const Json p = Mutated(PodAsking("team", "p", {{kPercent, "33"}}));
  EXPECT_EQ(LimitsOf(p)[kPercent], "33") << p.dump();
  EXPECT_FALSE(LimitsOf(p).contains("nvidia.com/gpumem")) << p.dump();
  EXPECT_EQ(CreateAndBind(p, {"t4-node"}), 4985);
  // Deleting lab's quota turns its rewrite off again.
  ASSERT_TRUE(server_->DeleteObject("resourcequotas", "lab", "gpu-quota").ok());
  ASSERT_TRUE(WaitFor([&] { return !RewritesIn("lab"); }));
  EXPECT_EQ(LimitsOf(Mutated(PodAsking("lab", "q", {{kPercent, "33"}})))[kPercent], "33");
}

TEST_F(QuotaPercentageTest, UntilTheQuotasAreListedPercentagePodsAreRefusedAndOthersAdmitted) {
  // The API server answers nothing about quotas: tessera-scheduler cannot
  // tell which namespaces limit GPU memory.
  server_->AddFault({::tessera::testing::Fault::Kind::kStatus, "GET", "/api/v1/resourcequotas",
                     ::tessera::testing::Fault::Applies::kAll, 503});
  StartScheduling();  // ready: quotas are not part of readiness
  Admission refused;
  ASSERT_TRUE(WaitFor([&] {
    refused = Admit(PodAsking("team", "p", {{kPercent, "33"}}));
    return refused.message.find("last error") != std::string::npos;
  })) << refused.message;
  EXPECT_FALSE(refused.allowed);
  for (const char* part :
       {"tessera: container \"app\" asks nvidia.com/gpumem-percentage 33",
        "whether namespace \"team\" has one is not known (the ResourceQuotas are not listed "
        "yet (last error: ",
        "retry in a moment, or ask nvidia.com/gpumem in MiB"}) {
    EXPECT_NE(refused.message.find(part), std::string::npos) << part << " in: " << refused.message;
  }
  // A pod in MiB needs no rewrite, a pod without GPUs is not tessera's.
  EXPECT_TRUE(Admit(PodAsking("team", "mib", {{"nvidia.com/gpumem", "3000"}})).allowed);
  EXPECT_TRUE(Admit(PodAsking("team", "cpu", {{"cpu", "1"}})).allowed);
  // The API server back, with a quota on team: the same pod is counted.
  AddQuota("team", "gpu-quota", {{"requests.nvidia.com/gpumem", "12000"}});
  server_->ClearFaults();
  ASSERT_TRUE(WaitFor([&] { return RewritesIn("team"); }));
  EXPECT_EQ(LimitsOf(Mutated(PodAsking("team", "p", {{kPercent, "33"}})))["nvidia.com/gpumem"], "4985");
}

TEST_F(QuotaPercentageTest, AnUnreadableQuotaRefusesPercentagesInItsNamespaceOnly) {
  StartScheduling();
  AddQuota("lab", "gpu-quota", {{"requests.nvidia.com/gpumem", "10000"}});
  // spec.hard that is not an object: kube-apiserver would not store it; the
  // stand-in does, and its watch delivers it as a broken server's would.
  auto broken =
      server_->CreateObject("resourcequotas", {{"apiVersion", "v1"},
                                               {"kind", "ResourceQuota"},
                                               {"metadata", {{"name", "broken"}, {"namespace", "team"}}},
                                               {"spec", {{"hard", "requests.nvidia.com/gpumem=1"}}}});
  ASSERT_TRUE(broken.ok()) << broken.error().message;
  Admission refused;
  ASSERT_TRUE(WaitFor([&] {
    refused = Admit(PodAsking("team", "p", {{kPercent, "33"}}));
    return refused.message.find("cannot be read") != std::string::npos;  // not "not listed yet"
  })) << refused.message;
  EXPECT_FALSE(refused.allowed);
  EXPECT_NE(
      refused.message.find("whether namespace \"team\" has one is not known (ResourceQuota \"broken\" cannot "
                           "be read: spec.hard is not an object)"),
      std::string::npos)
      << refused.message;
  // Other namespaces, and MiB pods in this one, are not affected.
  EXPECT_TRUE(RewritesIn("lab"));
  EXPECT_EQ(LimitsOf(Mutated(PodAsking("other", "p", {{kPercent, "33"}})))[kPercent], "33");
  EXPECT_TRUE(Admit(PodAsking("team", "mib", {{"nvidia.com/gpumem", "3000"}})).allowed);
  // Gone: the namespace is known again (no quota on memory: the percentage stays).
  ASSERT_TRUE(server_->DeleteObject("resourcequotas", "team", "broken").ok());
  ASSERT_TRUE(WaitFor([&] { return Admit(PodAsking("team", "p", {{kPercent, "33"}})).allowed; }));
  EXPECT_EQ(LimitsOf(Mutated(PodAsking("team", "p", {{kPercent, "33"}})))[kPercent], "33");
}

}  // namespace
}  // namespace tessera::scheduler::it
