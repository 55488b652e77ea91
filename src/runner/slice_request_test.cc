#include "runner/slice_request.h"

#include <gtest/gtest.h>

namespace tessera::runner {
namespace {

TEST(SliceRequest, ParsesMemoryForms) {
  SliceRequest r;
  ASSERT_TRUE(ParseGpuMemory("3000", r).ok());
  EXPECT_EQ(r.memory_mib, 3000);
  EXPECT_FALSE(r.memory_percent);
  ASSERT_TRUE(ParseGpuMemory("3Gi", r).ok());
  EXPECT_EQ(r.memory_mib, 3072);
  ASSERT_TRUE(ParseGpuMemory("1G", r).ok());
  EXPECT_EQ(r.memory_mib, 954);  // 10^9 bytes rounded up to whole MiB
  ASSERT_TRUE(ParseGpuMemory("25%", r).ok());
  EXPECT_EQ(r.memory_percent, 25);
  EXPECT_EQ(r.memory_mib, 0);
}

TEST(SliceRequest, RejectsBadMemoryWithTheFlagName) {
  for (const char* bad : {"", "abc", "-5", "0", "0%", "101%", "2.5", "12.5%", "%", "3 Gi"}) {
    SliceRequest r;
    auto st = ParseGpuMemory(bad, r);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.error().message.find("--gpumem"), std::string::npos) << st.error().message;
  }
}

TEST(SliceRequest, ValidatesRanges) {
  SliceRequest r;
  EXPECT_TRUE(Validate(r).ok());
  r.cores = 101;
  EXPECT_NE(Validate(r).error().message.find("--gpucores"), std::string::npos);
  r.cores = 30;
  r.gpus = 0;
  EXPECT_NE(Validate(r).error().message.find("--gpus"), std::string::npos);
  r.gpus = 1;
  r.policy = "fastest";
  EXPECT_NE(Validate(r).error().message.find("--policy"), std::string::npos);
  r.policy = "spread";
  EXPECT_EQ(r.core_policy, "default");
  for (const char* ok : {"force", "default", "disable"}) {
    r.core_policy = ok;
    EXPECT_TRUE(Validate(r).ok()) << ok;
  }
  r.core_policy = "strict";
  EXPECT_EQ(Validate(r).error().message, "--core-policy: must be force, default or disable, got 'strict'");
}

TEST(SliceRequest, PolicyNamesAreThePlacementPoliciesAndTheOldSpellingsWarn) {
  SliceRequest r;
  EXPECT_EQ(r.policy, "gpu-binpack");
  for (const char* name : {"gpu-binpack", "gpu-spread", "node-binpack", "node-spread", "tessera"}) {
    r.policy = name;
    EXPECT_TRUE(Validate(r).ok()) << name;
    EXPECT_EQ(*CorePolicyName(r), name);
    EXPECT_EQ(PolicyDeprecation(r), "") << name;
  }
  r.policy = "spread";  // before: GPU spread; the scheduler's policy.node spread is node-level
  EXPECT_EQ(*CorePolicyName(r), "gpu-spread");
  EXPECT_NE(PolicyDeprecation(r).find("write --policy gpu-spread"), std::string::npos)
      << PolicyDeprecation(r);
  r.policy = "binpack";
  EXPECT_EQ(*CorePolicyName(r), "gpu-binpack");
  r.policy = "fgd";  // a trace baseline, not a placement policy of run
  EXPECT_NE(Validate(r).error().message.find("must be gpu-binpack, gpu-spread"), std::string::npos);
}

TEST(SliceRequest, MapsOntoOneContainerPod) {
  SliceRequest r;
  r.gpus = 2;
  r.memory_mib = 4000;
  r.cores = 30;
  r.gpu_types = {"A100"};
  core::PodRequest pod = ToPodRequest(r);
  ASSERT_EQ(pod.containers.size(), 1u);
  EXPECT_EQ(pod.containers[0].gpus, 2);
  EXPECT_EQ(pod.containers[0].memory_mib, 4000);
  EXPECT_EQ(pod.containers[0].cores, 30);
  EXPECT_EQ(pod.filter.use_types, std::vector<std::string>{"A100"});
  auto policy = CorePolicyName(r);
  ASSERT_TRUE(policy.ok()) << policy.error().message;
  EXPECT_EQ(*policy, "gpu-binpack");
}

}  // namespace
}  // namespace tessera::runner
