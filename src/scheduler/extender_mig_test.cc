// The extender's verbs for pods that ask for dynamic MIG (HAMi's
// nvidia.com/vgpu-mode: mig): filter, prioritize and bind as kube-scheduler
// calls them.
#include <gtest/gtest.h>

#include <set>

#include "core/allocation_codec.h"
#include "scheduler/extender.h"
#include "scheduler/testing.h"

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;
using testing::GpuPod;
using testing::MigPod;
using testing::NodeWithDynamicMigGpus;
using testing::NodeWithGpus;

class ExtenderMigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_.UpsertNode(NodeWithDynamicMigGpus("mig-node", 1, 2));
    state_.UpsertNode(NodeWithGpus("vgpu-node", 2, 1, 81920));
    ExtenderDeps deps;
    deps.state = &state_;
    deps.config.identity = "me";
    deps.get_pod = [this](const std::string& ns, const std::string& name) -> Result<Json> {
      auto it = pods_.find(ns + "/" + name);
      if (it == pods_.end()) return Error{"pods \"" + name + "\" not found"};
      return it->second;
    };
    deps.bind = [this](const std::string&, const std::string& name, const std::string& node,
                       const std::map<std::string, std::string>& annotations) -> kube::ApiStatus {
      binds_.push_back({name, node, annotations});
      return kube::ApiStatus::Ok();
    };
    extender_ = std::make_unique<Extender>(std::move(deps));
  }

  Json Args(const Json& pod) const {
    return {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", Json::array({"mig-node", "vgpu-node"})}};
  }

  // Filter, prioritize and bind `pod` on the node prioritize scores 10; the
  // allocation written, or an error.
  Result<core::PodAllocation> Schedule(const Json& pod) {
    pods_[pod["metadata"]["namespace"].get<std::string>() + "/" +
          pod["metadata"]["name"].get<std::string>()] = pod;
    auto [fs, filter] = extender_->Filter(Args(pod));
    if (filter["NodeNames"].empty()) return Error{filter.dump()};
    auto [ps, scores] =
        extender_->Prioritize({{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", filter["NodeNames"]}});
    std::string best;
    for (const Json& h : scores) {
      if (h["Score"] == 10) best = h["Host"];
    }
    auto [bs, bound] = extender_->Bind({{"PodName", pod["metadata"]["name"]},
                                        {"PodNamespace", pod["metadata"]["namespace"]},
                                        {"PodUID", ""},
                                        {"Node", best}});
    if (bound["Error"] != "") return Error{bound["Error"].get<std::string>()};
    return core::DecodeAllocation(binds_.back().annotations.at(std::string(core::kAllocationAnnotation)));
  }

  struct BindCall {
    std::string name, node;
    std::map<std::string, std::string> annotations;
  };
  ClusterState state_;
  std::map<std::string, Json> pods_;
  std::vector<BindCall> binds_;
  std::unique_ptr<Extender> extender_;
};

TEST_F(ExtenderMigTest, FilterKeepsOnlyNodesWithRoomOnAMigDynamicGpuAndSaysWhyForTheOthers) {
  auto [status, result] = extender_->Filter(Args(MigPod("d", "small", 9728)));
  EXPECT_EQ(status, 200);
  EXPECT_EQ(result["Error"], "");
  EXPECT_EQ(result["NodeNames"], Json::array({"mig-node"}));
  const std::string why = result["FailedNodes"].value("vgpu-node", "");
  EXPECT_NE(why.find("needs a MIG instance"), std::string::npos) << why;
  EXPECT_NE(why.find("not in mig-dynamic mode"), std::string::npos) << why;

  // Bigger than any profile: every node fails with the Placer's reason.
  auto [s2, huge] = extender_->Filter(Args(MigPod("d", "huge", 100000)));
  EXPECT_TRUE(huge["NodeNames"].empty());
  const std::string too_big = huge["FailedNodes"].value("mig-node", "");
  EXPECT_NE(too_big.find("no MIG profile of A100-80GB holds 100000 MiB"), std::string::npos) << too_big;

  // The same request without the annotation is a vGPU request: the other way round.
  auto [s3, plain] = extender_->Filter(Args(GpuPod("d", "plain", 1, 9728, 0)));
  EXPECT_EQ(plain["NodeNames"], Json::array({"vgpu-node"}));
  EXPECT_NE(plain["FailedNodes"].value("mig-node", "").find("in MIG mode"), std::string::npos);
}

TEST_F(ExtenderMigTest, BindWritesTheMigAllocationAndNoVisibleDevices) {
  std::set<std::pair<std::string, int>> taken;
  for (int i = 0; i < 7; ++i) {
    auto a = Schedule(MigPod("d", "p" + std::to_string(i), 9728));
    ASSERT_TRUE(a.ok()) << i << ": " << a.error().message;
    ASSERT_EQ(a->node, "mig-node");
    const core::DeviceSlice& d = a->containers.at(0).devices.at(0);
    EXPECT_EQ(d.uuid, testing::GpuUuid(1, 0));
    EXPECT_EQ(d.mig_profile, "1g.10gb");
    EXPECT_EQ(d.cores, 0);
    EXPECT_TRUE(taken.insert({d.uuid, d.mig_start}).second) << "placement given twice";
    EXPECT_EQ(binds_.back().annotations.size(), 1u) << "only the allocation";
  }
  auto forty = Schedule(MigPod("d", "forty", 40000));
  ASSERT_TRUE(forty.ok()) << forty.error().message;
  EXPECT_EQ(forty->containers.at(0).devices.at(0).uuid, testing::GpuUuid(1, 1));
  EXPECT_EQ(forty->containers.at(0).devices.at(0).mig_profile, "3g.40gb");
  // A plain pod still gets its slice on the vGPU node, with its visible devices.
  auto plain = Schedule(GpuPod("d", "plain", 1, 9728, 10));
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_EQ(plain->node, "vgpu-node");
  EXPECT_TRUE(plain->containers.at(0).devices.at(0).mig_profile.empty());
  EXPECT_EQ(binds_.back().annotations.count("tessera.io/visible-devices.0"), 1u);
  // Binding a MIG pod on a node without dynamic GPUs is refused with the reason.
  pods_["d/lost"] = MigPod("d", "lost", 9728);
  auto [bs, refused] = extender_->Bind({{"PodName", "lost"}, {"PodNamespace", "d"}, {"Node", "vgpu-node"}});
  EXPECT_NE(refused["Error"].get<std::string>().find("not in mig-dynamic mode"), std::string::npos)
      << refused.dump();
}

TEST_F(ExtenderMigTest, MigPodsAreNotCountedIntoTheVgpuWorkloadMix) {
  Json mig = MigPod("d", "m", 9728);
  mig["metadata"]["uid"] = "uid-m";
  extender_->Filter(Args(mig));
  extender_->Prioritize(Args(mig));
  EXPECT_EQ(extender_->learner().stats().counted, 0u);
  Json listed = MigPod("d", "listed", 9728);
  listed["metadata"]["uid"] = "uid-listed";
  EXPECT_EQ(extender_->ObserveListedPods({listed}), 0u);
  Json plain = GpuPod("d", "p", 1, 9728, 10);
  plain["metadata"]["uid"] = "uid-p";
  extender_->Filter(Args(plain));
  EXPECT_EQ(extender_->learner().stats().counted, 1u);
}

}  // namespace
}  // namespace tessera::scheduler
