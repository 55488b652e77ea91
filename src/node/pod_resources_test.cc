// PodResources: flattening the kubelet's List answer, and KubeletPodResources
// against an in-process PodResourcesLister on a unix socket (answers, gRPC
// errors, a missing / refusing / silent socket, a restarted server).
#include "node/pod_resources.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "base/testing.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "podresources/v1/api.grpc.pb.h"

namespace tessera::node {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::ContainerDevices* AddDevices(v1::ContainerResources* container, const std::string& resource,
                                 std::vector<std::string> ids, std::vector<int64_t> numa = {}) {
  auto* devices = container->add_devices();
  devices->set_resource_name(resource);
  for (const auto& id : ids) devices->add_device_ids(id);
  for (int64_t node : numa) devices->mutable_topology()->add_nodes()->set_id(node);
  return devices;
}

v1::PodResources* AddPod(v1::ListPodResourcesResponse& response, const std::string& ns,
                         const std::string& name) {
  auto* pod = response.add_pod_resources();
  pod->set_namespace_(ns);
  pod->set_name(name);
  return pod;
}

// ---- flattening ----

TEST(PodResourcesFlattenTest, OneEntryPerContainerAndResourceInKubeletOrder) {
  v1::ListPodResourcesResponse response;
  auto* train = AddPod(response, "ml", "train-0");
  auto* main = train->add_containers();
  main->set_name("main");
  AddDevices(main, "nvidia.com/gpu", {"GPU-a::0", "GPU-b::3"});
  AddDevices(main, "example.com/nic", {"nic-1"});
  auto* sidecar = train->add_containers();
  sidecar->set_name("sidecar");
  AddDevices(sidecar, "nvidia.com/gpu", {"GPU-a::1"});
  auto* web = AddPod(response, "default", "web");
  web->add_containers()->set_name("nginx");

  auto flat = FlattenPodResources(response);
  EXPECT_THAT(
      flat, ElementsAre(ContainerDevices{"ml", "train-0", "main", "nvidia.com/gpu", {"GPU-a::0", "GPU-b::3"}},
                        ContainerDevices{"ml", "train-0", "main", "example.com/nic", {"nic-1"}},
                        ContainerDevices{"ml", "train-0", "sidecar", "nvidia.com/gpu", {"GPU-a::1"}}));
}

// A kubelet sends one ContainerDevices per device and per NUMA node of the
// device: they merge into one entry per resource, each ID once.
TEST(PodResourcesFlattenTest, MergesTheKubeletsPerDeviceEntries) {
  v1::ListPodResourcesResponse response;
  auto* container = AddPod(response, "ns", "pod")->add_containers();
  container->set_name("c");
  AddDevices(container, "nvidia.com/gpu", {"GPU-a::0"}, {0});
  AddDevices(container, "example.com/nic", {"nic-1"}, {0});
  AddDevices(container, "nvidia.com/gpu", {"GPU-b::2"}, {0});
  AddDevices(container, "nvidia.com/gpu", {"GPU-b::2"}, {1});  // same device, second NUMA node
  AddDevices(container, "nvidia.com/gpu", {"GPU-c::1"});       // no topology

  auto flat = FlattenPodResources(response);
  EXPECT_THAT(
      flat,
      ElementsAre(ContainerDevices{"ns", "pod", "c", "nvidia.com/gpu", {"GPU-a::0", "GPU-b::2", "GPU-c::1"}},
                  ContainerDevices{"ns", "pod", "c", "example.com/nic", {"nic-1"}}));
}

TEST(PodResourcesFlattenTest, LeavesOutContainersAndResourcesWithoutDevices) {
  v1::ListPodResourcesResponse response;
  auto* pod = AddPod(response, "ns", "cpu-only");
  auto* pinned = pod->add_containers();
  pinned->set_name("pinned");
  pinned->add_cpu_ids(3);
  pinned->add_memory()->set_size(1 << 30);
  AddDevices(pinned, "nvidia.com/gpu", {});  // a resource entry without IDs
  auto* dra = pod->add_containers();
  dra->set_name("dra");
  auto* claim = dra->add_dynamic_resources();
  claim->set_claim_name("gpu-claim");
  claim->add_claim_resources()->add_cdi_devices()->set_name("nvidia.com/gpu=0");
  AddPod(response, "ns", "no-containers");

  // Only the DRA container's claim is left.
  auto flat = FlattenPodResources(response);
  ASSERT_EQ(flat.size(), 1u);
  EXPECT_EQ(flat[0].container_name, "dra");
  EXPECT_TRUE(flat[0].resource_name.empty());
  EXPECT_TRUE(flat[0].device_ids.empty());
  EXPECT_THAT(flat[0].cdi_devices, ElementsAre("nvidia.com/gpu=0"));
  EXPECT_TRUE(FlattenPodResources(v1::ListPodResourcesResponse()).empty());
}

TEST(PodResourcesFlattenTest, DraClaimsMakeOneEntryPerContainer) {
  v1::ListPodResourcesResponse response;
  auto* container = AddPod(response, "team", "trainer")->add_containers();
  container->set_name("main");
  AddDevices(container, "nvidia.com/gpu", {"GPU-a::0"});
  for (const char* claim_name : {"gpu-a", "gpu-b"}) {
    auto* claim = container->add_dynamic_resources();
    claim->set_claim_name(claim_name);
    claim->set_claim_namespace("team");
    auto* resource = claim->add_claim_resources();
    resource->set_driver_name("gpu.tessera.io");
    resource->add_cdi_devices()->set_name(std::string("tessera.io/gpu=") + claim_name);
    resource->add_cdi_devices()->set_name("tessera.io/gpu=gpu-a");  // repeated: kept once
    resource->add_cdi_devices()->set_name("");                      // empty: left out
  }
  auto flat = FlattenPodResources(response);
  ASSERT_EQ(flat.size(), 2u);
  EXPECT_EQ(flat[0].resource_name, "nvidia.com/gpu");
  EXPECT_TRUE(flat[0].cdi_devices.empty());
  EXPECT_EQ(flat[1],
            (ContainerDevices{
                "team", "trainer", "main", "", {}, {"tessera.io/gpu=gpu-a", "tessera.io/gpu=gpu-b"}}));
}

TEST(PodResourcesFlattenTest, SameContainerNameInTwoPodsStaysApart) {
  v1::ListPodResourcesResponse response;
  for (const char* name : {"a", "b"}) {
    auto* container = AddPod(response, "ns", name)->add_containers();
    container->set_name("main");
    AddDevices(container, "nvidia.com/gpu", {std::string("GPU-") + name + "::0"});
  }
  auto flat = FlattenPodResources(response);
  ASSERT_EQ(flat.size(), 2u);
  EXPECT_EQ(flat[0].pod_name, "a");
  EXPECT_THAT(flat[0].device_ids, ElementsAre("GPU-a::0"));
  EXPECT_EQ(flat[1].pod_name, "b");
  EXPECT_THAT(flat[1].device_ids, ElementsAre("GPU-b::0"));
}

// ---- KubeletPodResources against an in-process server ----

// A PodResourcesLister whose List answers `response`, or `status` when that is
// not OK, or holds the call until released when `hold` is set.
class FakeLister final : public v1::PodResourcesLister::Service {
 public:
  grpc::Status List(grpc::ServerContext* context, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* response) override {
    std::unique_lock lock(mu_);
    ++calls_;
    // Until released, or the client gave up on the call.
    while (hold_ && !context->IsCancelled()) released_.wait_for(lock, 20ms);
    if (!status_.ok()) return status_;
    *response = response_;
    return grpc::Status::OK;
  }

  void Answer(v1::ListPodResourcesResponse response) {
    std::lock_guard lock(mu_);
    response_ = std::move(response);
    status_ = grpc::Status::OK;
  }
  void Fail(grpc::Status status) {
    std::lock_guard lock(mu_);
    status_ = std::move(status);
  }
  void Hold(bool hold) {
    {
      std::lock_guard lock(mu_);
      hold_ = hold;
    }
    released_.notify_all();
  }
  int calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }

 private:
  std::mutex mu_;
  std::condition_variable released_;
  v1::ListPodResourcesResponse response_;  // guarded by mu_
  grpc::Status status_;                    // guarded by mu_
  bool hold_ = false;                      // guarded by mu_
  int calls_ = 0;                          // guarded by mu_
};

class KubeletPodResourcesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    socket_ = root_ + "/pod-resources/kubelet.sock";
    fs::create_directories(root_ + "/pod-resources");
  }
  void TearDown() override {
    lister_.Hold(false);
    StopServer();
  }

  // Serves `service` (the fake PodResources lister unless another is given) on the socket.
  void StartServer(grpc::Service* service = nullptr) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(service != nullptr ? service : &lister_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  // Like a kubelet going away: the server ends and its socket is deleted.
  void StopServer() {
    if (!server_) return;
    lister_.Hold(false);
    server_->Shutdown(std::chrono::system_clock::now() + 1s);
    server_->Wait();
    server_.reset();
    ::unlink(socket_.c_str());
  }
  // A socket file with nobody listening: what a kubelet that died leaves behind.
  void LeaveDeadSocket() {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, socket_.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ::close(fd);  // the file stays, the listener is gone
  }

  static v1::ListPodResourcesResponse OnePod(const std::string& device) {
    v1::ListPodResourcesResponse response;
    auto* container = AddPod(response, "ml", "train-0")->add_containers();
    container->set_name("main");
    AddDevices(container, "nvidia.com/gpu", {device});
    return response;
  }

  // short: unix socket paths are limited
  ::tessera::testing::TempDir tmp_{"tpr"};
  const std::string root_ = tmp_.path();
  std::string socket_;
  FakeLister lister_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(KubeletPodResourcesTest, ListsAndFlattensTheKubeletsAnswer) {
  lister_.Answer(OnePod("GPU-a::0"));
  StartServer();
  KubeletPodResources source(socket_);
  EXPECT_EQ(source.socket_path(), socket_);
  auto listed = source.List();
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  EXPECT_THAT(*listed,
              ElementsAre(ContainerDevices{"ml", "train-0", "main", "nvidia.com/gpu", {"GPU-a::0"}}));

  // The channel is reused and sees new answers.
  lister_.Answer(OnePod("GPU-b::1"));
  listed = source.List();
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_THAT(listed->front().device_ids, ElementsAre("GPU-b::1"));
  EXPECT_EQ(lister_.calls(), 2);
}

TEST_F(KubeletPodResourcesTest, AMissingSocketSaysSoAndWhatToCheck) {
  KubeletPodResources source(socket_);
  auto listed = source.List();
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.error().message, "the kubelet's pod-resources socket " + socket_ +
                                        " does not exist (is the kubelet's PodResources API enabled / the "
                                        "directory mounted?)");

  KubeletPodResources no_dir(root_ + "/not-mounted/kubelet.sock");
  listed = no_dir.List();
  ASSERT_FALSE(listed.ok());
  EXPECT_THAT(listed.error().message, HasSubstr("does not exist"));
}

TEST_F(KubeletPodResourcesTest, AFileThatIsNotASocketIsReported) {
  std::ofstream(socket_) << "not a socket";
  KubeletPodResources source(socket_);
  auto listed = source.List();
  ASSERT_FALSE(listed.ok());
  EXPECT_THAT(listed.error().message, HasSubstr(socket_ + " is not a socket"));
}

TEST_F(KubeletPodResourcesTest, ASocketNobodyListensOnIsConnectionRefused) {
  ASSERT_NO_FATAL_FAILURE(LeaveDeadSocket());
  KubeletPodResources source(socket_);
  auto listed = source.List();
  ASSERT_FALSE(listed.ok());
  EXPECT_THAT(listed.error().message, HasSubstr("connection refused"));
  EXPECT_THAT(listed.error().message, HasSubstr(socket_));
}

TEST_F(KubeletPodResourcesTest, AKubeletThatDoesNotAnswerInTimeIsADeadlineError) {
  lister_.Hold(true);
  StartServer();
  KubeletPodResources source(socket_, 300ms);
  auto listed = source.List();
  ASSERT_FALSE(listed.ok());
  EXPECT_THAT(listed.error().message, HasSubstr("did not answer"));
  EXPECT_THAT(listed.error().message, HasSubstr("within 300 ms (deadline exceeded)"));
  EXPECT_THAT(listed.error().message, HasSubstr(socket_));
  lister_.Hold(false);

  // The same source works once the kubelet answers again. The deadline is
  // short, so a loaded machine gets several tries rather than a false failure.
  lister_.Answer(OnePod("GPU-a::0"));
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  do {
    listed = source.List();
  } while (!listed.ok() && std::chrono::steady_clock::now() < give_up);
  EXPECT_TRUE(listed.ok()) << listed.error().message;
}

TEST_F(KubeletPodResourcesTest, AGrpcErrorCarriesCodeAndMessage) {
  lister_.Fail(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "pod resources are not for you"));
  StartServer();
  KubeletPodResources source(socket_);
  auto listed = source.List();
  ASSERT_FALSE(listed.ok());
  EXPECT_THAT(listed.error().message, HasSubstr("PERMISSION_DENIED (7)"));
  EXPECT_THAT(listed.error().message, HasSubstr("pod resources are not for you"));
  EXPECT_THAT(listed.error().message, HasSubstr(socket_));
}

// A service that is not the PodResources API (here a device plugin's
// Registration on the path) answers UNIMPLEMENTED; that is reported, not taken
// for "no pods".
TEST_F(KubeletPodResourcesTest, AServerWithoutTheApiIsUnimplemented) {
  v1beta1::Registration::Service other;
  ASSERT_NO_FATAL_FAILURE(StartServer(&other));
  KubeletPodResources source(socket_);
  auto listed = source.List();
  ASSERT_FALSE(listed.ok());
  EXPECT_THAT(listed.error().message, HasSubstr("UNIMPLEMENTED"));
  StopServer();  // before `other` goes
}

// A kubelet restart deletes the socket and makes a new one: the same source
// reports the gap and works on the new socket at the first call after it.
TEST_F(KubeletPodResourcesTest, ARecreatedSocketWorksWithTheSameSource) {
  lister_.Answer(OnePod("GPU-a::0"));
  StartServer();
  KubeletPodResources source(socket_);
  ASSERT_TRUE(source.List().ok());

  for (int restart = 0; restart < 3; ++restart) {
    StopServer();
    auto gap = source.List();
    ASSERT_FALSE(gap.ok());
    EXPECT_THAT(gap.error().message, HasSubstr("does not exist"));

    // The kubelet is back on a new socket at the same path.
    StartServer();
    lister_.Answer(OnePod("GPU-a::" + std::to_string(restart + 1)));
    auto listed = source.List();
    ASSERT_TRUE(listed.ok()) << "restart " << restart << ": " << listed.error().message;
    ASSERT_EQ(listed->size(), 1u);
    EXPECT_THAT(listed->front().device_ids, ElementsAre("GPU-a::" + std::to_string(restart + 1)));
  }
}

// Right after a failed connection the channel backs off; a socket that
// reappears within that window still answers the very next call.
TEST_F(KubeletPodResourcesTest, ASocketBackRightAfterARefusalAnswersTheNextCall) {
  ASSERT_NO_FATAL_FAILURE(LeaveDeadSocket());
  KubeletPodResources source(socket_);
  ASSERT_FALSE(source.List().ok());

  ::unlink(socket_.c_str());
  lister_.Answer(OnePod("GPU-a::0"));
  StartServer();
  auto listed = source.List();
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  EXPECT_EQ(listed->size(), 1u);
}

TEST_F(KubeletPodResourcesTest, ManyThreadsShareOneSource) {
  lister_.Answer(OnePod("GPU-a::0"));
  StartServer();
  KubeletPodResources source(socket_);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        auto listed = source.List();
        if (listed.ok() && listed->size() == 1) ++ok;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(ok.load(), 80);
}

TEST_F(KubeletPodResourcesTest, ATooLongSocketPathIsAnErrorNotACrash) {
  KubeletPodResources source("/" + std::string(200, 'x') + "/kubelet.sock");
  auto listed = source.List();
  ASSERT_FALSE(listed.ok());
  EXPECT_THAT(listed.error().message, HasSubstr("too long"));
}

// The seam: code that needs pod resources can be given a fake.
class FixedSource final : public PodResourcesSource {
 public:
  Result<std::vector<ContainerDevices>> List() override {
    return std::vector<ContainerDevices>{{"ns", "p", "c", "nvidia.com/gpu", {"GPU-a::0"}}};
  }
};

TEST(PodResourcesSourceTest, IsSubstitutable) {
  std::unique_ptr<PodResourcesSource> source = std::make_unique<FixedSource>();
  auto listed = source->List();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->front().container_name, "c");
}

}  // namespace
}  // namespace tessera::node
