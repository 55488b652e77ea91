#include "kube/client.h"

#include <gtest/gtest.h>

#include <deque>

#include "kube/typed_api.h"

namespace tessera::kube {
namespace {

// A transport that replays canned answers and records requests.
class ScriptedTransport : public Transport {
 public:
  struct Answer {
    ApiResult<HttpResponse> response = HttpResponse{};
    std::vector<std::string> lines;  // for streams
  };
  ApiResult<HttpResponse> Do(const HttpRequest& r) override {
    requests.push_back(r);
    Answer a = Next();
    return a.response;
  }
  ApiResult<HttpResponse> Stream(const HttpRequest& r,
                                 const std::function<bool(std::string_view)>& on_line) override {
    requests.push_back(r);
    Answer a = Next();
    if (a.response.ok() && a.response->status == 200) {
      for (const auto& l : a.lines) {
        if (!on_line(l)) break;
      }
    }
    return a.response;
  }
  void Push(int status, std::string body, std::vector<std::string> lines = {}) {
    HttpResponse r;
    r.status = status;
    r.body = std::move(body);
    answers.push_back(Answer{r, std::move(lines)});
  }
  Answer Next() {
    if (answers.empty()) return Answer{ApiError{0, "TransportError", "no answer scripted"}, {}};
    Answer a = answers.front();
    answers.pop_front();
    return a;
  }
  std::deque<Answer> answers;
  std::vector<HttpRequest> requests;
};

class ClientTest : public ::testing::Test {
 protected:
  ClientTest() : transport_(std::make_shared<ScriptedTransport>()), client_(transport_, Options()) {}
  static ClientOptions Options() {
    ClientOptions o;
    o.qps = 0;
    return o;
  }
  std::shared_ptr<ScriptedTransport> transport_;
  Client client_;
};

TEST_F(ClientTest, ErrorsCarryStatusReasonAndServerMessage) {
  transport_->Push(404,
                   R"({"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods \"x\" not found",
                           "reason":"NotFound","code":404})");
  auto r = client_.Get(resources::kPods, "ns", "x");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().IsNotFound());
  EXPECT_EQ(r.error().reason, "NotFound");
  EXPECT_EQ(r.error().message, "GET /api/v1/namespaces/ns/pods/x: 404 Not Found: pods \"x\" not found");
  EXPECT_EQ(transport_->requests[0].path, "/api/v1/namespaces/ns/pods/x");
}

TEST_F(ClientTest, NonStatusErrorBodiesAreQuotedShort) {
  transport_->Push(502, std::string(1000, 'x'));
  auto r = client_.Get(resources::kNodes, "", "n");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().IsServerError());
  EXPECT_LT(r.error().message.size(), 300u);
}

TEST_F(ClientTest, GarbageOn200IsAnInvalidResponseError) {
  transport_->Push(200, "<html>oops");
  auto r = client_.Get(resources::kNodes, "", "n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "InvalidResponse");
  EXPECT_NE(r.error().message.find("not a JSON object"), std::string::npos);
  transport_->Push(200, R"({"kind":"PodList"})");
  auto l = client_.List(resources::kPods, "");
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().reason, "InvalidResponse");
}

TEST_F(ClientTest, ListEncodesSelectorsAndRestoresTypeMeta) {
  transport_->Push(200, R"({"kind":"PodList","metadata":{"resourceVersion":"42"},
                           "items":[{"metadata":{"name":"a","namespace":"n"}}]})");
  ListOptions o;
  o.label_selector = "app in (a,b)";
  o.field_selector = "spec.nodeName=";
  auto l = client_.List(resources::kPods, "", o);
  ASSERT_TRUE(l.ok()) << l.error().message;
  EXPECT_EQ(l->resource_version, "42");
  ASSERT_EQ(l->items.size(), 1u);
  EXPECT_EQ(l->items[0]["kind"], "Pod");
  EXPECT_EQ(transport_->requests[0].path,
            "/api/v1/pods?labelSelector=app%20in%20%28a%2Cb%29&fieldSelector=spec.nodeName%3D");
}

TEST_F(ClientTest, WatchDeliversEventsAndMapsError410ToGone) {
  transport_->Push(200, "",
                   {R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5"}}})",
                    R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}})",
                    R"J({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired",
                        "message":"too old resource version: 5 (10)"}})J"});
  std::vector<std::string> seen;
  WatchOptions o;
  o.resource_version = "4";
  o.timeout_seconds = 60;
  auto st = client_.Watch(resources::kPods, "ns", o, [&](WatchEvent&& e) {
    seen.push_back(std::string(WatchEventTypeName(e.type)) + ":" + ResourceVersionOf(e.object));
    return true;
  });
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(st.error().IsGone());
  EXPECT_NE(st.error().message.find("too old resource version"), std::string::npos);
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED:5", "BOOKMARK:9"}));
  EXPECT_EQ(
      transport_->requests[0].path,
      "/api/v1/namespaces/ns/pods?watch=true&resourceVersion=4&allowWatchBookmarks=true&timeoutSeconds=60");
}

TEST_F(ClientTest, WatchStopsAtAGarbageLine) {
  transport_->Push(
      200, "",
      {R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5"}}})", "not json",
       R"({"type":"ADDED","object":{"metadata":{"name":"b","resourceVersion":"6"}}})"});
  int events = 0;
  auto st = client_.Watch(resources::kPods, "", {}, [&](WatchEvent&&) {
    ++events;
    return true;
  });
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().reason, "InvalidResponse");
  EXPECT_EQ(events, 1);
}

std::shared_ptr<const FieldSelection> NameAndVersion() {
  auto s = std::make_shared<FieldSelection>();
  s->Member("metadata").Members({"name", "resourceVersion"});
  return s;
}

// With object_fields, events carry only the selected fields; bookmarks,
// errors and bad lines read as without.
TEST_F(ClientTest, WatchWithFieldsDecodesOnlyThemAndKeepsEveryError) {
  transport_->Push(200, "",
                   {R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5","uid":"u"},
                        "spec":{"big":[1,2,3]}}})",
                    R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9",
                        "annotations":{"k8s.io/initial-events-end":"true"}}}})",
                    R"J({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired",
                        "message":"too old resource version: 5 (10)"}})J"});
  WatchOptions o;
  o.object_fields = NameAndVersion();
  std::vector<Json> seen;
  auto st = client_.Watch(resources::kPods, "", o, [&](WatchEvent&& e) {
    seen.push_back(e.object);
    return true;
  });
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(st.error().IsGone());
  EXPECT_NE(st.error().message.find("too old resource version"), std::string::npos);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], Json::parse(R"({"metadata":{"name":"a","resourceVersion":"5"}})"));
  EXPECT_EQ(AnnotationOf(seen[1], kInitialEventsEndAnnotation), "true");  // a bookmark is whole

  // An object cut mid-way, an event with an object without a name, an
  // unknown type and a byte that is not UTF-8 in a skipped field: the errors
  // they gave before.
  const std::pair<std::string, std::string> bad[] = {
      {R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVer)", "not a watch event"},
      {R"({"type":"ADDED","object":{"metadata":{"uid":"u"}}})", "an object without a name"},
      {R"({"type":"SOMETHING","object":{"metadata":{"name":"a"}}})", "unknown watch event type"},
      {"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"},\"spec\":{\"x\":\"\xff\"}}}",
       "not a watch event"},
  };
  for (const auto& [line, message] : bad) {
    SCOPED_TRACE(line);
    transport_->Push(200, "", {line});
    int events = 0;
    auto failed = client_.Watch(resources::kPods, "", o, [&](WatchEvent&&) {
      ++events;
      return true;
    });
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.error().reason, "InvalidResponse");
    EXPECT_NE(failed.error().message.find(message), std::string::npos) << failed.error().message;
    EXPECT_EQ(events, 0);
  }
}

TEST_F(ClientTest, ListWithFieldsDecodesOnlyThemAndKeepsEveryError) {
  transport_->Push(200, R"({"kind":"PodList","metadata":{"resourceVersion":"42","continue":"c"},
                           "items":[{"metadata":{"name":"a","namespace":"n","labels":{"x":"y"}},"spec":{}}]})");
  ListOptions o;
  o.item_fields = NameAndVersion();
  auto l = client_.List(resources::kPods, "", o);
  ASSERT_TRUE(l.ok()) << l.error().message;
  EXPECT_EQ(l->resource_version, "42");
  EXPECT_EQ(l->continue_token, "c");
  ASSERT_EQ(l->items.size(), 1u);
  EXPECT_EQ(l->items[0], Json::parse(R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"a"}})"));
  // A page that ends mid-object, and one whose item is not an object.
  transport_->Push(200, R"({"kind":"PodList","metadata":{},"items":[{"metadata":{"name":"a")");
  auto cut = client_.List(resources::kPods, "", o);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().reason, "InvalidResponse");
  EXPECT_NE(cut.error().message.find("not a JSON object"), std::string::npos) << cut.error().message;
  transport_->Push(200, R"({"kind":"PodList","metadata":{},"items":[7]})");
  auto scalar = client_.List(resources::kPods, "", o);
  ASSERT_FALSE(scalar.ok());
  EXPECT_NE(scalar.error().message.find("a list item is not an object"), std::string::npos);
}

TEST_F(ClientTest, BindSendsABindingWithAnnotations) {
  transport_->Push(201, R"({"kind":"Status","status":"Success","code":201})");
  PodsApi pods(&client_);
  ASSERT_TRUE(pods.Bind("ns", "p", "node-1", {{"tessera.io/allocation", "{}"}}).ok());
  const HttpRequest& r = transport_->requests[0];
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/api/v1/namespaces/ns/pods/p/binding");
  const Json body = Json::parse(r.body);
  EXPECT_EQ(body["kind"], "Binding");
  EXPECT_EQ(body["target"]["name"], "node-1");
  EXPECT_EQ(body["target"]["kind"], "Node");
  EXPECT_EQ(body["metadata"]["annotations"]["tessera.io/allocation"], "{}");
}

TEST_F(ClientTest, AnnotationPatchIsAMergePatchWithNullForRemoval) {
  transport_->Push(200, R"({"metadata":{"name":"n"}})");
  NodesApi nodes(&client_);
  ASSERT_TRUE(nodes.PatchAnnotations("n", {{"a", "1"}, {"b", std::nullopt}}).ok());
  const HttpRequest& r = transport_->requests[0];
  EXPECT_EQ(r.method, "PATCH");
  EXPECT_EQ(r.content_type, "application/merge-patch+json");
  EXPECT_EQ(Json::parse(r.body), Json::parse(R"({"metadata":{"annotations":{"a":"1","b":null}}})"));
}

TEST_F(ClientTest, TransportFailuresPassThrough) {
  auto r = client_.Get(resources::kPods, "ns", "x");  // nothing scripted: transport error
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().IsTransport());
}

}  // namespace
}  // namespace tessera::kube
