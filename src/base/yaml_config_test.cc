#include "base/yaml_config.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <optional>

namespace tessera::config {
namespace {

using std::chrono::milliseconds;

TEST(ConfigRules, BooleansAreTrueOrFalseAndNothingElse) {
  EXPECT_TRUE(*ParseBool("true"));
  EXPECT_FALSE(*ParseBool("false"));
  for (const char* other : {"True", "FALSE", "yes", "no", "on", "off", "y", "1", "0", ""}) {
    auto b = ParseBool(other);
    ASSERT_FALSE(b.ok()) << other;
    EXPECT_EQ(b.error().message, "must be true or false, got '" + std::string(other) + "'");
  }
}

TEST(ConfigRules, IntegersAreDecimalAndMustFit) {
  EXPECT_EQ(*ParseInteger("42"), 42);
  EXPECT_EQ(*ParseInteger("-7"), -7);
  EXPECT_EQ(*ParseInteger("+7"), 7);
  EXPECT_EQ(*ParseInteger("010"), 10);  // decimal, not octal
  for (const char* bad : {"0x10", "1.0", "1e3", "ten", "", "-", "+-1", "4 ", "99999999999999999999"}) {
    EXPECT_FALSE(ParseInteger(bad).ok()) << bad;
  }
  auto out = ParseInteger("300", 0, 255);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().message, "must be an integer from 0 to 255, got '300'");
  EXPECT_EQ(ParseInteger("ten").error().message, "must be an integer, got 'ten'");
}

TEST(ConfigRules, NumbersAreFiniteDecimals) {
  EXPECT_DOUBLE_EQ(*ParseNumber("1.5"), 1.5);
  EXPECT_DOUBLE_EQ(*ParseNumber("2"), 2);
  EXPECT_DOUBLE_EQ(*ParseNumber("1e3"), 1000);
  EXPECT_DOUBLE_EQ(*ParseNumber("-0.25"), -0.25);
  for (const char* bad : {"inf", "nan", ".inf", "0x10", "1,5", "", "many"}) {
    EXPECT_FALSE(ParseNumber(bad).ok()) << bad;
  }
}

TEST(ConfigRules, DurationsAreSeconds) {
  EXPECT_EQ(*ParseSeconds("1.5"), milliseconds(1500));
  EXPECT_EQ(*ParseSeconds("60"), milliseconds(60000));
  EXPECT_FALSE(ParseSeconds("0").ok());
  EXPECT_EQ(*ParseSeconds("0", /*zero_allowed=*/true), milliseconds(0));
  EXPECT_EQ(ParseSeconds("-1", true).error().message,
            "must be 0 (off) or a positive number of seconds, got '-1'");
  EXPECT_EQ(ParseSeconds("soon").error().message, "must be a positive number of seconds, got 'soon'");
}

struct Settings {
  std::string name = "default";
  int port = 8888;
  double qps = 200;
  bool enabled = true;
  milliseconds timeout{10000};
  std::string mode = "webhook";
  std::optional<int> percent;
};

YamlConfig KeysOf(Settings& s) {
  YamlConfig keys(" (see --help for the keys)");
  keys.String("name", &s.name, "a name")
      .Int("server.port", &s.port, "the port")
      .Number("kube.qps", &s.qps, "requests per second")
      .Bool("leader.enabled", &s.enabled, "elect a leader")
      .Seconds("kube.timeoutSeconds", &s.timeout, "request timeout")
      .Choice(
          "mode", {"webhook", "device-ids", "all"}, [&s](const std::string& v) { s.mode = v; },
          [&s] { return s.mode; }, "who sets it")
      .Custom(
          "percent", "integer", "an integer",
          [&s](std::string_view text) -> Status {
            TESSERA_ASSIGN_OR_RETURN(int64_t v, ParseInteger(text, 1, 100));
            s.percent = static_cast<int>(v);
            return Status::Ok();
          },
          [&s] { return s.percent ? std::to_string(*s.percent) : std::string("unset"); });
  return keys;
}

TEST(YamlConfigTest, SetsNestedKeysAndLeavesTheOthers) {
  Settings s;
  ASSERT_TRUE(KeysOf(s)
                  .Apply("name: n2\nserver: {port: 9000}\nkube:\n  qps: 0.5\n  timeoutSeconds: 2.5\n"
                         "leader: {enabled: false}\nmode: all\npercent: 25\n",
                         "f.yaml")
                  .ok());
  EXPECT_EQ(s.name, "n2");
  EXPECT_EQ(s.port, 9000);
  EXPECT_DOUBLE_EQ(s.qps, 0.5);
  EXPECT_EQ(s.timeout, milliseconds(2500));
  EXPECT_FALSE(s.enabled);
  EXPECT_EQ(s.mode, "all");
  EXPECT_EQ(s.percent, 25);

  Settings untouched;
  EXPECT_TRUE(KeysOf(untouched).Apply("", "empty.yaml").ok());
  EXPECT_TRUE(KeysOf(untouched).Apply("server:\n", "f.yaml").ok());  // a mapping with nothing in it
  EXPECT_EQ(untouched.port, 8888);
}

TEST(YamlConfigTest, ErrorsNameTheSourceTheKeyAndWhatItMustBe) {
  Settings s;
  auto error = [&](const std::string& yaml) {
    Status st = KeysOf(s).Apply(yaml, "f.yaml");
    return st.ok() ? std::string("(accepted)") : st.error().message;
  };
  EXPECT_EQ(error("server: {prot: 1}\n"), "f.yaml: unknown key 'server.prot' (see --help for the keys)");
  EXPECT_EQ(error("nmae: x\n"), "f.yaml: unknown key 'nmae' (see --help for the keys)");
  EXPECT_EQ(error("server: {port: lots}\n"), "f.yaml: 'server.port' must be an integer, got 'lots'");
  EXPECT_EQ(error("server: {port: [1, 2]}\n"), "f.yaml: 'server.port' must be an integer, got a list");
  EXPECT_EQ(error("server: {port: }\n"), "f.yaml: 'server.port' must be an integer, got no value");
  EXPECT_EQ(error("server: {port: 99999999999}\n"),
            "f.yaml: 'server.port' must be an integer from -2147483648 to 2147483647, got '99999999999'");
  EXPECT_EQ(error("leader: {enabled: yes}\n"), "f.yaml: 'leader.enabled' must be true or false, got 'yes'");
  EXPECT_EQ(error("mode: some\n"), "f.yaml: 'mode' must be webhook, device-ids or all, got 'some'");
  EXPECT_EQ(error("percent: 0\n"), "f.yaml: 'percent' must be an integer from 1 to 100, got '0'");
  EXPECT_EQ(error("server: 5\n"), "f.yaml: 'server' must be a mapping");
  EXPECT_EQ(error("- a\n- b\n"), "f.yaml: expected a mapping of configuration keys");
  EXPECT_NE(error("server: {port: 1\n").find("f.yaml: not valid YAML: "), std::string::npos);
}

TEST(YamlConfigTest, SetAppliesOneKeyByTheSameRules) {
  Settings s;
  const YamlConfig keys = KeysOf(s);
  ASSERT_TRUE(keys.Set("server.port", "9001", "--port").ok());
  EXPECT_EQ(s.port, 9001);
  ASSERT_TRUE(keys.Set("leader.enabled", "false", "--set leader.enabled").ok());
  EXPECT_FALSE(s.enabled);
  EXPECT_EQ(keys.Set("leader.enabled", "yes", "--leader").error().message,
            "--leader: 'leader.enabled' must be true or false, got 'yes'");
  EXPECT_EQ(keys.Set("server", "1", "--set server").error().message,
            "--set server: unknown key 'server' (see --help for the keys)");
}

TEST(YamlConfigTest, AnAllowRuleMayRefuseADeclaredKey) {
  Settings s;
  YAML::Node section = YAML::Load("name: x\nserver: {port: 1}\n");
  auto only_name = [](const std::string& key) -> Status {
    if (key == "name") return Status::Ok();
    return Error{"key '" + key + "' cannot be set here"};
  };
  Status st = KeysOf(s).Apply(section, "nodes.yaml: node 'a'", only_name);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "nodes.yaml: node 'a': key 'server.port' cannot be set here");
}

TEST(YamlConfigTest, HelpListsEveryKeyWithItsTypeAndDefault) {
  Settings s;
  EXPECT_EQ(KeysOf(s).Help(),
            "  name (string, default default)\n      a name\n"
            "  server.port (integer, default 8888)\n      the port\n"
            "  kube.qps (number, default 200)\n      requests per second\n"
            "  leader.enabled (bool, default true)\n      elect a leader\n"
            "  kube.timeoutSeconds (seconds, default 10)\n      request timeout\n"
            "  mode (string, default webhook)\n      who sets it\n"
            "  percent (integer, default unset)\n");
}

}  // namespace
}  // namespace tessera::config
