#include "vgpu/json.h"

#include <gtest/gtest.h>

#include <cstring>

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

TEST(Json, StringsMustBeWellFormedUtf8) {
  for (const char* good : {"\"caf\xc3\xa9\"", "\"\xe2\x82\xac\"", "\"\xf0\x9f\x98\x80\""}) {
    JsonValue v;
    std::string err;
    ASSERT_TRUE(parse_json(good, &v, &err)) << err;
    EXPECT_EQ(v.string, std::string(good + 1, std::strlen(good) - 2));
  }
  // A lone continuation byte, a truncated sequence, an overlong '/', a
  // surrogate, a code point past U+10FFFF, bytes never used in UTF-8.
  for (const char* bad : {"\"\x80\"", "\"\xc3\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"",
                          "\"\xff\"", "\"\xe2\x82\""}) {
    JsonValue v;
    std::string err;
    EXPECT_FALSE(parse_json(bad, &v, &err)) << bad;
    EXPECT_NE(err.find("UTF-8"), std::string::npos) << err;
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
