// Informer at scale against the stand-in: streaming lists (sendInitialEvents)
// and paginated lists (limit/continue), the transform, a list page that ends
// mid-object, and a burst of 100,000 watch events beside another informer.
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "fixture.h"
#include "kube/informer.h"

namespace tessera::kube::it {
namespace {

// Counts handler calls per key.
class Counter {
 public:
  ResourceEventHandler Handler() {
    ResourceEventHandler h;
    h.on_add = [this](const Json& o) { Bump("add " + KeyOf(o)); };
    h.on_update = [this](const Json&, const Json& o) { Bump("update " + KeyOf(o)); };
    h.on_delete = [this](const Json& o) { Bump("delete " + KeyOf(o)); };
    return h;
  }
  int Of(const std::string& what) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = counts_.find(what);
    return it == counts_.end() ? 0 : it->second;
  }
  size_t Distinct() const {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_.size();
  }
  int Total() const {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const auto& [k, v] : counts_) n += v;
    return n;
  }

 private:
  void Bump(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_[what];
  }
  mutable std::mutex mu_;
  std::map<std::string, int> counts_;
};

// Passes requests through, cutting in half the body of the first `cuts`
// list answers that continue a list (a page that ends mid-object).
class CuttingTransport : public Transport {
 public:
  CuttingTransport(std::shared_ptr<Transport> inner, int cuts) : inner_(std::move(inner)), cuts_(cuts) {}
  ApiResult<HttpResponse> Do(const HttpRequest& request) override {
    auto r = inner_->Do(request);
    if (r.ok() && request.path.find("continue=") != std::string::npos && cuts_.fetch_sub(1) > 0) {
      r->body.resize(r->body.size() / 2);
    }
    return r;
  }
  ApiResult<HttpResponse> Stream(const HttpRequest& request,
                                 const std::function<bool(std::string_view)>& on_line) override {
    return inner_->Stream(request, on_line);
  }

 private:
  std::shared_ptr<Transport> inner_;
  std::atomic<int> cuts_;
};

class InformerScaleIT : public KubeIntegrationTest {
 protected:
  // A stand-in of its own, without streaming lists (an older API server).
  void UseServerWithoutStreamingLists() {
    server_->Stop();
    auto o = ServerOptions();
    o.streaming_lists = false;
    server_ = std::make_unique<testing::FakeApiServer>(o);
    ASSERT_TRUE(server_->Start().ok());
    client_ = MakeClient(std::chrono::milliseconds(10000));
  }

  void CreatePods(int n, const std::string& prefix = "p") {
    for (int i = 0; i < n; ++i) {
      Json pod = Pod("ns", prefix + std::to_string(i));
      pod["status"] = {{"phase", "Running"}, {"podIP", "10.0.0.1"}};
      ASSERT_TRUE(server_->CreateObject("pods", pod).ok());
    }
  }

  InformerOptions PodOptions(int64_t page_size = 500) {
    InformerOptions o;
    o.type = resources::kPods;
    o.page_size = page_size;
    o.initial_backoff = std::chrono::milliseconds(20);
    o.max_backoff = std::chrono::milliseconds(200);
    return o;
  }

  size_t RequestsWith(const std::string& part) const {
    size_t n = 0;
    for (const auto& r : server_->Requests()) n += r.target.find(part) != std::string::npos;
    return n;
  }
};

TEST_F(InformerScaleIT, StartsWithAStreamingListWhereTheServerOffersIt) {
  CreatePods(1200);
  Counter counter;
  Informer informer(client_.get(), PodOptions());
  informer.AddHandler(counter.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(20)));
  EXPECT_EQ(informer.Size(), 1200u);
  EXPECT_EQ(counter.Of("add ns/p7"), 1);
  EXPECT_EQ(counter.Total(), 1200);
  EXPECT_EQ(informer.Stats().streaming_lists, 1u);
  EXPECT_EQ(informer.Stats().pages, 0u);  // no list request at all
  EXPECT_EQ(RequestsWith("sendInitialEvents=true"), 1u);
  EXPECT_EQ(RequestsWith("resourceVersionMatch=NotOlderThan"), 1u);
  // The same stream goes on with the changes.
  ASSERT_TRUE(server_->DeleteObject("pods", "ns", "p7").ok());
  ASSERT_TRUE(WaitFor([&] { return counter.Of("delete ns/p7") == 1; }));
  EXPECT_EQ(informer.Size(), 1199u);
  EXPECT_EQ(informer.LastResourceVersion(), std::to_string(server_->CurrentResourceVersion()));
}

TEST_F(InformerScaleIT, ReadsPaginatedListsFromAServerWithoutStreamingLists) {
  UseServerWithoutStreamingLists();
  CreatePods(1200);
  Counter counter;
  Informer informer(client_.get(), PodOptions(500));
  informer.AddHandler(counter.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(20)));
  EXPECT_EQ(informer.Size(), 1200u);
  EXPECT_EQ(counter.Total(), 1200);
  EXPECT_EQ(counter.Distinct(), 1200u);  // each told once
  EXPECT_EQ(informer.Stats().streaming_lists, 0u);
  EXPECT_EQ(informer.Stats().pages, 3u);  // 500 + 500 + 200
  EXPECT_EQ(RequestsWith("limit=500"), 3u);
  EXPECT_EQ(RequestsWith("continue="), 2u);
  // The refusal is remembered: no second streaming attempt on the next start.
  ASSERT_TRUE(server_->CreateObject("pods", Pod("ns", "late")).ok());
  ASSERT_TRUE(WaitFor([&] { return counter.Of("add ns/late") == 1; }));
  EXPECT_EQ(RequestsWith("sendInitialEvents=true"), 1u);
}

TEST_F(InformerScaleIT, TheStandInRefusesAStreamingListWithoutNotOlderThan) {
  // What a real API server answers (KEP-3157's validation), which the
  // informer's fallback relies on.
  HttpRequest bad;
  bad.path = "/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true";
  CurlTransportOptions t;
  t.server = server_->url();
  CurlTransport transport(t);
  auto r = transport.Do(bad);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 422);
  EXPECT_NE(r->body.find("NotOlderThan"), std::string::npos);
}

TEST_F(InformerScaleIT, TheTransformDecidesWhatIsStoredAndTold) {
  CreatePods(3);
  InformerOptions o = PodOptions();
  o.transform = [](Json& pod) {
    pod.erase("spec");
    pod["metadata"]["labels"]["projected"] = "yes";
  };
  std::vector<Json> told;
  std::mutex mu;
  Informer informer(client_.get(), o);
  informer.AddHandler({[&](const Json& p) {
                         std::lock_guard<std::mutex> lock(mu);
                         told.push_back(p);
                       },
                       nullptr, nullptr});
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(20)));
  auto cached = informer.Get("ns/p1");
  ASSERT_TRUE(cached.has_value());
  EXPECT_EQ((*cached)["metadata"]["labels"]["projected"], "yes");
  EXPECT_FALSE(cached->contains("spec"));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(told.size(), 3u);
  for (const Json& p : told) EXPECT_FALSE(p.contains("spec")) << p.dump();
}

TEST_F(InformerScaleIT, AListPageThatEndsMidObjectIsReadAgainWithoutTellingTwice) {
  UseServerWithoutStreamingLists();
  CreatePods(1200);
  CurlTransportOptions t;
  t.server = server_->url();
  ClientOptions co;
  co.qps = 0;
  Client client(std::make_shared<CuttingTransport>(std::make_shared<CurlTransport>(t), 1), co);
  Counter counter;
  Informer informer(&client, PodOptions(500));
  informer.AddHandler(counter.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(20)));
  const InformerStats stats = informer.Stats();
  EXPECT_GE(stats.failures, 1u);
  // The error says which request answered what.
  EXPECT_NE(stats.last_error.find("continue="), std::string::npos) << stats.last_error;
  EXPECT_EQ(stats.lists, 1u);  // the cut list was never applied as a whole
  EXPECT_EQ(informer.Size(), 1200u);
  // The first page's pods were told as they arrived; reading the list again
  // tells the rest, and nothing twice.
  EXPECT_EQ(counter.Total(), 1200);
  EXPECT_EQ(counter.Distinct(), 1200u);
}

TEST_F(InformerScaleIT, ABurstOf100000EventsIsAbsorbedWithoutStallingAnotherInformer) {
  CreatePods(10);
  Counter pods_seen;
  Informer pods(client_.get(), PodOptions());
  pods.AddHandler(pods_seen.Handler());
  Counter nodes_seen;
  InformerOptions no;
  no.type = resources::kNodes;
  Informer nodes(client_.get(), no);
  nodes.AddHandler(nodes_seen.Handler());
  pods.Start();
  nodes.Start();
  ASSERT_TRUE(pods.WaitForSync(std::chrono::seconds(20)));
  ASSERT_TRUE(nodes.WaitForSync(std::chrono::seconds(20)));
  // 50,000 pods created and deleted: 100,000 events, most of them while the
  // pod informer's stream is still delivering the first ones.
  std::thread burst([&] {
    for (int i = 0; i < 50000; ++i) {
      const std::string name = "b" + std::to_string(i);
      ASSERT_TRUE(server_->CreateObject("pods", Pod("ns", name)).ok());
      ASSERT_TRUE(server_->DeleteObject("pods", "ns", name).ok());
      if (i == 25000) {
        ASSERT_TRUE(server_->CreateObject("nodes", Node("n-during-burst")).ok());
      }
    }
  });
  burst.join();
  // The node informer is not held up by the pod one (its own thread and stream).
  ASSERT_TRUE(WaitFor([&] { return nodes_seen.Of("add n-during-burst") == 1; }));
  // The pod informer ends at the server's state: the 10 pods, nothing of the
  // burst (told, or skipped by a relist when it fell behind the history).
  ASSERT_TRUE(
      WaitFor([&] { return pods.LastResourceVersion() == std::to_string(server_->CurrentResourceVersion()); },
              std::chrono::seconds(120)))
      << pods.LastResourceVersion() << " vs " << server_->CurrentResourceVersion();
  EXPECT_EQ(pods.Size(), 10u);
  EXPECT_EQ(pods_seen.Of("add ns/b49999"), pods_seen.Of("delete ns/b49999"));
}

TEST_F(InformerScaleIT, AWatchLineLongerThanAnyObjectDropsTheStreamWithAClearError) {
  CreatePods(1);
  Informer informer(client_.get(), PodOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(20)));
  Json huge = Pod("ns", "huge");
  huge["metadata"]["annotations"]["junk"] = std::string(kMaxStreamLineBytes + (1u << 20), 'x');
  ASSERT_TRUE(server_->CreateObject("pods", huge).ok());
  ASSERT_TRUE(WaitFor([&] { return informer.Stats().last_error.find("longer than") != std::string::npos; }))
      << informer.Stats().last_error;
  // The informer goes on (here the list it reads again carries the object).
  ASSERT_TRUE(server_->CreateObject("pods", Pod("ns", "after")).ok());
  ASSERT_TRUE(WaitFor([&] { return informer.Get("ns/after").has_value(); }));
}

}  // namespace
}  // namespace tessera::kube::it
