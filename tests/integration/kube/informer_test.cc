// Informer against the stand-in: events, bookmarks, 410 relists with the right
// differences, outages, garbage on the stream.
#include <algorithm>
#include <mutex>
#include <vector>

#include "fixture.h"
#include "kube/informer.h"

namespace tessera::kube::it {
namespace {

// Records handler calls as "add ns/name", "update ns/name", "delete ns/name".
class Recorder {
 public:
  ResourceEventHandler Handler() {
    ResourceEventHandler h;
    h.on_add = [this](const Json& o) { Push("add " + KeyOf(o)); };
    h.on_update = [this](const Json& old_obj, const Json& new_obj) {
      EXPECT_EQ(KeyOf(old_obj), KeyOf(new_obj));
      Push("update " + KeyOf(new_obj));
    };
    h.on_delete = [this](const Json& o) { Push("delete " + KeyOf(o)); };
    return h;
  }
  std::vector<std::string> Events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  bool Has(const std::string& e) const {
    auto v = Events();
    return std::find(v.begin(), v.end(), e) != v.end();
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    events_.clear();
  }

 private:
  void Push(std::string e) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
  }
  mutable std::mutex mu_;
  std::vector<std::string> events_;
};

class InformerIT : public KubeIntegrationTest {
 protected:
  std::unique_ptr<Informer> MakeInformer(const ResourceType& type, Recorder* recorder,
                                         const std::string& field_selector = "") {
    InformerOptions o;
    o.type = type;
    o.field_selector = field_selector;
    o.initial_backoff = std::chrono::milliseconds(20);
    o.max_backoff = std::chrono::milliseconds(200);
    auto informer = std::make_unique<Informer>(client_.get(), o);
    if (recorder != nullptr) informer->AddHandler(recorder->Handler());
    return informer;
  }

  // A node informer, started and synced, over a cluster of one node (n1).
  std::unique_ptr<Informer> SyncedNodeInformerOverN1(Recorder* recorder) {
    NodesApi nodes(client_.get());
    EXPECT_TRUE(nodes.Create(Node("n1")).ok());
    auto informer = MakeInformer(resources::kNodes, recorder);
    informer->Start();
    EXPECT_TRUE(informer->WaitForSync(std::chrono::seconds(20)));
    return informer;
  }
};

TEST_F(InformerIT, SeesAddUpdateDelete) {
  PodsApi pods(client_.get());
  ASSERT_TRUE(pods.Create("ns", Pod("ns", "before")).ok());
  Recorder rec;
  auto informer = MakeInformer(resources::kPods, &rec);
  informer->Start();
  ASSERT_TRUE(informer->WaitForSync(std::chrono::seconds(20)));
  EXPECT_EQ(rec.Events(), std::vector<std::string>{"add ns/before"});

  ASSERT_TRUE(pods.Create("ns", Pod("ns", "p")).ok());
  ASSERT_TRUE(WaitFor([&] { return rec.Has("add ns/p"); }));
  ASSERT_TRUE(pods.PatchAnnotations("ns", "p", {{"k", "v"}}).ok());
  ASSERT_TRUE(WaitFor([&] { return rec.Has("update ns/p"); }));
  auto cached = informer->Get("ns/p");
  ASSERT_TRUE(cached.has_value());
  EXPECT_EQ((*cached)["metadata"]["annotations"]["k"], "v");
  ASSERT_TRUE(pods.Delete("ns", "p").ok());
  ASSERT_TRUE(WaitFor([&] { return rec.Has("delete ns/p"); }));
  EXPECT_FALSE(informer->Get("ns/p").has_value());
  EXPECT_EQ(informer->Size(), 1u);
  EXPECT_EQ(rec.Events(),
            (std::vector<std::string>{"add ns/before", "add ns/p", "update ns/p", "delete ns/p"}));
  EXPECT_EQ(informer->Stats().relists, 0u);
  informer->Stop();
}

TEST_F(InformerIT, FieldSelectedInformerSeesPodsEnterAndLeave) {
  PodsApi pods(client_.get());
  ASSERT_TRUE(pods.Create("ns", Pod("ns", "p")).ok());
  Recorder rec;
  auto unbound = MakeInformer(resources::kPods, &rec, "spec.nodeName=");
  unbound->Start();
  ASSERT_TRUE(unbound->WaitForSync(std::chrono::seconds(20)));
  ASSERT_TRUE(pods.Bind("ns", "p", "node-1").ok());
  // Binding moves the pod out of the selection: the watch says DELETED.
  ASSERT_TRUE(WaitFor([&] { return rec.Has("delete ns/p"); }));
  EXPECT_EQ(unbound->Size(), 0u);
  unbound->Stop();
}

TEST_F(InformerIT, BookmarksAdvanceTheResourceVersion) {
  NodesApi nodes(client_.get());
  ASSERT_TRUE(nodes.Create(Node("n1")).ok());
  auto informer = MakeInformer(resources::kNodes, nullptr);
  informer->Start();
  ASSERT_TRUE(informer->WaitForSync(std::chrono::seconds(20)));
  const std::string synced_rv = informer->LastResourceVersion();
  // Changes to other kinds move the global version without any node event...
  PodsApi pods(client_.get());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(pods.Create("ns", Pod("ns", "p" + std::to_string(i))).ok());
  const std::string target = std::to_string(server_->CurrentResourceVersion());
  // ...and only a BOOKMARK can tell the informer about it.
  server_->SendBookmarks();
  ASSERT_TRUE(WaitFor([&] { return informer->LastResourceVersion() == target; }))
      << "informer at " << informer->LastResourceVersion() << ", server at " << target;
  EXPECT_NE(synced_rv, target);
  EXPECT_EQ(informer->Size(), 1u);  // bookmarks carry no objects

  // A reconnect resumes from the bookmarked version, not from the list's.
  server_->ClearRequests();
  server_->DropWatches();
  ASSERT_TRUE(WaitFor([&] {
    for (const auto& r : server_->Requests()) {
      if (r.watch && r.target.find("resourceVersion=" + target) != std::string::npos) return true;
    }
    return false;
  }));
  EXPECT_EQ(informer->Stats().relists, 0u);
  informer->Stop();
}

// Disconnects the informer (watches fail with 500), changes the world, forgets
// the history, then lets it reconnect: it must get 410, relist, and deliver
// exactly the differences.
void RelistScenario(InformerIT* test, testing::FakeApiServer* server, Client* client, bool gone_as_http) {
  PodsApi pods(client);
  ASSERT_TRUE(pods.Create("ns", Pod("ns", "a")).ok());
  ASSERT_TRUE(pods.Create("ns", Pod("ns", "b")).ok());
  ASSERT_TRUE(pods.Create("ns", Pod("ns", "c")).ok());
  Recorder rec;
  InformerOptions o;
  o.type = resources::kPods;
  o.initial_backoff = std::chrono::milliseconds(20);
  o.max_backoff = std::chrono::milliseconds(200);
  Informer informer(client, o);
  informer.AddHandler(rec.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(20)));
  ASSERT_EQ(informer.Size(), 3u);
  const std::string c_before = ResourceVersionOf(*informer.Get("ns/c"));

  testing::Fault refuse;
  refuse.kind = testing::Fault::Kind::kStatus;
  refuse.status = 500;
  refuse.applies_to = testing::Fault::Applies::kWatchOnly;
  server->AddFault(refuse);
  const auto failures_before = informer.Stats().failures;
  server->DropWatches();
  ASSERT_TRUE(WaitFor([&] { return informer.Stats().failures > failures_before; }));

  rec.Clear();
  ASSERT_TRUE(pods.PatchAnnotations("ns", "a", {{"changed", "yes"}}).ok());
  ASSERT_TRUE(pods.Delete("ns", "b").ok());
  ASSERT_TRUE(pods.Create("ns", Pod("ns", "d")).ok());
  server->SetGoneAsHttpStatus(gone_as_http);
  server->CompactHistory();
  server->ClearFaults();

  ASSERT_TRUE(WaitFor([&] {
    return informer.Stats().relists >= 1 && informer.Size() == 3 && rec.Events().size() >= 3;
  })) << "relists="
      << informer.Stats().relists << " size=" << informer.Size()
      << " last_error=" << informer.Stats().last_error;
  auto events = rec.Events();
  std::sort(events.begin(), events.end());
  EXPECT_EQ(events, (std::vector<std::string>{"add ns/d", "delete ns/b", "update ns/a"}));
  EXPECT_NE(informer.Stats().last_error.find("410"), std::string::npos) << informer.Stats().last_error;
  EXPECT_EQ((*informer.Get("ns/a"))["metadata"]["annotations"]["changed"], "yes");
  EXPECT_EQ(ResourceVersionOf(*informer.Get("ns/c")), c_before);
  EXPECT_FALSE(informer.Get("ns/b").has_value());

  // And it keeps watching after the relist.
  ASSERT_TRUE(pods.Create("ns", Pod("ns", "e")).ok());
  EXPECT_TRUE(WaitFor([&] { return rec.Has("add ns/e"); }));
  informer.Stop();
  (void)test;
}

TEST_F(InformerIT, GoneAsErrorEventRelistsWithTheRightDiff) {
  RelistScenario(this, server_.get(), client_.get(), /*gone_as_http=*/false);
}

TEST_F(InformerIT, GoneAsHttpStatusRelistsWithTheRightDiff) {
  RelistScenario(this, server_.get(), client_.get(), /*gone_as_http=*/true);
}

TEST_F(InformerIT, RecoversFromAServerOutage) {
  Recorder rec;
  auto informer = SyncedNodeInformerOverN1(&rec);
  ASSERT_FALSE(HasFailure());
  const auto failures_before = informer->Stats().failures;
  server_->Stop();
  ASSERT_TRUE(WaitFor([&] { return informer->Stats().failures > failures_before; }));
  EXPECT_FALSE(informer->Stats().last_error.empty());
  EXPECT_EQ(informer->Size(), 1u);  // the cache survives the outage
  // Another API server replica took a write meanwhile.
  ASSERT_TRUE(server_->CreateObject("nodes", Node("n2")).ok());
  ASSERT_TRUE(server_->Start().ok());
  ASSERT_TRUE(WaitFor([&] { return rec.Has("add n2"); })) << informer->Stats().last_error;
  EXPECT_EQ(informer->Size(), 2u);
  informer->Stop();
}

TEST_F(InformerIT, GarbageOnTheStreamDoesNotCorruptTheCache) {
  Recorder rec;
  auto informer = SyncedNodeInformerOverN1(&rec);
  ASSERT_FALSE(HasFailure());
  const Json n1_before = *informer->Get("n1");

  testing::Fault garbage;
  garbage.kind = testing::Fault::Kind::kGarbage;
  garbage.applies_to = testing::Fault::Applies::kWatchOnly;
  garbage.times = 1;
  server_->AddFault(garbage);
  server_->DropWatches();
  ASSERT_TRUE(WaitFor([&] {
    return informer->Stats().last_error.find("not a watch event") != std::string::npos;
  })) << informer->Stats().last_error;
  EXPECT_EQ(informer->Size(), 1u);
  EXPECT_EQ(*informer->Get("n1"), n1_before);

  // A garbage list during a relist keeps the old cache too.
  garbage.applies_to = testing::Fault::Applies::kNonWatch;
  garbage.path_contains = "/api/v1/nodes";
  garbage.times = 2;
  server_->AddFault(garbage);
  testing::Fault refuse;
  refuse.applies_to = testing::Fault::Applies::kWatchOnly;
  refuse.times = -1;
  server_->AddFault(refuse);
  server_->CompactHistory();
  server_->DropWatches();
  ASSERT_TRUE(WaitFor([&] { return informer->Stats().failures >= 3; }));
  EXPECT_EQ(informer->Size(), 1u);
  server_->ClearFaults();

  // It recovers and carries on.
  ASSERT_TRUE(NodesApi(client_.get()).Create(Node("n2")).ok());
  ASSERT_TRUE(WaitFor([&] { return rec.Has("add n2"); })) << informer->Stats().last_error;
  EXPECT_EQ(informer->Size(), 2u);
  for (const std::string& e : rec.Events()) EXPECT_TRUE(e == "add n1" || e == "add n2") << e;
  informer->Stop();
}

}  // namespace
}  // namespace tessera::kube::it
