#include "node/sharing/replica_service.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "contract/container_contract.h"
#include "node/device_state.h"

namespace tessera::node::sharing {
namespace {

using core::SharingMode;

ReplicaGpu Replicated(int index, SharingMode mode, int replicas, const std::string& resource) {
  ReplicaGpu gpu;
  gpu.gpu.uuid = "GPU-0000000" + std::to_string(index) + "-0000-0000-0000-000000000000";
  gpu.gpu.index = index;
  gpu.gpu.memory_mib = 16384;
  gpu.gpu.numa_node = index;
  gpu.mode.uuid = gpu.gpu.uuid;
  gpu.mode.index = index;
  gpu.mode.mode = mode;
  gpu.mode.replicas = replicas;
  gpu.mode.resource_name = resource;
  if (mode == SharingMode::kMps) {
    gpu.mode.mps_active_thread_percentage = 100 / replicas;
    gpu.mode.mps_pinned_memory_mib = gpu.gpu.memory_mib / replicas;
    gpu.mode.fail_requests_greater_than_one = true;
  }
  return gpu;
}

v1beta1::ContainerAllocateRequest Request(const std::vector<std::string>& ids) {
  v1beta1::ContainerAllocateRequest request;
  for (const auto& id : ids) request.add_devices_ids(id);
  return request;
}

TEST(ReplicaServiceTest, DeviceListHasReplicasPerGpu) {
  auto a = Replicated(1, SharingMode::kTimeslice, 3, "nvidia.com/gpu.shared");
  auto b = Replicated(0, SharingMode::kTimeslice, 2, "nvidia.com/gpu.shared");
  b.gpu.healthy = false;
  auto list = ReplicaDeviceList({a, b});
  ASSERT_EQ(list.devices_size(), 5);
  EXPECT_EQ(list.devices(0).id(), MakeDeviceId(b.gpu.uuid, 0));  // by GPU index
  EXPECT_EQ(list.devices(0).health(), "Unhealthy");
  EXPECT_EQ(list.devices(4).id(), a.gpu.uuid + "::2");
  EXPECT_EQ(list.devices(4).topology().nodes(0).id(), 1);
}

TEST(ReplicaServiceTest, ShareOfTimesliceWithEqualSplit) {
  auto a = Replicated(0, SharingMode::kTimeslice, 4, "r");
  a.mode.memory_split = MemorySplit::kEqual;
  auto b = Replicated(1, SharingMode::kTimeslice, 4, "r");
  auto share = ShareOf({a, b}, "r", Request({b.gpu.uuid + "::0", a.gpu.uuid + "::1", a.gpu.uuid + "::3"}));
  ASSERT_TRUE(share.ok()) << share.error().message;
  EXPECT_EQ(share->mode, SharingMode::kTimeslice);
  ASSERT_EQ(share->gpus.size(), 2u);
  EXPECT_EQ(share->gpus[0].uuid, b.gpu.uuid);  // first asked, ordinal 0
  EXPECT_EQ(share->gpus[0].held, 1);
  EXPECT_EQ(share->gpus[0].memory_limit_mib, 0);  // no split on b
  EXPECT_EQ(share->gpus[1].container_ordinal, 1);
  EXPECT_EQ(share->gpus[1].held, 2);
  EXPECT_EQ(share->gpus[1].memory_limit_mib, 16384 * 2 / 4);

  auto answer = AllocateShare(*share, {});
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->envs().at(contract::kVisibleDevicesEnv), b.gpu.uuid + "," + a.gpu.uuid);
}

TEST(ReplicaServiceTest, MpsShareAndHook) {
  auto a = Replicated(0, SharingMode::kMps, 4, "nvidia.com/gpu");
  a.mode.fail_requests_greater_than_one = false;
  auto share = ShareOf({a}, "nvidia.com/gpu", Request({a.gpu.uuid + "::0", a.gpu.uuid + "::1"}));
  ASSERT_TRUE(share.ok()) << share.error().message;
  EXPECT_EQ(share->gpus[0].active_thread_percentage, 50);
  EXPECT_EQ(share->gpus[0].memory_limit_mib, 8192);
  ContainerSetups setups;
  setups[SharingMode::kMps] = [](const ShareRequest& r) -> Result<ContainerEdits> {
    ContainerEdits edits;
    edits.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string(r.gpus[0].active_thread_percentage);
    edits.env[contract::kVisibleDevicesEnv] = "hook-must-not-win";
    edits.mounts.push_back({"/tmp/nvidia-mps", "/run/tessera/mps/0", false});
    return edits;
  };
  auto answer = AllocateShare(*share, setups);
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->envs().at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "50");
  EXPECT_EQ(answer->envs().at(contract::kVisibleDevicesEnv), a.gpu.uuid);
  ASSERT_EQ(answer->mounts_size(), 1);
  EXPECT_FALSE(answer->mounts(0).read_only());

  setups[SharingMode::kMps] = [](const ShareRequest&) -> Result<ContainerEdits> {
    return Error{"the MPS daemon of GPU 0 is not running"};
  };
  auto refused = AllocateShare(*share, setups);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message, "the MPS daemon of GPU 0 is not running");
}

// NVIDIA's rules and words.
TEST(ReplicaServiceTest, RefusalsUseNvidiasWords) {
  auto a = Replicated(0, SharingMode::kTimeslice, 4, "nvidia.com/gpu");
  a.mode.fail_requests_greater_than_one = true;
  auto too_many = ShareOf({a}, "nvidia.com/gpu", Request({a.gpu.uuid + "::0", a.gpu.uuid + "::1"}));
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.error().message,
            "request for 'nvidia.com/gpu: 2' too large: maximum request size for shared resources is 1");
  EXPECT_TRUE(ShareOf({a}, "nvidia.com/gpu", Request({a.gpu.uuid + "::3"})).ok());

  for (const std::string& id : {a.gpu.uuid + "::4", std::string("GPU-x::0"), std::string("nonsense")}) {
    auto unknown = ShareOf({a}, "nvidia.com/gpu", Request({id}));
    ASSERT_FALSE(unknown.ok()) << id;
    EXPECT_EQ(unknown.error().message,
              "invalid allocation request for 'nvidia.com/gpu': unknown device: " + id);
  }
  // Another resource's replica is unknown here.
  auto other = ShareOf({a}, "nvidia.com/gpu.shared", Request({a.gpu.uuid + "::0"}));
  EXPECT_FALSE(other.ok());
  EXPECT_FALSE(ShareOf({a}, "nvidia.com/gpu", Request({})).ok());
}

}  // namespace
}  // namespace tessera::node::sharing
