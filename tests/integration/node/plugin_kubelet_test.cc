// tessera-node's device plugin driven by the kubelet stand-in over the real
// v1beta1 gRPC: registration, the advertised list, health changes, Allocate,
// GetPreferredAllocation and kubelet / plugin restarts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "agent_fixture.h"
#include "base/testing.h"
#include "contract/container_contract.h"
#include "node/registrar.h"
#include "testing/ports.h"

namespace tessera::node {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::KubeletStandIn;

// Polls `condition` until it holds or kWait passes.
bool Eventually(const std::function<bool()>& condition) {
  return ::tessera::testing::WaitFor(condition, kWait);
}

using ::tessera::testing::FreePort;

size_t CountHealth(const std::vector<v1beta1::Device>& devices, const std::string& health) {
  return std::count_if(devices.begin(), devices.end(), [&](const auto& d) { return d.health() == health; });
}

class PluginKubeletTest : public test::AgentFixture {
 protected:
  void SetUp() override { SetUpNode(); }
};

TEST_F(PluginKubeletTest, RegistersWhileServingAndAdvertisesSplitCountDevicesPerGpu) {
  ASSERT_TRUE(kubelet_->Start());
  StartAgent();

  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, kWait));
  auto registration = kubelet_->registrations().front();
  EXPECT_TRUE(registration.accepted) << registration.rejection;
  EXPECT_TRUE(registration.plugin_was_serving) << "the plugin registered before its socket answered";
  EXPECT_EQ(registration.request.version(), "v1beta1");
  EXPECT_EQ(registration.request.resource_name(), "nvidia.com/gpu");
  EXPECT_EQ(registration.request.endpoint(), "tessera-nvidia.com-gpu.sock");
  EXPECT_TRUE(registration.request.options().get_preferred_allocation_available());
  EXPECT_FALSE(registration.request.options().pre_start_required());
  EXPECT_TRUE(registration.plugin_options.get_preferred_allocation_available());

  ASSERT_TRUE(kubelet_->WaitForDevices([](const auto& d) { return d.size() == 6; }, kWait));
  auto devices = kubelet_->devices();
  std::vector<std::string> ids;
  for (const auto& d : devices) ids.push_back(d.id());
  const auto gpus = TwoGpus();
  EXPECT_THAT(ids, ::testing::ElementsAre(gpus[0].uuid + "::0", gpus[0].uuid + "::1", gpus[0].uuid + "::2",
                                          gpus[1].uuid + "::0", gpus[1].uuid + "::1", gpus[1].uuid + "::2"));
  EXPECT_EQ(CountHealth(devices, "Healthy"), 6u);
  ASSERT_EQ(devices[4].topology().nodes_size(), 1);
  EXPECT_EQ(devices[4].topology().nodes(0).id(), 1);
}

TEST_F(PluginKubeletTest, WaitsForAKubeletThatStartsLater) {
  StartAgent();
  EXPECT_EQ(kubelet_->registrations().size(), 0u);
  ASSERT_TRUE(kubelet_->Start());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, kWait));
  EXPECT_TRUE(kubelet_->registrations().front().plugin_was_serving);
}

TEST_F(PluginKubeletTest, AnUnhealthyGpuTakesItsDevicesOutOfTheList) {
  ASSERT_TRUE(kubelet_->Start());
  StartAgent();
  ASSERT_TRUE(kubelet_->WaitForDevices([](const auto& d) { return CountHealth(d, "Healthy") == 6; }, kWait));

  const auto gpus = TwoGpus();
  inventory_->ReportHealth(gpus[1].uuid, false, "XID 79");
  ASSERT_TRUE(
      kubelet_->WaitForDevices([](const auto& d) { return CountHealth(d, "Unhealthy") == 3; }, kWait));
  for (const auto& device : kubelet_->devices()) {
    bool on_bad_gpu = device.id().starts_with(gpus[1].uuid);
    EXPECT_EQ(device.health(), on_bad_gpu ? "Unhealthy" : "Healthy") << device.id();
  }
  EXPECT_FALSE(agent_->devices().Get().gpus[1].healthy);
}

TEST_F(PluginKubeletTest, AllocateMountsLibvgpuAndARegionAndSetsPodIndependentEnv) {
  ASSERT_TRUE(kubelet_->Start());
  StartAgent();
  ASSERT_TRUE(kubelet_->WaitForDevices([](const auto& d) { return d.size() == 6; }, kWait));
  const auto gpus = TwoGpus();

  v1beta1::PreferredAllocationRequest preferred_request;
  auto* want = preferred_request.add_container_requests();
  for (const auto& d : kubelet_->devices()) want->add_available_deviceids(d.id());
  want->set_allocation_size(2);
  v1beta1::PreferredAllocationResponse preferred;
  ASSERT_TRUE(kubelet_->GetPreferredAllocation(preferred_request, &preferred).ok());
  ASSERT_EQ(preferred.container_responses_size(), 1);
  ASSERT_EQ(preferred.container_responses(0).deviceids_size(), 2);
  EXPECT_NE(preferred.container_responses(0).deviceids(0).substr(0, 40),
            preferred.container_responses(0).deviceids(1).substr(0, 40))
      << "two vGPUs of one container belong on two GPUs";

  v1beta1::AllocateRequest request;
  auto* first = request.add_container_requests();
  first->add_devices_ids(preferred.container_responses(0).deviceids(0));
  first->add_devices_ids(preferred.container_responses(0).deviceids(1));
  request.add_container_requests()->add_devices_ids(gpus[0].uuid + "::2");
  v1beta1::AllocateResponse response;
  grpc::Status status = kubelet_->Allocate(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.container_responses_size(), 2);

  std::set<std::string> regions;
  for (const auto& container : response.container_responses()) {
    ASSERT_EQ(container.mounts_size(), 4);
    EXPECT_EQ(container.mounts(0).host_path(), config_.libvgpu_host_path);
    EXPECT_EQ(container.mounts(1).container_path(), "/etc/ld.so.preload");
    EXPECT_EQ(container.mounts(2).container_path(), "/tmp/tessera");
    // The limits file's directory, out of the container's reach (docs/security.md).
    EXPECT_EQ(container.mounts(3).container_path(), contract::kLimitsContainerDir);
    EXPECT_TRUE(container.mounts(3).read_only());
    EXPECT_TRUE(fs::is_directory(container.mounts(2).host_path()));
    regions.insert(container.mounts(2).host_path());
    EXPECT_EQ(container.envs().at("CUDA_DEVICE_MEMORY_SHARED_CACHE"), "/tmp/tessera/vgpu.region");
  }
  EXPECT_EQ(regions.size(), 2u) << "each container has its own region";

  // The preload file the agent wrote names libvgpu's path inside the container.
  std::ifstream preload(response.container_responses(0).mounts(1).host_path());
  std::string line;
  std::getline(preload, line);
  EXPECT_EQ(line, config_.libvgpu_container_path);

  // Devices the node does not have are refused with a reason.
  // The whole request is refused, and no region is made for its good container.
  size_t regions_before =
      std::distance(fs::directory_iterator(config_.region_host_dir), fs::directory_iterator());
  v1beta1::AllocateRequest bad;
  bad.add_container_requests()->add_devices_ids(gpus[0].uuid + "::0");
  bad.add_container_requests()->add_devices_ids("GPU-not-here::0");
  status = kubelet_->Allocate(bad, &response);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.error_message().find("GPU-not-here::0"), std::string::npos) << status.error_message();
  EXPECT_EQ(std::distance(fs::directory_iterator(config_.region_host_dir), fs::directory_iterator()),
            static_cast<std::ptrdiff_t>(regions_before));

  v1beta1::PreStartContainerRequest prestart;
  prestart.add_devices_ids(gpus[0].uuid + "::0");
  EXPECT_TRUE(kubelet_->PreStartContainer(prestart).ok());
}

TEST_F(PluginKubeletTest, KubeletRestartLeadsToANewRegistrationAndStream) {
  ASSERT_TRUE(kubelet_->Start());
  StartAgent();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, kWait));
  ASSERT_TRUE(kubelet_->WaitForDevices([](const auto& d) { return d.size() == 6; }, kWait));

  // Like a starting kubelet: its socket and every plugin socket are deleted and
  // kubelet.sock comes back.
  ASSERT_TRUE(kubelet_->Restart());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, kWait));
  auto registration = kubelet_->registrations().back();
  EXPECT_TRUE(registration.accepted) << registration.rejection;
  EXPECT_TRUE(registration.plugin_was_serving) << "re-registered before serving again";
  EXPECT_TRUE(fs::exists(config_.PluginSocketPath()));

  // The new connection works end to end.
  uint64_t lists = kubelet_->device_lists_received();
  inventory_->ReportHealth(TwoGpus()[0].uuid, false, "XID 48");
  ASSERT_TRUE(
      kubelet_->WaitForDevices([](const auto& d) { return CountHealth(d, "Unhealthy") == 3; }, kWait));
  EXPECT_GT(kubelet_->device_lists_received(), lists);
  v1beta1::AllocateRequest request;
  request.add_container_requests()->add_devices_ids(TwoGpus()[1].uuid + "::1");
  v1beta1::AllocateResponse response;
  EXPECT_TRUE(kubelet_->Allocate(request, &response).ok());
}

TEST_F(PluginKubeletTest, ANewKubeletSocketAloneIsEnoughToRegisterAgain) {
  ASSERT_TRUE(kubelet_->Start());
  StartAgent();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, kWait));
  for (size_t restarts = 1; restarts <= 3; ++restarts) {
    ASSERT_TRUE(kubelet_->Restart(/*wipe_plugin_sockets=*/false));  // kubelet.sock replaced, ours kept
    ASSERT_TRUE(kubelet_->WaitForRegistrations(1 + restarts, kWait)) << "restart " << restarts;
    EXPECT_TRUE(kubelet_->registrations().back().plugin_was_serving);
  }
  // The agent counts a registration once the kubelet's answer is back.
  EXPECT_TRUE(Eventually([&] { return agent_->registrations() == 4; }));
}

TEST_F(PluginKubeletTest, APluginRestartLeavesRunningContainersMountsInPlace) {
  ASSERT_TRUE(kubelet_->Start());
  StartAgent();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, kWait));
  v1beta1::AllocateRequest request;
  request.add_container_requests()->add_devices_ids(TwoGpus()[0].uuid + "::0");
  v1beta1::AllocateResponse before;
  ASSERT_TRUE(kubelet_->Allocate(request, &before).ok());
  const std::string region = before.container_responses(0).mounts(2).host_path();
  std::ofstream(region + "/vgpu.region") << "in use by a running container";

  // The agent goes away and a new one starts (a DaemonSet pod replaced).
  agent_.reset();
  StartAgent();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, kWait));
  EXPECT_TRUE(kubelet_->registrations().back().plugin_was_serving);

  // What the running container has mounted is still there, untouched.
  EXPECT_TRUE(fs::exists(config_.libvgpu_host_path));
  EXPECT_TRUE(fs::exists(config_.PreloadFileHostPath()));
  std::ifstream in(region + "/vgpu.region");
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "in use by a running container");

  // And the new plugin answers a new container the same way.
  v1beta1::AllocateResponse after;
  ASSERT_TRUE(kubelet_->Allocate(request, &after).ok());
  EXPECT_EQ(after.container_responses(0).mounts(0).host_path(),
            before.container_responses(0).mounts(0).host_path());
  EXPECT_EQ(after.container_responses(0).envs().at("CUDA_DEVICE_MEMORY_SHARED_CACHE"),
            before.container_responses(0).envs().at("CUDA_DEVICE_MEMORY_SHARED_CACHE"));
  EXPECT_NE(after.container_responses(0).mounts(2).host_path(), region);
}

TEST_F(PluginKubeletTest, ConfiguredResourceNameAndPreStartAreRegistered) {
  config_.resource_name = "example.com/vgpu";
  config_.pre_start_required = true;
  ASSERT_TRUE(kubelet_->Start());
  StartAgent();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, kWait));
  auto registration = kubelet_->registrations().front();
  EXPECT_TRUE(registration.accepted) << registration.rejection;
  EXPECT_EQ(registration.request.resource_name(), "example.com/vgpu");
  EXPECT_EQ(registration.request.endpoint(), "tessera-example.com-vgpu.sock");
  EXPECT_TRUE(registration.request.options().pre_start_required());
  EXPECT_TRUE(registration.plugin_options.pre_start_required());
}

// The metrics endpoint is started last; a Stop() that follows at once used to
// be able to hang in the listener's join (its stop() came before the accept
// loop ran). Each Stop must return and leave the port closed.
TEST_F(PluginKubeletTest, StopRightAfterStartReturnsAndClosesTheMetricsPort) {
  for (int i = 0; i < 20; ++i) {
    config_.metrics_address = "127.0.0.1";
    config_.metrics_port = FreePort();
    ASSERT_GT(config_.metrics_port, 0);
    StartAgent();
    ASSERT_EQ(agent_->metrics_port(), config_.metrics_port);
    ::tessera::testing::ReturnsOrAbort([&] { agent_->Stop(); }, "Agent::Stop right after Start");
    EXPECT_TRUE(::tessera::testing::NothingListensOn(config_.metrics_port)) << "iteration " << i;
    agent_.reset();
  }
}

// The stand-in's checks must be able to fail, or the tests above prove nothing.
TEST_F(PluginKubeletTest, StandInCatchesARegistrationBeforeServingAndBadRequests) {
  ASSERT_TRUE(kubelet_->Start());
  auto status = RegisterWithKubelet(config_);  // no plugin serving on the endpoint
  ASSERT_TRUE(status.ok()) << status.error().message;
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, kWait));
  EXPECT_TRUE(kubelet_->registrations().front().accepted);
  EXPECT_FALSE(kubelet_->registrations().front().plugin_was_serving);

  auto stub = v1beta1::Registration::NewStub(
      grpc::CreateChannel("unix://" + kubelet_->socket_path(), grpc::InsecureChannelCredentials()));
  for (auto [version, resource] : {std::pair{"v1alpha", "nvidia.com/gpu"}, std::pair{"v1beta1", "gpu"}}) {
    v1beta1::RegisterRequest request;
    request.set_version(version);
    request.set_endpoint("x.sock");
    request.set_resource_name(resource);
    grpc::ClientContext context;
    v1beta1::Empty empty;
    EXPECT_FALSE(stub->Register(&context, request, &empty).ok()) << version << " " << resource;
  }
  ASSERT_TRUE(kubelet_->WaitForRegistrations(3, kWait));
  EXPECT_FALSE(kubelet_->registrations()[1].accepted);
  EXPECT_FALSE(kubelet_->registrations()[2].accepted);
}

}  // namespace
}  // namespace tessera::node
