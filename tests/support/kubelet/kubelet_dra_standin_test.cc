// The kubelet DRA stand-in against a minimal DRA plugin written here: what a
// real kubelet would do with a plugin's registration, its versions, its
// answers, its deadline and its restarts.
#include "kubelet_dra_standin.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/testing.h"
#include "dra/v1beta1/api.grpc.pb.h"

namespace tessera::testing {
namespace {

namespace drav1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

constexpr auto kWait = std::chrono::seconds(20);

// A DRA kubelet plugin as a driver would write one: the DRA service on one
// socket (v1 and/or v1beta1), then the registration service on another.
class FakeDraPlugin {
 public:
  struct Options {
    std::string driver = "gpu.tessera.io";
    std::string registration_socket;
    std::string dra_socket;
    std::string type = "DRAPlugin";
    std::vector<std::string> versions = {"v1.DRAPlugin", "v1beta1.DRAPlugin"};
    std::string endpoint;  // what GetInfo reports; default: dra_socket
    bool serve_v1 = true;
    bool serve_v1beta1 = true;
  };
  using PrepareHandler =
      std::function<void(const drav1::NodePrepareResourcesRequest&, drav1::NodePrepareResourcesResponse*)>;
  using UnprepareHandler = std::function<void(const drav1::NodeUnprepareResourcesRequest&,
                                              drav1::NodeUnprepareResourcesResponse*)>;

  explicit FakeDraPlugin(Options options) : options_(std::move(options)) {
    if (options_.endpoint.empty()) options_.endpoint = options_.dra_socket;
  }
  ~FakeDraPlugin() { Stop(); }

  // Every claim gets one device, with a share ID over v1.
  static void DefaultPrepare(const drav1::NodePrepareResourcesRequest& request,
                             drav1::NodePrepareResourcesResponse* response) {
    for (const auto& claim : request.claims()) {
      drav1::Device* device = (*response->mutable_claims())[claim.uid()].add_devices();
      device->set_pool_name("node-a");
      device->set_device_name("gpu-0");
      device->add_cdi_device_ids("tessera.io/gpu=" + claim.uid() + "-gpu-0");
      device->set_share_id("share-" + claim.uid());
    }
  }
  static void DefaultUnprepare(const drav1::NodeUnprepareResourcesRequest& request,
                               drav1::NodeUnprepareResourcesResponse* response) {
    for (const auto& claim : request.claims()) (*response->mutable_claims())[claim.uid()];
  }

  void StartDra() {
    ::unlink(options_.dra_socket.c_str());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + options_.dra_socket, grpc::InsecureServerCredentials());
    if (options_.serve_v1) builder.RegisterService(&v1_);
    if (options_.serve_v1beta1) builder.RegisterService(&v1beta1_);
    dra_server_ = builder.BuildAndStart();
    ASSERT_NE(dra_server_, nullptr);
  }
  void StartRegistration() {
    ::unlink(options_.registration_socket.c_str());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + options_.registration_socket, grpc::InsecureServerCredentials());
    builder.RegisterService(&registration_);
    registration_server_ = builder.BuildAndStart();
    ASSERT_NE(registration_server_, nullptr);
  }
  // The DRA server first, as the DRA helper does.
  void Start() {
    StartDra();
    StartRegistration();
  }
  // Stops serving; `remove_sockets` false plays a crash (the files stay).
  void Stop(bool remove_sockets = true) {
    for (auto* server : {&registration_server_, &dra_server_}) {
      if (*server) {
        (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
        (*server)->Wait();
        server->reset();
      }
    }
    if (remove_sockets) {
      ::unlink(options_.registration_socket.c_str());
      ::unlink(options_.dra_socket.c_str());
    }
  }

  void SetVersions(std::vector<std::string> versions) {
    std::lock_guard lock(mu_);
    options_.versions = std::move(versions);
  }
  void SetPrepare(PrepareHandler handler) {
    std::lock_guard lock(mu_);
    prepare_ = std::move(handler);
  }
  void SetUnprepare(UnprepareHandler handler) {
    std::lock_guard lock(mu_);
    unprepare_ = std::move(handler);
  }

  std::vector<pluginregistration::RegistrationStatus> notifications() const {
    std::lock_guard lock(mu_);
    return notifications_;
  }
  bool WaitForNotifications(size_t count) const {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, kWait, [&] { return notifications_.size() >= count; });
  }
  // The service each DRA call arrived on ("v1" or "v1beta1"), in order.
  std::vector<std::string> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  std::chrono::system_clock::time_point last_deadline() const {
    std::lock_guard lock(mu_);
    return last_deadline_;
  }
  drav1::NodePrepareResourcesRequest last_prepare() const {
    std::lock_guard lock(mu_);
    return last_prepare_;
  }

 private:
  class Registration final : public pluginregistration::Registration::Service {
   public:
    explicit Registration(FakeDraPlugin& owner) : owner_(owner) {}
    grpc::Status GetInfo(grpc::ServerContext*, const pluginregistration::InfoRequest*,
                         pluginregistration::PluginInfo* info) override {
      std::lock_guard lock(owner_.mu_);
      info->set_type(owner_.options_.type);
      info->set_name(owner_.options_.driver);
      info->set_endpoint(owner_.options_.endpoint);
      for (const auto& version : owner_.options_.versions) info->add_supported_versions(version);
      return grpc::Status::OK;
    }
    grpc::Status NotifyRegistrationStatus(grpc::ServerContext*,
                                          const pluginregistration::RegistrationStatus* status,
                                          pluginregistration::RegistrationStatusResponse*) override {
      {
        std::lock_guard lock(owner_.mu_);
        owner_.notifications_.push_back(*status);
      }
      owner_.changed_.notify_all();
      return grpc::Status::OK;
    }

   private:
    FakeDraPlugin& owner_;
  };

  class V1 final : public drav1::DRAPlugin::Service {
   public:
    explicit V1(FakeDraPlugin& owner) : owner_(owner) {}
    grpc::Status NodePrepareResources(grpc::ServerContext* context,
                                      const drav1::NodePrepareResourcesRequest* request,
                                      drav1::NodePrepareResourcesResponse* response) override {
      owner_.Prepare("v1", context, *request, response);
      return context->IsCancelled() ? grpc::Status::CANCELLED : grpc::Status::OK;
    }
    grpc::Status NodeUnprepareResources(grpc::ServerContext* context,
                                        const drav1::NodeUnprepareResourcesRequest* request,
                                        drav1::NodeUnprepareResourcesResponse* response) override {
      owner_.Unprepare("v1", context, *request, response);
      return grpc::Status::OK;
    }

   private:
    FakeDraPlugin& owner_;
  };

  class V1beta1 final : public drav1beta1::DRAPlugin::Service {
   public:
    explicit V1beta1(FakeDraPlugin& owner) : owner_(owner) {}
    grpc::Status NodePrepareResources(grpc::ServerContext* context,
                                      const drav1beta1::NodePrepareResourcesRequest* request,
                                      drav1beta1::NodePrepareResourcesResponse* response) override {
      // Same logic, carried in v1beta1 messages (which have no share ID).
      drav1::NodePrepareResourcesRequest v1_request;
      for (const auto& claim : request->claims()) {
        *v1_request.add_claims() =
            KubeletDraStandIn::MakeClaim(claim.namespace_(), claim.name(), claim.uid());
      }
      drav1::NodePrepareResourcesResponse v1_response;
      owner_.Prepare("v1beta1", context, v1_request, &v1_response);
      for (const auto& [uid, claim] : v1_response.claims()) {
        auto& out = (*response->mutable_claims())[uid];
        out.set_error(claim.error());
        for (const auto& device : claim.devices()) {
          auto* d = out.add_devices();
          d->set_pool_name(device.pool_name());
          d->set_device_name(device.device_name());
          for (const auto& id : device.cdi_device_ids()) d->add_cdi_device_ids(id);
        }
      }
      return grpc::Status::OK;
    }
    grpc::Status NodeUnprepareResources(grpc::ServerContext* context,
                                        const drav1beta1::NodeUnprepareResourcesRequest* request,
                                        drav1beta1::NodeUnprepareResourcesResponse* response) override {
      drav1::NodeUnprepareResourcesRequest v1_request;
      for (const auto& claim : request->claims()) {
        *v1_request.add_claims() =
            KubeletDraStandIn::MakeClaim(claim.namespace_(), claim.name(), claim.uid());
      }
      drav1::NodeUnprepareResourcesResponse v1_response;
      owner_.Unprepare("v1beta1", context, v1_request, &v1_response);
      for (const auto& [uid, claim] : v1_response.claims())
        (*response->mutable_claims())[uid].set_error(claim.error());
      return grpc::Status::OK;
    }

   private:
    FakeDraPlugin& owner_;
  };

  void Prepare(const char* version, grpc::ServerContext* context,
               const drav1::NodePrepareResourcesRequest& request,
               drav1::NodePrepareResourcesResponse* response) {
    PrepareHandler handler;
    {
      std::lock_guard lock(mu_);
      calls_.push_back(version);
      last_deadline_ = context->deadline();
      last_prepare_ = request;
      handler = prepare_;
    }
    handler(request, response);
  }
  void Unprepare(const char* version, grpc::ServerContext* context,
                 const drav1::NodeUnprepareResourcesRequest& request,
                 drav1::NodeUnprepareResourcesResponse* response) {
    UnprepareHandler handler;
    {
      std::lock_guard lock(mu_);
      calls_.push_back(version);
      last_deadline_ = context->deadline();
      handler = unprepare_;
    }
    handler(request, response);
  }

  Options options_;  // versions guarded by mu_ once started
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::vector<pluginregistration::RegistrationStatus> notifications_;  // guarded by mu_
  std::vector<std::string> calls_;                                     // guarded by mu_
  std::chrono::system_clock::time_point last_deadline_;                // guarded by mu_
  drav1::NodePrepareResourcesRequest last_prepare_;                    // guarded by mu_
  PrepareHandler prepare_ = DefaultPrepare;                            // guarded by mu_
  UnprepareHandler unprepare_ = DefaultUnprepare;                      // guarded by mu_
  Registration registration_{*this};
  V1 v1_{*this};
  V1beta1 v1beta1_{*this};
  std::unique_ptr<grpc::Server> dra_server_;
  std::unique_ptr<grpc::Server> registration_server_;
};

class KubeletDraStandInTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = root_ + "/reg";
    plugins_ = root_ + "/plugins";
    std::filesystem::create_directories(registry_);
    std::filesystem::create_directories(plugins_);
  }
  void TearDown() override {
    kubelet_.reset();
    for (auto& plugin : plugins_started_) plugin->Stop();
    plugins_started_.clear();
  }

  KubeletDraStandIn& Kubelet(KubeletDraOptions options = {}) {
    options.registry_dir = registry_;
    kubelet_ = std::make_unique<KubeletDraStandIn>(options);
    EXPECT_TRUE(kubelet_->Start());
    return *kubelet_;
  }
  // No automatic retries: each refusal is one attempt.
  static KubeletDraOptions NoRetries() {
    KubeletDraOptions options;
    options.retry_initial = std::chrono::milliseconds(0);
    return options;
  }

  FakeDraPlugin::Options PluginOptions(const std::string& name = "gpu.tessera.io") {
    FakeDraPlugin::Options options;
    options.driver = name;
    options.registration_socket = registry_ + "/" + name + "-reg.sock";
    options.dra_socket = plugins_ + "/" + name + ".sock";
    return options;
  }
  FakeDraPlugin& Plugin(FakeDraPlugin::Options options, bool start = true) {
    plugins_started_.push_back(std::make_unique<FakeDraPlugin>(std::move(options)));
    if (start) plugins_started_.back()->Start();
    return *plugins_started_.back();
  }

  ::tessera::testing::TempDir tmp_{"kdra"};  // short: unix socket paths are limited
  const std::string root_ = tmp_.path();
  std::string registry_, plugins_;
  std::unique_ptr<KubeletDraStandIn> kubelet_;
  std::vector<std::unique_ptr<FakeDraPlugin>> plugins_started_;
};

TEST_F(KubeletDraStandInTest, RegistersAPluginAndChoosesV1) {
  auto& kubelet = Kubelet();
  auto& plugin = Plugin(PluginOptions());
  ASSERT_TRUE(kubelet.WaitForPlugin("gpu.tessera.io", kWait));
  ASSERT_TRUE(plugin.WaitForNotifications(1));
  EXPECT_TRUE(plugin.notifications()[0].plugin_registered());
  EXPECT_EQ(plugin.notifications()[0].error(), "");

  auto attempts = kubelet.attempts();
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_TRUE(attempts[0].accepted);
  EXPECT_EQ(attempts[0].chosen_service, "v1.DRAPlugin");
  EXPECT_TRUE(attempts[0].dra_endpoint_was_serving);
  EXPECT_EQ(attempts[0].socket_path, registry_ + "/gpu.tessera.io-reg.sock");
  auto plugins = kubelet.plugins();
  ASSERT_EQ(plugins.size(), 1u);
  EXPECT_EQ(plugins[0].endpoint, plugins_ + "/gpu.tessera.io.sock");
}

TEST_F(KubeletDraStandInTest, RegistersSocketsPresentAtStart) {
  auto& plugin = Plugin(PluginOptions());
  auto& kubelet = Kubelet();
  ASSERT_TRUE(kubelet.WaitForPlugin("gpu.tessera.io", kWait));
  ASSERT_TRUE(plugin.WaitForNotifications(1));
}

TEST_F(KubeletDraStandInTest, ThePluginsOrderDecidesTheVersion) {
  auto options = PluginOptions();
  options.versions = {"v1beta1.DRAPlugin", "v1.DRAPlugin"};
  auto& plugin = Plugin(options);
  auto& kubelet = Kubelet();
  ASSERT_TRUE(kubelet.WaitForPlugin("gpu.tessera.io", kWait));
  EXPECT_EQ(kubelet.plugins()[0].service, "v1beta1.DRAPlugin");

  auto result =
      kubelet.NodePrepareResources("gpu.tessera.io", {KubeletDraStandIn::MakeClaim("ns", "c1", "u1")});
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.kubelet_error, "");
  EXPECT_EQ(result.service, "v1beta1.DRAPlugin");
  EXPECT_EQ(plugin.calls(), std::vector<std::string>{"v1beta1"});
  ASSERT_EQ(result.response.claims().at("u1").devices_size(), 1);
  const auto& device = result.response.claims().at("u1").devices(0);
  EXPECT_EQ(device.cdi_device_ids(0), "tessera.io/gpu=u1-gpu-0");
  EXPECT_FALSE(device.has_share_id());  // v1beta1 cannot carry one
}

TEST_F(KubeletDraStandInTest, UnknownVersionsAreSkippedInThePluginsOrder) {
  auto options = PluginOptions();
  options.versions = {"v2.DRAPlugin", "v1alpha1.DRAResourceHealth", "v1beta1.DRAPlugin"};
  options.serve_v1 = false;
  Plugin(options);
  auto& kubelet = Kubelet();
  ASSERT_TRUE(kubelet.WaitForPlugin("gpu.tessera.io", kWait));
  EXPECT_EQ(kubelet.plugins()[0].service, "v1beta1.DRAPlugin");
}

struct Refusal {
  const char* what;
  std::function<void(FakeDraPlugin::Options&)> change;
  const char* error_contains;
};

TEST_F(KubeletDraStandInTest, RefusesWhatTheKubeletRefusesAndSaysWhy) {
  const std::vector<Refusal> refusals = {
      {"no versions", [](auto& o) { o.versions.clear(); }, "empty list of supported gRPC services"},
      {"unknown versions", [](auto& o) { o.versions = {"v9.DRAPlugin"}; },
       "none of services supported by the plugin ([\"v9.DRAPlugin\"]) are supported by the kubelet"},
      {"other plugin type", [](auto& o) { o.type = "CSIPlugin"; },
       "no handler registered for plugin type: CSIPlugin"},
      {"relative endpoint", [](auto& o) { o.endpoint = "dra.sock"; }, "is not an absolute socket path"},
      {"no driver name", [](auto& o) { o.driver = ""; }, "DRA driver name is empty"},
  };
  auto& kubelet = Kubelet(NoRetries());
  size_t attempts = 0;
  for (const auto& refusal : refusals) {
    SCOPED_TRACE(refusal.what);
    auto options = PluginOptions("bad" + std::to_string(attempts) + ".tessera.io");
    refusal.change(options);
    auto& plugin = Plugin(options);
    ASSERT_TRUE(plugin.WaitForNotifications(1));
    EXPECT_FALSE(plugin.notifications()[0].plugin_registered());
    EXPECT_NE(plugin.notifications()[0].error().find(refusal.error_contains), std::string::npos)
        << plugin.notifications()[0].error();
    ASSERT_TRUE(kubelet.WaitForAttempts(++attempts, kWait));
    const auto attempt = kubelet.attempts().back();
    EXPECT_FALSE(attempt.accepted);
    EXPECT_TRUE(attempt.notified);
    EXPECT_EQ(attempt.rejection, plugin.notifications()[0].error());
  }
  EXPECT_TRUE(kubelet.plugins().empty());
}

TEST_F(KubeletDraStandInTest, ARefusedPluginIsTriedAgainWithBackOff) {
  KubeletDraOptions options;
  options.retry_initial = std::chrono::milliseconds(20);
  auto& kubelet = Kubelet(options);
  auto plugin_options = PluginOptions();
  plugin_options.versions = {"v9.DRAPlugin"};
  auto& plugin = Plugin(plugin_options);
  ASSERT_TRUE(plugin.WaitForNotifications(2));  // refused, then asked again
  EXPECT_FALSE(plugin.notifications()[1].plugin_registered());
  plugin.SetVersions({"v1.DRAPlugin"});
  ASSERT_TRUE(kubelet.WaitForPlugin("gpu.tessera.io", kWait));
  EXPECT_TRUE(plugin.notifications().back().plugin_registered());
}

TEST_F(KubeletDraStandInTest, IgnoresHiddenSocketsAndOtherFiles) {
  // A dot-file socket and a plain file named like a registration socket.
  const std::string hidden = registry_ + "/.hidden-reg.sock";
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", hidden.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  std::ofstream(registry_ + "/plain-reg.sock") << "not a socket";

  auto& kubelet = Kubelet(NoRetries());
  Plugin(PluginOptions());
  ASSERT_TRUE(kubelet.WaitForPlugin("gpu.tessera.io", kWait));
  // The pass that found the plugin saw the other two files as well.
  EXPECT_EQ(kubelet.attempts().size(), 1u);
  ::close(fd);
}

TEST_F(KubeletDraStandInTest, AnEndpointIsRegisteredOncePerDriver) {
  auto& kubelet = Kubelet(NoRetries());
  auto& first = Plugin(PluginOptions());
  ASSERT_TRUE(first.WaitForNotifications(1));
  auto hijack = PluginOptions();
  hijack.registration_socket = registry_ + "/gpu.tessera.io-2-reg.sock";
  hijack.dra_socket = plugins_ + "/other.sock";
  hijack.endpoint = plugins_ + "/gpu.tessera.io.sock";  // the first instance's endpoint
  auto& second = Plugin(hijack);
  ASSERT_TRUE(second.WaitForNotifications(1));
  EXPECT_FALSE(second.notifications()[0].plugin_registered());
  EXPECT_NE(second.notifications()[0].error().find("already registered for DRA driver plugin gpu.tessera.io"),
            std::string::npos)
      << second.notifications()[0].error();
  ASSERT_TRUE(kubelet.WaitForAttempts(2, kWait));
  EXPECT_EQ(kubelet.plugins().size(), 1u);
}

// A rolling update: two instances of one driver, each with its own sockets.
// Calls go to the newest one that is connected.
TEST_F(KubeletDraStandInTest, RollingUpdateKeepsBothAndCallsTheNewest) {
  auto& kubelet = Kubelet();
  auto& old_instance = Plugin(PluginOptions());
  ASSERT_TRUE(old_instance.WaitForNotifications(1));
  auto next = PluginOptions();
  next.registration_socket = registry_ + "/gpu.tessera.io-new-reg.sock";
  next.dra_socket = plugins_ + "/new.sock";
  auto& new_instance = Plugin(next);
  ASSERT_TRUE(new_instance.WaitForNotifications(1));
  EXPECT_TRUE(new_instance.notifications()[0].plugin_registered());
  ASSERT_TRUE(kubelet.WaitForAttempts(2, kWait));
  EXPECT_EQ(kubelet.plugins().size(), 2u);

  auto result =
      kubelet.NodePrepareResources("gpu.tessera.io", {KubeletDraStandIn::MakeClaim("ns", "c", "u")});
  EXPECT_EQ(result.kubelet_error, "");
  EXPECT_EQ(result.endpoint, plugins_ + "/new.sock");
  EXPECT_EQ(new_instance.calls().size(), 1u);
  EXPECT_TRUE(old_instance.calls().empty());

  // The old instance goes away: the new one stays registered.
  old_instance.Stop();
  ASSERT_TRUE(kubelet.WaitForDeregistrations(1, kWait));
  ASSERT_EQ(kubelet.plugins().size(), 1u);
  EXPECT_EQ(kubelet.plugins()[0].endpoint, plugins_ + "/new.sock");
}

TEST_F(KubeletDraStandInTest, PreparesAndUnpreparesOverThePluginsSocket) {
  auto& kubelet = Kubelet();
  auto& plugin = Plugin(PluginOptions());
  ASSERT_TRUE(kubelet.WaitForPlugin("gpu.tessera.io", kWait));

  const std::vector<drav1::Claim> claims = {KubeletDraStandIn::MakeClaim("team-a", "c1", "uid-1"),
                                            KubeletDraStandIn::MakeClaim("team-b", "c2", "uid-2")};
  auto prepared = kubelet.NodePrepareResources("gpu.tessera.io", claims);
  ASSERT_TRUE(prepared.status.ok()) << prepared.status.error_message();
  EXPECT_EQ(prepared.kubelet_error, "");
  EXPECT_EQ(prepared.service, "v1.DRAPlugin");
  // The plugin received the claims as the kubelet names them.
  const auto request = plugin.last_prepare();
  ASSERT_EQ(request.claims_size(), 2);
  EXPECT_EQ(request.claims(1).namespace_(), "team-b");
  EXPECT_EQ(request.claims(1).name(), "c2");
  EXPECT_EQ(request.claims(1).uid(), "uid-2");
  // v1 keeps the share ID.
  const auto& device = prepared.response.claims().at("uid-2").devices(0);
  EXPECT_TRUE(device.has_share_id());
  EXPECT_EQ(device.share_id(), "share-uid-2");

  auto unprepared = kubelet.NodeUnprepareResources("gpu.tessera.io", claims);
  ASSERT_TRUE(unprepared.status.ok());
  EXPECT_EQ(unprepared.kubelet_error, "");
  EXPECT_EQ(unprepared.response.claims().size(), 2u);
  EXPECT_EQ(plugin.calls(), (std::vector<std::string>{"v1", "v1"}));
}

TEST_F(KubeletDraStandInTest, JudgesAnswersAsTheKubeletDoes) {
  auto& kubelet = Kubelet();
  auto& plugin = Plugin(PluginOptions());
  ASSERT_TRUE(kubelet.WaitForPlugin("gpu.tessera.io", kWait));
  const std::vector<drav1::Claim> claims = {KubeletDraStandIn::MakeClaim("ns", "c1", "uid-1"),
                                            KubeletDraStandIn::MakeClaim("ns", "c2", "uid-2")};

  plugin.SetPrepare([](const auto& request, auto* response) {
    FakeDraPlugin::DefaultPrepare(request, response);
    (*response->mutable_claims())["uid-2"].set_error("GPU-123 is not on this node");
  });
  EXPECT_EQ(kubelet.NodePrepareResources("gpu.tessera.io", claims).kubelet_error,
            "NodePrepareResources failed for claim ns/c2: GPU-123 is not on this node");

  plugin.SetPrepare([](const auto& request, auto* response) {
    FakeDraPlugin::DefaultPrepare(request, response);
    response->mutable_claims()->erase("uid-1");
  });
  EXPECT_EQ(kubelet.NodePrepareResources("gpu.tessera.io", claims).kubelet_error,
            "NodePrepareResources left out 1 claims");

  plugin.SetPrepare([](const auto& request, auto* response) {
    FakeDraPlugin::DefaultPrepare(request, response);
    (*response->mutable_claims())["uid-9"];
  });
  EXPECT_EQ(kubelet.NodePrepareResources("gpu.tessera.io", claims).kubelet_error,
            "NodePrepareResources returned result for unknown claim UID uid-9");

  plugin.SetUnprepare([](const auto&, auto* response) { (*response->mutable_claims())["uid-1"]; });
  EXPECT_EQ(kubelet.NodeUnprepareResources("gpu.tessera.io", claims).kubelet_error,
            "NodeUnprepareResources left out 1 claims");

  plugin.SetUnprepare([](const auto& request, auto* response) {
    FakeDraPlugin::DefaultUnprepare(request, response);
    (*response->mutable_claims())["uid-1"].set_error("busy");
  });
  EXPECT_EQ(kubelet.NodeUnprepareResources("gpu.tessera.io", claims).kubelet_error,
            "NodeUnprepareResources failed for claim ns/c1: busy");

  auto missing = kubelet.NodePrepareResources("other.example.com", claims);
  EXPECT_FALSE(missing.status.ok());
  EXPECT_NE(missing.kubelet_error.find("DRA driver other.example.com is not registered"), std::string::npos);
}

// The kubelet's 45-second deadline reaches the plugin with the call.
TEST_F(KubeletDraStandInTest, EachCallCarriesTheKubeletsDeadline) {
  auto& kubelet = Kubelet();
  auto& plugin = Plugin(PluginOptions());
  ASSERT_TRUE(kubelet.WaitForPlugin("gpu.tessera.io", kWait));
  const auto before = std::chrono::system_clock::now();
  auto result =
      kubelet.NodePrepareResources("gpu.tessera.io", {KubeletDraStandIn::MakeClaim("ns", "c", "u")});
  const auto after = std::chrono::system_clock::now();
  ASSERT_TRUE(result.status.ok());
  // gRPC sends the remaining time; the plugin's deadline lands 45 s after the
  // call began, give or take the call itself and the timeout's coarse encoding.
  EXPECT_GE(plugin.last_deadline(), before + std::chrono::seconds(45) - std::chrono::milliseconds(100));
  EXPECT_LE(plugin.last_deadline(), after + std::chrono::seconds(46));
}

TEST_F(KubeletDraStandInTest, APluginThatOverrunsTheDeadlineFailsTheCall) {
  KubeletDraOptions options;
  options.call_timeout = std::chrono::milliseconds(300);
  auto& kubelet = Kubelet(options);
  auto& plugin = Plugin(PluginOptions());
  ASSERT_TRUE(kubelet.WaitForPlugin("gpu.tessera.io", kWait));
  // Shared: the handler may still be looping when the test body returns.
  auto release = std::make_shared<std::atomic<bool>>(false);
  plugin.SetPrepare([release](const auto&, auto*) {
    while (!*release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  auto result =
      kubelet.NodePrepareResources("gpu.tessera.io", {KubeletDraStandIn::MakeClaim("ns", "c", "u")});
  *release = true;
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(result.kubelet_error.rfind("NodePrepareResources failed: ", 0), 0u) << result.kubelet_error;
}

TEST_F(KubeletDraStandInTest, APluginThatGoesAwayAndComesBackIsRegisteredAgain) {
  auto& kubelet = Kubelet();
  auto& plugin = Plugin(PluginOptions());
  ASSERT_TRUE(kubelet.WaitForPlugin("gpu.tessera.io", kWait));

  plugin.Stop();  // removes its sockets
  ASSERT_TRUE(kubelet.WaitForNoPlugin("gpu.tessera.io", kWait));
  EXPECT_EQ(kubelet.deregistrations(), 1u);
  EXPECT_FALSE(kubelet.NodePrepareResources("gpu.tessera.io", {KubeletDraStandIn::MakeClaim("ns", "c", "u")})
                   .status.ok());

  plugin.Start();
  ASSERT_TRUE(kubelet.WaitForPlugin("gpu.tessera.io", kWait));
  ASSERT_TRUE(plugin.WaitForNotifications(2));
  EXPECT_TRUE(plugin.notifications()[1].plugin_registered());
  EXPECT_EQ(kubelet.attempts().size(), 2u);
  auto result =
      kubelet.NodePrepareResources("gpu.tessera.io", {KubeletDraStandIn::MakeClaim("ns", "c", "u")});
  EXPECT_TRUE(result.status.ok()) << result.status.error_message();
}

// A crashed plugin leaves its socket file; the next instance replaces it.
TEST_F(KubeletDraStandInTest, AReplacedSocketIsRegisteredAnew) {
  auto& kubelet = Kubelet();
  auto& plugin = Plugin(PluginOptions());
  ASSERT_TRUE(plugin.WaitForNotifications(1));
  plugin.Stop(/*remove_sockets=*/false);
  plugin.Start();  // unlinks and binds the same names again
  ASSERT_TRUE(plugin.WaitForNotifications(2));
  EXPECT_TRUE(plugin.notifications()[1].plugin_registered());
  EXPECT_GE(kubelet.deregistrations(), 1u);
  ASSERT_TRUE(kubelet.WaitForPlugin("gpu.tessera.io", kWait));
  EXPECT_EQ(kubelet.plugins().size(), 1u);
}

TEST_F(KubeletDraStandInTest, ARestartedKubeletRegistersThePluginAgain) {
  auto& kubelet = Kubelet();
  auto& plugin = Plugin(PluginOptions());
  ASSERT_TRUE(plugin.WaitForNotifications(1));
  ASSERT_TRUE(kubelet.Restart());
  ASSERT_TRUE(plugin.WaitForNotifications(2));
  EXPECT_TRUE(plugin.notifications()[1].plugin_registered());
  ASSERT_TRUE(kubelet.WaitForPlugin("gpu.tessera.io", kWait));
  EXPECT_EQ(kubelet.plugins().size(), 1u);
}

// The kubelet registers a plugin whose DRA server is not up yet (it connects on
// demand), but records it; calls fail until the server answers.
TEST_F(KubeletDraStandInTest, RecordsADraServerThatWasNotServingAtRegistration) {
  KubeletDraOptions options;
  options.connect_timeout = std::chrono::milliseconds(200);
  auto& kubelet = Kubelet(options);
  auto& plugin = Plugin(PluginOptions(), /*start=*/false);
  plugin.StartRegistration();
  ASSERT_TRUE(plugin.WaitForNotifications(1));
  EXPECT_TRUE(plugin.notifications()[0].plugin_registered());
  ASSERT_TRUE(kubelet.WaitForAttempts(1, kWait));
  EXPECT_FALSE(kubelet.attempts()[0].dra_endpoint_was_serving);

  auto result =
      kubelet.NodePrepareResources("gpu.tessera.io", {KubeletDraStandIn::MakeClaim("ns", "c", "u")});
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);

  plugin.StartDra();
  // As the kubelet retries a pod's sync, until the connection is up.
  const auto give_up = std::chrono::steady_clock::now() + kWait;
  do {
    result = kubelet.NodePrepareResources("gpu.tessera.io", {KubeletDraStandIn::MakeClaim("ns", "c", "u")});
  } while (!result.status.ok() && std::chrono::steady_clock::now() < give_up);
  EXPECT_TRUE(result.status.ok()) << result.status.error_message();
}

}  // namespace
}  // namespace tessera::testing
