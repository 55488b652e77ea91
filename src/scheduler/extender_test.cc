#include "scheduler/extender.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include "base/log.h"
#include "core/allocation_codec.h"
#include "core/pod_request.h"
#include "core/policy_placer.h"
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
    deps.leader_identity = [this] { return holder_; };
    deps.not_ready = [this] { return not_ready_; };
    deps.bind_held = [this] { return bind_held_; };
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
      if (bind_refusal_) return *bind_refusal_;
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
  std::optional<kube::ApiError> bind_refusal_;  // the API server's answer to every Binding
  std::atomic<bool> leader_{true};
  std::string holder_ = "other";  // the Lease's holder as the elector last saw it
  std::string bind_held_;         // the leader's settle after a takeover ("" = none)
  std::string not_ready_;         // "" = ready; read on each call
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
  // HAMi's annotation picks node binpack for this pod (the default is tessera).
  Json binpack = Json::parse(kFilterArgs);
  binpack["Pod"]["metadata"]["annotations"]["hami.io/node-scheduler-policy"] = "binpack";
  auto [status, list] = extender_->Prioritize(binpack);
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
  // The container's own limits, what tessera-node's limits file will hold,
  // which the webhook mounts into that container read-only.
  EXPECT_EQ(binds_[0].annotations.at("tessera.io/limits.0"),
            *core::EncodeContainerLimits(*allocation, "app"));
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

// Just after a takeover the predecessor's Bindings may still land: the new
// leader refuses binds (kube-scheduler retries) and reserves nothing.
TEST_F(ExtenderTest, ALeaderSettlingAfterATakeoverRefusesToBindAndReservesNothing) {
  bind_held_ = "this replica took the leader lease over 10 ms ago and waits 1990 ms more";
  auto [status, result] = extender_->Bind(Json::parse(kBindArgs));
  EXPECT_EQ(status, 200);
  std::string error = result["Error"];
  EXPECT_NE(error.find("bind default/p1: this replica took the leader lease over"), std::string::npos)
      << error;
  EXPECT_TRUE(binds_.empty());
  EXPECT_EQ(state_.Stats().reservations, 0u);
  EXPECT_EQ(extender_->counters().bind_settling.load(), 1u);

  bind_held_.clear();
  auto [status2, result2] = extender_->Bind(Json::parse(kBindArgs));
  EXPECT_FALSE(result2.contains("Error") && !result2["Error"].get<std::string>().empty()) << result2.dump();
  EXPECT_EQ(binds_.size(), 1u);
}

TEST_F(ExtenderTest, AFollowerWhoseLeaseNamesItselfDoesNotCallItselfTheLeader) {
  leader_ = false;
  holder_ = "me";  // restarted with the same identity, or failing to renew
  auto [status, result] = extender_->Bind(Json::parse(kBindArgs));
  std::string error = result["Error"];
  EXPECT_NE(error.find("tessera-scheduler me is not the leader (the lease names it, but it has not renewed"),
            std::string::npos)
      << error;
  EXPECT_EQ(error.find("the leader is me"), std::string::npos) << error;
  EXPECT_TRUE(binds_.empty());
}

TEST_F(ExtenderTest, NothingIsDecidedBeforeTheViewIsComplete) {
  not_ready_ = "the pods are not listed yet";
  auto [fstatus, filtered] = extender_->Filter(Json::parse(kFilterArgs));
  EXPECT_EQ(fstatus, 200);
  EXPECT_NE(filtered["Error"].get<std::string>().find("is not ready to decide: the pods are not listed yet"),
            std::string::npos)
      << filtered.dump();
  EXPECT_TRUE(filtered["NodeNames"].is_null());
  EXPECT_TRUE(filtered["FailedNodes"].empty());
  auto [pstatus, scores] = extender_->Prioritize(Json::parse(kFilterArgs));
  EXPECT_EQ(pstatus, 503);
  auto [bstatus, bound] = extender_->Bind(Json::parse(kBindArgs));
  EXPECT_NE(bound["Error"].get<std::string>().find("not ready to decide"), std::string::npos) << bound.dump();
  EXPECT_TRUE(binds_.empty());
  EXPECT_EQ(state_.Stats().reservations, 0u);
  EXPECT_EQ(extender_->counters().not_ready.load(), 3u);
  EXPECT_EQ(extender_->learner().stats().counted, 0u) << "a refused pod is not counted as an arrival";
  not_ready_.clear();
  EXPECT_EQ(extender_->Bind(Json::parse(kBindArgs)).second["Error"], "");
}

TEST_F(ExtenderTest, RefusedBindingGivesTheReservationBack) {
  bind_refusal_ = kube::ApiError{404, "NotFound", "pods \"p1\" not found"};
  auto [status, result] = extender_->Bind(Json::parse(kBindArgs));
  EXPECT_NE(result["Error"].get<std::string>().find("not found"), std::string::npos);
  EXPECT_EQ(state_.Stats().reservations, 0u);
  EXPECT_EQ(state_.Node("node-a")->gpus()[0].used.memory_mib, 0);
}

TEST_F(ExtenderTest, ARetryAfterALostAnswerKeepsTheFirstBindsGpus) {
  // The first Binding's answer is lost (a timeout): it may still land, so its
  // reservation stays.
  bind_refusal_ = kube::ApiError{0, "", "Operation timed out after 2001 milliseconds"};
  EXPECT_NE(extender_->Bind(Json::parse(kBindArgs)).second["Error"], "");
  const auto held = state_.Node("node-a")->gpus();
  ASSERT_EQ(state_.Stats().reservations, 1u);
  // Filter leads kube-scheduler back to the node that holds its GPUs.
  auto [filter_status, filtered] = extender_->Filter(Json::parse(kFilterArgs));
  EXPECT_EQ(filtered["NodeNames"], Json::array({"node-a"})) << filtered.dump();
  EXPECT_NE(filtered["FailedNodes"].value("node-c", "").find("outcome is not known yet"), std::string::npos)
      << filtered.dump();
  // A retry on another node is refused while the first is unsettled.
  std::string elsewhere = kBindArgs;
  elsewhere.replace(elsewhere.find("node-a"), 6, "node-b");
  auto other = extender_->Bind(Json::parse(elsewhere)).second["Error"].get<std::string>();
  EXPECT_NE(other.find("whose outcome is not known yet"), std::string::npos) << other;
  // On the same node: the same GPUs again, and the first Binding had landed
  // after all (409). Nothing is given back on either: the informer settles it.
  bind_refusal_ = kube::ApiError{409, "Conflict", "pod p1 is already assigned to node \"node-a\""};
  auto again = extender_->Bind(Json::parse(kBindArgs)).second["Error"].get<std::string>();
  EXPECT_NE(again.find("already assigned"), std::string::npos) << again;
  EXPECT_EQ(state_.Stats().reservations, 1u);
  ASSERT_EQ(state_.Node("node-a")->gpus().size(), held.size());
  for (size_t g = 0; g < held.size(); ++g) {
    EXPECT_EQ(state_.Node("node-a")->gpus()[g].used.memory_mib, held[g].used.memory_mib) << g;
  }
  EXPECT_EQ(state_.Node("node-b")->gpus()[0].used.memory_mib, 0);
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

// What an operator reads in tessera-scheduler's log about each decision.
TEST_F(ExtenderTest, EachBindIsLoggedWithItsGpusAndWhy) {
  log::Capture capture;
  ASSERT_EQ(extender_->Bind(Json::parse(kBindArgs)).second["Error"], "");
  auto bound = capture.Matching("bound pod");
  ASSERT_EQ(bound.size(), 1u);
  auto allocation = core::DecodeAllocation(binds_.at(0).annotations.at("tessera.io/allocation"));
  ASSERT_TRUE(allocation.ok());
  EXPECT_EQ(
      bound[0],
      "bound pod pod=default/p1 node=node-a gpus=app:" + allocation->containers[0].devices[0].uuid +
          ":30000MiB:30% why=\"policy tessera: node by policy.node, GPUs by the node policy (policy.gpu "
          "unset)\"");
  EXPECT_EQ(capture.Lines().back().level, log::Level::kInfo);

  fail_binds_ = true;
  Json other = pods_["default/p1"];
  other["metadata"]["name"] = "p2";
  other["metadata"]["uid"] = "uid-2";
  pods_["default/p2"] = other;
  Json args = Json::parse(kBindArgs);
  args["PodName"] = "p2";
  args["PodUID"] = "uid-2";
  ASSERT_NE(extender_->Bind(args).second["Error"], "");
  auto refused = capture.Matching("bind refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_NE(refused[0].find(
                "pod=default/p2 node=node-a reason=\"bind default/p2 to node-a: pod is already bound\""),
            std::string::npos)
      << refused[0];
  EXPECT_EQ(capture.Lines().back().level, log::Level::kWarn);
}

TEST_F(ExtenderTest, NotReadyRefusalsAreLoggedOncePerEpisode) {
  log::Capture capture;
  not_ready_ = "the pods are not listed yet";
  for (int i = 0; i < 3; ++i) {
    extender_->Filter(Json::parse(kFilterArgs));
    extender_->Bind(Json::parse(kBindArgs));
  }
  EXPECT_EQ(extender_->counters().not_ready.load(), 6u);
  auto refusing = capture.Matching("not ready");
  ASSERT_EQ(refusing.size(), 1u) << "one line for the whole episode";
  EXPECT_NE(refusing[0].find("reason=\"the pods are not listed yet\""), std::string::npos) << refusing[0];
  EXPECT_TRUE(capture.Matching("bind refused").empty())
      << "not-ready binds are the episode's, not warnings each";
  not_ready_.clear();
  extender_->Filter(Json::parse(kFilterArgs));
  extender_->Filter(Json::parse(kFilterArgs));
  EXPECT_EQ(capture.Matching("ready: deciding again").size(), 1u);
  not_ready_ = "the nodes are not listed yet";
  extender_->Filter(Json::parse(kFilterArgs));
  EXPECT_EQ(capture.Matching("not ready").size(), 2u) << "a new episode is logged again";
}

TEST_F(ExtenderTest, FilterLogsWhyANodeDoesNotFitAtDebugOnly) {
  log::Capture capture;
  extender_->Filter(Json::parse(kFilterArgs));
  EXPECT_TRUE(capture.Matching("does not fit").empty()) << "info is the default level";
  const log::Level saved = log::GetLevel();
  log::SetLevel(log::Level::kDebug);
  extender_->Filter(Json::parse(kFilterArgs));
  log::SetLevel(saved);
  auto unfit = capture.Matching("node does not fit");
  ASSERT_EQ(unfit.size(), 2u);  // node-b is too small, node-c has no inventory
  EXPECT_NE(unfit[0].find("pod=default/p1 node=node-b reason="), std::string::npos) << unfit[0];
  EXPECT_NE(unfit[1].find("pod=default/p1 node=node-c reason="), std::string::npos) << unfit[1];
  EXPECT_EQ(capture.Matching("filter pod=default/p1 feasible=1 failed=2").size(), 1u);
}

TEST(ClusterStateTest, ARetriedReserveKeepsTheReservationOfAnUnsettledBind) {
  FakeClock clock(std::chrono::system_clock::now());  // the nodes' heartbeats are the real now
  ClusterState state(ClusterStateOptions{&clock});
  state.UpsertNode(NodeWithGpus("n", 1, 1, 8000));
  state.UpsertNode(NodeWithGpus("m", 2, 1, 8000));
  auto request = core::DerivePodRequest(GpuPod("d", "a", 1, 6000, 0), {});
  ASSERT_TRUE(request.ok());
  auto first = state.Reserve("d/a", *request, "n", core::GpuOrder::kBinpack, std::chrono::seconds(60));
  ASSERT_TRUE(first.ok()) << first.error().message;
  clock.Advance(std::chrono::seconds(50));
  // The same node: the same allocation, held 60 s from now.
  auto again = state.Reserve("d/a", *request, "n", core::GpuOrder::kBinpack, std::chrono::seconds(60));
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(*again, *first);
  EXPECT_EQ(state.Node("n")->gpus()[0].used.memory_mib, 6000);
  EXPECT_FALSE(state.Reserve("d/b", *request, "n", core::GpuOrder::kBinpack, std::chrono::seconds(60)).ok())
      << "the GPU stays held";
  // Another node: refused, and the first stays.
  auto moved = state.Reserve("d/a", *request, "m", core::GpuOrder::kBinpack, std::chrono::seconds(60));
  ASSERT_FALSE(moved.ok());
  EXPECT_NE(moved.error().message.find("whose outcome is not known yet"), std::string::npos)
      << moved.error().message;
  EXPECT_EQ(state.Node("m")->gpus()[0].used.memory_mib, 0);
  clock.Advance(std::chrono::seconds(30));
  EXPECT_EQ(state.ExpireReservations(), 0u) << "the retry moved the deadline";
  clock.Advance(std::chrono::seconds(31));
  EXPECT_EQ(state.ExpireReservations(), 1u);
  EXPECT_EQ(state.Node("n")->gpus()[0].used.memory_mib, 0);
}

TEST(ClusterStateTest, ReservationsExpireAndTerminalPodsRelease) {
  FakeClock clock(std::chrono::system_clock::now());  // the nodes' heartbeats are the real now
  ClusterState state(ClusterStateOptions{&clock});
  state.UpsertNode(NodeWithGpus("n", 1, 1, 10000));
  auto request = core::DerivePodRequest(GpuPod("d", "a", 1, 6000, 0), {});
  ASSERT_TRUE(request.ok());
  ASSERT_TRUE(state.Reserve("d/a", *request, "n", core::GpuOrder::kBinpack, std::chrono::seconds(5)).ok());
  auto second = state.Reserve("d/b", *request, "n", core::GpuOrder::kBinpack, std::chrono::seconds(5));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().message.find("no longer fits"), std::string::npos) << second.error().message;
  clock.Advance(std::chrono::seconds(4));
  EXPECT_EQ(state.ExpireReservations(), 0u);
  clock.Advance(std::chrono::seconds(2));
  EXPECT_EQ(state.ExpireReservations(), 1u);
  EXPECT_EQ(state.Node("n")->gpus()[0].used.memory_mib, 0);

  // A bound pod counts until it finishes.
  auto alloc = state.Reserve("d/b", *request, "n", core::GpuOrder::kBinpack, std::chrono::seconds(5));
  ASSERT_TRUE(alloc.ok());
  Json pod = GpuPod("d", "b", 1, 6000, 0, Json{{"tessera.io/allocation", *core::EncodeAllocation(*alloc)}});
  pod["status"]["phase"] = "Running";
  state.UpsertPod(pod);
  clock.Advance(std::chrono::seconds(60));
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

// Learning the workload mix: the extender's `tessera` policy learns from the
// pods kube-scheduler asks about, as the trace benchmark's policy learns from
// arrivals.
namespace tessera::scheduler {
namespace {

using Json = nlohmann::json;
using testing::GpuPod;
using testing::NodeWithGpus;

Json WithUid(Json pod, const std::string& uid) {
  pod["metadata"]["uid"] = uid;
  return pod;
}

Json ExtenderArgsFor(const Json& pod, const std::vector<std::string>& nodes) {
  return {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", nodes}};
}

// The node prioritize scores 10 ("" when none).
std::string ScoredTen(const Json& list) {
  std::string ten;
  for (const Json& h : list) {
    if (h["Score"] == 10) {
      EXPECT_EQ(ten, "") << "two nodes at 10: " << list.dump();
      ten = h["Host"];
    }
  }
  return ten;
}

// A cluster of assorted nodes (names out of order; 1-8 GPUs of 24, 40 or 80
// GB; some already in use) and an extender scoring with `tessera`.
struct LearningCluster {
  ClusterState state;
  std::vector<std::string> names;
  std::unique_ptr<Extender> extender;

  LearningCluster() {
    int used = 0;
    for (int i = 0; i < 24; ++i) {
      names.push_back("gpu-" + std::to_string((i * 7) % 24));
      const int gpus = std::vector<int>{1, 2, 4, 8}[i % 4];
      const int64_t memory = std::vector<int64_t>{24576, 40960, 81920}[i % 3];
      state.UpsertNode(NodeWithGpus(names.back(), i + 1, gpus, memory, 8));
      for (int p = 0; p < (i * 5) % 7; ++p) {
        auto pod = core::DerivePodRequest(GpuPod("d", "u", 1, 4000 + 3000 * ((i + p) % 4), 10 * (p % 3)), {});
        EXPECT_TRUE(pod.ok());
        (void)state.Reserve("d/used-" + std::to_string(++used), *pod, names.back(), core::GpuOrder::kBinpack,
                            std::chrono::hours(1));
      }
    }
    ExtenderDeps deps;
    deps.state = &state;
    deps.config.node_policy = "tessera";
    extender = std::make_unique<Extender>(std::move(deps));
  }

  // The engine of the trace benchmark over the same nodes, in name order.
  core::Placer Placer() const {
    std::vector<std::string> by_name = names;
    std::sort(by_name.begin(), by_name.end());
    std::vector<core::NodeState> nodes;
    for (const std::string& n : by_name) nodes.push_back(*state.Node(n));
    return core::Placer(std::move(nodes));
  }
};

// The i-th pod of a workload dominated by a few shapes (like a real trace):
// mostly half-GPU slices, then whole GPUs, small slices and pairs.
Json ArrivingPod(int i) {
  const std::string name = "arrival-" + std::to_string(i);
  switch (i % 10) {
    case 0:
    case 1:
    case 2:
    case 3:
      return GpuPod("d", name, 1, 20000, 50);
    case 4:
    case 5:
      return GpuPod("d", name, 1, 40960, 100);
    case 6:
    case 7:
      return GpuPod("d", name, 1, 6000, 10);
    case 8:
      return GpuPod("d", name, 2, 30000, 50);
    default:
      return GpuPod("d", name, 1, 12000 + 1000 * (i % 7), 30);
  }
}

// Production and benchmark agree: after the same arrivals, the node the
// extender's prioritize gives 10 is the node core::Placer (the engine of
// `tessera simulate`) chooses with core's `tessera` policy told about the same
// pods in the same order (Observe before Choose, as the replay does), over the
// same cluster state — and, for some pods, not the node chosen before any pod
// was seen (best fit), so the learning is what decides.
TEST(ExtenderLearningTest, PrioritizeChoosesWhatTheBenchmarksPlacerChoosesAfterTheSameArrivals) {
  LearningCluster cluster;
  core::Placer placer = cluster.Placer();
  auto benchmark = core::MakePolicy("tessera");  // = tessera-online's policy
  auto unlearned = core::MakePolicy("tessera");  // sees nothing: what the extender did before
  ASSERT_TRUE(benchmark.ok() && unlearned.ok());
  int arrivals = 0;
  int probes = 0;
  int compared = 0;
  int learning_decided = 0;
  // 600 arrivals cross two relearns (pods 1 and 513); probes after each stage.
  for (int stage : {1, 300, 600}) {
    for (; arrivals < stage; ++arrivals) {
      Json pod = WithUid(ArrivingPod(arrivals), "uid-" + std::to_string(arrivals));
      (*benchmark)->Observe(*core::DerivePodRequest(pod, {}));
      auto [status, answer] = cluster.extender->Filter(ExtenderArgsFor(pod, cluster.names));
      ASSERT_EQ(status, 200);
      ASSERT_EQ(answer["Error"], "");
    }
    for (auto [gpus, memory, cores] :
         {std::tuple{1, 3000, 5}, std::tuple{1, 10000, 20}, std::tuple{1, 20000, 50},
          std::tuple{2, 16000, 40}, std::tuple{1, 40960, 100}}) {
      Json pod = WithUid(GpuPod("d", "probe", gpus, memory, cores), "uid-probe-" + std::to_string(++probes));
      auto request = core::DerivePodRequest(pod, {});
      ASSERT_TRUE(request.ok());
      (*benchmark)->Observe(*request);
      // kube-scheduler's cycle: filter (counts the pod), prioritize.
      Json filtered = cluster.extender->Filter(ExtenderArgsFor(pod, cluster.names)).second;
      std::vector<std::string> feasible = filtered["NodeNames"];
      std::shuffle(feasible.begin(), feasible.end(), std::mt19937(probes));  // kube-scheduler's order varies
      const std::string chosen =
          ScoredTen(cluster.extender->Prioritize(ExtenderArgsFor(pod, feasible)).second);
      auto decision = placer.Choose(*request, **benchmark);
      const std::string what = "after " + std::to_string(stage) + " arrivals, " + std::to_string(gpus) + "x" +
                               std::to_string(memory) + " MiB";
      ASSERT_EQ(chosen.empty(), !decision) << what;
      if (!decision) continue;
      ++compared;
      EXPECT_EQ(chosen, placer.node(decision->node).name()) << what;
      EXPECT_EQ(cluster.extender->learner().Current()->epoch(), (*benchmark)->epoch()) << what;
      auto best_fit = placer.Choose(*request, **unlearned);
      learning_decided += best_fit && best_fit->node != decision->node;
    }
  }
  EXPECT_EQ(compared, 15);
  EXPECT_GE(learning_decided, 3) << learning_decided;
  EXPECT_EQ(cluster.extender->learner().stats().counted, 615u);
  EXPECT_EQ((*benchmark)->epoch(), 2u);
}

// kube-scheduler retries an unschedulable pod, and asks filter and then
// prioritize about it on every attempt: it counts once, by UID.
TEST(ExtenderLearningTest, APodAskedAboutManyTimesCountsOnce) {
  LearningCluster cluster;
  Extender& extender = *cluster.extender;
  Json pod = WithUid(GpuPod("d", "retried", 1, 20000, 50), "uid-retried");
  for (int attempt = 0; attempt < 20; ++attempt) {
    EXPECT_EQ(extender.Filter(ExtenderArgsFor(pod, cluster.names)).first, 200);
    EXPECT_EQ(extender.Prioritize(ExtenderArgsFor(pod, cluster.names)).first, 200);
  }
  EXPECT_EQ(extender.learner().stats().counted, 1u);
  // Another pod of the same shape is another arrival; one asked about only in
  // prioritize (its filter went to another replica) counts too.
  extender.Filter(ExtenderArgsFor(WithUid(GpuPod("d", "twin", 1, 20000, 50), "uid-twin"), cluster.names));
  extender.Prioritize(ExtenderArgsFor(WithUid(GpuPod("d", "late", 1, 20000, 50), "uid-late"), cluster.names));
  EXPECT_EQ(extender.learner().stats().counted, 3u);
  // Without a UID (not from kube-scheduler) a pod is known by namespace/name.
  for (int attempt = 0; attempt < 3; ++attempt) {
    extender.Filter(ExtenderArgsFor(GpuPod("d", "no-uid", 1, 20000, 50), cluster.names));
  }
  EXPECT_EQ(extender.learner().stats().counted, 4u);
  // Pods filter refuses, and pods asking for no GPU, are not arrivals of GPU work.
  Json bad_policy = WithUid(GpuPod("d", "x", 1, 1000, 10, {{"tessera.io/node-policy", "fastest"}}), "uid-x");
  Json bad_request = WithUid(GpuPod("d", "y", 1, 1000, 150), "uid-y");
  Json no_gpu = WithUid(GpuPod("d", "z", 1, 1000, 10), "uid-z");
  no_gpu["spec"]["containers"][0]["resources"] = Json::object();
  for (const Json& p : {bad_policy, bad_request, no_gpu}) {
    extender.Filter(ExtenderArgsFor(p, cluster.names));
    extender.Prioritize(ExtenderArgsFor(p, cluster.names));
  }
  EXPECT_EQ(extender.learner().stats().counted, 4u);
  // A pod that is gone is forgotten; its count stays.
  extender.ForgetPod(pod);
  EXPECT_EQ(extender.learner().stats().remembered, 3u);
  EXPECT_EQ(extender.learner().stats().counted, 4u);
}

// Scores are cached per shape and policy epoch; the scores of the previous
// mix are dropped when the mix is relearned, and only then.
TEST(ExtenderLearningTest, RelearningDropsTheCachedScoresAndOnlyThen) {
  LearningCluster cluster;
  Extender& extender = *cluster.extender;
  core::Placer placer = cluster.Placer();
  auto benchmark = core::MakePolicy("tessera");
  ASSERT_TRUE(benchmark.ok());
  int uid = 0;
  auto arrive = [&](const Json& pod) {
    Json p = WithUid(pod, "uid-" + std::to_string(++uid));
    (*benchmark)->Observe(*core::DerivePodRequest(p, {}));
    return p;
  };
  auto choose = [&](const Json& probe) {
    Json p = arrive(probe);
    extender.Filter(ExtenderArgsFor(p, cluster.names));
    return ScoredTen(extender.Prioritize(ExtenderArgsFor(p, cluster.names)).second);
  };
  extender.Filter(ExtenderArgsFor(arrive(GpuPod("d", "a", 1, 40960, 100)), cluster.names));  // mix 1
  ASSERT_EQ(extender.learner().Current()->epoch(), 1u);
  const std::vector<Json> probes = {GpuPod("d", "p", 1, 3000, 5), GpuPod("d", "q", 1, 10000, 20),
                                    GpuPod("d", "r", 2, 16000, 40)};
  for (const Json& probe : probes) choose(probe);
  const size_t fit_and_scores = cluster.state.Stats().evaluation_caches;
  EXPECT_EQ(fit_and_scores, 1u + 2 * probes.size());  // fit|a, fit|probe and tessera@1|probe each
  // Pods of a shape already cached, up to the 512th pod since the first mix:
  // nothing is dropped.
  while (extender.learner().stats().counted < 512) {
    extender.Filter(ExtenderArgsFor(arrive(GpuPod("d", "a", 1, 40960, 100)), cluster.names));
  }
  EXPECT_EQ(extender.learner().Current()->epoch(), 1u);
  EXPECT_EQ(cluster.state.Stats().evaluation_caches, fit_and_scores);
  // The 513th relearns: the scores of mix 1 go, the fit verdicts stay.
  extender.Filter(ExtenderArgsFor(arrive(GpuPod("d", "a", 1, 40960, 100)), cluster.names));
  EXPECT_EQ(extender.learner().Current()->epoch(), 2u);
  EXPECT_EQ(cluster.state.Stats().evaluation_caches, 1u + probes.size());
  // And the choices are the new mix's.
  for (const Json& probe : probes) {
    const std::string chosen = choose(probe);
    auto decision = placer.Choose(*core::DerivePodRequest(probe, {}), **benchmark);
    ASSERT_TRUE(decision);
    EXPECT_EQ(chosen, placer.node(decision->node).name());
  }
}

std::string CreatedAt(int second) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "2026-11-23T%02d:%02d:%02dZ", 10 + second / 3600, second / 60 % 60,
                second % 60);
  return buf;
}

// After a restart the pods the API server lists are counted as if they had
// arrived: in creation order, only those filter would have counted, and the
// mix then equals that of a scheduler that saw them arrive.
TEST(ExtenderLearningTest, ListedPodsAreCountedAsTheirArrivalsWere) {
  // 700 pods; the first 513 in creation order are mostly one shape, the rest
  // another, so the mix learned at the 513th pod depends on the order. Names
  // run against creation order, so sorting by name would get it wrong.
  std::vector<Json> arrived;
  for (int i = 0; i < 700; ++i) {
    Json pod = i < 513 ? (i % 4 ? GpuPod("d", "", 1, 20000, 50) : GpuPod("d", "", 1, 6000, 10))
                       : (i % 4 ? GpuPod("d", "", 2, 40960, 100) : GpuPod("d", "", 1, 6000, 10));
    pod["metadata"]["name"] = "pod-" + std::to_string(1000 - i);
    pod["metadata"]["uid"] = "uid-" + std::to_string(i);
    pod["metadata"]["creationTimestamp"] = CreatedAt(i);
    pod["status"]["phase"] = i % 3 ? "Running" : "Pending";
    arrived.push_back(std::move(pod));
  }
  LearningCluster live;
  for (const Json& pod : arrived) live.extender->Filter(ExtenderArgsFor(pod, live.names));

  std::vector<Json> listed = arrived;
  // Placed by tessera under another schedulerName: counted.
  listed[5]["spec"]["schedulerName"] = "renamed";
  listed[5]["metadata"]["annotations"]["tessera.io/allocation"] = "{}";
  // Not counted: finished, another scheduler's, no GPU, refused by filter.
  auto extra = [&](Json pod, const std::string& uid) {
    pod["metadata"]["uid"] = uid;
    pod["metadata"]["creationTimestamp"] = CreatedAt(100);
    listed.push_back(std::move(pod));
  };
  Json done = GpuPod("d", "done", 1, 1000, 10);
  done["status"]["phase"] = "Succeeded";
  extra(done, "uid-done");
  Json failed = GpuPod("d", "failed", 1, 1000, 10);
  failed["status"]["phase"] = "Failed";
  extra(failed, "uid-failed");
  Json elsewhere = GpuPod("d", "elsewhere", 1, 1000, 10);
  elsewhere["spec"]["schedulerName"] = "default-scheduler";
  extra(elsewhere, "uid-elsewhere");
  Json cpu = GpuPod("d", "cpu", 1, 1000, 10);
  cpu["spec"]["containers"][0]["resources"] = Json::object();
  extra(cpu, "uid-cpu");
  extra(GpuPod("d", "bad", 1, 1000, 150), "uid-bad");
  extra(GpuPod("d", "policy", 1, 1000, 10, {{"hami.io/node-scheduler-policy", "fastest"}}), "uid-policy");
  std::shuffle(listed.begin(), listed.end(), std::mt19937(3));  // the API lists by name, not by age

  LearningCluster restarted;
  EXPECT_EQ(restarted.extender->ObserveListedPods(listed), 700u);
  const auto& a = live.extender->learner();
  const auto& b = restarted.extender->learner();
  EXPECT_EQ(b.stats().counted, 700u);
  EXPECT_EQ(b.Current()->epoch(), a.Current()->epoch());
  ASSERT_EQ(b.Current()->mix().size(), a.Current()->mix().size());
  for (size_t i = 0; i < a.Current()->mix().size(); ++i) {
    EXPECT_EQ(b.Current()->mix()[i].shape, a.Current()->mix()[i].shape);
    EXPECT_EQ(b.Current()->mix()[i].weight, a.Current()->mix()[i].weight);
  }
  // The same choices.
  for (const Json& probe : {GpuPod("d", "p", 1, 3000, 5), GpuPod("d", "q", 1, 20000, 50)}) {
    std::string choice[2];
    int k = 0;
    for (LearningCluster* c : {&live, &restarted}) {
      Json p = WithUid(probe, "uid-probe-" + std::string(probe["metadata"]["name"]));
      c->extender->Filter(ExtenderArgsFor(p, c->names));
      choice[k++] = ScoredTen(c->extender->Prioritize(ExtenderArgsFor(p, c->names)).second);
    }
    EXPECT_EQ(choice[0], choice[1]);
    EXPECT_NE(choice[0], "");
  }
  // A listed pod that kube-scheduler asks about again is not counted again.
  restarted.extender->Filter(ExtenderArgsFor(arrived[600], restarted.names));
  EXPECT_EQ(b.stats().counted, 702u);  // 700 + the two probes
  EXPECT_EQ(restarted.extender->ObserveListedPods(listed), 0u);

  // Noted as they arrive (the scheduler's start), with updates and deletions
  // on the way: the same count and mix as the list of what is left.
  LearningCluster noted;
  const core::ResourceConfig resources;
  auto note = [&](const Json& pod) { noted.extender->NoteListedPod(PodDigest(pod, resources)); };
  Json gone = GpuPod("d", "gone", 1, 9000, 10);
  gone["metadata"]["uid"] = "uid-gone";
  gone["metadata"]["creationTimestamp"] = CreatedAt(1);
  note(gone);
  // Enough events to compact the notes on the way (every 4,096 records).
  for (int round = 0; round < 6; ++round) {
    for (const Json& pod : listed) {
      Json earlier = GpuPod("d", "x", 1, 1000 + 1000 * round, 10);
      earlier["metadata"] = pod["metadata"];
      note(earlier);
    }
  }
  for (size_t i = 0; i < listed.size(); ++i) {
    if (i % 50 == 0) {  // first seen with another shape and age, then updated
      Json earlier = GpuPod("d", "x", 2, 40960, 100);
      earlier["metadata"] = listed[i]["metadata"];
      earlier["metadata"]["creationTimestamp"] = CreatedAt(0);
      note(earlier);
    }
    note(listed[i]);
  }
  Json finished = listed[7];
  finished["status"]["phase"] = "Succeeded";
  note(finished);
  note(listed[7]);
  Json left = listed[8];
  note(left);
  noted.extender->DropListedPod(gone);
  EXPECT_EQ(noted.extender->ObserveNotedPods(), 700u);
  const auto& c = noted.extender->learner();
  EXPECT_EQ(c.Current()->epoch(), restarted.extender->learner().Current()->epoch());
  ASSERT_EQ(c.Current()->mix().size(), a.Current()->mix().size());
  for (size_t i = 0; i < a.Current()->mix().size(); ++i) {
    EXPECT_EQ(c.Current()->mix()[i].shape, a.Current()->mix()[i].shape);
    EXPECT_EQ(c.Current()->mix()[i].weight, a.Current()->mix()[i].weight);
  }
  // The count ends the noting.
  Json late = GpuPod("d", "late", 1, 9000, 10);
  late["metadata"]["uid"] = "uid-late";
  note(late);
  EXPECT_EQ(noted.extender->ObserveNotedPods(), 0u);
  EXPECT_EQ(c.stats().counted, 700u);
}

}  // namespace
}  // namespace tessera::scheduler
