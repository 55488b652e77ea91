// tessera-dra's pieces in process, against the kubelet DRA stand-in (real
// gRPC) and the API-server stand-in: the per-call deadline, the v1beta1
// service, and the ResourceSlice publisher's writes.
#include "dra/dra_plugin.h"

#include <gtest/gtest.h>

#include <thread>

#include "apiserver/fake_apiserver.h"
#include "base/testing.h"
#include "dra/resource_slices.h"
#include "dra/v1beta1/api.grpc.pb.h"
#include "kube/config.h"
#include "kubelet_dra_standin.h"

namespace tessera::dra {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;
using testing::KubeletDraStandIn;

constexpr const char* kGpu0 = "GPU-00000000-0000-0000-0000-000000000000";

Json AllocatedClaim(const std::string& name, const std::string& uid) {
  Json result = {{"request", "gpu"},
                 {"driver", "gpu.tessera.io"},
                 {"pool", "node-a"},
                 {"device", "gpu-0"},
                 {"shareID", "aaaaaaaa-0000-4000-8000-" + uid.substr(24)},
                 {"consumedCapacity", {{"memory", "1Gi"}, {"cores", "10"}}}};
  Json claim = {{"metadata", {{"namespace", "team"}, {"name", name}, {"uid", uid}}}};
  claim["status"]["allocation"]["devices"]["results"] = Json::array({result});
  return claim;
}

class DraPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.node_name = "node-a";
    config_.registry_dir = tmp_.MakeDir("reg");
    config_.plugins_dir = tmp_.MakeDir("plugins");
    config_.cdi_dir = tmp_.Path("cdi");
    config_.region_host_dir = tmp_.Path("regions");
    config_.device_nodes = false;
    core::Gpu gpu;
    gpu.uuid = kGpu0;
    gpu.memory_mib = 81920;
    PreparerDeps deps;
    deps.read_claim = [this](const std::string&, const std::string& name) -> Result<std::optional<Json>> {
      if (name == slow_claim_ && !slowed_) {
        slowed_ = true;
        std::this_thread::sleep_for(slow_for_);
      }
      for (const auto& c : claims_) {
        if (c["metadata"]["name"] == name) return std::optional<Json>(c);
      }
      return std::optional<Json>();
    };
    deps.gpus = [gpu] { return std::vector<core::Gpu>{gpu}; };
    preparer_ = std::make_unique<ClaimPreparer>(config_, deps);
    ASSERT_TRUE(preparer_->Recover().ok());
    plugin_ = std::make_unique<DraPlugin>(config_, *preparer_);
    ASSERT_TRUE(plugin_->Start().ok());
  }

  testing::TempDir tmp_{"tdrap"};
  DraConfig config_;
  std::vector<Json> claims_;
  std::string slow_claim_;
  std::chrono::milliseconds slow_for_{0};
  std::atomic<bool> slowed_{false};
  std::unique_ptr<ClaimPreparer> preparer_;
  std::unique_ptr<DraPlugin> plugin_;
};

TEST_F(DraPluginTest, ClaimsLeftWhenTheDeadlineNearsAreAnsweredForTheRetry) {
  const std::string uid1 = "10000000-0000-4000-8000-000000000001";
  const std::string uid2 = "20000000-0000-4000-8000-000000000002";
  claims_ = {AllocatedClaim("one", uid1), AllocatedClaim("two", uid2)};
  // The first claim's read takes past the point where less than the margin is
  // left of the kubelet's deadline: the second claim is not started.
  testing::KubeletDraOptions options;
  options.registry_dir = config_.registry_dir;
  options.call_timeout = 5s;
  slow_claim_ = "one";
  slow_for_ = options.call_timeout - kDeadlineMargin + 200ms;
  KubeletDraStandIn kubelet(options);
  ASSERT_TRUE(kubelet.Start());
  ASSERT_TRUE(kubelet.WaitForPlugin("gpu.tessera.io", 30s));
  EXPECT_TRUE(plugin_->registered());
  auto r = kubelet.NodePrepareResources(
      "gpu.tessera.io",
      {KubeletDraStandIn::MakeClaim("team", "one", uid1), KubeletDraStandIn::MakeClaim("team", "two", uid2)});
  ASSERT_TRUE(r.status.ok()) << "answered within the deadline: " << r.status.error_message();
  EXPECT_EQ(r.response.claims().at(uid1).error(), "");
  EXPECT_NE(r.response.claims().at(uid2).error().find("too little of the call's deadline"),
            std::string::npos);
  // The kubelet retries the claim that was left.
  auto retry =
      kubelet.NodePrepareResources("gpu.tessera.io", {KubeletDraStandIn::MakeClaim("team", "two", uid2)});
  EXPECT_EQ(retry.kubelet_error, "");
  kubelet.Stop();
}

TEST_F(DraPluginTest, V1beta1KubeletsGetTheSameAnswerWithoutShareId) {
  const std::string uid = "30000000-0000-4000-8000-000000000003";
  claims_ = {AllocatedClaim("three", uid)};
  auto channel = grpc::CreateChannel("unix://" + config_.DraSocketPath(), grpc::InsecureChannelCredentials());
  auto stub = ::k8s::io::kubelet::pkg::apis::dra::v1beta1::DRAPlugin::NewStub(channel);
  ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodePrepareResourcesRequest request;
  auto* claim = request.add_claims();
  claim->set_namespace_("team");
  claim->set_name("three");
  claim->set_uid(uid);
  ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodePrepareResourcesResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 45s);
  ASSERT_TRUE(stub->NodePrepareResources(&context, request, &response).ok());
  const auto& answer = response.claims().at(uid);
  EXPECT_EQ(answer.error(), "");
  ASSERT_EQ(answer.devices_size(), 1);
  EXPECT_EQ(answer.devices(0).device_name(), "gpu-0");
  EXPECT_TRUE(answer.devices(0).cdi_device_ids(0).starts_with("tessera.io/gpu=" + uid + "-gpu-0-"));
}

TEST(SlicePublisherTest, WritesOnlyChangesAndBumpsTheGeneration) {
  testing::FakeApiServer api;
  ASSERT_TRUE(api.Start().ok());
  ASSERT_TRUE(api.CreateObject("nodes", {{"metadata", {{"name", "node-a"}}}}).ok());
  // Another driver's slice on the same node is not ours to touch.
  ASSERT_TRUE(
      api.CreateObject("resourceslices",
                       {{"metadata", {{"name", "other"}}},
                        {"spec",
                         {{"driver", "gpu.nvidia.com"},
                          {"nodeName", "node-a"},
                          {"pool", {{"name", "node-a"}, {"generation", 9}, {"resourceSliceCount", 1}}},
                          {"devices", Json::array()}}}})
          .ok());
  DraConfig config;
  config.node_name = "node-a";
  kube::ClientConfig client_config;
  client_config.server = api.url();
  std::shared_ptr<kube::Client> client = kube::MakeClient(client_config);
  SlicePublisher publisher(config, client);
  auto ours = [&] {
    std::vector<Json> out;
    for (auto& s : api.ListObjects("resourceslices")) {
      if (s["spec"]["driver"] == "gpu.tessera.io") out.push_back(s);
    }
    return out;
  };
  auto devices = [](int n) {
    std::vector<Json> out;
    for (int i = 0; i < n; ++i) out.push_back({{"name", "gpu-" + std::to_string(i)}});
    return out;
  };

  auto writes = publisher.Sync(devices(2));
  ASSERT_TRUE(writes.ok()) << writes.error().message;
  EXPECT_EQ(*writes, 1);
  ASSERT_EQ(ours().size(), 1u);
  EXPECT_EQ(ours()[0]["spec"]["pool"]["generation"], 1);
  EXPECT_EQ(ours()[0]["metadata"]["ownerReferences"][0]["name"], "node-a");
  EXPECT_EQ(*publisher.Sync(devices(2)), 0) << "nothing changed, nothing written";

  EXPECT_EQ(*publisher.Sync(devices(1)), 1) << "a GPU left (unhealthy): the slice is updated";
  EXPECT_EQ(ours()[0]["spec"]["pool"]["generation"], 2);
  EXPECT_EQ(ours()[0]["spec"]["devices"].size(), 1u);

  EXPECT_EQ(*publisher.Sync(devices(130)), 2) << "a second slice";
  ASSERT_EQ(ours().size(), 2u);
  for (const auto& s : ours()) {
    EXPECT_EQ(s["spec"]["pool"]["generation"], 3);
    EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], 2);
  }
  EXPECT_EQ(*publisher.Sync(devices(3)), 2) << "the obsolete slice is deleted, the other updated";
  ASSERT_EQ(ours().size(), 1u);
  EXPECT_EQ(ours()[0]["spec"]["pool"]["resourceSliceCount"], 1);

  ASSERT_TRUE(publisher.RemoveAll().ok());
  EXPECT_TRUE(ours().empty());
  EXPECT_EQ(api.ListObjects("resourceslices").size(), 1u) << "the other driver's slice stays";
  api.Stop();
}

}  // namespace
}  // namespace tessera::dra
