#include "scheduler/extender_wire.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tessera::scheduler::wire {
namespace {

using Json = nlohmann::json;

TEST(ExtenderWireTest, ReadsTheBodyKubeSchedulerSends) {
  const std::string body = R"({"Pod":{"metadata":{"name":"p1","annotations":{"a":"x\"}]"}}},"Nodes":null,)"
                           "\n  \"NodeNames\" : [ \"node-a\",\"node.b\" ,\t\"n\" ] }\r\n";
  ScannedArgs args;
  ASSERT_TRUE(ScanExtenderArgs(body, args));
  EXPECT_EQ(args.node_names, (std::vector<std::string_view>{"node-a", "node.b", "n"}));
  EXPECT_EQ(Json::parse(args.pod), Json::parse(body)["Pod"]);

  ASSERT_TRUE(ScanExtenderArgs(R"({"NodeNames":[]})", args));
  EXPECT_TRUE(args.node_names.empty());
  EXPECT_TRUE(args.pod.empty());
}

TEST(ExtenderWireTest, LeavesEverythingElseToTheFullParser) {
  // Each is either not JSON, or JSON whose NodeNames the fast reader does not
  // take as is; the caller then parses the body with nlohmann::json.
  for (const char* body : {
           R"({"NodeNames":null,"Nodes":{"items":[]}})",         // a NodeList instead
           R"({"Pod":{}})",                                      // no NodeNames
           R"({"NodeNames":["a\u002db"]})",                      // an escape
           "{\"NodeNames\":[\"n\xc3\xa9\"]}",                    // non-ASCII
           R"({"NodeNames":["a",1]})",                           // not a string
           R"({"NodeNames":["a"],"NodeNames":["b"]})",           // given twice
           R"({"Pod":{},"Pod":{},"NodeNames":[]})",              // Pod twice
           R"({"Node\u004eames":["a"]})",                        // escaped key
           R"({"NodeNames":["a",]})",                            // trailing comma
           R"({"NodeNames":["a"]} x)",                           // trailing garbage
           R"({"NodeNames":["a"],"Nodes":nul})",                 // bad literal elsewhere
           R"({"NodeNames":["a"],"Nodes":{"x":}})",              // bad object elsewhere
           R"({"Pod":,"NodeNames":[]})",                         // no Pod value (fuzz/regressions/extender)
           R"({"NodeNames":[],"Pod": })",                        // no Pod value, last
           "{\"NodeNames\":[\"a\"],\"Nodes\":\"tab\tinside\"}",  // raw control character
           R"({"NodeNames":["a"])",                              // unterminated
           R"(["a"])",                                           // not an object
           "",
       }) {
    ScannedArgs args;
    EXPECT_FALSE(ScanExtenderArgs(body, args)) << body;
  }
}

TEST(ExtenderWireTest, StringsAreEscapedExactlyAsNlohmannDumps) {
  std::string every;
  for (int c = 1; c < 0x80; ++c) every.push_back(static_cast<char>(c));
  every += "\xc3\xa9\xe2\x80\xa6";  // é and … stay UTF-8
  for (const std::string& text : {every, std::string(), std::string("plain"), std::string("a\"b\\c\nd")}) {
    std::string out;
    AppendJsonString(out, text);
    EXPECT_EQ(out, Json(text).dump());
  }
}

TEST(ExtenderWireTest, AnswersAreTheExtenderResultTypes) {
  std::vector<std::string_view> names = {"a", "b\"q", "c"};
  std::vector<uint32_t> feasible = {0, 2};
  std::vector<std::pair<uint32_t, std::string>> failed = {{1, "not enough memory: 3000 MiB asked\n"}};
  Json filter = Json::parse(FilterResultText(names, feasible, failed));
  EXPECT_EQ(filter, Json::parse(R"({"Nodes":null,"NodeNames":["a","c"],
      "FailedNodes":{"b\"q":"not enough memory: 3000 MiB asked\n"},"FailedAndUnresolvableNodes":{},"Error":""})"));
  // Nothing passes: NodeNames is an empty array, not null.
  Json none = Json::parse(FilterResultText(names, {}, {}));
  EXPECT_EQ(none["NodeNames"], Json::array());

  std::vector<uint32_t> positions = {0, 1, 2};
  std::vector<int> scores = {10, 0, 7};
  EXPECT_EQ(HostPriorityListText(names, positions, scores),
            R"([{"Host":"a","Score":10},{"Host":"b\"q","Score":0},)"
            R"({"Host":"c","Score":7}])");
  // Only the positions given are answered.
  positions = {0, 2};
  scores = {3, 9};
  EXPECT_EQ(HostPriorityListText(names, positions, scores),
            R"([{"Host":"a","Score":3},{"Host":"c","Score":9}])");
  EXPECT_EQ(HostPriorityListText({}, {}, {}), "[]");
}

}  // namespace
}  // namespace tessera::scheduler::wire
