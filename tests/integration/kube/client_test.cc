// The typed client against the stand-in: CRUD, conflicts, merge patches,
// bindings, leases, events, auth, and failures of the server.
#include <set>

#include "fixture.h"

namespace tessera::kube::it {
namespace {

class ClientIT : public KubeIntegrationTest {};

TEST_F(ClientIT, PodCrudWithSelectors) {
  PodsApi pods(client_.get());
  auto created = pods.Create("ns1", Pod("ns1", "web-1", {{"app", "web"}}));
  ASSERT_TRUE(created.ok()) << created.error().message;
  EXPECT_FALSE(ResourceVersionOf(*created).empty());
  EXPECT_EQ((*created)["status"]["phase"], "Pending");
  ASSERT_TRUE(pods.Create("ns1", Pod("ns1", "db-1", {{"app", "db"}})).ok());
  ASSERT_TRUE(pods.Create("ns2", Pod("ns2", "web-2", {{"app", "web"}})).ok());

  auto got = pods.Get("ns1", "web-1");
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(NameOf(*got), "web-1");

  auto all = pods.List("");
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ(all->items.size(), 3u);
  EXPECT_EQ(all->resource_version, std::to_string(server_->CurrentResourceVersion()));

  ListOptions web;
  web.label_selector = "app in (web)";
  auto webs = pods.List("", web);
  ASSERT_TRUE(webs.ok());
  std::set<std::string> keys;
  for (const Json& p : webs->items) keys.insert(KeyOf(p));
  EXPECT_EQ(keys, (std::set<std::string>{"ns1/web-1", "ns2/web-2"}));

  auto ns1 = pods.List("ns1", {"app!=web", "", ""});
  ASSERT_TRUE(ns1.ok());
  ASSERT_EQ(ns1->items.size(), 1u);
  EXPECT_EQ(NameOf(ns1->items[0]), "db-1");

  ASSERT_TRUE(pods.Delete("ns1", "db-1").ok());
  auto gone = pods.Get("ns1", "db-1");
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(gone.error().IsNotFound());
  EXPECT_NE(gone.error().message.find("pods \"db-1\" not found"), std::string::npos) << gone.error().message;
  auto twice = pods.Delete("ns1", "db-1");
  ASSERT_FALSE(twice.ok());
  EXPECT_TRUE(twice.error().IsNotFound());

  auto bad = pods.List("", {"app in (", "", ""});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().http_status, 400);
}

TEST_F(ClientIT, ConflictsAreDistinctErrors) {
  PodsApi pods(client_.get());
  ASSERT_TRUE(pods.Create("ns", Pod("ns", "p")).ok());
  auto dup = pods.Create("ns", Pod("ns", "p"));
  ASSERT_FALSE(dup.ok());
  EXPECT_TRUE(dup.error().IsConflict());
  EXPECT_TRUE(dup.error().IsAlreadyExists());
  EXPECT_NE(dup.error().message.find("already exists"), std::string::npos);

  auto v1 = pods.Get("ns", "p");
  ASSERT_TRUE(v1.ok());
  Json a = *v1, b = *v1;
  a["metadata"]["labels"]["writer"] = "a";
  b["metadata"]["labels"]["writer"] = "b";
  auto ua = client_->Update(resources::kPods, "ns", a);
  ASSERT_TRUE(ua.ok()) << ua.error().message;
  EXPECT_NE(ResourceVersionOf(*ua), ResourceVersionOf(*v1));
  auto ub = client_->Update(resources::kPods, "ns", b);  // stale resourceVersion
  ASSERT_FALSE(ub.ok());
  EXPECT_TRUE(ub.error().IsConflict());
  EXPECT_FALSE(ub.error().IsAlreadyExists());
  EXPECT_NE(ub.error().message.find("the object has been modified"), std::string::npos);
  EXPECT_EQ((*pods.Get("ns", "p"))["metadata"]["labels"]["writer"], "a");
}

TEST_F(ClientIT, MergePatchOfAnnotationsKeepsTheRest) {
  PodsApi pods(client_.get());
  Json pod = Pod("ns", "p");
  pod["metadata"]["annotations"] = {{"keep", "1"}, {"drop", "2"}};
  ASSERT_TRUE(pods.Create("ns", pod).ok());
  auto patched = pods.PatchAnnotations("ns", "p", {{"drop", std::nullopt}, {"add", "3"}});
  ASSERT_TRUE(patched.ok()) << patched.error().message;
  EXPECT_EQ((*patched)["metadata"]["annotations"], Json({{"keep", "1"}, {"add", "3"}}));
  EXPECT_EQ((*patched)["spec"], pod["spec"]);
  const auto& log = server_->Requests();
  bool saw_patch = false;
  for (const auto& r : log) {
    if (r.method == "PATCH") {
      saw_patch = true;
      EXPECT_EQ(r.content_type, "application/merge-patch+json");
    }
  }
  EXPECT_TRUE(saw_patch);

  auto missing = pods.PatchAnnotations("ns", "nope", {{"a", "b"}});
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(missing.error().IsNotFound());
}

TEST_F(ClientIT, NodesLabelsAndAnnotations) {
  NodesApi nodes(client_.get());
  ASSERT_TRUE(nodes.Create(Node("n1")).ok());
  ASSERT_TRUE(nodes.Create(Node("n2")).ok());
  ASSERT_TRUE(nodes.PatchLabels("n1", {{"gpu", "true"}}).ok());
  auto a = nodes.PatchAnnotations("n1", {{"tessera.io/inventory", "{\"v\":1}"}});
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ((*a)["metadata"]["labels"]["gpu"], "true");
  auto gpu = nodes.List({"gpu", "", ""});
  ASSERT_TRUE(gpu.ok());
  ASSERT_EQ(gpu->items.size(), 1u);
  EXPECT_EQ(NameOf(gpu->items[0]), "n1");
  EXPECT_EQ(gpu->items[0]["metadata"]["annotations"]["tessera.io/inventory"], "{\"v\":1}");
}

TEST_F(ClientIT, BindingSetsNodeAndAnnotationsOnce) {
  PodsApi pods(client_.get());
  Json pod = Pod("ns", "p");
  pod["metadata"]["annotations"] = {{"existing", "x"}};
  ASSERT_TRUE(pods.Create("ns", pod).ok());
  auto st = pods.Bind("ns", "p", "node-7", {{"tessera.io/allocation", "{\"v\":1}"}});
  ASSERT_TRUE(st.ok()) << st.error().message;
  auto bound = pods.Get("ns", "p");
  ASSERT_TRUE(bound.ok());
  EXPECT_EQ((*bound)["spec"]["nodeName"], "node-7");
  EXPECT_EQ((*bound)["metadata"]["annotations"],
            Json({{"existing", "x"}, {"tessera.io/allocation", "{\"v\":1}"}}));

  auto again = pods.Bind("ns", "p", "node-8");
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(again.error().IsConflict());
  EXPECT_NE(again.error().message.find("already assigned to node \"node-7\""), std::string::npos)
      << again.error().message;
  auto missing = pods.Bind("ns", "nope", "node-7");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(missing.error().IsNotFound());

  // Field selectors see the binding.
  auto on_node = pods.List("", {"", "spec.nodeName=node-7", ""});
  ASSERT_TRUE(on_node.ok());
  EXPECT_EQ(on_node->items.size(), 1u);
  auto unbound = pods.List("", {"", "spec.nodeName=", ""});
  ASSERT_TRUE(unbound.ok());
  EXPECT_EQ(unbound->items.size(), 0u);
}

TEST_F(ClientIT, LeasesCompareAndSwap) {
  LeasesApi leases(client_.get());
  LeaseRecord l;
  l.namespace_ = "kube-system";
  l.name = "lock";
  l.holder_identity = "a";
  l.lease_duration_seconds = 15;
  l.renew_time = std::chrono::system_clock::now();
  auto created = leases.Create(l);
  ASSERT_TRUE(created.ok()) << created.error().message;
  auto exists = leases.Create(l);
  ASSERT_FALSE(exists.ok());
  EXPECT_TRUE(exists.error().IsAlreadyExists());

  LeaseRecord mine = *created;
  mine.holder_identity = "b";
  auto updated = leases.Update(mine);
  ASSERT_TRUE(updated.ok()) << updated.error().message;
  auto stale = leases.Update(mine);  // same, now-stale resourceVersion
  ASSERT_FALSE(stale.ok());
  EXPECT_TRUE(stale.error().IsConflict());
  EXPECT_NE(stale.error().message.find("leases.coordination.k8s.io"), std::string::npos)
      << stale.error().message;
  auto got = leases.Get("kube-system", "lock");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->holder_identity, "b");
  EXPECT_EQ(got->renew_time.has_value(), true);
}

TEST_F(ClientIT, EventsAreCreated) {
  PodsApi pods(client_.get());
  auto pod = pods.Create("ns", Pod("ns", "p"));
  ASSERT_TRUE(pod.ok());
  EventsApi events(client_.get());
  EventSpec spec;
  spec.involved_object = MakeObjectReference(*pod);
  spec.reason = "Scheduled";
  spec.message = "assigned ns/p to node-1";
  spec.component = "tessera-scheduler";
  auto ev = events.Create("ns", spec);
  ASSERT_TRUE(ev.ok()) << ev.error().message;
  auto list = client_->List(resources::kEvents, "ns", {"", "involvedObject.name=p", ""});
  ASSERT_TRUE(list.ok()) << list.error().message;
  ASSERT_EQ(list->items.size(), 1u);
  EXPECT_EQ(list->items[0]["reason"], "Scheduled");
  EXPECT_EQ(list->items[0]["involvedObject"]["uid"], (*pod)["metadata"]["uid"]);
}

TEST_F(ClientIT, BearerTokenIsSentAndChecked) {
  server_->Stop();
  auto o = ServerOptions();
  o.bearer_token = "s3cret";
  server_ = std::make_unique<testing::FakeApiServer>(o);
  ASSERT_TRUE(server_->Start().ok());
  auto anonymous = MakeClient(std::chrono::milliseconds(5000));
  auto r = anonymous->List(resources::kNodes, "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().http_status, 401);
  auto authed = MakeClient(std::chrono::milliseconds(5000), "s3cret");
  EXPECT_TRUE(authed->List(resources::kNodes, "").ok());
}

TEST_F(ClientIT, ServerDownIsAClearErrorAndRecovers) {
  NodesApi nodes(client_.get());
  ASSERT_TRUE(nodes.Create(Node("n1")).ok());
  server_->Stop();
  auto down = nodes.Get("n1");
  ASSERT_FALSE(down.ok());
  EXPECT_TRUE(down.error().IsTransport());
  EXPECT_NE(down.error().message.find("GET " + server_->url() + "/api/v1/nodes/n1"), std::string::npos)
      << down.error().message;
  ASSERT_TRUE(server_->Start().ok());
  auto up = nodes.Get("n1");
  ASSERT_TRUE(up.ok()) << up.error().message;
}

TEST_F(ClientIT, ErrorsAndGarbageFromTheServer) {
  NodesApi nodes(client_.get());
  ASSERT_TRUE(nodes.Create(Node("n1")).ok());
  testing::Fault f;
  f.kind = testing::Fault::Kind::kStatus;
  f.status = 500;
  f.times = 1;
  server_->AddFault(f);
  auto e500 = nodes.Get("n1");
  ASSERT_FALSE(e500.ok());
  EXPECT_TRUE(e500.error().IsServerError());
  EXPECT_NE(e500.error().message.find("injected fault"), std::string::npos);

  f.kind = testing::Fault::Kind::kGarbage;
  server_->AddFault(f);
  auto garbage = nodes.Get("n1");
  ASSERT_FALSE(garbage.ok());
  EXPECT_EQ(garbage.error().reason, "InvalidResponse");
  server_->AddFault(f);
  auto garbage_list = nodes.List();
  ASSERT_FALSE(garbage_list.ok());
  EXPECT_EQ(garbage_list.error().reason, "InvalidResponse");

  EXPECT_TRUE(nodes.Get("n1").ok());  // faults were one-shot
}

TEST_F(ClientIT, SlowServerHitsTheRequestTimeout) {
  auto impatient = MakeClient(std::chrono::milliseconds(300));
  testing::Fault slow;
  slow.kind = testing::Fault::Kind::kDelay;
  slow.delay = std::chrono::milliseconds(1500);
  slow.times = 1;
  server_->AddFault(slow);
  auto r = impatient->List(resources::kNodes, "");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().IsTransport());
  EXPECT_EQ(r.error().reason, "Timeout") << r.error().message;
  EXPECT_TRUE(WaitFor([&] { return impatient->List(resources::kNodes, "").ok(); }));
}

}  // namespace
}  // namespace tessera::kube::it
