#include "apiserver/merge_patch.h"

#include <gtest/gtest.h>

namespace tessera::testing {
namespace {

using Json = nlohmann::json;

// The examples of RFC 7386, appendix A.
TEST(MergePatchTest, Rfc7386Examples) {
  struct Case {
    const char* target;
    const char* patch;
    const char* result;
  };
  const Case cases[] = {
      {R"({"a":"b"})", R"({"a":"c"})", R"({"a":"c"})"},
      {R"({"a":"b"})", R"({"b":"c"})", R"({"a":"b","b":"c"})"},
      {R"({"a":"b"})", R"({"a":null})", R"({})"},
      {R"({"a":"b","b":"c"})", R"({"a":null})", R"({"b":"c"})"},
      {R"({"a":["b"]})", R"({"a":"c"})", R"({"a":"c"})"},
      {R"({"a":"c"})", R"({"a":["b"]})", R"({"a":["b"]})"},
      {R"({"a":{"b":"c"}})", R"({"a":{"b":"d","c":null}})", R"({"a":{"b":"d"}})"},
      {R"({"a":[{"b":"c"}]})", R"({"a":[1]})", R"({"a":[1]})"},
      {R"(["a","b"])", R"(["c","d"])", R"(["c","d"])"},
      {R"({"a":"b"})", R"(["c"])", R"(["c"])"},
      {R"({"a":"foo"})", R"(null)", R"(null)"},
      {R"({"a":"foo"})", R"("bar")", R"("bar")"},
      {R"({"e":null})", R"({"a":1})", R"({"e":null,"a":1})"},
      {R"([1,2])", R"({"a":"b","c":null})", R"({"a":"b"})"},
      {R"({})", R"({"a":{"bb":{"ccc":null}}})", R"({"a":{"bb":{}}})"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ApplyMergePatch(Json::parse(c.target), Json::parse(c.patch)), Json::parse(c.result))
        << c.target << " + " << c.patch;
  }
}

TEST(MergePatchTest, AnnotationPatchLeavesOtherMetadataAlone) {
  const Json pod = {{"metadata", {{"name", "p"}, {"annotations", {{"keep", "1"}, {"drop", "2"}}}}}};
  const Json patch = {{"metadata", {{"annotations", {{"drop", nullptr}, {"add", "3"}}}}}};
  const Json out = ApplyMergePatch(pod, patch);
  EXPECT_EQ(out["metadata"]["name"], "p");
  EXPECT_EQ(out["metadata"]["annotations"], Json({{"keep", "1"}, {"add", "3"}}));
}

}  // namespace
}  // namespace tessera::testing
