#include "base/prometheus_text.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "base/testing.h"

namespace tessera {
namespace {

TEST(PrometheusTextTest, RendersHelpTypeAndSamples) {
  PrometheusText text;
  text.Describe("tessera_container_memory_used_bytes", MetricType::kGauge, "Device memory in use.");
  text.Add("tessera_container_memory_used_bytes", {{"pod", "train-0"}, {"container", "app"}}, 1048576);
  text.Add("tessera_container_memory_used_bytes", {}, 7);
  EXPECT_EQ(text.Render(),
            "# HELP tessera_container_memory_used_bytes Device memory in use.\n"
            "# TYPE tessera_container_memory_used_bytes gauge\n"
            "tessera_container_memory_used_bytes{pod=\"train-0\",container=\"app\"} 1048576\n"
            "tessera_container_memory_used_bytes 7\n");
  EXPECT_EQ(text.rejected(), 0u);
}

TEST(PrometheusTextTest, SpellsEachType) {
  PrometheusText text;
  text.Describe("a", MetricType::kGauge, "A.");
  text.Describe("b_total", MetricType::kCounter, "B.");
  text.Describe("c", MetricType::kUntyped, "C.");
  text.Add("a", {}, 1);
  text.Add("b_total", {}, 2);
  text.Add("c", {}, 3);
  EXPECT_EQ(text.Render(),
            "# HELP a A.\n# TYPE a gauge\na 1\n"
            "# HELP b_total B.\n# TYPE b_total counter\nb_total 2\n"
            "# HELP c C.\n# TYPE c untyped\nc 3\n");
}

TEST(PrometheusTextTest, EscapesHelpBackslashAndNewlineButNotQuotes) {
  PrometheusText text;
  text.Describe("m", MetricType::kGauge, "path C:\\x \"quoted\"\nsecond line");
  text.Add("m", {}, 1);
  EXPECT_EQ(text.Render(), "# HELP m path C:\\\\x \"quoted\"\\nsecond line\n# TYPE m gauge\nm 1\n");
}

TEST(PrometheusTextTest, EscapesLabelValues) {
  PrometheusText text;
  text.Describe("m", MetricType::kGauge, "M.");
  text.Add("m", {{"v", "a\\b\"c\"\nd"}, {"u", "\xc3\xa9t\xc3\xa9 {x=1}, y"}}, 1);
  EXPECT_EQ(text.Render(),
            "# HELP m M.\n# TYPE m gauge\n"
            "m{v=\"a\\\\b\\\"c\\\"\\nd\",u=\"\xc3\xa9t\xc3\xa9 {x=1}, y\"} 1\n");
}

TEST(PrometheusTextTest, GroupsInterleavedSamplesByFamilyInDescribeOrder) {
  PrometheusText text;
  text.Describe("used_bytes", MetricType::kGauge, "Used.");
  text.Describe("limit_bytes", MetricType::kGauge, "Limit.");
  text.Describe("never_sampled", MetricType::kGauge, "Left out.");
  // Per container, both metrics: the caller's natural order.
  text.Add("limit_bytes", {{"container", "a"}}, 100);
  text.Add("used_bytes", {{"container", "a"}}, 10);
  text.Add("limit_bytes", {{"container", "b"}}, 200);
  text.Add("used_bytes", {{"container", "b"}}, 20);
  EXPECT_EQ(text.Render(),
            "# HELP used_bytes Used.\n# TYPE used_bytes gauge\n"
            "used_bytes{container=\"a\"} 10\nused_bytes{container=\"b\"} 20\n"
            "# HELP limit_bytes Limit.\n# TYPE limit_bytes gauge\n"
            "limit_bytes{container=\"a\"} 100\nlimit_bytes{container=\"b\"} 200\n");
}

TEST(PrometheusTextTest, EmptyDocumentWhenNothingWasAdded) {
  PrometheusText text;
  EXPECT_EQ(text.Render(), "");
  text.Describe("m", MetricType::kGauge, "M.");
  EXPECT_EQ(text.Render(), "");
}

TEST(PrometheusTextTest, ValidatesNames) {
  EXPECT_TRUE(IsValidMetricName("tessera_gpu_memory_bytes"));
  EXPECT_TRUE(IsValidMetricName("job:rate5m"));
  EXPECT_TRUE(IsValidMetricName("_x9"));
  EXPECT_TRUE(IsValidMetricName(":"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("9lives"));
  EXPECT_FALSE(IsValidMetricName("gpu-memory"));
  EXPECT_FALSE(IsValidMetricName("gpu memory"));
  EXPECT_FALSE(IsValidMetricName("m\xc3\xa9moire"));

  EXPECT_TRUE(IsValidLabelName("container"));
  EXPECT_TRUE(IsValidLabelName("_x"));
  EXPECT_TRUE(IsValidLabelName("gpu_uuid2"));
  EXPECT_FALSE(IsValidLabelName(""));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("2gpu"));
  EXPECT_FALSE(IsValidLabelName("gpu-uuid"));
  EXPECT_FALSE(IsValidLabelName("__name__"));
  EXPECT_FALSE(IsValidLabelName("__meta"));
}

// Data-dependent rejections: skipped and counted in every build.
TEST(PrometheusTextTest, SkipsADuplicateSeriesWhateverTheLabelOrder) {
  PrometheusText text;
  text.Describe("m", MetricType::kGauge, "M.");
  text.Add("m", {{"a", "1"}, {"b", "2"}}, 1);
  text.Add("m", {{"b", "2"}, {"a", "1"}}, 2);
  text.Add("m", {{"a", "1"}, {"b", "3"}}, 3);
  EXPECT_EQ(text.Render(), "# HELP m M.\n# TYPE m gauge\nm{a=\"1\",b=\"2\"} 1\nm{a=\"1\",b=\"3\"} 3\n");
  EXPECT_EQ(text.rejected(), 1u);
  EXPECT_NE(text.first_rejection().find("duplicate series"), std::string::npos) << text.first_rejection();
}

TEST(PrometheusTextTest, SkipsALabelValueThatIsNotUtf8) {
  PrometheusText text;
  text.Describe("m", MetricType::kGauge, "M.");
  text.Add("m", {{"a", "ok"}}, 1);
  const char* bad[] = {"\xff", "a\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"};
  for (const char* value : bad) text.Add("m", {{"a", value}}, 2);
  EXPECT_EQ(text.Render(), "# HELP m M.\n# TYPE m gauge\nm{a=\"ok\"} 1\n");
  EXPECT_EQ(text.rejected(), std::size(bad));
  EXPECT_NE(text.first_rejection().find("not valid UTF-8"), std::string::npos) << text.first_rejection();
}

// Programming errors: release builds (NDEBUG, the project's default RelWithDebInfo)
// skip and count; debug builds assert.
#ifdef NDEBUG
TEST(PrometheusTextTest, ReleaseBuildSkipsAndCountsInvalidUse) {
  PrometheusText text;
  text.Describe("good", MetricType::kGauge, "Good.");
  text.Describe("bad-name", MetricType::kGauge, "Bad.");
  text.Describe("good", MetricType::kCounter, "Described twice.");
  text.Describe("bad_help", MetricType::kGauge, "\xff");
  text.Add("bad-name", {}, 1);
  text.Add("undescribed", {}, 1);
  text.Add("good", {{"bad:label", "x"}}, 1);
  text.Add("good", {{"__reserved", "x"}}, 1);
  text.Add("good", {{"a", "x"}, {"a", "y"}}, 1);
  text.Add("good", {{"a", "x"}}, 5);
  EXPECT_EQ(text.Render(), "# HELP good Good.\n# TYPE good gauge\ngood{a=\"x\"} 5\n");
  EXPECT_EQ(text.rejected(), 8u);
  EXPECT_EQ(text.first_rejection(), "invalid metric name 'bad-name'");
}
#else
TEST(PrometheusTextDeathTest, DebugBuildAssertsOnInvalidUse) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  PrometheusText text;
  text.Describe("good", MetricType::kGauge, "Good.");
  EXPECT_DEATH(text.Describe("bad-name", MetricType::kGauge, "Bad."), "invalid use");
  EXPECT_DEATH(text.Describe("good", MetricType::kGauge, "Twice."), "invalid use");
  EXPECT_DEATH(text.Add("undescribed", {}, 1), "invalid use");
  EXPECT_DEATH(text.Add("good", {{"bad:label", "x"}}, 1), "invalid use");
  EXPECT_DEATH(text.Add("good", {{"a", "x"}, {"a", "y"}}, 1), "invalid use");
}
#endif

// The round trip through the real parser of Debian's prometheus package: promtool
// reads the text format as the Go client libraries write it and lints it.
class PromtoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* env = std::getenv("TESSERA_PROMTOOL");
    promtool_ = env != nullptr && *env != '\0' ? env : "/usr/bin/promtool";
    if (::access(promtool_.c_str(), X_OK) != 0) {
      GTEST_SKIP() << promtool_ << " not found: install Debian's prometheus package "
                   << "(scripts/install-deps.sh does) or set TESSERA_PROMTOOL";
    }
  }

  // Runs `promtool check metrics` on `document`; returns its exit status, output in *output.
  int CheckMetrics(const std::string& document, std::string* output) {
    const std::string in = dir_ + "/metrics.txt";
    const std::string out = dir_ + "/promtool.out";
    std::ofstream(in, std::ios::binary) << document;
    const std::string command = "'" + promtool_ + "' check metrics < '" + in + "' > '" + out + "' 2>&1";
    const int status = std::system(command.c_str());
    std::stringstream text;
    text << std::ifstream(out).rdbuf();
    *output = text.str();
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string promtool_;
  ::tessera::testing::TempDir tmp_{"tessera-promtool"};
  const std::string dir_ = tmp_.path();
};

TEST_F(PromtoolTest, AcceptsARenderedDocumentWithoutLintProblems) {
  PrometheusText text;
  text.Describe("tessera_container_memory_used_bytes", MetricType::kGauge,
                "Device memory in use by the container, in bytes.\nCounted by libvgpu \\ the region file.");
  text.Describe("tessera_container_oom_refusals_total", MetricType::kCounter, "Allocations refused.");
  text.Describe("tessera_container_gpu_utilization_ratio", MetricType::kGauge, "Share of the GPU's time.");
  text.Describe("tessera_node_info", MetricType::kUntyped, "Build information.");
  for (int c = 0; c < 3; ++c) {
    const MetricLabels labels = {{"namespace", "ml"},
                                 {"pod", "train-" + std::to_string(c)},
                                 {"container", "app \"main\"\\\nline"},
                                 {"uuid", "GPU-0b1c-\xc3\xa9"}};
    text.Add("tessera_container_oom_refusals_total", labels, c);
    text.Add("tessera_container_memory_used_bytes", labels, 9007199254740992.0 - c);
    text.Add("tessera_container_gpu_utilization_ratio", labels,
             c == 0   ? 0.1
             : c == 1 ? std::numeric_limits<double>::quiet_NaN()
                      : std::numeric_limits<double>::infinity());
  }
  text.Add("tessera_node_info", {{"version", "0.1.0"}}, 1);
  text.Add("tessera_container_gpu_utilization_ratio", {{"pod", "idle"}},
           -std::numeric_limits<double>::infinity());
  ASSERT_EQ(text.rejected(), 0u) << text.first_rejection();

  std::string output;
  EXPECT_EQ(CheckMetrics(text.Render(), &output), 0) << output << "\n--- document:\n" << text.Render();
}

// The harness can fail: promtool refuses what the writer must never produce.
TEST_F(PromtoolTest, RefusesABrokenDocument) {
  std::string output;
  EXPECT_NE(CheckMetrics("# TYPE m gauge\nm{a=\"unterminated} 1\n", &output), 0) << output;
  EXPECT_NE(CheckMetrics("# TYPE m gauge\nm{a=\"x\"} 1e+06x\n", &output), 0) << output;
}

}  // namespace
}  // namespace tessera
