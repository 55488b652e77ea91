#include "scheduler/dashboard/metrics_text.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/prometheus_text.h"

namespace tessera::scheduler::dashboard {
namespace {

TEST(MetricsTextTest, ReadsWhatPrometheusTextWrites) {
  PrometheusText text;
  text.Describe("tessera_gpu_memory_used_bytes", MetricType::kGauge, "used");
  text.Add("tessera_gpu_memory_used_bytes", {{"gpu_uuid", "GPU-1"}}, 1048576);
  text.Describe("tessera_container_compute_share_percent", MetricType::kGauge, "share");
  text.Add("tessera_container_compute_share_percent",
           {{"namespace", "ml"}, {"pod", "a\"b"}, {"container", "line\nbreak\\"}, {"gpu_uuid", "GPU-1"}},
           12.5);
  auto samples = ParseMetricsText(text.Render());
  ASSERT_TRUE(samples.ok()) << samples.error().message;
  ASSERT_EQ(samples->size(), 2u);
  EXPECT_EQ((*samples)[0].name, "tessera_gpu_memory_used_bytes");
  EXPECT_EQ((*samples)[0].Label("gpu_uuid"), "GPU-1");
  EXPECT_EQ((*samples)[0].value, 1048576);
  EXPECT_EQ((*samples)[1].Label("pod"), "a\"b");
  EXPECT_EQ((*samples)[1].Label("container"), "line\nbreak\\");
  EXPECT_EQ((*samples)[1].value, 12.5);
  EXPECT_EQ((*samples)[1].Label("absent"), "");
}

TEST(MetricsTextTest, AcceptsTimestampsSpecialValuesAndNoLabels) {
  auto samples = ParseMetricsText("# HELP x y\n\nup 1 1700000000000\nx{a=\"1\",} +Inf\ny NaN\r\nz -Inf\n");
  ASSERT_TRUE(samples.ok()) << samples.error().message;
  ASSERT_EQ(samples->size(), 4u);
  EXPECT_EQ((*samples)[0].value, 1);
  EXPECT_TRUE(std::isinf((*samples)[1].value));
  EXPECT_TRUE(std::isnan((*samples)[2].value));
  EXPECT_LT((*samples)[3].value, 0);
}

TEST(MetricsTextTest, CorruptLinesFailWithTheirLineNumber) {
  for (const char* bad : {"ok 1\n{broken 1\n", "ok 1\nx{a=\"1\" 2\n", "ok 1\nx{a=1} 2\n", "ok 1\nx twelve\n",
                          "ok 1\nx\n", "ok 1\n<html>\n"}) {
    auto samples = ParseMetricsText(bad);
    ASSERT_FALSE(samples.ok()) << bad;
    EXPECT_EQ(samples.error().message.rfind("line 2: ", 0), 0u) << samples.error().message;
  }
}

}  // namespace
}  // namespace tessera::scheduler::dashboard
