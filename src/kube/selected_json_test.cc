#include "kube/selected_json.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera::kube {
namespace {

using Json = nlohmann::json;

// The reference: nlohmann's whole tree with what `s` does not select removed.
Json Pruned(const Json& v, const FieldSelection& s) {
  if (s.whole()) return v;
  if (v.is_object()) {
    Json out = Json::object();
    for (const auto& [key, member] : v.items()) {
      if (auto it = s.members.find(key); it != s.members.end()) {
        out[key] = Pruned(member, it->second);
        continue;
      }
      for (const std::string& prefix : s.member_prefixes) {
        if (key.starts_with(prefix)) {
          out[key] = member;
          break;
        }
      }
    }
    return out;
  }
  if (v.is_array()) {
    Json out = Json::array();
    for (const Json& e : v) out.push_back(Pruned(e, s));
    return out;
  }
  return v;
}

FieldSelection PodLike() {
  FieldSelection s;
  FieldSelection& meta = s.Member("metadata");
  meta.Members({"name", "namespace", "uid", "labels"});
  meta.Member("annotations").member_prefixes = {"tessera.io/", "nvidia.com/"};
  FieldSelection& spec = s.Member("spec");
  spec.Members({"nodeName", "priority"});
  spec.Member("containers").Members({"name", "resources"});
  s.Member("status").Member("conditions").Members({"type", "status"});
  return s;
}

// A pod-shaped document with what a parser can trip on in kept and skipped
// places: escapes, surrogate pairs, multi-byte UTF-8, numbers of every kind,
// empty containers, nesting, whitespace.
const char* const kDocument = R"({
  "kind": "Pod", "apiVersion": "v1",
  "metadata": {"name": "p\u00e9-1", "namespace": "d\u00e9v", "uid": "u-1", "generation": 3,
    "labels": {"app": "tr\"ain", "tier": "", "n": -12, "f": 1.5e3, "z": 0, "big": 18446744073709551615},
    "annotations": {"tessera.io/allocation": "{\"node\":\"n1\"}", "nvidia.com/use-gputype": "A100",
      "kubectl.kubernetes.io/last-applied-configuration": "{\"x\":[1,2,{\"y\":\"\\ud83d\\ude00\"}]}",
      "other": "caf\u00e9 \ud83d\ude00 ümlaut 日本 😀"},
    "ownerReferences": [{"kind": "Job", "controller": true, "blockOwnerDeletion": false, "x": null}],
    "managedFields": [{"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:env": []}}}}]},
  "spec": {"nodeName": "n1", "priority": -2147483648, "volumes": [[], {}, [[[]]], -0.0, 1E-7],
    "containers": [
      {"name": "app", "image": "img", "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": 2.5}},
       "env": [{"name": "A", "value": "\/\b\f\n\r\t\\"}]},
      {"name": "side", "resources": {}}, 7, "text", null]},
  "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "r"}],
    "podIP": "10.0.0.1", "startTime": null, "qosClass": "Burstable", "ready": true}
})";

TEST(ParseSelectedTest, GivesNlohmannsTreeWithTheUnselectedMembersRemoved) {
  const Json full = Json::parse(kDocument);
  const FieldSelection s = PodLike();
  auto got = ParseSelected(kDocument, s);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, Pruned(full, s));
  EXPECT_EQ((*got)["metadata"]["name"], "p\u00e9-1");
  EXPECT_FALSE((*got)["metadata"].contains("generation"));
  EXPECT_FALSE((*got)["metadata"]["annotations"].contains("other"));
  EXPECT_EQ((*got)["metadata"]["annotations"]["nvidia.com/use-gputype"], "A100");
  EXPECT_FALSE((*got)["spec"]["containers"][0].contains("env"));
  EXPECT_EQ((*got)["spec"]["containers"][2], 7);
  // Numbers keep nlohmann's types (unsigned, signed, float).
  EXPECT_TRUE((*got)["metadata"]["labels"]["z"].is_number_unsigned());
  EXPECT_TRUE((*got)["metadata"]["labels"]["n"].is_number_integer());
  EXPECT_TRUE((*got)["metadata"]["labels"]["f"].is_number_float());
  EXPECT_EQ((*got)["metadata"]["labels"]["big"], full["metadata"]["labels"]["big"]);
  EXPECT_EQ((*got)["spec"]["priority"], -2147483648LL);
}

TEST(ParseSelectedTest, AnEmptySelectionKeepsEverything) {
  for (const char* text : {kDocument, "[]", "{}", " 12 ", "-0", "1e5", "\"x\"", "true", "null", "[1,[2,[3]]]",
                           "12345678901234567890123", "0.1", "\"\\u0000\""}) {
    SCOPED_TRACE(text);
    auto got = ParseSelected(text, FieldSelection{});
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(*got, Json::parse(text));
    EXPECT_EQ(got->type(), Json::parse(text).type());
  }
}

TEST(ParseSelectedTest, TheLastOfDuplicateKeysWinsAsInNlohmann) {
  const char* text = R"({"metadata": {"name": "a", "uid": "1"}, "metadata": {"name": "b"}})";
  auto got = ParseSelected(text, PodLike());
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, Pruned(Json::parse(text), PodLike()));
  EXPECT_FALSE((*got)["metadata"].contains("uid"));
}

// Whatever nlohmann refuses is refused, kept or skipped: cut anywhere, or
// with any byte replaced by one that can break the grammar.
TEST(ParseSelectedTest, RefusesExactlyWhatNlohmannRefuses) {
  const std::string doc = kDocument;
  const FieldSelection s = PodLike();
  auto check = [&](const std::string& text) {
    const Json full = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    auto got = ParseSelected(text, s);
    if (full.is_discarded()) {
      EXPECT_FALSE(got.has_value()) << text;
    } else {
      ASSERT_TRUE(got.has_value()) << text;
      EXPECT_EQ(*got, Pruned(full, s)) << text;
    }
  };
  for (size_t cut = 0; cut < doc.size(); ++cut) check(doc.substr(0, cut));
  const std::string replacements[] = {
      std::string(1, '\0'), "\"",  "\\", "}", "]", ",", ":", "x", "1", "\x01", "\x7f", "\xc3", "\xff", "\x80",
      "\xed\xa0\x80",       "\\u", " ",  "\n"};
  for (size_t at = 0; at < doc.size(); ++at) {
    for (const std::string& r : replacements) check(doc.substr(0, at) + r + doc.substr(at + 1));
  }
  for (const char* text : {"",
                           " ",
                           "{",
                           "{\"a\"}",
                           "{\"a\":}",
                           "[1,]",
                           "{\"a\":1,}",
                           "01",
                           "1.",
                           "1e",
                           "-",
                           "+1",
                           ".5",
                           "tru",
                           "nul",
                           "[1 2]",
                           "{} {}",
                           "\"\\ud800\"",
                           "\"\\udc00\"",
                           "\"\\ud800\\u0041\"",
                           "\"\\x\"",
                           "\"\t\"",
                           "\"\xc0\x80\"",
                           "\"\xf4\x90\x80\x80\"",
                           "\"\xed\xa0\x80\"",
                           "\"\xe0\x80\x80\""}) {
    check(text);
    check(std::string(R"({"spec":{"volumes":)") + text + "}}");       // skipped
    check(std::string(R"({"metadata":{"labels":)") + text + "}}");    // kept whole
    check(std::string(R"({"spec":{"containers":[)") + text + "]}}");  // selected per element
  }
}

TEST(ParseSelectedTest, SkipsHugeAndDeepValuesWithoutBuildingThem) {
  // A megabyte-long annotation that is not kept, and nesting deeper than any
  // recursion would survive, in a skipped member.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const std::string text = R"({"metadata":{"name":"a","annotations":{"big":")" + std::string(1 << 20, 'x') +
                           R"("}},"spec":{"volumes":)" + deep + "}}";
  auto got = ParseSelected(text, PodLike());
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->dump(), R"({"metadata":{"annotations":{},"name":"a"},"spec":{}})");
  // The same nesting cut short is refused.
  EXPECT_FALSE(ParseSelected(text.substr(0, text.size() - 10), PodLike()).has_value());
}

TEST(ParseSelectedTest, LeavesKeptValuesNestedTooDeepToNlohmann) {
  const int depth = kMaxSelectedDepth + 10;
  const std::string text =
      R"({"metadata":{"labels":)" + std::string(depth, '[') + std::string(depth, ']') + "}}";
  EXPECT_FALSE(ParseSelected(text, PodLike()).has_value());
  EXPECT_FALSE(Json::parse(text, nullptr, false).is_discarded());  // the caller's fallback reads it
}

}  // namespace
}  // namespace tessera::kube
