// Sharing modes per GPU (issue 15, the scheduler's half) through the real
// Scheduler over HTTP against the API-server stand-in: one node whose
// inventory has one GPU in each mode (vgpu, exclusive, timeslice with 4
// replicas, mps sized per request, mps split into 2 replicas, mig-dynamic).
// The test plays kube-scheduler (filter, prioritize, bind) and checks:
//  - vGPU pods land only on the vgpu GPU, whole-GPU pods on the exclusive one;
//  - MPS pods (annotation or alias resources) land only on the mps GPU, with
//    the allocation marking the MPS share and memory/cores counted exactly:
//    what is left fits, one MiB more does not, and a restarted scheduler
//    relearns the same from the pods' annotations;
//  - a pod asking only a replica resource is left alone by the webhook and
//    passes filter on every node, and its bind writes no allocation;
//  - impossible MPS requests are refused with the reason.
#include "core/inventory_codec.h"
#include "fixture.h"

namespace tessera::scheduler::it {
namespace {

constexpr const char* kNode = "modes-node";
constexpr int kNodeId = 7;
constexpr int64_t kGpuMiB = 81920;

enum GpuIndex { kVgpuGpu, kExclusiveGpu, kTimesliceGpu, kMpsGpu, kMpsReplicaGpu, kMigGpu };

Json ModesNode() {
  Json node = testing::NodeWithGpus(kNode, kNodeId, 6, kGpuMiB, 10);
  auto& text = node["metadata"]["annotations"][std::string(core::kInventoryAnnotation)];
  auto inv = core::DecodeInventory(text.get<std::string>());
  if (!inv.ok()) return node;
  auto& g = inv->gpus;
  g[kExclusiveGpu].mode = core::SharingMode::kExclusive;
  g[kExclusiveGpu].slots = 1;
  g[kTimesliceGpu].mode = core::SharingMode::kTimeslice;
  g[kTimesliceGpu].replicas = 4;
  g[kTimesliceGpu].slots = 0;
  g[kMpsGpu].mode = core::SharingMode::kMps;
  g[kMpsReplicaGpu].mode = core::SharingMode::kMps;
  g[kMpsReplicaGpu].replicas = 2;
  g[kMpsReplicaGpu].slots = 0;
  g[kMigGpu].mode = core::SharingMode::kMigDynamic;
  g[kMigGpu].mig_capable = true;
  g[kMigGpu].slots = 0;
  auto encoded = core::EncodeInventory(*inv);
  text = encoded.ok() ? *encoded : "";
  return node;
}

Json PodWith(const std::string& name, const Json& limits, const Json& annotations = Json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "default"}, {"annotations", annotations}}},
          {"spec",
           {{"schedulerName", "tessera-scheduler"},
            {"hostIPC", true},
            {"containers", {{{"name", "app"}, {"image", "cuda"}, {"resources", {{"limits", limits}}}}}}}}};
}

Json MpsAliasPod(const std::string& name, int cores, int memory_gib) {
  return PodWith(name, {{"nvidia.com/mps-core", std::to_string(cores)},
                        {"nvidia.com/mps-memory", std::to_string(memory_gib)}});
}

class SharingModesTest : public SchedulerIntegrationTest {
 protected:
  void SetUp() override {
    SchedulerIntegrationTest::SetUp();
    ASSERT_TRUE(server_->CreateObject("nodes", ModesNode()).ok());
    scheduler_ = StartScheduler(Config());
  }

  Attempt Schedule(const Json& pod) {
    auto created = server_->CreateObject("pods", pod);
    if (!created.ok()) return {Outcome::kError, created.error().message};
    return ScheduleOnce(scheduler_->port(), *created, {kNode});
  }

  Json Pod(const std::string& name) const {
    auto pod = server_->GetObject("pods", "default", name);
    return pod ? *pod : Json();
  }

  // The pod's allocation, decoded (empty when it has none).
  core::PodAllocation AllocationOf(const std::string& name) const {
    const Json pod = Pod(name);
    auto annotations = pod["metadata"].value("annotations", Json::object());
    auto text = annotations.value(std::string(core::kAllocationAnnotation), "");
    if (text.empty()) return {};
    auto a = core::DecodeAllocation(text);
    EXPECT_TRUE(a.ok()) << name << ": " << text;
    return a.ok() ? *a : core::PodAllocation{};
  }

  std::string GpuOf(const std::string& name) const {
    auto a = AllocationOf(name);
    return a.containers.empty() || a.containers[0].devices.empty() ? "" : a.containers[0].devices[0].uuid;
  }

  static std::string Uuid(int gpu) { return testing::GpuUuid(kNodeId, gpu); }

  // Filter's verdict on the node: "" = passes, else its reason.
  std::string FilterReason(const Json& pod) {
    httplib::Client http("127.0.0.1", scheduler_->port());
    Json args = {{"Pod", pod}, {"NodeNames", {kNode}}};
    auto res = http.Post("/filter", args.dump(), "application/json");
    if (!res) return "(no answer)";
    Json r = Json::parse(res->body);
    if (!r.value("Error", "").empty()) return "error: " + r["Error"].get<std::string>();
    if (r["NodeNames"].is_array() && !r["NodeNames"].empty()) return "";
    return r["FailedNodes"].value(kNode, r.dump());
  }
};

TEST_F(SharingModesTest, EachRequestLandsOnlyOnTheGpuOfItsMode) {
  // vGPU slices: only the vgpu GPU, as long as it has room.
  for (int i = 0; i < 3; ++i) {
    const std::string name = "slice-" + std::to_string(i);
    Attempt a = Schedule(testing::GpuPod("default", name, 1, 20000, 20));
    ASSERT_EQ(a.outcome, Outcome::kBound) << a.message;
    EXPECT_EQ(GpuOf(name), Uuid(kVgpuGpu));
    EXPECT_FALSE(AllocationOf(name).containers[0].devices[0].mps);
  }
  Attempt full = Schedule(testing::GpuPod("default", "slice-3", 1, 30000, 20));
  EXPECT_EQ(full.outcome, Outcome::kUnschedulable) << "no other GPU takes vGPU slices: " << full.message;
  EXPECT_NE(full.message.find("which kube-scheduler counts"), std::string::npos) << full.message;

  // A whole GPU: the exclusive one, held whole.
  Attempt whole =
      Schedule(PodWith("whole", {{"nvidia.com/gpu", "1"}}, {{"nvidia.com/vgpu-mode", "exclusive"}}));
  ASSERT_EQ(whole.outcome, Outcome::kBound) << whole.message;
  const core::PodAllocation w = AllocationOf("whole");
  ASSERT_EQ(w.containers.size(), 1u);
  EXPECT_EQ(w.containers[0].devices[0], (core::DeviceSlice{Uuid(kExclusiveGpu), kGpuMiB, 100}));

  // MPS shares: only the sized mps GPU, with the share marked and exact.
  Attempt mps = Schedule(MpsAliasPod("mps-a", 30, 20));
  ASSERT_EQ(mps.outcome, Outcome::kBound) << mps.message;
  core::DeviceSlice expected{Uuid(kMpsGpu), 20 * 1024, 30};
  expected.mps = true;
  EXPECT_EQ(AllocationOf("mps-a").containers[0].devices[0], expected);
  // Bind writes the container's MPS values, which the webhook wires into
  // CUDA_MPS_ACTIVE_THREAD_PERCENTAGE / CUDA_MPS_PINNED_DEVICE_MEM_LIMIT.
  const Json mps_annotations = Pod("mps-a")["metadata"]["annotations"];
  EXPECT_EQ(mps_annotations.value("tessera.io/mps-thread-percentage.0", ""), "30");
  EXPECT_EQ(mps_annotations.value("tessera.io/mps-pinned-memory.0", ""), "0=20480M");
  EXPECT_EQ(mps_annotations.value("tessera.io/visible-devices.0", ""), Uuid(kMpsGpu));
  EXPECT_FALSE(Pod("slice-0")["metadata"]["annotations"].contains("tessera.io/mps-pinned-memory.0"));
  const Json annotated = PodWith(
      "mps-b", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "40000"}, {"nvidia.com/gpucores", "50"}},
      {{"nvidia.com/vgpu-mode", "mps"}});
  Attempt b = Schedule(annotated);
  ASSERT_EQ(b.outcome, Outcome::kBound) << b.message;
  EXPECT_EQ(GpuOf("mps-b"), Uuid(kMpsGpu));
  EXPECT_TRUE(AllocationOf("mps-b").containers[0].devices[0].mps);
  // 81920 - 20480 - 40000 = 21440 MiB and 20 % are left: one MiB or one
  // percent more is refused, exactly that fits.
  const int64_t left = kGpuMiB - 20 * 1024 - 40000;
  auto mps_pod = [](const std::string& name, int64_t mib, int cores) {
    return PodWith(name,
                   {{"nvidia.com/gpu", "1"},
                    {"nvidia.com/gpumem", std::to_string(mib)},
                    {"nvidia.com/gpucores", std::to_string(cores)}},
                   {{"nvidia.com/vgpu-mode", "mps"}});
  };
  Attempt over_memory = Schedule(mps_pod("mps-over-memory", left + 1, 20));
  EXPECT_EQ(over_memory.outcome, Outcome::kUnschedulable) << over_memory.message;
  EXPECT_NE(over_memory.message.find("not enough memory"), std::string::npos) << over_memory.message;
  Attempt over_cores = Schedule(mps_pod("mps-over-cores", left, 21));
  EXPECT_EQ(over_cores.outcome, Outcome::kUnschedulable) << over_cores.message;
  EXPECT_NE(over_cores.message.find("not enough cores"), std::string::npos) << over_cores.message;
  Attempt exact = Schedule(mps_pod("mps-exact", left, 20));
  ASSERT_EQ(exact.outcome, Outcome::kBound) << exact.message;
  EXPECT_EQ(GpuOf("mps-exact"), Uuid(kMpsGpu));
  int bound = 0;
  EXPECT_EQ(CheckNoOvercommit(*server_, &bound), std::vector<std::string>{});
  EXPECT_EQ(bound, 7);

  // A restarted scheduler relearns the shares from the pods: still full.
  scheduler_.reset();
  scheduler_ = StartScheduler(Config());
  ASSERT_TRUE(WaitFor([&] { return !FilterReason(mps_pod("probe", 1, 1)).empty(); }));
  EXPECT_NE(FilterReason(mps_pod("probe", 1, 1)).find("GPU-"), std::string::npos);
  Json small_vgpu = testing::GpuPod("default", "probe-vgpu", 1, 1000, 10);
  EXPECT_EQ(FilterReason(small_vgpu), "") << "the vgpu GPU still has 21920 MiB";
}

TEST_F(SharingModesTest, ReplicaOnlyPodsAreLeftToKubeScheduler) {
  const Json replica = PodWith("replica", {{"nvidia.com/gpu.shared", "1"}});
  // The webhook leaves it alone: no patch, no scheduler name, no env.
  httplib::Client http("127.0.0.1", scheduler_->port());
  Json review = {{"apiVersion", "admission.k8s.io/v1"},
                 {"kind", "AdmissionReview"},
                 {"request", {{"uid", "u-r"}, {"object", replica}}}};
  auto mutate = http.Post("/mutate", review.dump(), "application/json");
  ASSERT_TRUE(mutate);
  Json answer = Json::parse(mutate->body);
  EXPECT_EQ(answer["response"]["allowed"], true);
  EXPECT_FALSE(answer["response"].contains("patch")) << answer.dump();
  // Sent to the extender anyway, it passes and is bound with no allocation.
  Attempt a = Schedule(replica);
  ASSERT_EQ(a.outcome, Outcome::kBound) << a.message;
  EXPECT_EQ(Pod("replica")["spec"]["nodeName"], kNode);
  EXPECT_TRUE(AllocationOf("replica").containers.empty());
  int bound = 0;
  EXPECT_EQ(CheckNoOvercommit(*server_, &bound), std::vector<std::string>{});
  EXPECT_EQ(bound, 0) << "nothing of any GPU is counted for it";
}

TEST_F(SharingModesTest, ImpossibleMpsRequestsAreRefusedWithTheReason) {
  // More memory than the GPU: admitted by neither the webhook nor filter.
  const Json too_big = MpsAliasPod("too-big", 50, 100);
  httplib::Client http("127.0.0.1", scheduler_->port());
  Json review = {{"apiVersion", "admission.k8s.io/v1"},
                 {"kind", "AdmissionReview"},
                 {"request", {{"uid", "u-b"}, {"object", too_big}}}};
  auto mutate = http.Post("/mutate", review.dump(), "application/json");
  ASSERT_TRUE(mutate);
  Json answer = Json::parse(mutate->body);
  EXPECT_EQ(answer["response"]["allowed"], false);
  EXPECT_NE(answer["response"]["status"]["message"].get<std::string>().find(
                "an MPS share of 102400 MiB is more than the largest GPU in the cluster (81920 MiB)"),
            std::string::npos)
      << answer.dump();
  const std::string reason = FilterReason(too_big);
  EXPECT_NE(reason.find("102400 MiB asked, more than the GPU's 81920 MiB"), std::string::npos) << reason;
  // Cores outside 1..100: the request itself is refused, naming the field.
  for (const char* cores : {"0", "101"}) {
    Json bad = MpsAliasPod(std::string("cores-") + cores, 50, 8);
    bad["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mps-core"] = cores;
    const std::string why = FilterReason(bad);
    EXPECT_NE(why.find(std::string("nvidia.com/mps-core is \"") + cores + "\""), std::string::npos) << why;
  }
  int bound = 0;
  EXPECT_EQ(CheckNoOvercommit(*server_, &bound), std::vector<std::string>{});
  EXPECT_EQ(bound, 0);
}

}  // namespace
}  // namespace tessera::scheduler::it
