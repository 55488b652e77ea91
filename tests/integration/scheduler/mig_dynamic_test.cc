// Dynamic MIG through the tessera-scheduler binary (issue 14 item 3, the
// scheduler's half): pods annotated nvidia.com/vgpu-mode: mig against the
// API-server stand-in, whose Node lists two A100-80GB GPUs in mig-dynamic
// mode. The test plays kube-scheduler (filter, prioritize, bind over HTTP)
// and tessera-node (it publishes the instances the allocations asked for in
// the node's inventory, and takes them out once "destroyed").
//
// The scenario: seven 1g.10gb-sized pods (gpumem 9728) fill GPU 0, a
// restarted scheduler still knows they are taken, a 40 GB pod goes to GPU 1
// and a second one to its other half (the instance the node lists and the
// pod's allocation count once), a third is refused; deleting the pods on GPU
// 0's slices 0..3 frees them once the node no longer lists them, and a
// 3g.40gb fits there again. A plain pod of the same size gets a vGPU slice
// on the other node all along.
#include <map>
#include <set>

#include "core/mig/geometry.h"
#include "fixture.h"

namespace tessera::scheduler::it {
namespace {

constexpr const char* kMigNode = "mig-node";
constexpr const char* kVgpuNode = "vgpu-node";

class MigDynamicTest : public SchedulerIntegrationTest {
 protected:
  void TearDown() override {
    binary_.Stop();
    SchedulerIntegrationTest::TearDown();
    if (HasFailure()) std::cerr << "tessera-scheduler log:\n" << binary_.Log() << std::endl;
  }

  bool StartBinary() {
    return binary_.Start(server_->url(), {"--leader-elect=false", "--set=inventoryStaleSeconds=0"}) &&
           WaitFor([&] { return binary_.Get("/readyz").first == 200; });
  }

  // Replaces a node's inventory annotation, as tessera-node rewrites it.
  void Publish(const Json& node) {
    httplib::Client http("127.0.0.1", server_->port());
    http.set_connection_timeout(2);
    http.set_read_timeout(10);
    const std::string key(core::kInventoryAnnotation);
    Json patch = {{"metadata", {{"annotations", {{key, node["metadata"]["annotations"][key]}}}}}};
    auto res = http.Patch("/api/v1/nodes/" + node["metadata"]["name"].get<std::string>(), patch.dump(),
                          "application/merge-patch+json");
    ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
  }

  // Waits until the scheduler has seen every change published so far: the
  // vGPU node gains a GPU, and node events arrive in order.
  void Sync() {
    ++vgpu_gpus_;
    ASSERT_NO_FATAL_FAILURE(Publish(testing::NodeWithGpus(kVgpuNode, 2, vgpu_gpus_, 81920)));
    ASSERT_TRUE(WaitFor([&] { return binary_.Metric("tessera_scheduler_gpus") == 2 + vgpu_gpus_; }))
        << binary_.Get("/metrics").second;
  }

  Attempt Schedule(const Json& pod) {
    auto created = server_->CreateObject("pods", pod);
    if (!created.ok()) return {Outcome::kError, created.error().message};
    return ScheduleOnce(binary_.port(), *created, {kMigNode, kVgpuNode});
  }

  core::PodAllocation AllocationOf(const std::string& name) const {
    auto pod = server_->GetObject("pods", "default", name);
    EXPECT_TRUE(pod.has_value()) << name;
    if (!pod) return {};
    auto text = (*pod)["metadata"]["annotations"].value(std::string(core::kAllocationAnnotation), "");
    auto a = core::DecodeAllocation(text);
    EXPECT_TRUE(a.ok()) << name << ": " << text;
    return a.ok() ? *a : core::PodAllocation{};
  }

  static const core::DeviceSlice& Device(const core::PodAllocation& a) {
    static const core::DeviceSlice none;
    return a.containers.empty() || a.containers[0].devices.empty() ? none : a.containers[0].devices[0];
  }

  // The MIG device tessera-node lists once it created `name`'s instance.
  core::MigDevice Listed(const std::string& name) const {
    return testing::ListedMigDevice(Device(AllocationOf(name)), "MIG-" + name, "default/" + name + "/app");
  }

  // The mig-node's inventory listing the instances of `pods` on their GPUs.
  Json MigNodeListing(const std::vector<std::string>& pods) const {
    std::map<int, std::vector<core::MigDevice>> devices;
    for (const std::string& name : pods) {
      const int gpu = Device(AllocationOf(name)).uuid == testing::GpuUuid(1, 0) ? 0 : 1;
      devices[gpu].push_back(Listed(name));
    }
    return testing::NodeWithDynamicMigGpus(kMigNode, 1, 2, devices);
  }

  // Every bound pod's MIG instances, per GPU, form a valid set (no two
  // share a memory slice, no GPU over its compute slices).
  std::vector<std::string> CheckNoMigOverlap() const {
    std::map<std::string, std::vector<core::mig::Instance>> by_gpu;
    for (const Json& pod : server_->ListObjects("pods")) {
      auto text = pod["metadata"].value("annotations", Json::object()).value("tessera.io/allocation", "");
      auto a = core::DecodeAllocation(text);
      if (!a.ok()) continue;
      for (const auto& c : a->containers) {
        for (const auto& d : c.devices) {
          if (!d.mig_profile.empty())
            by_gpu[d.uuid].push_back({d.mig_profile, static_cast<uint32_t>(d.mig_start)});
        }
      }
    }
    std::vector<std::string> problems;
    for (const auto& [uuid, instances] : by_gpu) {
      if (Status s = core::mig::CheckInstances(*core::mig::FindModel("A100-80GB"), instances); !s.ok()) {
        problems.push_back(uuid + ": " + s.error().message);
      }
    }
    return problems;
  }

  ::tessera::testing::TempDir tmp_{"tessera-mig-dynamic-test"};
  SchedulerBinary binary_{tmp_.Path("scheduler.log")};
  int vgpu_gpus_ = 1;
};

Json Mig(const std::string& name, int64_t memory_mib) {
  return testing::MigPod("default", name, memory_mib);
}

TEST_F(MigDynamicTest, SevenSmallPodsFillAGpuFortyGigabytesGoElsewhereAndFitAgainOnceFreed) {
  ASSERT_TRUE(server_->CreateObject("nodes", testing::NodeWithDynamicMigGpus(kMigNode, 1, 2)).ok());
  ASSERT_TRUE(server_->CreateObject("nodes", testing::NodeWithGpus(kVgpuNode, 2, 1, 81920)).ok());
  ASSERT_TRUE(StartBinary()) << binary_.Log();
  const std::string gpu0 = testing::GpuUuid(1, 0), gpu1 = testing::GpuUuid(1, 1);

  // Seven 1g.10gb-sized pods: all on GPU 0, each at its own placement.
  std::vector<std::string> small;
  std::set<int> starts;
  for (int i = 0; i < 7; ++i) {
    small.push_back("small-" + std::to_string(i));
    Attempt a = Schedule(Mig(small.back(), 9728));
    ASSERT_EQ(a.outcome, Outcome::kBound) << a.message;
    EXPECT_EQ(a.message, kMigNode);
    const core::DeviceSlice d = Device(AllocationOf(small.back()));
    EXPECT_EQ(d.uuid, gpu0) << small.back();
    EXPECT_EQ(d.mig_profile, "1g.10gb");
    EXPECT_TRUE(starts.insert(d.mig_start).second) << "start " << d.mig_start << " given twice";
    auto pod = server_->GetObject("pods", "default", small.back());
    EXPECT_FALSE((*pod)["metadata"]["annotations"].contains("tessera.io/visible-devices.0"))
        << "no GPU UUID for a MIG instance";
  }
  // A plain pod of the same size: a vGPU slice on the other node.
  Attempt plain = Schedule(testing::GpuPod("default", "plain", 1, 9728, 10));
  ASSERT_EQ(plain.outcome, Outcome::kBound) << plain.message;
  EXPECT_EQ(plain.message, kVgpuNode);
  EXPECT_TRUE(Device(AllocationOf("plain")).mig_profile.empty());

  // Restarted before the node lists any instance: the bound pods' placements
  // are relearned from their allocations before anything is decided.
  binary_.Kill();
  ASSERT_TRUE(StartBinary()) << binary_.Log();
  EXPECT_EQ(binary_.Metric("tessera_scheduler_mig_placements"), 7);
  Attempt eighth = Schedule(Mig("small-7", 9728));
  ASSERT_EQ(eighth.outcome, Outcome::kBound) << eighth.message;
  EXPECT_EQ(Device(AllocationOf("small-7")).uuid, gpu1) << "GPU 0 is full";
  // Gone before the node created it: its placement is free at once.
  ASSERT_TRUE(server_->DeleteObject("pods", "default", "small-7").ok());
  ASSERT_TRUE(WaitFor([&] { return binary_.Metric("tessera_scheduler_mig_placements") == 7; }));

  // 40 GB: GPU 1.
  Attempt forty = Schedule(Mig("forty-0", 40000));
  ASSERT_EQ(forty.outcome, Outcome::kBound) << forty.message;
  EXPECT_EQ(Device(AllocationOf("forty-0")).uuid, gpu1);
  EXPECT_EQ(Device(AllocationOf("forty-0")).mig_profile, "3g.40gb");

  // The node creates the instances and lists them, in use: each counts once,
  // so GPU 1's other half still takes a second 40 GB pod.
  std::vector<std::string> listed = small;
  listed.push_back("forty-0");
  ASSERT_NO_FATAL_FAILURE(Publish(MigNodeListing(listed)));
  ASSERT_NO_FATAL_FAILURE(Sync());
  Attempt second = Schedule(Mig("forty-1", 40000));
  ASSERT_EQ(second.outcome, Outcome::kBound) << second.message;
  EXPECT_EQ(Device(AllocationOf("forty-1")).uuid, gpu1);
  EXPECT_NE(Device(AllocationOf("forty-1")).mig_start, Device(AllocationOf("forty-0")).mig_start);
  // A third has no room anywhere; the reason names both GPUs.
  Attempt third = Schedule(Mig("forty-2", 40000));
  ASSERT_EQ(third.outcome, Outcome::kUnschedulable) << third.message;
  EXPECT_NE(third.message.find(gpu0 + " (#0"), std::string::npos) << third.message;
  EXPECT_NE(third.message.find(gpu1 + " (#1"), std::string::npos) << third.message;
  EXPECT_NE(third.message.find("not in mig-dynamic mode"), std::string::npos) << "the vGPU node";

  // The pods on GPU 0's memory slices 0..3 end. While the node still lists
  // their instances (not destroyed yet), the slices stay taken.
  std::vector<std::string> kept = {"forty-0"};
  for (const std::string& name : small) {
    if (Device(AllocationOf(name)).mig_start < 4) {
      ASSERT_TRUE(server_->DeleteObject("pods", "default", name).ok());
    } else {
      kept.push_back(name);
    }
  }
  ASSERT_EQ(kept.size(), 4u) << "three small pods were on slices 4..6";
  ASSERT_TRUE(WaitFor([&] { return binary_.Metric("tessera_scheduler_mig_placements") == 5; }));
  Attempt waiting =
      ScheduleOnce(binary_.port(), *server_->GetObject("pods", "default", "forty-2"), {kMigNode, kVgpuNode});
  ASSERT_EQ(waiting.outcome, Outcome::kUnschedulable) << waiting.message;
  EXPECT_NE(waiting.message.find("1g.10gb@0"), std::string::npos) << waiting.message;

  // Destroyed: the node lists only the instances still in use, and a
  // 3g.40gb fits on GPU 0 again, at slice 0.
  kept.push_back("forty-1");
  ASSERT_NO_FATAL_FAILURE(Publish(MigNodeListing(kept)));
  ASSERT_NO_FATAL_FAILURE(Sync());
  Attempt again =
      ScheduleOnce(binary_.port(), *server_->GetObject("pods", "default", "forty-2"), {kMigNode, kVgpuNode});
  ASSERT_EQ(again.outcome, Outcome::kBound) << again.message;
  const core::DeviceSlice refit = Device(AllocationOf("forty-2"));
  EXPECT_EQ(refit.uuid, gpu0);
  EXPECT_EQ(refit.mig_profile, "3g.40gb");
  EXPECT_EQ(refit.mig_start, 0);

  EXPECT_EQ(CheckNoMigOverlap(), std::vector<std::string>{});
  EXPECT_EQ(binary_.Metric("tessera_scheduler_inconsistent_annotations_total"), 0);
  EXPECT_EQ(binary_.Metric("tessera_scheduler_workload_pods_observed_total"), 1) << "only the plain pod";
}

TEST_F(MigDynamicTest, RequestsNoGpuCanHoldAreRefusedWithTheReason) {
  ASSERT_TRUE(server_->CreateObject("nodes", testing::NodeWithDynamicMigGpus(kMigNode, 1, 2)).ok());
  ASSERT_TRUE(server_->CreateObject("nodes", testing::NodeWithGpus(kVgpuNode, 2, 1, 81920)).ok());
  ASSERT_TRUE(StartBinary()) << binary_.Log();
  Attempt huge = Schedule(Mig("huge", 100000));
  ASSERT_EQ(huge.outcome, Outcome::kUnschedulable) << huge.message;
  EXPECT_NE(huge.message.find("no MIG profile of A100-80GB holds 100000 MiB"), std::string::npos)
      << huge.message;
  // Two devices in one container need two GPUs; three is one too many.
  Json three = testing::GpuPod("default", "three", 3, 9728, 0, {{"nvidia.com/vgpu-mode", "mig"}});
  Attempt refused = Schedule(three);
  ASSERT_EQ(refused.outcome, Outcome::kUnschedulable) << refused.message;
  EXPECT_NE(refused.message.find("already holds another device of this container"), std::string::npos)
      << refused.message;
  Json two = testing::GpuPod("default", "two", 2, 9728, 0, {{"nvidia.com/vgpu-mode", "mig"}});
  Attempt placed = Schedule(two);
  ASSERT_EQ(placed.outcome, Outcome::kBound) << placed.message;
  const core::PodAllocation a = AllocationOf("two");
  ASSERT_EQ(a.containers.at(0).devices.size(), 2u);
  EXPECT_NE(a.containers[0].devices[0].uuid, a.containers[0].devices[1].uuid);
}

}  // namespace
}  // namespace tessera::scheduler::it
