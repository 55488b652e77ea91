// The API-server stand-in over HTTP: a list or a watch with a selector it
// cannot honour is refused with a 400 Status, as the real server does,
// rather than answered unfiltered.
#include "apiserver/fake_apiserver.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <tuple>
#include <utility>

namespace tessera::testing {
namespace {

using Json = nlohmann::json;

class FakeApiServerSelectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start().ok());
    for (const char* name : {"a", "b"}) {
      Json pod = {{"metadata", {{"name", name}, {"namespace", "ml"}, {"labels", {{"app", name}}}}},
                  {"spec", {{"nodeName", std::string("node-") + name}}}};
      ASSERT_TRUE(server_.CreateObject("pods", pod).ok());
    }
  }
  void TearDown() override { server_.Stop(); }

  // {status, body} of a GET on the stand-in.
  std::pair<int, Json> Get(const std::string& path) {
    const std::string url = server_.url();
    httplib::Client http(url.substr(url.find("://") + 3));
    http.set_read_timeout(10);
    auto res = http.Get(path);
    if (!res) return {0, Json()};
    return {res->status, Json::parse(res->body, nullptr, false)};
  }

  // A list and a watch of pods with `selector_query` get a 400 Status whose
  // message holds `message`.
  void ExpectRefused(const std::string& selector_query, const std::string& message) {
    for (const char* watch : {"", "&watch=true"}) {
      auto [status, body] = Get("/api/v1/namespaces/ml/pods?" + selector_query + watch);
      EXPECT_EQ(status, 400) << selector_query << watch << ": " << body.dump();
      EXPECT_EQ(body.value("reason", ""), "BadRequest") << body.dump();
      EXPECT_NE(body.value("message", "").find(message), std::string::npos) << body.dump();
    }
  }

  FakeApiServer server_;
};

TEST_F(FakeApiServerSelectorTest, AListIsFilteredByItsSelectors) {
  auto [status, list] = Get("/api/v1/namespaces/ml/pods?labelSelector=app%3Db");
  ASSERT_EQ(status, 200) << list.dump();
  ASSERT_EQ(list["items"].size(), 1u);
  EXPECT_EQ(list["items"][0]["metadata"]["name"], "b");
  std::tie(status, list) = Get("/api/v1/namespaces/ml/pods?fieldSelector=spec.nodeName%3Dnode-a");
  ASSERT_EQ(status, 200) << list.dump();
  ASSERT_EQ(list["items"].size(), 1u);
  EXPECT_EQ(list["items"][0]["metadata"]["name"], "a");
}

TEST_F(FakeApiServerSelectorTest, ABadLabelSelectorIsRefused) {
  ExpectRefused("labelSelector=app%20in%20(web", "unable to parse requirement");
}

TEST_F(FakeApiServerSelectorTest, AFieldTheKindCannotBeSelectedByIsRefused) {
  ExpectRefused("fieldSelector=spec.unknown%3Dx", "field label not supported: spec.unknown");
}

}  // namespace
}  // namespace tessera::testing
