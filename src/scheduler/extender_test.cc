#include "scheduler/extender.h"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "core/allocation_codec.h"
#include "core/pod_request.h"
#include "scheduler/testing.h"

namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;
using testing::GpuPod;
using testing::NodeWithGpus;

// The exact body kube-scheduler posts to filterVerb/prioritizeVerb with
// nodeCacheCapable: true (Go structs without json tags: capitalised names;
// Nodes is a nil pointer, so null).
const char* kFilterArgs = R"({"Pod":{"metadata":{"name":"p1","namespace":"default","uid":"uid-1",
"creationTimestamp":null,"annotations":{}},"spec":{"containers":[{"name":"app","image":"cuda",
"resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"30000","nvidia.com/gpucores":"30"}}}],
"schedulerName":"tessera-scheduler"},"status":{}},"Nodes":null,"NodeNames":["node-a","node-b","node-c"]})";

const char* kBindArgs = R"({"PodName":"p1","PodNamespace":"default","PodUID":"uid-1","Node":"node-a"})";

struct BindCall {
  std::string ns, name, node;
  std::map<std::string, std::string> annotations;
};

class ExtenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_.UpsertNode(NodeWithGpus("node-a", 1, 2, 81920));
    state_.UpsertNode(NodeWithGpus("node-b", 2, 1, 16384));  // too small for 30000 MiB
    pods_["default/p1"] = Json::parse(kFilterArgs)["Pod"];
    MakeExtender();
  }

  void MakeExtender() {
    ExtenderDeps deps;
    deps.state = &state_;
    deps.config.identity = "me";
    deps.is_leader = [this] { return leader_.load(); };
    deps.leader_identity = [] { return std::string("other"); };
    deps.get_pod = [this](const std::string& ns, const std::string& name) -> Result<Json> {
      std::lock_guard lock(mu_);
      auto it = pods_.find(ns + "/" + name);
      if (it == pods_.end()) return Error{"pods \"" + name + "\" not found"};
      return it->second;
    };
    deps.bind = [this](const std::string& ns, const std::string& name, const std::string& node,
                       const std::map<std::string, std::string>& ann) -> kube::ApiStatus {
      std::lock_guard lock(mu_);
      if (fail_binds_) return kube::ApiError{409, "Conflict", "pod is already bound"};
      binds_.push_back({ns, name, node, ann});
      return kube::ApiStatus::Ok();
    };
    extender_ = std::make_unique<Extender>(std::move(deps));
  }

  ClusterState state_;
  std::mutex mu_;
  std::map<std::string, Json> pods_;
  std::vector<BindCall> binds_;
  bool fail_binds_ = false;
  std::atomic<bool> leader_{true};
  std::unique_ptr<Extender> extender_;
};

TEST_F(ExtenderTest, FilterAnswersInKubeSchedulerShape) {
  auto [status, result] = extender_->Filter(Json::parse(kFilterArgs));
  EXPECT_EQ(status, 200);
  // Exactly the ExtenderFilterResult members, capitalised.
  for (const char* key : {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}) {
    EXPECT_TRUE(result.contains(key)) << key;
  }
  EXPECT_TRUE(result["Nodes"].is_null());
  EXPECT_EQ(result["NodeNames"], Json::array({"node-a"}));
  EXPECT_EQ(result["Error"], "");
  ASSERT_TRUE(result["FailedNodes"].contains("node-b"));
  ASSERT_TRUE(result["FailedNodes"].contains("node-c"));
  std::string b = result["FailedNodes"]["node-b"];
  EXPECT_NE(b.find("memory"), std::string::npos) << b;
  std::string c = result["FailedNodes"]["node-c"];
  EXPECT_NE(c.find("tessera.io/gpu-inventory"), std::string::npos) << c;
}

TEST_F(ExtenderTest, BodiesReadFastAndBodiesParsedInFullGetTheSameAnswers) {
  // The same request twice: as kube-scheduler writes it (read without a JSON
  // tree) and with every name escaped (only the full parser takes it).
  const std::string fast = kFilterArgs;
  std::string slow = fast;
  for (const char* name : {"node-a", "node-b", "node-c"}) {
    const std::string plain = std::string("\"") + name + "\"";
    const std::string escaped = std::string("\"") + std::string(name).replace(4, 1, "\\u002d") + "\"";
    slow.replace(slow.find(plain), plain.size(), escaped);
  }
  ASSERT_NE(slow, fast);
  ASSERT_EQ(Json::parse(slow), Json::parse(fast));
  auto [fast_status, fast_filter] = extender_->FilterBody(fast);
  auto [slow_status, slow_filter] = extender_->FilterBody(slow);
  EXPECT_EQ(fast_status, 200);
  EXPECT_EQ(slow_status, 200);
  EXPECT_EQ(Json::parse(fast_filter), Json::parse(slow_filter));
  EXPECT_EQ(Json::parse(fast_filter)["NodeNames"], Json::array({"node-a"}));
  auto [fp, fast_prio] = extender_->PrioritizeBody(fast);
  auto [sp, slow_prio] = extender_->PrioritizeBody(slow);
  EXPECT_EQ(fast_prio, slow_prio);
  EXPECT_EQ(Json::parse(fast_prio).size(), 3u);

  auto [status, garbage] = extender_->FilterBody("{not json");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(Json::parse(garbage)["Error"], "request body is not valid JSON");
  EXPECT_EQ(extender_->PrioritizeBody("{not json"), (std::pair<int, std::string>{400, "[]"}));
}

size_t Occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_F(ExtenderTest, ANodeListedTwiceIsAnsweredOnce) {
  // node-b does not fit, node-c is unknown, node-a fits; each listed twice.
  Json args = Json::parse(kFilterArgs);
  args["NodeNames"] = {"node-b", "node-a", "node-b", "node-c", "node-a", "node-c"};
  const std::string fast = args.dump();
  std::string slow = fast;  // an escaped name: the full parser reads this one
  slow.replace(slow.find("\"node-a\""), 8, "\"node\\u002da\"");
  ASSERT_EQ(Json::parse(slow), Json::parse(fast));
  for (const std::string& body : {fast, slow, fast}) {  // fast twice: the second from the name-list memo
    auto [status, filter] = extender_->FilterBody(body);
    EXPECT_EQ(status, 200);
    EXPECT_EQ(Occurrences(filter, "\"node-b\":"), 1u) << filter;  // one FailedNodes member each
    EXPECT_EQ(Occurrences(filter, "\"node-c\":"), 1u) << filter;
    EXPECT_EQ(Json::parse(filter)["NodeNames"], Json::array({"node-a"})) << filter;
    auto [prio_status, prio] = extender_->PrioritizeBody(body);
    EXPECT_EQ(prio_status, 200);
    // kube-scheduler adds up a host's entries: one each, at its first listing.
    Json list = Json::parse(prio);
    ASSERT_EQ(list.size(), 3u) << prio;
    EXPECT_EQ(list[0]["Host"], "node-b");
    EXPECT_EQ(list[1]["Host"], "node-a");
    EXPECT_EQ(list[2]["Host"], "node-c");
    EXPECT_EQ(list[1]["Score"], 10);
  }
  // A pod asking for no GPU passes every node, each once.
  args["Pod"]["spec"]["containers"][0]["resources"] = Json::object();
  auto [status, filter] = extender_->Filter(args);
  EXPECT_EQ(filter["NodeNames"], Json::array({"node-b", "node-a", "node-c"}));
  EXPECT_EQ(extender_->Prioritize(args).second.size(), 3u);
  // A NodeList with a node twice: its Node object comes back once.
  Json list_args = Json::parse(kFilterArgs);
  list_args.erase("NodeNames");
  Json node_a = {{"metadata", {{"name", "node-a"}}}};
  list_args["Nodes"] = {{"items", {node_a, node_a}}};
  auto [list_status, list_filter] = extender_->Filter(list_args);
  EXPECT_EQ(list_filter["Nodes"]["items"].size(), 1u) << list_filter.dump();
}

TEST_F(ExtenderTest, MalformedArgsGetAnError) {
  auto [status, result] = extender_->Filter(Json{{"NodeNames", {"node-a"}}});
  EXPECT_NE(result["Error"].get<std::string>().find("no Pod"), std::string::npos) << result.dump();
  std::tie(status, result) = extender_->Filter(Json::array());
  EXPECT_EQ(status, 400);
  std::tie(status, result) = extender_->Prioritize(Json{{"Pod", 5}, {"NodeNames", {"node-a"}}});
  EXPECT_EQ(result, Json::parse(R"([{"Host":"node-a","Score":0}])"));
  std::tie(status, result) = extender_->Bind(Json{{"PodName", 3}});
  EXPECT_FALSE(result["Error"].get<std::string>().empty());
}

TEST_F(ExtenderTest, FilterWithNodeListReturnsNodeObjects) {
  Json args = Json::parse(kFilterArgs);
  args["NodeNames"] = nullptr;
  args["Nodes"] = {{"metadata", Json::object()},
                   {"items", {{{"metadata", {{"name", "node-a"}}}}, {{"metadata", {{"name", "node-b"}}}}}}};
  auto [status, result] = extender_->Filter(args);
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(result["NodeNames"].is_null());
  ASSERT_EQ(result["Nodes"]["items"].size(), 1u);
  EXPECT_EQ(result["Nodes"]["items"][0]["metadata"]["name"], "node-a");
}

TEST_F(ExtenderTest, FilterReportsMalformedPodAsError) {
  Json args = Json::parse(kFilterArgs);
  args["Pod"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = "150";
  auto [status, result] = extender_->Filter(args);
  std::string error = result["Error"];
  EXPECT_NE(error.find("nvidia.com/gpucores"), std::string::npos) << error;
  EXPECT_NE(error.find("default/p1"), std::string::npos) << error;

  args = Json::parse(kFilterArgs);
  args["Pod"]["metadata"]["annotations"]["hami.io/gpu-scheduler-policy"] = "sideways";
  std::tie(status, result) = extender_->Filter(args);
  error = result["Error"];
  EXPECT_NE(error.find("hami.io/gpu-scheduler-policy"), std::string::npos) << error;
}

TEST_F(ExtenderTest, PrioritizeAnswersABareHostPriorityList) {
  state_.UpsertNode(NodeWithGpus("node-c", 3, 2, 81920));
  // Put something on node-c so binpack prefers it.
  Json placed = GpuPod("default", "already", 1, 10000, 10);
  ASSERT_TRUE(state_
                  .Reserve("default/already", *core::DerivePodRequest(placed, {}), "node-c",
                           core::GpuOrder::kBinpack, std::chrono::hours(1))
                  .ok());
  auto [status, list] = extender_->Prioritize(Json::parse(kFilterArgs));
  EXPECT_EQ(status, 200);
  ASSERT_TRUE(list.is_array());
  ASSERT_EQ(list.size(), 3u);
  std::map<std::string, int> score;
  for (const Json& h : list) {
    ASSERT_EQ(h.size(), 2u);
    score[h["Host"]] = h["Score"];
    EXPECT_GE(h["Score"].get<int>(), 0);
    EXPECT_LE(h["Score"].get<int>(), 10);
  }
  EXPECT_EQ(score["node-b"], 0);  // does not fit
  EXPECT_EQ(score["node-c"], 10);
  EXPECT_LT(score["node-a"], 10);

  // The pod asks for spread: the empty node wins.
  Json args = Json::parse(kFilterArgs);
  args["Pod"]["metadata"]["annotations"]["tessera.io/node-policy"] = "spread";
  list = extender_->Prioritize(args).second;
  for (const Json& h : list) score[h["Host"]] = h["Score"];
  EXPECT_EQ(score["node-a"], 10);
  EXPECT_LT(score["node-c"], 10);
}

TEST_F(ExtenderTest, BindWritesAllocationWithTheBinding) {
  auto [status, result] = extender_->Bind(Json::parse(kBindArgs));
  EXPECT_EQ(status, 200);
  EXPECT_EQ(result, Json({{"Error", ""}}));
  ASSERT_EQ(binds_.size(), 1u);
  EXPECT_EQ(binds_[0].node, "node-a");
  auto allocation = core::DecodeAllocation(binds_[0].annotations.at("tessera.io/allocation"));
  ASSERT_TRUE(allocation.ok()) << allocation.error().message;
  EXPECT_EQ(allocation->node, "node-a");
  ASSERT_EQ(allocation->containers.size(), 1u);
  EXPECT_EQ(allocation->containers[0].container, "app");
  EXPECT_EQ(allocation->containers[0].devices[0].memory_mib, 30000);
  EXPECT_EQ(allocation->containers[0].devices[0].cores, 30);
  EXPECT_EQ(binds_[0].annotations.at("tessera.io/visible-devices.0"),
            allocation->containers[0].devices[0].uuid);
  // Held until the informer shows the pod bound.
  EXPECT_EQ(state_.Stats().reservations, 1u);
  Json bound = pods_["default/p1"];
  bound["spec"]["nodeName"] = "node-a";
  bound["metadata"]["annotations"]["tessera.io/allocation"] =
      binds_[0].annotations.at("tessera.io/allocation");
  state_.UpsertPod(bound);
  EXPECT_EQ(state_.Stats().reservations, 0u);
  EXPECT_EQ(state_.Stats().pods, 1u);
  EXPECT_EQ(state_.Node("node-a")
                ->gpus()[allocation->containers[0].devices[0].uuid == testing::GpuUuid(1, 0) ? 0 : 1]
                .used.memory_mib,
            30000);
}

TEST_F(ExtenderTest, FollowerRefusesToBind) {
  leader_ = false;
  auto [status, result] = extender_->Bind(Json::parse(kBindArgs));
  std::string error = result["Error"];
  EXPECT_NE(error.find("not the leader"), std::string::npos) << error;
  EXPECT_NE(error.find("other"), std::string::npos) << error;
  EXPECT_TRUE(binds_.empty());
}

TEST_F(ExtenderTest, RefusedBindingGivesTheReservationBack) {
  fail_binds_ = true;
  auto [status, result] = extender_->Bind(Json::parse(kBindArgs));
  EXPECT_NE(result["Error"].get<std::string>().find("already bound"), std::string::npos);
  EXPECT_EQ(state_.Stats().reservations, 0u);
  EXPECT_EQ(state_.Node("node-a")->gpus()[0].used.memory_mib, 0);
}

TEST_F(ExtenderTest, BindChecksUidAndUnknownPods) {
  Json args = Json::parse(kBindArgs);
  args["PodUID"] = "uid-2";
  EXPECT_NE(extender_->Bind(args).second["Error"].get<std::string>().find("recreated"), std::string::npos);
  args = Json::parse(kBindArgs);
  args["PodName"] = "ghost";
  EXPECT_NE(extender_->Bind(args).second["Error"].get<std::string>().find("not found"), std::string::npos);
  EXPECT_TRUE(binds_.empty());
}

TEST_F(ExtenderTest, ConcurrentBindsOnOneNodeNeverDoubleBook) {
  // node-a: 2 GPUs x 100 % cores; 30 % pods -> at most 3 per GPU.
  const int kPods = 40;
  for (int i = 0; i < kPods; ++i)
    pods_["default/c" + std::to_string(i)] = GpuPod("default", "c" + std::to_string(i), 1, 1000, 30);
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kPods; i += 8) {
        Json args = {{"PodName", "c" + std::to_string(i)},
                     {"PodNamespace", "default"},
                     {"PodUID", ""},
                     {"Node", "node-a"}};
        if (extender_->Bind(args).second["Error"] == "") ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 6);
  auto node_a = state_.Node("node-a");
  for (const auto& g : node_a->gpus()) {
    EXPECT_LE(g.used.cores, 100);
    EXPECT_EQ(g.used.slots, 3);
  }
}

TEST(ClusterStateTest, ReservationsExpireAndTerminalPodsRelease) {
  auto now = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::time_point{});
  ClusterState state([now] { return *now; });
  state.UpsertNode(NodeWithGpus("n", 1, 1, 10000));
  auto request = core::DerivePodRequest(GpuPod("d", "a", 1, 6000, 0), {});
  ASSERT_TRUE(request.ok());
  ASSERT_TRUE(state.Reserve("d/a", *request, "n", core::GpuOrder::kBinpack, std::chrono::seconds(5)).ok());
  auto second = state.Reserve("d/b", *request, "n", core::GpuOrder::kBinpack, std::chrono::seconds(5));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().message.find("no longer fits"), std::string::npos) << second.error().message;
  *now += std::chrono::seconds(4);
  EXPECT_EQ(state.ExpireReservations(), 0u);
  *now += std::chrono::seconds(2);
  EXPECT_EQ(state.ExpireReservations(), 1u);
  EXPECT_EQ(state.Node("n")->gpus()[0].used.memory_mib, 0);

  // A bound pod counts until it finishes.
  auto alloc = state.Reserve("d/b", *request, "n", core::GpuOrder::kBinpack, std::chrono::seconds(5));
  ASSERT_TRUE(alloc.ok());
  Json pod = GpuPod("d", "b", 1, 6000, 0, Json{{"tessera.io/allocation", *core::EncodeAllocation(*alloc)}});
  pod["status"]["phase"] = "Running";
  state.UpsertPod(pod);
  *now += std::chrono::seconds(60);
  state.ExpireReservations();
  EXPECT_EQ(state.Node("n")->gpus()[0].used.memory_mib, 6000);
  pod["status"]["phase"] = "Succeeded";
  state.UpsertPod(pod);
  EXPECT_EQ(state.Node("n")->gpus()[0].used.memory_mib, 0);
  EXPECT_EQ(state.Stats().pods, 0u);
}

TEST(ClusterStateTest, PodsSeenBeforeTheirNodeAreAppliedWhenItArrivesAndGarbageIsCounted) {
  ClusterState state;
  ClusterState source;
  source.UpsertNode(NodeWithGpus("n", 1, 2, 10000));
  auto request = core::DerivePodRequest(GpuPod("d", "a", 2, 4000, 50), {});
  auto alloc = source.Reserve("d/a", *request, "n", core::GpuOrder::kSpread, std::chrono::seconds(5));
  ASSERT_TRUE(alloc.ok());
  state.UpsertPod(
      GpuPod("d", "a", 2, 4000, 50, Json{{"tessera.io/allocation", *core::EncodeAllocation(*alloc)}}));
  state.UpsertPod(GpuPod("d", "junk", 1, 1, 1, Json{{"tessera.io/allocation", "{not json"}}));
  EXPECT_EQ(state.Stats().inconsistent, 1u);
  state.UpsertNode(NodeWithGpus("n", 1, 2, 10000));
  auto node_n = state.Node("n");
  for (const auto& g : node_n->gpus()) {
    EXPECT_EQ(g.used.memory_mib, 4000);
    EXPECT_EQ(g.used.cores, 50);
  }
  // Inventory changes (memory grows): usage is re-applied onto the new GPUs.
  state.UpsertNode(NodeWithGpus("n", 1, 2, 20000));
  EXPECT_EQ(state.Node("n")->gpus()[1].used.memory_mib, 4000);
  EXPECT_EQ(state.LargestGpuMemoryMiB(), 20000);
  state.DeletePod(GpuPod("d", "a", 1, 1, 1));
  EXPECT_EQ(state.Node("n")->gpus()[1].used.memory_mib, 0);
}

TEST(ClusterStateTest, OnlyThePlacersChoiceScoresTen) {
  auto scores = [](std::vector<std::string_view> names, std::vector<std::optional<double>> raw) {
    std::vector<int> out;
    ExtenderScores(names, raw, out);
    return out;
  };
  // The best score gets 10, the others 0..9 between the lowest and the best.
  EXPECT_EQ(scores({"d", "c", "b", "a"}, {1.0, std::nullopt, 3.0, 2.0}), (std::vector<int>{0, 0, 10, 4}));
  // Equal scores: the name that sorts first wins (Placer order = by name).
  EXPECT_EQ(scores({"n2", "n1", "n3"}, {7.0, 7.0, 7.0}), (std::vector<int>{9, 10, 9}));
  EXPECT_EQ(scores({"b", "a", "c"}, {5.0, 5.0, 6.0}), (std::vector<int>{0, 0, 10}));
  EXPECT_EQ(scores({"b", "a"}, {5.0, 4.0}), (std::vector<int>{10, 0}));
  EXPECT_EQ(scores({"a", "b"}, {std::nullopt, std::nullopt}), (std::vector<int>{0, 0}));
  EXPECT_EQ(scores({}, {}), std::vector<int>{});
}

}  // namespace
}  // namespace tessera::scheduler

namespace tessera::scheduler {
namespace {

TEST(ClusterStateTest, CachedEvaluationsFollowEveryChange) {
  ClusterState state;
  state.UpsertNode(testing::NodeWithGpus("n", 1, 1, 10000));
  auto request = core::DerivePodRequest(testing::GpuPod("d", "a", 1, 6000, 0), {});
  ASSERT_TRUE(request.ok());
  auto policy = core::MakePolicy("node-binpack");
  ASSERT_TRUE(policy.ok());
  EXPECT_EQ(state.Filter(*request, {"n"}).feasible.size(), 1u);
  EXPECT_EQ(state.Prioritize(*request, **policy, {"n"}), std::vector<int>{10});
  // Usage changes: the same shape is evaluated afresh.
  ASSERT_TRUE(state.Reserve("d/a", *request, "n", core::GpuOrder::kBinpack, std::chrono::hours(1)).ok());
  EXPECT_EQ(state.Filter(*request, {"n"}).feasible.size(), 0u);
  EXPECT_EQ(state.Prioritize(*request, **policy, {"n"}), std::vector<int>{0});
  state.Unreserve("d/a");
  EXPECT_EQ(state.Filter(*request, {"n"}).feasible.size(), 1u);
  // The inventory changes (a rebuilt node starts at version 0 again).
  state.UpsertNode(testing::NodeWithGpus("n", 1, 1, 4000));
  auto out = state.Filter(*request, {"n"});
  EXPECT_EQ(out.feasible.size(), 0u);
  EXPECT_NE(out.failed["n"].find("memory"), std::string::npos) << out.failed["n"];
  EXPECT_EQ(state.Prioritize(*request, **policy, {"n"}), std::vector<int>{0});
  state.UpsertNode(testing::NodeWithGpus("n", 1, 1, 10000));
  EXPECT_EQ(state.Filter(*request, {"n"}).feasible.size(), 1u);
  // A node deleted and added back.
  state.DeleteNode(testing::NodeWithGpus("n", 1, 1, 10000));
  EXPECT_EQ(state.Filter(*request, {"n"}).feasible.size(), 0u);
  state.UpsertNode(testing::NodeWithGpus("n", 1, 1, 10000));
  EXPECT_EQ(state.Filter(*request, {"n"}).feasible.size(), 1u);
}

}  // namespace
}  // namespace tessera::scheduler
