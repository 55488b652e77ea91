// tessera-node's PodResources client against the kubelet stand-in over the
// real gRPC: containers admitted through the stand-in (which calls tessera's
// device plugin's Allocate) are listed with their device IDs, deleted pods
// disappear, and the client copes with a missing socket and kubelet restarts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "agent_fixture.h"
#include "host/inventory.h"
#include "node/pod_resources.h"

namespace tessera::node {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::KubeletStandIn;

std::string Device(int gpu, int replica) {
  return TwoGpus()[gpu].uuid + "::" + std::to_string(replica);
}

ino_t Inode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

class PodResourcesKubeletTest : public test::AgentFixture {
 protected:
  // Laid out like a kubelet's root: <root>/device-plugins and <root>/pod-resources.
  void SetUp() override { SetUpNode("pod-resources/kubelet.sock"); }

  // The kubelet, then the agent, registered and advertising its 6 devices.
  void StartKubeletAndAgent() {
    ASSERT_TRUE(kubelet_->Start());
    StartAgent();
    ASSERT_TRUE(kubelet_->WaitForDevices([](const auto& d) { return d.size() == 6; }, kWait));
  }

  std::vector<ContainerDevices> ListOrFail(KubeletPodResources& source) {
    auto listed = source.List();
    EXPECT_TRUE(listed.ok()) << listed.error().message;
    return listed.ok() ? *listed : std::vector<ContainerDevices>{};
  }
};

TEST_F(PodResourcesKubeletTest, AnAdmittedContainerIsListedWithItsDevicesUntilItsPodIsDeleted) {
  StartKubeletAndAgent();
  KubeletPodResources source(pod_resources_socket_);
  EXPECT_THAT(ListOrFail(source), IsEmpty());

  // The kubelet admits a container with two vGPUs: tessera's Allocate runs.
  v1beta1::ContainerAllocateResponse allocated;
  grpc::Status status =
      kubelet_->AdmitContainer("ml", "train-0", "main", {Device(0, 0), Device(1, 2)}, &allocated);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(allocated.mounts_size(), 4);  // libvgpu, ld.so.preload, the region, the read-only limits
  EXPECT_EQ(allocated.mounts(2).container_path(), "/tmp/tessera");
  EXPECT_TRUE(fs::is_directory(allocated.mounts(2).host_path())) << "Allocate made the container's region";
  EXPECT_EQ(allocated.annotations().at("tessera.io/region-dir"), allocated.mounts(2).host_path());

  // A container of the same pod that requests no devices, and another pod.
  ASSERT_TRUE(kubelet_->AdmitContainer("ml", "train-0", "log-shipper", {}, nullptr).ok());
  ASSERT_TRUE(kubelet_->AdmitContainer("default", "infer", "server", {Device(0, 1)}, nullptr).ok());

  EXPECT_THAT(
      ListOrFail(source),
      ElementsAre(ContainerDevices{"ml", "train-0", "main", "nvidia.com/gpu", {Device(0, 0), Device(1, 2)}},
                  ContainerDevices{"default", "infer", "server", "nvidia.com/gpu", {Device(0, 1)}}));

  kubelet_->RemovePod("ml", "train-0");
  EXPECT_THAT(ListOrFail(source),
              ElementsAre(ContainerDevices{"default", "infer", "server", "nvidia.com/gpu", {Device(0, 1)}}));
  kubelet_->RemovePod("default", "infer");
  EXPECT_THAT(ListOrFail(source), IsEmpty());
}

TEST_F(PodResourcesKubeletTest, AContainerThePluginRefusesIsNotListed) {
  StartKubeletAndAgent();
  KubeletPodResources source(pod_resources_socket_);
  v1beta1::ContainerAllocateResponse allocated;
  grpc::Status status = kubelet_->AdmitContainer("ml", "bad", "main", {"GPU-not-here::0"}, &allocated);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.error_message(), HasSubstr("GPU-not-here::0"));
  EXPECT_THAT(ListOrFail(source), IsEmpty());
}

TEST_F(PodResourcesKubeletTest, TheConfiguredResourceNameIsWhatTheKubeletReports) {
  config_.resource_name = "example.com/vgpu";
  StartKubeletAndAgent();
  ASSERT_TRUE(kubelet_->AdmitContainer("ns", "p", "c", {Device(1, 0)}, nullptr).ok());
  KubeletPodResources source(pod_resources_socket_);
  EXPECT_THAT(ListOrFail(source),
              ElementsAre(ContainerDevices{"ns", "p", "c", "example.com/vgpu", {Device(1, 0)}}));
}

TEST_F(PodResourcesKubeletTest, AMissingSocketIsAClearError) {
  KubeletPodResources source(pod_resources_socket_);
  auto listed = source.List();  // no kubelet yet
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.error().message, "the kubelet's pod-resources socket " + pod_resources_socket_ +
                                        " does not exist (is the kubelet's PodResources API enabled / the "
                                        "directory mounted?)");

  StartKubeletAndAgent();
  EXPECT_TRUE(source.List().ok());
  kubelet_->Stop();
  listed = source.List();
  ASSERT_FALSE(listed.ok());
  EXPECT_THAT(listed.error().message, HasSubstr("does not exist"));
}

// A kubelet restart deletes and recreates the socket and restores the pods'
// devices from its checkpoint: the same client reads them on the new socket.
TEST_F(PodResourcesKubeletTest, AfterAKubeletRestartListWorksOnTheNewSocket) {
  StartKubeletAndAgent();
  ASSERT_TRUE(kubelet_->AdmitContainer("ml", "train-0", "main", {Device(0, 0)}, nullptr).ok());
  KubeletPodResources source(pod_resources_socket_);
  ASSERT_THAT(ListOrFail(source),
              ElementsAre(ContainerDevices{"ml", "train-0", "main", "nvidia.com/gpu", {Device(0, 0)}}));
  ASSERT_NE(Inode(pod_resources_socket_), 0u);

  for (size_t restart = 1; restart <= 2; ++restart) {
    ASSERT_TRUE(kubelet_->Restart());
    // Restart deleted the socket and bound a new one (an inode number may be
    // reused, so only its presence is checked).
    EXPECT_NE(Inode(pod_resources_socket_), 0u);
    // Pods admitted before the restart are still listed, on the new socket.
    auto listed = ListOrFail(source);
    ASSERT_EQ(listed.size(), restart) << "restart " << restart;
    EXPECT_EQ(listed.front(), (ContainerDevices{"ml", "train-0", "main", "nvidia.com/gpu", {Device(0, 0)}}));

    // The plugin registers again; new containers are admitted and listed too.
    ASSERT_TRUE(kubelet_->WaitForRegistrations(1 + restart, kWait));
    const std::string pod = "after-restart-" + std::to_string(restart);
    const std::string device = Device(1, static_cast<int>(restart));
    grpc::Status status = kubelet_->AdmitContainer("ml", pod, "main", {device}, nullptr);
    ASSERT_TRUE(status.ok()) << status.error_message();
    listed = ListOrFail(source);
    ASSERT_EQ(listed.size(), 1 + restart);
    EXPECT_EQ(listed.back(), (ContainerDevices{"ml", pod, "main", "nvidia.com/gpu", {device}}));
  }
}

// The stand-in's own checks and its other two methods, through the raw API:
// they must be able to fail, or the tests above prove less.
TEST_F(PodResourcesKubeletTest, StandInServesGetAndAllocatableLikeAKubelet) {
  StartKubeletAndAgent();
  ASSERT_TRUE(kubelet_->AdmitContainer("ml", "train-0", "main", {Device(0, 0)}, nullptr).ok());

  grpc::Status taken = kubelet_->AdmitContainer("ml", "other", "main", {Device(0, 0)}, nullptr);
  EXPECT_EQ(taken.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(taken.error_message(), HasSubstr("already allocated to ml/train-0/main"));

  auto stub = v1::PodResourcesLister::NewStub(
      grpc::CreateChannel("unix://" + pod_resources_socket_, grpc::InsecureChannelCredentials()));
  {
    v1::GetPodResourcesRequest request;
    request.set_pod_namespace("ml");
    request.set_pod_name("train-0");
    v1::GetPodResourcesResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(stub->Get(&context, request, &response).ok());
    EXPECT_EQ(response.pod_resources().name(), "train-0");
    ASSERT_EQ(response.pod_resources().containers_size(), 1);
    ASSERT_EQ(response.pod_resources().containers(0).devices_size(), 1);
    const auto& devices = response.pod_resources().containers(0).devices(0);
    EXPECT_THAT(devices.device_ids(), ElementsAre(Device(0, 0)));
    ASSERT_EQ(devices.topology().nodes_size(), 1);
    EXPECT_EQ(devices.topology().nodes(0).id(), 0) << "GPU 0's NUMA node";
  }
  {
    v1::GetPodResourcesRequest request;
    request.set_pod_namespace("ml");
    request.set_pod_name("gone");
    v1::GetPodResourcesResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub->Get(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNKNOWN) << "a kubelet's plain error";
    EXPECT_EQ(status.error_message(), "pod gone in namespace ml not found");
  }
  auto allocatable = [&] {
    v1::AllocatableResourcesResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(stub->GetAllocatableResources(&context, v1::AllocatableResourcesRequest(), &response).ok());
    return response;
  };
  auto all = allocatable();
  ASSERT_EQ(all.devices_size(), 6);
  for (const auto& d : all.devices()) EXPECT_EQ(d.resource_name(), "nvidia.com/gpu");

  inventory_->ReportHealth(TwoGpus()[1].uuid, false, "XID 79");
  ASSERT_TRUE(kubelet_->WaitForDevices(
      [](const auto& d) {
        return std::count_if(d.begin(), d.end(), [](const auto& x) { return x.health() == "Unhealthy"; }) ==
               3;
      },
      kWait));
  auto healthy = allocatable();
  ASSERT_EQ(healthy.devices_size(), 3);
  for (const auto& d : healthy.devices()) EXPECT_THAT(d.device_ids(0), HasSubstr(TwoGpus()[0].uuid));
}

}  // namespace
}  // namespace tessera::node
