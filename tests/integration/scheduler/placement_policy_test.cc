// One placement path (issue 18 item 1): what bind commits is the placement
// the configured policy chose — tessera's GPUs by default, HAMi's binpack or
// spread when a pod's annotation or the configuration asks for it — through
// the API-server stand-in and the extender's HTTP verbs, as kube-scheduler
// calls them.
#include "core/pod_request.h"
#include "core/policy.h"
#include "fixture.h"

namespace tessera::scheduler::it {
namespace {

using scheduler::testing::GpuPod;
using scheduler::testing::GpuUuid;

class PlacementPolicyTest : public SchedulerIntegrationTest {
 protected:
  // A pod asking one vGPU of `mib` MiB (no core limit), created in the stand-in.
  Json CreatePod(const std::string& name, int64_t mib, const Json& annotations = Json::object()) {
    auto r = server_->CreateObject("pods", GpuPod("default", name, 1, mib, 0, annotations));
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : Json();
  }

  // The GPU (UUID) of the pod's one device, as its allocation annotation says.
  std::string GpuOf(const std::string& name) const {
    auto pod = server_->GetObject("pods", "default", name);
    if (!pod) return "no pod";
    auto text = (*pod)["metadata"]["annotations"].value(std::string(core::kAllocationAnnotation), "");
    auto allocation = core::DecodeAllocation(text);
    if (!allocation.ok()) return "no allocation";
    return allocation->containers.at(0).devices.at(0).uuid;
  }

  void Schedule(const Json& pod, const std::vector<std::string>& nodes) {
    Attempt a = ScheduleOnce(scheduler_->port(), pod, nodes);
    ASSERT_EQ(a.outcome, Outcome::kBound) << a.message;
    const std::string name = pod["metadata"]["name"];
    // The informer has applied it: the next decision sees it.
    ASSERT_TRUE(WaitFor([&] { return scheduler_->state().AllocationOf("default/" + name).has_value(); }));
    ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().reservations == 0; }));
  }

  // One node of three 10000 MiB GPUs with 6000 MiB used on the first and 3000
  // on the second, and a `tessera` mix learned from 4000 MiB pods: the first
  // pod the extender is asked about is a 4000 MiB one (it stays pending), and
  // the mix is learned at the first arrival (the next relearn is 512 pods
  // away). The two pods that make the usage say by HAMi's annotation which
  // GPUs they take.
  void SetUpThreeGpus() {
    ASSERT_TRUE(
        server_->CreateObject("nodes", scheduler::testing::NodeWithGpus("gpu-node", 1, 3, 10000)).ok());
    nodes_ = {"gpu-node"};
    ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().nodes == 1; }));
    Json waiting = CreatePod("waiting-4000", 4000);
    httplib::Client http("127.0.0.1", scheduler_->port());
    http.set_connection_timeout(5);
    http.set_read_timeout(30);
    Json args = {{"Pod", waiting}, {"Nodes", nullptr}, {"NodeNames", nodes_}};
    auto filter = http.Post("/filter", args.dump(), "application/json");
    ASSERT_TRUE(filter && filter->status == 200);
    Schedule(CreatePod("a-6000", 6000, {{"hami.io/gpu-scheduler-policy", "binpack"}}), nodes_);
    Schedule(CreatePod("b-3000", 3000, {{"hami.io/gpu-scheduler-policy", "spread"}}), nodes_);
    ASSERT_EQ(GpuOf("a-6000"), GpuUuid(1, 0));
    ASSERT_EQ(GpuOf("b-3000"), GpuUuid(1, 1));
  }

  // GPU uuid the core's FitNode would pick on the node as the scheduler has it now.
  std::string FitNodeGpu(const Json& pod, core::GpuOrder order) const {
    auto request = core::DerivePodRequest(pod, {});
    const core::NodeState node = *scheduler_->state().Node("gpu-node");
    core::FitResult fit = core::FitNode(node, *request, order);
    return fit.fits ? node.gpus()[fit.placement.containers.at(0).slices.at(0).gpu].gpu.uuid : "no fit";
  }

  std::vector<std::string> nodes_;
};

TEST_F(PlacementPolicyTest, BindCommitsTheGpusTheTesseraPolicyChose) {
  scheduler_ = StartScheduler(Config());  // the default policy: tessera, its own GPUs
  ASSERT_EQ(Config().node_policy, "tessera");
  SetUpThreeGpus();

  Json pod = CreatePod("new-3000", 3000);
  // What core's tessera policy, told about the same pods in the same order,
  // chooses on this node — and what either FitNode order would have taken.
  std::unique_ptr<core::Policy> tessera = std::move(core::MakePolicy("tessera").value());
  for (const char* name : {"waiting-4000", "a-6000", "b-3000", "new-3000"}) {
    tessera->Observe(*core::DerivePodRequest(*server_->GetObject("pods", "default", name), {}));
  }
  const core::NodeState node = *scheduler_->state().Node("gpu-node");
  auto request = core::DerivePodRequest(pod, {});
  auto candidate = tessera->Evaluate(node, *request);
  ASSERT_TRUE(candidate.has_value());
  const std::string chosen = node.gpus()[candidate->placement.containers[0].slices[0].gpu].gpu.uuid;
  EXPECT_EQ(chosen, GpuUuid(1, 1));
  const std::string binpack = FitNodeGpu(pod, core::GpuOrder::kBinpack);
  const std::string spread = FitNodeGpu(pod, core::GpuOrder::kSpread);
  ASSERT_NE(chosen, binpack) << "the test needs a node where the orders differ from the policy";
  ASSERT_NE(chosen, spread);

  const ClusterStats before = scheduler_->state().Stats();
  Schedule(pod, nodes_);
  EXPECT_EQ(GpuOf("new-3000"), chosen);
  // Prioritize's candidate was committed, not evaluated again.
  EXPECT_EQ(scheduler_->state().Stats().reserves_from_cache, before.reserves_from_cache + 1);
  EXPECT_EQ(scheduler_->state().Stats().reserves_evaluated, before.reserves_evaluated);
}

TEST_F(PlacementPolicyTest, HamiAnnotationsChooseBinpackOrSpreadPerPod) {
  scheduler_ = StartScheduler(Config());
  SetUpThreeGpus();
  // GPU level: the same 3000 MiB pod, once per HAMi value, against the same
  // node (each given back after its bind is checked).
  for (auto [value, order] :
       {std::pair{"binpack", core::GpuOrder::kBinpack}, std::pair{"spread", core::GpuOrder::kSpread}}) {
    const std::string name = std::string("gpu-") + value;
    Json pod = CreatePod(name, 3000, {{"hami.io/gpu-scheduler-policy", value}});
    const std::string want = FitNodeGpu(pod, order);
    Schedule(pod, nodes_);
    EXPECT_EQ(GpuOf(name), want) << value;
    ASSERT_TRUE(server_->DeleteObject("pods", "default", name).ok());
    ASSERT_TRUE(WaitFor([&] { return !scheduler_->state().AllocationOf("default/" + name).has_value(); }));
  }
  EXPECT_EQ(GpuOf("gpu-binpack"), "no pod");

  // Node level: a fuller and an empty node.
  ASSERT_TRUE(
      server_->CreateObject("nodes", scheduler::testing::NodeWithGpus("empty-node", 2, 3, 10000)).ok());
  ASSERT_TRUE(WaitFor([&] { return scheduler_->state().Stats().nodes == 2; }));
  const std::vector<std::string> both = {"empty-node", "gpu-node"};
  Schedule(CreatePod("node-binpack", 1000, {{"hami.io/node-scheduler-policy", "binpack"}}), both);
  EXPECT_EQ(server_->GetObject("pods", "default", "node-binpack")->at("spec").value("nodeName", ""),
            "gpu-node");
  Schedule(CreatePod("node-spread", 1000, {{"hami.io/node-scheduler-policy", "spread"}}), both);
  EXPECT_EQ(server_->GetObject("pods", "default", "node-spread")->at("spec").value("nodeName", ""),
            "empty-node");
  // A value HAMi does not document is refused at filter, naming the annotation.
  Json bad = CreatePod("bad", 1000, {{"hami.io/gpu-scheduler-policy", "fullest"}});
  Attempt a = ScheduleOnce(scheduler_->port(), bad, both);
  EXPECT_EQ(a.outcome, Outcome::kError);
  EXPECT_NE(a.message.find("hami.io/gpu-scheduler-policy"), std::string::npos) << a.message;
}

TEST_F(PlacementPolicyTest, TheClusterCanChooseHamisPoliciesInItsConfiguration) {
  SchedulerConfig config = Config();
  config.node_policy = "binpack";
  config.gpu_policy = "spread";  // HAMi's defaults
  scheduler_ = StartScheduler(config);
  SetUpThreeGpus();
  Json pod = CreatePod("new-3000", 3000);
  const std::string want = FitNodeGpu(pod, core::GpuOrder::kSpread);
  EXPECT_EQ(want, GpuUuid(1, 2));
  Schedule(pod, nodes_);
  EXPECT_EQ(GpuOf("new-3000"), want);
  // The pod's tessera annotation wins over the configuration.
  Json own = CreatePod("own-3000", 3000, {{"tessera.io/gpu-policy", "binpack"}});
  const std::string binpack = FitNodeGpu(own, core::GpuOrder::kBinpack);
  Schedule(own, nodes_);
  EXPECT_EQ(GpuOf("own-3000"), binpack);
}

}  // namespace
}  // namespace tessera::scheduler::it
