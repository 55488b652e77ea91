#include "vgpu/json.h"

#include <gtest/gtest.h>

namespace tessera::vgpu {
namespace {

TEST(Json, ParsesNestedDocument) {
  JsonValue v;
  std::string err;
  ASSERT_TRUE(parse_json(R"( {"a": [1, -2, 3.5, true, null], "b": {"c": "x\u00e9\n"}} )", &v, &err)) << err;
  ASSERT_EQ(v.kind, JsonValue::Kind::kObject);
  const JsonValue* a = v.find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->array.size(), 5u);
  EXPECT_TRUE(a->array[0].is_integer);
  EXPECT_EQ(a->array[1].integer, -2);
  EXPECT_FALSE(a->array[2].is_integer);
  EXPECT_DOUBLE_EQ(a->array[2].number, 3.5);
  EXPECT_TRUE(a->array[3].boolean);
  EXPECT_EQ(v.find("b")->find("c")->string, "x\xc3\xa9\n");
}

TEST(Json, RejectsWhatIsNotStrictJson) {
  const char* bad[] = {"",        "{",           "{\"a\":1,}",    "[1,]",
                       "{'a':1}", "{\"a\":01}",  "{\"a\":1} x",   "{\"a\":tru}",
                       "\"\\x\"", "\"\\ud800\"", "[1 2]",         "{\"a\" 1}",
                       "-",       "1.",          "\"tab\there\"", "nan"};
  for (const char* text : bad) {
    JsonValue v;
    std::string err;
    EXPECT_FALSE(parse_json(text, &v, &err)) << text;
    EXPECT_FALSE(err.empty()) << text;
  }
}

TEST(Json, RejectsExcessiveNesting) {
  std::string deep(100, '[');
  deep += std::string(100, ']');
  JsonValue v;
  std::string err;
  EXPECT_FALSE(parse_json(deep.c_str(), &v, &err));
  EXPECT_NE(err.find("deep"), std::string::npos);
}

TEST(Json, HugeIntegerIsNotAnInteger) {
  JsonValue v;
  std::string err;
  ASSERT_TRUE(parse_json("123456789012345678901234567890", &v, &err));
  EXPECT_FALSE(v.is_integer);
}

}  // namespace
}  // namespace tessera::vgpu
