#include "base/log.h"

#include <gtest/gtest.h>

namespace tessera::log {
namespace {

TEST(LogTest, FieldsFollowTheMessageAsKeyValuePairs) {
  EXPECT_EQ(FormatLine("bound pod", {{"pod", "team/train-0"}, {"node", "gpu-1"}, {"gpus", 2}}),
            "bound pod pod=team/train-0 node=gpu-1 gpus=2");
  EXPECT_EQ(FormatLine("no fields", {}), "no fields");
}

TEST(LogTest, ValuesThatWouldNotParseBackAreQuoted) {
  EXPECT_EQ(FormatLine("m", {{"reason", "no GPU fits"}}), "m reason=\"no GPU fits\"");
  EXPECT_EQ(FormatLine("m", {{"empty", ""}}), "m empty=\"\"");
  EXPECT_EQ(FormatLine("m", {{"q", "say \"hi\"\\now"}}), "m q=\"say \\\"hi\\\"\\\\now\"");
  EXPECT_EQ(FormatLine("m", {{"eq", "a=b"}}), "m eq=\"a=b\"");
  EXPECT_EQ(FormatLine("m", {{"nl", "two\nlines"}}), "m nl=\"two\\nlines\"");
}

TEST(LogTest, NumbersBooleansAndDurationsHaveOneSpelling) {
  EXPECT_EQ(FormatLine("m", {{"n", uint64_t{1000000}}, {"x", 0.5}, {"b", true}, {"big", 1e6}}),
            "m n=1000000 x=0.5 b=true big=1000000");
  EXPECT_EQ(FormatLine("m", {{"wait", std::chrono::milliseconds(2500)}, {"lease", std::chrono::seconds(15)}}),
            "m wait=2.5s lease=15s");
}

TEST(LogTest, LevelsParseAndFilter) {
  for (std::string_view name : {"trace", "debug", "info", "warn", "error"}) {
    auto level = ParseLevel(name);
    ASSERT_TRUE(level.ok()) << name;
    EXPECT_EQ(LevelName(*level), name);
  }
  auto bad = ParseLevel("verbose");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "log level 'verbose' must be trace, debug, info, warn or error");

  const Level saved = GetLevel();
  SetLevel(Level::kWarn);
  Capture capture;
  Info("not shown", {{"k", 1}});
  Warn("shown", {{"k", 2}});
  Error("also shown");
  Debug("not shown either");
  SetLevel(saved);
  auto lines = capture.Lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].level, Level::kWarn);
  EXPECT_EQ(lines[0].text, "shown k=2");
  EXPECT_EQ(lines[1].text, "also shown");
  EXPECT_EQ(capture.Matching("also").size(), 1u);
}

}  // namespace
}  // namespace tessera::log
