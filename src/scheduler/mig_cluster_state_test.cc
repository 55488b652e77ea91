// The scheduler's view of GPUs in MIG mode: their MIG devices come through the
// inventory annotation, and no vGPU slice is placed on them.
#include <gtest/gtest.h>

#include "core/inventory_codec.h"
#include "core/pod_request.h"
#include "scheduler/cluster_state.h"
#include "scheduler/testing.h"

namespace tessera::scheduler {
namespace {

using testing::GpuPod;
using testing::NodeWithGpus;

// `name` with two A100-80GB GPUs; GPU 0 in dynamic MIG mode with one 3g.40gb in use.
nlohmann::json NodeWithOneMigGpu(const std::string& name) {
  nlohmann::json node = NodeWithGpus(name, 7, 2, 81920);
  auto& text = node["metadata"]["annotations"][std::string(core::kInventoryAnnotation)];
  auto inv = core::DecodeInventory(text.get<std::string>());
  EXPECT_TRUE(inv.ok());
  core::Gpu& mig = inv->gpus[0];
  mig.mig_capable = true;
  mig.mig_mode = core::MigMode::kDynamic;
  mig.mig_devices = {
      {"MIG-11111111-2222-3333-4444-555555555555", "3g.40gb", 0, 4, 40192, 42, true, "ml/train/main"}};
  text = *core::EncodeInventory(*inv);
  return node;
}

core::PodRequest Request(int64_t memory_mib, int gpus = 1) {
  auto r = core::DerivePodRequest(GpuPod("d", "p", gpus, memory_mib, 10), {});
  EXPECT_TRUE(r.ok());
  return *r;
}

TEST(MigClusterStateTest, MigDevicesReachTheSchedulersNodeState) {
  ClusterState state;
  state.UpsertNode(NodeWithOneMigGpu("n"));
  auto node = state.Node("n");
  ASSERT_TRUE(node.has_value());
  ASSERT_EQ(node->gpus().size(), 2u);
  const core::Gpu& mig = node->gpus()[0].gpu;
  EXPECT_EQ(mig.mig_mode, core::MigMode::kDynamic);
  ASSERT_EQ(mig.mig_devices.size(), 1u);
  EXPECT_EQ(mig.mig_devices[0].profile, "3g.40gb");
  EXPECT_EQ(mig.mig_devices[0].used_by, "ml/train/main");
  EXPECT_EQ(node->gpus()[1].gpu.mig_mode, core::MigMode::kNone);
}

TEST(MigClusterStateTest, NoVgpuSliceGoesToAGpuInMigMode) {
  ClusterState state;
  state.UpsertNode(NodeWithOneMigGpu("n"));
  auto one = state.Filter(Request(1000), {"n"});
  EXPECT_EQ(one.feasible, std::vector<std::string>{"n"}) << "GPU 1 takes it";
  auto reserved =
      state.Reserve("d/p", Request(1000), "n", core::GpuOrder::kBinpack, std::chrono::seconds(60));
  ASSERT_TRUE(reserved.ok()) << reserved.error().message;
  ASSERT_EQ(reserved->containers.size(), 1u);
  ASSERT_EQ(reserved->containers[0].devices.size(), 1u);
  EXPECT_EQ(reserved->containers[0].devices[0].uuid, state.Node("n")->gpus()[1].gpu.uuid);

  auto two = state.Filter(Request(1000, 2), {"n"});
  EXPECT_TRUE(two.feasible.empty());
  ASSERT_EQ(two.failed.count("n"), 1u);
  EXPECT_NE(two.failed["n"].find("in MIG mode"), std::string::npos) << two.failed["n"];
}

}  // namespace
}  // namespace tessera::scheduler
