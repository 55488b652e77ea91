#include "node/mig/dynamic_mig.h"

#include <gtest/gtest.h>

#include <map>

#include "node/device_state.h"
#include "node/metrics.h"
#include "node/mig/fake_mig_driver.h"
#include "node/plugin_service.h"

namespace tessera::node::mig {
namespace {

using testing::FakeMigDriver;

// A pod with one container whose devices are MIG instances: (gpu uuid, profile, start) each.
struct Want {
  std::string gpu;
  std::string profile;
  int start = 0;
};

BoundPod Pod(const std::string& name, const std::string& created, std::vector<Want> wants,
             const std::string& container = "main", bool init = false) {
  BoundPod pod;
  pod.pod_namespace = "ml";
  pod.pod_name = name;
  pod.uid = "uid-" + name;
  pod.created = created;
  core::ContainerAllocation c;
  c.container = container;
  c.init = init;
  for (const auto& w : wants) {
    core::DeviceSlice d{w.gpu, 9728, 0};
    d.mig_profile = w.profile;
    d.mig_start = w.start;
    c.devices.push_back(d);
  }
  pod.allocation.containers.push_back(c);
  return pod;
}

v1beta1::ContainerAllocateRequest Request(std::vector<std::string> ids) {
  v1beta1::ContainerAllocateRequest request;
  for (auto& id : ids) request.add_devices_ids(std::move(id));
  return request;
}

core::Gpu Discovered(const host::MigGpuState& g) {
  core::Gpu gpu;
  gpu.uuid = g.uuid;
  gpu.index = g.index;
  gpu.model = g.name;
  gpu.memory_mib = static_cast<int64_t>(g.memory_mib);
  gpu.mig_capable = g.mig_capable;
  return gpu;
}

class DynamicMigTest : public ::testing::Test {
 protected:
  // Two A100-80GB (MIG on) and an L4 (no MIG), unless a test adds others first.
  void AddDefaultGpus(bool mig_enabled = true) {
    driver_.AddGpu("A100-80GB", "NVIDIA A100-SXM4-80GB", 81920, true, mig_enabled, /*ampere=*/true);
    driver_.AddGpu("A100-80GB", "NVIDIA A100-SXM4-80GB", 81920, true, mig_enabled, /*ampere=*/true);
    driver_.AddGpu("A100-80GB", "NVIDIA L4", 23034, false, false, false);
  }

  // Builds the DynamicMig over `selection` and prepares it.
  Result<std::vector<core::Gpu>> Make(MigGpuSelection selection, bool with_held = true) {
    DynamicMigOptions options;
    options.gpus = selection;
    options.grace_seconds = 30;
    options.pod_wait = std::chrono::milliseconds(0);
    DynamicMig::HeldSource held;
    if (with_held) {
      held = [this]() -> Result<std::set<std::string>> {
        if (!kubelet_answers_) return Error{"no kubelet"};
        return held_;
      };
    }
    mig_ = std::make_unique<DynamicMig>(
        options, &driver_,
        [this]() -> std::optional<std::vector<BoundPod>> {
          if (!pods_synced_) return std::nullopt;
          return pods_;
        },
        held,
        [this](const std::string&, const std::string& reason, const std::string& message) {
          events_.push_back(reason + ": " + message);
        },
        [this] { return now_; });
    std::vector<core::Gpu> discovered;
    for (const auto& g : driver_.gpus_) discovered.push_back(Discovered(g));
    return mig_->Prepare(discovered);
  }

  std::string Visible(const Result<v1beta1::ContainerAllocateResponse>& answer) {
    if (!answer.ok()) return "error: " + answer.error().message;
    return answer->envs().at("NVIDIA_VISIBLE_DEVICES");
  }

  FakeMigDriver driver_;
  std::unique_ptr<DynamicMig> mig_;
  std::vector<BoundPod> pods_;
  bool pods_synced_ = true;
  std::set<std::string> held_;
  bool kubelet_answers_ = true;
  std::vector<std::string> events_;
  int64_t now_ = 1000;
};

const std::string kGpu0 = "GPU-fake-0";
const std::string kGpu1 = "GPU-fake-1";
const std::string kL4 = "GPU-fake-2";

TEST(MigClaimsTest, OlderPodsFirstInitContainersFirstVgpuContainersLeftOut) {
  BoundPod late = Pod("late", "2026-01-02T00:00:00Z", {{kGpu0, "1g.10gb", 0}});
  BoundPod early = Pod("early", "2026-01-01T00:00:00Z", {{kGpu0, "1g.10gb", 1}}, "app");
  core::ContainerAllocation init{"setup", {core::DeviceSlice{kGpu1, 9728, 0}}, true};
  init.devices[0].mig_profile = "1g.10gb";
  early.allocation.containers.push_back(init);
  core::ContainerAllocation vgpu{"side", {core::DeviceSlice{kGpu1, 1000, 10}}};
  early.allocation.containers.push_back(vgpu);
  auto claims = MigClaimsOf({late, early});
  ASSERT_EQ(claims.size(), 3u);
  EXPECT_EQ(claims[0].key(), "ml/early/setup");
  EXPECT_EQ(claims[1].key(), "ml/early/app");
  EXPECT_EQ(claims[2].key(), "ml/late/main");
}

TEST(MigClaimsTest, ChoosesTheWaitingContainerOnTheRequestedGpus) {
  auto claims = MigClaimsOf({Pod("a", "1", {{kGpu0, "1g.10gb", 0}}), Pod("b", "2", {{kGpu1, "3g.40gb", 0}}),
                             Pod("c", "3", {{kGpu0, "1g.10gb", 1}, {kGpu1, "1g.10gb", 6}})});
  auto none_made = [](const MigClaim&) { return false; };
  auto chosen = ChooseClaim(claims, 1, {kGpu1}, none_made, std::set<std::string>{}, {});
  ASSERT_TRUE(chosen.ok()) << chosen.error().message;
  EXPECT_EQ(chosen->pod_name, "b");
  // Requested GPUs that match nobody: the kubelet's order decides (its device IDs are only a count).
  chosen = ChooseClaim(claims, 1, {"GPU-other"}, none_made, std::set<std::string>{}, {});
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->pod_name, "a");
  chosen = ChooseClaim(claims, 2, {}, none_made, std::set<std::string>{}, {});
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->pod_name, "c");
  // Made and listed by the kubelet: done, not waiting.
  auto a_made = [](const MigClaim& c) { return c.pod_name == "a"; };
  chosen = ChooseClaim(claims, 1, {}, a_made, std::set<std::string>{"ml/a/main"}, {});
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->pod_name, "b");
  // Made, not listed: a retry of a's Allocate.
  chosen = ChooseClaim(claims, 1, {kGpu0}, a_made, std::set<std::string>{}, {});
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->pod_name, "a");
  // Without the kubelet's answer, only a container answered before is a retry.
  chosen = ChooseClaim(claims, 1, {kGpu0}, a_made, std::nullopt, {});
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->pod_name, "b");
  chosen = ChooseClaim(claims, 1, {kGpu0}, a_made, std::nullopt, {"ml/a/main"});
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->pod_name, "a");
  // Three devices: nobody; the error lists who waits.
  auto none = ChooseClaim(claims, 3, {}, none_made, std::set<std::string>{}, {});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("waits for 3 dynamic MIG instance(s)"), std::string::npos);
  EXPECT_NE(none.error().message.find("ml/c/main (2)"), std::string::npos) << none.error().message;
}

TEST(MigClaimsTest, APodsContainersAreServedInOrder) {
  BoundPod pod = Pod("two", "1", {{kGpu0, "1g.10gb", 0}}, "first");
  core::ContainerAllocation second{"second", {core::DeviceSlice{kGpu0, 9728, 0}}};
  second.devices[0].mig_profile = "1g.10gb";
  second.devices[0].mig_start = 1;
  pod.allocation.containers.push_back(second);
  auto claims = MigClaimsOf({pod});
  auto made = [](const MigClaim&) { return false; };
  auto chosen = ChooseClaim(claims, 1, {kGpu0}, made, std::set<std::string>{}, {});
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->container, "first");
  chosen = ChooseClaim(claims, 1, {kGpu0}, made, std::set<std::string>{"ml/two/first"}, {});
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->container, "second");
}

TEST_F(DynamicMigTest, PrepareRefusesGpusItCannotCutAndChangesNothing) {
  AddDefaultGpus(/*mig_enabled=*/false);
  auto missing = Make({false, {0, 7}});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("GPU 7, which this node does not have"), std::string::npos)
      << missing.error().message;
  auto no_mig = Make({false, {2}});
  ASSERT_FALSE(no_mig.ok());
  EXPECT_NE(no_mig.error().message.find("which has no MIG"), std::string::npos) << no_mig.error().message;
  EXPECT_EQ(driver_.mode_calls, 0);
  // "all": the GPUs that have MIG.
  auto all = Make({true, {}});
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ(all->size(), 2u);
  EXPECT_FALSE(mig_->Owns(kL4));
}

TEST_F(DynamicMigTest, HopperIsOnAtOnceAmpereWaitsForAResetSetOnceReportedOnce) {
  driver_.AddGpu("H100-80GB", "NVIDIA H100 80GB HBM3", 81559, true, false, /*ampere=*/false);
  driver_.AddGpu("A100-80GB", "NVIDIA A100-SXM4-80GB", 81920, true, false, /*ampere=*/true);
  ASSERT_TRUE(Make({true, {}}).ok());
  EXPECT_TRUE(driver_.gpus_[0].mig_enabled);
  EXPECT_FALSE(driver_.gpus_[1].mig_enabled);
  EXPECT_TRUE(driver_.gpus_[1].mig_pending);
  for (int i = 0; i < 5; ++i) mig_->Tick();
  EXPECT_EQ(driver_.mode_calls, 2);  // once per GPU, never again
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_NE(events_[0].find("MigDynamicPending"), std::string::npos);
  EXPECT_NE(events_[0].find("pending until the GPU is reset"), std::string::npos);
  auto advertised = mig_->Advertised();
  ASSERT_EQ(advertised.size(), 2u);
  EXPECT_TRUE(advertised[0].healthy);
  EXPECT_EQ(advertised[0].slots, 7);
  EXPECT_FALSE(advertised[1].healthy);
  auto inventory = mig_->InventoryGpus();
  EXPECT_EQ(inventory[1].mode, core::SharingMode::kMigDynamic);
  EXPECT_FALSE(inventory[1].healthy);

  // A pod placed there anyway is refused, nothing created.
  pods_.push_back(Pod("early", "1", {{"GPU-fake-1", "1g.10gb", 0}}));
  auto refused = mig_->Allocate(Request({"GPU-fake-1::0"}));
  EXPECT_NE(Visible(refused).find("pending until the GPU is reset"), std::string::npos) << Visible(refused);
  EXPECT_EQ(driver_.creates, 0);

  const uint64_t before = mig_->version();
  driver_.Reset(1);
  mig_->Tick();
  EXPECT_NE(mig_->version(), before);
  EXPECT_TRUE(mig_->Advertised()[1].healthy);
  EXPECT_EQ(driver_.mode_calls, 2);
  EXPECT_NE(Visible(mig_->Allocate(Request({"GPU-fake-1::0"}))).rfind("MIG-", 0), std::string::npos);
}

TEST_F(DynamicMigTest, ACriticalXidTakesTheGpuOutUntilRestart) {
  AddDefaultGpus();
  ASSERT_TRUE(Make({false, {0, 1}}).ok());
  const uint64_t before = mig_->version();
  EXPECT_FALSE(mig_->SetHealth(kL4, false));  // not dynamic: ignored
  EXPECT_TRUE(mig_->SetHealth(kGpu1, false));
  EXPECT_FALSE(mig_->SetHealth(kGpu1, false));
  EXPECT_NE(mig_->version(), before);
  EXPECT_TRUE(mig_->Advertised()[0].healthy);
  EXPECT_FALSE(mig_->Advertised()[1].healthy);
  EXPECT_FALSE(mig_->InventoryGpus()[1].healthy);
  EXPECT_TRUE(mig_->InventoryGpus()[0].healthy);
}

// An XID naming one GPU instance takes out that instance's MIG device only;
// the GPU, its other instances and the other GPUs stay healthy. One naming no
// instance takes out all of the GPU's; other GPUs' XIDs are ignored.
TEST_F(DynamicMigTest, AnXidNamingAnInstanceTakesOutThatDeviceOnly) {
  AddDefaultGpus();
  ASSERT_TRUE(Make({false, {0, 1}}).ok());
  pods_.push_back(Pod("a", "1", {{kGpu0, "1g.10gb", 6}}));
  pods_.push_back(Pod("b", "2", {{kGpu0, "1g.10gb", 5}}));
  pods_.push_back(Pod("c", "3", {{kGpu1, "1g.10gb", 6}}));
  for (const std::string pod : {"a", "b", "c"}) {
    ASSERT_TRUE(mig_->Allocate(Request({(pod == "c" ? kGpu1 : kGpu0) + "::0"})).ok()) << pod;
    held_.insert("ml/" + pod + "/main");  // the kubelet lists it: the next Allocate serves the next pod
  }
  mig_->Tick();
  ASSERT_EQ(mig_->Devices().size(), 3u);
  const uint32_t gi_a = driver_.gpus_[0].instances[0].gpu_instance_id;
  const std::string mig_a = driver_.gpus_[0].instances[0].mig_uuid;
  auto health = [this] {
    std::map<std::string, bool> out;
    for (const auto& d : mig_->Devices()) out[d.used_by] = d.healthy;
    return out;
  };

  const uint64_t before = mig_->version();
  EXPECT_FALSE(mig_->OnXid({kL4, 79, 1}));  // not dynamic
  EXPECT_TRUE(mig_->OnXid({kGpu0, 79, gi_a}));
  EXPECT_NE(mig_->version(), before);
  EXPECT_EQ(health(),
            (std::map<std::string, bool>{{"ml/a/main", false}, {"ml/b/main", true}, {"ml/c/main", true}}));
  EXPECT_FALSE(mig_->OnXid({kGpu0, 79, gi_a}));  // already
  mig_->Tick();                                  // the next pass keeps it
  EXPECT_FALSE(health()["ml/a/main"]);
  auto inventory = mig_->InventoryGpus();
  EXPECT_TRUE(inventory[0].healthy) << "the GPU itself is not taken out";
  for (const auto& d : inventory[0].mig_devices) EXPECT_EQ(d.healthy, d.uuid != mig_a) << d.uuid;
  EXPECT_TRUE(mig_->Advertised()[0].healthy);

  // GPU-wide on GPU 1: its instance goes, GPU 0's b stays.
  EXPECT_TRUE(mig_->OnXid({kGpu1, 79}));
  EXPECT_EQ(health(),
            (std::map<std::string, bool>{{"ml/a/main", false}, {"ml/b/main", true}, {"ml/c/main", false}}));

  // a's instance destroyed: the instance made next at its placement is healthy.
  pods_.erase(pods_.begin());
  held_.erase("ml/a/main");
  now_ += 100;
  mig_->Tick();
  ASSERT_EQ(driver_.gpus_[0].instances.size(), 1u);
  ASSERT_EQ(mig_->Devices().size(), 2u);
  pods_.push_back(Pod("d", "4", {{kGpu0, "1g.10gb", 6}}));
  ASSERT_TRUE(mig_->Allocate(Request({kGpu0 + "::3"})).ok());
  mig_->Tick();
  EXPECT_TRUE(health()["ml/d/main"]);
}

TEST_F(DynamicMigTest, AllocateCreatesTheAllocationsInstanceAndARetryGetsTheSameOne) {
  AddDefaultGpus();
  ASSERT_TRUE(Make({false, {0, 1}}).ok());
  pods_.push_back(Pod("small", "1", {{kGpu0, "1g.10gb", 6}}));
  auto answer = mig_->Allocate(Request({kGpu0 + "::3"}));
  ASSERT_TRUE(answer.ok()) << answer.error().message;
  ASSERT_EQ(driver_.gpus_[0].instances.size(), 1u);
  EXPECT_EQ(driver_.Profiles(0), std::vector<std::string>{"1g.10gb@6"});
  EXPECT_EQ(Visible(answer), driver_.gpus_[0].instances[0].mig_uuid);
  EXPECT_EQ(answer->mounts_size(), 0);  // no libvgpu: MIG isolates in hardware

  // The kubelet did not record it (its call timed out) and asks again: the same instance.
  auto again = mig_->Allocate(Request({kGpu0 + "::4"}));
  EXPECT_EQ(Visible(again), Visible(answer));
  EXPECT_EQ(driver_.creates, 1);

  // Once the kubelet lists the container, it waits for nothing any more.
  held_.insert("ml/small/main");
  auto third = mig_->Allocate(Request({kGpu0 + "::5"}));
  EXPECT_NE(Visible(third).find("no pod bound to this node waits"), std::string::npos) << Visible(third);

  // The inventory lists the instance and the container it is for.
  mig_->Tick();
  auto inventory = mig_->InventoryGpus();
  ASSERT_EQ(inventory.size(), 2u);
  EXPECT_EQ(inventory[0].slots, 0);
  ASSERT_EQ(inventory[0].mig_devices.size(), 1u);
  EXPECT_EQ(inventory[0].mig_devices[0].profile, "1g.10gb");
  EXPECT_EQ(inventory[0].mig_devices[0].start, 6);
  EXPECT_EQ(inventory[0].mig_devices[0].memory_mib, 9728);
  EXPECT_EQ(inventory[0].mig_devices[0].used_by, "ml/small/main");
  EXPECT_TRUE(inventory[1].mig_devices.empty());
}

// The agent's tessera_mig_device_* series take Devices() as they take a
// layout's MIG devices: an instance made on demand is listed with the
// container it was made for, and one destroyed is not.
TEST_F(DynamicMigTest, InstancesMadeOnDemandHaveMetricsWithTheirContainer) {
  AddDefaultGpus();
  ASSERT_TRUE(Make({false, {0, 1}}).ok());
  pods_.push_back(Pod("small", "1", {{kGpu0, "1g.10gb", 6}}));
  ASSERT_TRUE(mig_->Allocate(Request({kGpu0 + "::0"})).ok());
  mig_->Tick();
  auto metrics = MigDeviceMetricsOf(mig_->Devices(), *driver_.List());
  ASSERT_EQ(metrics.size(), 1u);
  EXPECT_EQ(metrics[0].gpu_uuid, kGpu0);
  EXPECT_EQ(metrics[0].mig_uuid, driver_.gpus_[0].instances[0].mig_uuid);
  EXPECT_EQ(metrics[0].profile, "1g.10gb");
  EXPECT_EQ(metrics[0].memory_total_bytes, 9728ull << 20);
  ASSERT_TRUE(metrics[0].owner);
  EXPECT_EQ(metrics[0].owner->pod_name, "small");
  EXPECT_EQ(metrics[0].owner->container_name, "main");
  const std::string text = RenderMetrics(nullptr, {}, {}, metrics);
  EXPECT_NE(
      text.find("tessera_mig_device_memory_total_bytes{gpu_uuid=\"" + kGpu0 +
                "\",gpu_index=\"0\",mig_uuid=\"" + metrics[0].mig_uuid +
                "\",profile=\"1g.10gb\",namespace=\"ml\",pod=\"small\",container=\"main\"} 10200547328\n"),
      std::string::npos)
      << text;

  // Destroyed since the last pass (the driver no longer lists it): no series.
  ASSERT_TRUE(driver_.DestroyInstance(0, driver_.gpus_[0].instances[0].gpu_instance_id).ok());
  EXPECT_TRUE(MigDeviceMetricsOf(mig_->Devices(), *driver_.List()).empty());
}

TEST_F(DynamicMigTest, BadAllocationsAreRefusedAndCreateNothing) {
  AddDefaultGpus();
  driver_.AddGpu("A100-80GB", "NVIDIA A100-SXM4-80GB", 81920, true, true, true);  // #3, not dynamic
  ASSERT_TRUE(Make({false, {0, 1}}).ok());
  ASSERT_TRUE(driver_.CreateInstance(0, 9, 0).ok());  // 3g.40gb@0 on GPU 0, made by someone else
  const int creates = driver_.creates;

  pods_ = {Pod("taken", "1", {{kGpu0, "1g.10gb", 2}})};
  EXPECT_NE(Visible(mig_->Allocate(Request({kGpu0 + "::0"}))).find("1g.10gb@2 on GPU GPU-fake-0"),
            std::string::npos);
  pods_ = {Pod("unknown", "1", {{kGpu0, "5g.50gb", 0}})};
  auto unknown = Visible(mig_->Allocate(Request({kGpu0 + "::0"})));
  EXPECT_NE(unknown.find("MIG profile '5g.50gb' is not one of A100-80GB's"), std::string::npos) << unknown;
  pods_ = {Pod("elsewhere", "1", {{"GPU-fake-3", "1g.10gb", 0}})};
  EXPECT_NE(Visible(mig_->Allocate(Request({kGpu0 + "::0"}))).find("is not in mig-dynamic mode"),
            std::string::npos);
  pods_ = {Pod("badstart", "1", {{kGpu1, "3g.40gb", 2}})};
  EXPECT_NE(Visible(mig_->Allocate(Request({kGpu1 + "::0"}))).find("taken or invalid"), std::string::npos);
  // Two instances, the second one taken: neither is created.
  pods_ = {Pod("half", "1", {{kGpu1, "1g.10gb", 0}, {kGpu0, "1g.10gb", 1}})};
  EXPECT_NE(Visible(mig_->Allocate(Request({kGpu0 + "::0", kGpu1 + "::0"}))).find("taken"),
            std::string::npos);
  // Device IDs that are not the dynamic GPUs'.
  EXPECT_NE(Visible(mig_->Allocate(Request({kL4 + "::0"}))).find("names no mig-dynamic GPU"),
            std::string::npos);
  EXPECT_NE(Visible(mig_->Allocate(Request({kGpu0 + "::7"}))).find("beyond the 7 replicas"),
            std::string::npos);
  // Pods not known yet.
  pods_synced_ = false;
  EXPECT_NE(Visible(mig_->Allocate(Request({kGpu0 + "::0"}))).find("not known yet"), std::string::npos);
  EXPECT_EQ(driver_.creates, creates);
  EXPECT_EQ(driver_.Profiles(0), std::vector<std::string>{"3g.40gb@0"});
  EXPECT_TRUE(driver_.gpus_[1].instances.empty());
}

TEST_F(DynamicMigTest, AFailedCreateUndoesWhatTheCallMade) {
  AddDefaultGpus();
  ASSERT_TRUE(Make({false, {0, 1}}).ok());
  pods_ = {Pod("pair", "1", {{kGpu0, "1g.10gb", 0}, {kGpu1, "1g.10gb", 0}})};
  driver_.fail_creates_after = 1;
  auto answer = mig_->Allocate(Request({kGpu0 + "::0", kGpu1 + "::0"}));
  ASSERT_FALSE(answer.ok());
  EXPECT_NE(answer.error().message.find("injected failure"), std::string::npos);
  EXPECT_TRUE(driver_.gpus_[0].instances.empty());
  EXPECT_TRUE(driver_.gpus_[1].instances.empty());
}

TEST_F(DynamicMigTest, AnInstanceGoesAfterItsContainerAndTheGracePeriod) {
  AddDefaultGpus();
  ASSERT_TRUE(Make({false, {0, 1}}).ok());
  pods_ = {Pod("a", "1", {{kGpu0, "1g.10gb", 6}}), Pod("b", "2", {{kGpu0, "1g.10gb", 5}})};
  ASSERT_TRUE(mig_->Allocate(Request({kGpu0 + "::0"})).ok());
  held_.insert("ml/a/main");
  ASSERT_TRUE(mig_->Allocate(Request({kGpu0 + "::1"})).ok());
  held_.insert("ml/b/main");
  ASSERT_EQ(driver_.gpus_[0].instances.size(), 2u);

  // Pod a is deleted; the kubelet still lists its container for a while.
  pods_.erase(pods_.begin());
  now_ += 60;
  mig_->Tick();
  EXPECT_EQ(driver_.gpus_[0].instances.size(), 2u);
  // The kubelet does not answer: nothing goes.
  held_.erase("ml/a/main");
  kubelet_answers_ = false;
  mig_->Tick();
  EXPECT_EQ(driver_.gpus_[0].instances.size(), 2u);
  kubelet_answers_ = true;
  mig_->Tick();
  EXPECT_EQ(driver_.Profiles(0), std::vector<std::string>{"1g.10gb@5"});

  // Pod b goes within the grace period of its instance: kept until it ends.
  pods_.clear();
  held_.clear();
  pods_.push_back(Pod("c", "3", {{kGpu0, "1g.10gb", 4}}));
  ASSERT_TRUE(mig_->Allocate(Request({kGpu0 + "::2"})).ok());
  pods_.clear();
  mig_->Tick();
  EXPECT_EQ(driver_.Profiles(0), std::vector<std::string>{"1g.10gb@4"});  // b's went, c's is young
  now_ += 31;
  mig_->Tick();
  EXPECT_TRUE(driver_.gpus_[0].instances.empty());
  EXPECT_TRUE(mig_->Devices().empty());
}

TEST_F(DynamicMigTest, RestartKeepsInstancesInUseAndDestroysOrphans) {
  AddDefaultGpus();
  // Left by an earlier run: a's (its pod is live), one with a process, an orphan.
  ASSERT_TRUE(driver_.CreateInstance(0, 19, 6).ok());
  ASSERT_TRUE(driver_.CreateInstance(0, 19, 5).ok());
  ASSERT_TRUE(driver_.CreateInstance(1, 9, 4).ok());
  driver_.gpus_[0].instances[1].processes = 1;
  pods_ = {Pod("a", "1", {{kGpu0, "1g.10gb", 6}})};
  held_ = {"ml/a/main"};
  pods_synced_ = false;
  ASSERT_TRUE(Make({false, {0, 1}}).ok());
  mig_->Tick();  // the pods are not known yet: nothing goes
  EXPECT_EQ(driver_.gpus_[1].instances.size(), 1u);
  pods_synced_ = true;
  mig_->Tick();
  EXPECT_EQ(driver_.Profiles(0), (std::vector<std::string>{"1g.10gb@5", "1g.10gb@6"}));
  EXPECT_TRUE(driver_.gpus_[1].instances.empty());
  // The process ends: that one is an orphan too.
  driver_.gpus_[0].instances[1].processes = 0;
  mig_->Tick();
  EXPECT_EQ(driver_.Profiles(0), std::vector<std::string>{"1g.10gb@6"});
  EXPECT_EQ(mig_->InventoryGpus()[0].mig_devices.at(0).used_by, "ml/a/main");
}

TEST(PreferredDevicesWithDynamicTest, MigContainersGoToTheirGpusOthersToVgpuGpus) {
  std::vector<core::Gpu> gpus(3);
  for (int i = 0; i < 3; ++i) {
    gpus[i].uuid = "GPU-" + std::to_string(i);
    gpus[i].index = i;
    gpus[i].slots = 4;
  }
  v1beta1::ContainerPreferredAllocationRequest request;
  for (int g = 0; g < 3; ++g) {
    for (int r = 0; r < 4; ++r) request.add_available_deviceids(MakeDeviceId(gpus[g].uuid, r));
  }
  request.set_allocation_size(1);
  const std::set<std::string> dynamic = {"GPU-0", "GPU-1"};
  auto mig = PreferredDevicesWithDynamic(gpus, dynamic, {"GPU-1"}, request);
  ASSERT_TRUE(mig.ok());
  EXPECT_EQ(*mig, std::vector<std::string>{"GPU-1::0"});
  auto vgpu = PreferredDevicesWithDynamic(gpus, dynamic, {}, request);
  ASSERT_TRUE(vgpu.ok());
  EXPECT_EQ(*vgpu, std::vector<std::string>{"GPU-2::0"});
}

}  // namespace
}  // namespace tessera::node::mig
