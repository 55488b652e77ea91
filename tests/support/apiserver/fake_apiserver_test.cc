// The API-server stand-in over HTTP: a list or a watch with a selector it
// cannot honour is refused with a 400 Status, as the real server does,
// rather than answered unfiltered.
#include "apiserver/fake_apiserver.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <cstdio>
#include <map>
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

// A streaming list is formatted a chunk at a time as it is sent, the store
// unlocked in between: objects changed, created and deleted while the client
// is still reading must leave it, once it has read up to the store's version,
// with exactly the store's objects at their versions.
TEST(FakeApiServerStreamingListTest, ChangesWhileTheListIsReadEndInTheStoresState) {
  FakeApiServer server;
  ASSERT_TRUE(server.Start().ok());
  auto pod = [](const std::string& name, const std::string& tag) {
    return Json{{"metadata", {{"name", name}, {"namespace", "ml"}, {"labels", {{"tag", tag}}}}},
                {"spec", {{"nodeName", "n"}, {"padding", std::string(2000, 'x')}}}};
  };
  char name[16];
  for (int i = 0; i < 3000; ++i) {
    std::snprintf(name, sizeof name, "p%04d", i);
    ASSERT_TRUE(server.CreateObject("pods", pod(name, "old")).ok());
  }
  std::map<std::string, std::string> held;  // name -> resourceVersion, as the client knows them
  bool bookmarked = false, changed = false;
  uint64_t target = 0, seen = 0;
  std::string pending;
  const std::string url = server.url();
  httplib::Client http(url.substr(url.find("://") + 3));
  http.set_read_timeout(30);
  auto res = http.Get(
      "/api/v1/"
      "pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&"
      "timeoutSeconds=30",
      [&](const char* data, size_t n) {
        if (!changed) {
          // The first bytes are in; most of the list is not formatted yet.
          changed = true;
          EXPECT_TRUE(server.DeleteObject("pods", "ml", "p0000").ok());  // sent already
          EXPECT_TRUE(server.CreateObject("pods", pod("p0000", "new")).ok());
          EXPECT_TRUE(server.DeleteObject("pods", "ml", "p2999").ok());  // not sent yet
          EXPECT_TRUE(server.CreateObject("pods", pod("p1500a", "new")).ok());
          target = server.CurrentResourceVersion();
        }
        pending.append(data, n);
        for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
          Json event = Json::parse(pending.substr(0, nl), nullptr, false);
          pending.erase(0, nl + 1);
          if (event.is_discarded()) {
            ADD_FAILURE() << "not JSON";
            return false;
          }
          const Json& meta = event["object"]["metadata"];
          const std::string rv = meta.value("resourceVersion", "0");
          seen = std::max<uint64_t>(seen, std::stoull(rv));
          const std::string type = event.value("type", "");
          if (type == "BOOKMARK") {
            if (meta.contains("annotations")) bookmarked = true;
          } else if (type == "DELETED") {
            held.erase(meta.value("name", ""));
          } else {
            held[meta.value("name", "")] = rv;
          }
        }
        return !(bookmarked && seen >= target);
      });
  EXPECT_TRUE(bookmarked);
  ASSERT_GE(seen, target);
  std::map<std::string, std::string> store;
  for (const Json& o : server.ListObjects("pods")) {
    store[o["metadata"]["name"].get<std::string>()] = o["metadata"]["resourceVersion"].get<std::string>();
  }
  EXPECT_EQ(store.size(), 3000u);
  EXPECT_EQ(held, store);
  server.Stop();
}

}  // namespace
}  // namespace tessera::testing
