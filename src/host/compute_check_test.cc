#include "host/compute_check.h"

#include <gtest/gtest.h>

namespace tessera::host {
namespace {

TEST(JudgeComputePass, OverOnlyWhenItHurtsAnotherTenantOrBypassesLibvgpu) {
  // 60 % on a 30 % quota (+10 tolerance), alone and all through libvgpu:
  // idle time, harmless.
  EXPECT_FALSE(JudgeComputePass({{1, 60, true}}, 0, 30, 10).over);
  // The same while another tenant is busy: over.
  auto busy = JudgeComputePass({{1, 35, true}, {2, 25, true}}, 20, 30, 10);
  EXPECT_TRUE(busy.over);
  EXPECT_EQ(busy.used_percent, 60);
  EXPECT_EQ(busy.others_percent, 20);
  // A busy process libvgpu does not know: over even alone.
  auto bypass = JudgeComputePass({{1, 60, false}}, 0, 30, 10);
  EXPECT_TRUE(bypass.bypass);
  EXPECT_TRUE(bypass.over);
  // Within quota + tolerance: never.
  EXPECT_FALSE(JudgeComputePass({{1, 40, false}}, 50, 30, 10).over);
  // An idle process outside the region is no bypass.
  EXPECT_FALSE(JudgeComputePass({{1, 0, false}, {2, 60, true}}, 0, 30, 10).bypass);
}

TEST(ComputeOffenders, UnknownToLibvgpuFirstThenBusiestUntilTheRestFits) {
  auto taken = ComputeOffenders({{10, 30, true}, {11, 20, false}, {12, 45, true}, {13, 0, false}}, 30, 10);
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].pid, 11u);  // not in the region
  EXPECT_EQ(taken[1].pid, 12u);  // then the busiest: 30 left, within 40
  EXPECT_TRUE(ComputeOffenders({{1, 35, true}}, 30, 10).empty());
  // Ties: the lowest pid first.
  auto tie = ComputeOffenders({{9, 50, true}, {8, 50, true}}, 30, 10);
  ASSERT_EQ(tie.size(), 2u);
  EXPECT_EQ(tie[0].pid, 8u);
}

}  // namespace
}  // namespace tessera::host
