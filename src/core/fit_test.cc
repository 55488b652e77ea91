#include "core/fit.h"
#include "core/testing.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <set>

namespace tessera::core {
namespace {

using ::testing::HasSubstr;

Gpu MakeGpu(const std::string& uuid, const std::string& model = "NVIDIA A100-SXM4-80GB",
            int64_t memory = 80000, int numa = 0) {
  return TestGpu(uuid, model, memory, /*slots=*/4, numa);
}

PodAllocation AllocOn(const std::string& node, const std::string& uuid, int64_t memory, int cores) {
  return PodAllocation{node, {{"c", {{uuid, memory, cores}}, false}}};
}

GpuReason OnlyReason(const FitResult& r) {
  EXPECT_FALSE(r.fits);
  EXPECT_EQ(r.rejections.size(), 1u);
  return r.rejections.empty() ? GpuReason::kFits : r.rejections[0].check.reason;
}

TEST(FitTest, FitsOnAFreeGpu) {
  NodeState node("n", {MakeGpu("GPU-a")});
  FitResult r = FitNode(node, AppRequest(3000, 30));
  ASSERT_TRUE(r.fits) << r.message;
  ASSERT_EQ(r.placement.containers.size(), 1u);
  EXPECT_EQ(r.placement.containers[0].slices, (std::vector<SlicePlacement>{{0, 3000, 30}}));
}

TEST(FitTest, UnhealthyGpuIsRejected) {
  Gpu g = MakeGpu("GPU-a");
  g.healthy = false;
  NodeState node("n", {g});
  FitResult r = FitNode(node, AppRequest(1000, 10));
  EXPECT_EQ(OnlyReason(r), GpuReason::kUnhealthy);
  EXPECT_THAT(r.message, HasSubstr("unhealthy"));
}

TEST(FitTest, AGpuInMigModeTakesNoVgpuSlices) {
  Gpu mig = MakeGpu("GPU-a");
  mig.mig_capable = true;
  mig.mode = SharingMode::kMigDynamic;
  NodeState node("n", {mig, MakeGpu("GPU-b")});
  EXPECT_EQ(node.gpus()[0].free_milli(), 0);
  FitResult r = FitNode(node, AppRequest(1000, 10));
  ASSERT_TRUE(r.fits) << r.message;
  EXPECT_EQ(r.placement.containers[0].slices[0].gpu, 1) << "the slice goes to the GPU outside MIG";
  NodeState only_mig("n", {mig});
  FitResult refused = FitNode(only_mig, AppRequest(1000, 10));
  ASSERT_FALSE(refused.fits);
  EXPECT_EQ(OnlyReason(refused), GpuReason::kInMigMode);
  EXPECT_EQ(ReasonName(GpuReason::kInMigMode), "gpu-in-mig-mode");
  EXPECT_THAT(refused.message, HasSubstr("in MIG mode"));
}

TEST(FitTest, AGpuHeldByAPodTesseraDidNotPlaceIsRejected) {
  Gpu g = MakeGpu("GPU-a");
  g.held_by = "ml/legacy";
  NodeState node("n", {g, MakeGpu("GPU-b")});
  EXPECT_EQ(node.gpus()[0].free_milli(), 0);
  EXPECT_EQ(node.free_milli_total(), 1000) << "only GPU-b counts as free";
  FitResult r = FitNode(node, AppRequest(1000, 10, 2));
  EXPECT_FALSE(r.fits);
  EXPECT_THAT(r.message, HasSubstr("held whole by pod ml/legacy, which tessera-scheduler did not place"));
  FitResult one = FitNode(node, AppRequest(1000, 10));
  ASSERT_TRUE(one.fits) << one.message;
  EXPECT_EQ(one.placement.containers[0].slices[0].gpu, 1);
}

TEST(FitTest, TypeFilterIsCaseInsensitiveSubstring) {
  NodeState node("n", {MakeGpu("GPU-a", "NVIDIA A100-SXM4-80GB")});
  PodRequest use = AppRequest(1000, 10);
  use.filter.use_types = {"a100"};
  EXPECT_TRUE(FitNode(node, use).fits);
  use.filter.use_types = {"V100"};
  EXPECT_EQ(OnlyReason(FitNode(node, use)), GpuReason::kTypeNotAllowed);
  PodRequest nouse = AppRequest(1000, 10);
  nouse.filter.nouse_types = {"sxm4"};
  EXPECT_EQ(OnlyReason(FitNode(node, nouse)), GpuReason::kTypeNotAllowed);
}

TEST(FitTest, UuidFilter) {
  NodeState node("n", {MakeGpu("GPU-a"), MakeGpu("GPU-b")});
  PodRequest p = AppRequest(1000, 10);
  p.filter.use_uuids = {"GPU-b"};
  FitResult r = FitNode(node, p);
  ASSERT_TRUE(r.fits);
  EXPECT_EQ(r.placement.containers[0].slices[0].gpu, 1);
  p.filter.use_uuids.clear();
  p.filter.nouse_uuids = {"GPU-a", "GPU-b"};
  r = FitNode(node, p);
  EXPECT_FALSE(r.fits);
  ASSERT_EQ(r.rejections.size(), 2u);
  EXPECT_EQ(r.rejections[0].check.reason, GpuReason::kUuidNotAllowed);
}

TEST(FitTest, NoFreeSlot) {
  Gpu g = MakeGpu("GPU-a");
  g.slots = 1;
  NodeState node("n", {g});
  ASSERT_TRUE(node.Apply(AllocOn("n", "GPU-a", 1000, 10)).ok());
  FitResult r = FitNode(node, AppRequest(1000, 10));
  EXPECT_EQ(OnlyReason(r), GpuReason::kNoFreeSlot);
  EXPECT_THAT(r.message, HasSubstr("slot"));
}

TEST(FitTest, NotEnoughMemorySaysFreeVersusAsked) {
  NodeState node("n", {MakeGpu("GPU-a", "A100", 16000)});
  ASSERT_TRUE(node.Apply(AllocOn("n", "GPU-a", 15000, 10)).ok());
  FitResult r = FitNode(node, AppRequest(3000, 10));
  EXPECT_EQ(OnlyReason(r), GpuReason::kInsufficientMemory);
  EXPECT_EQ(r.rejections[0].check.asked, 3000);
  EXPECT_EQ(r.rejections[0].check.free, 1000);
  EXPECT_THAT(r.message, HasSubstr("3000 MiB asked, 1000 MiB free"));
}

TEST(FitTest, NotEnoughCores) {
  NodeState node("n", {MakeGpu("GPU-a")});
  ASSERT_TRUE(node.Apply(AllocOn("n", "GPU-a", 1000, 80)).ok());
  FitResult r = FitNode(node, AppRequest(1000, 30));
  EXPECT_EQ(OnlyReason(r), GpuReason::kInsufficientCores);
  EXPECT_THAT(r.message, HasSubstr("30% asked, 20% free"));
}

TEST(FitTest, ExclusiveHolderBlocksOthersAndExclusiveNeedsIdleGpu) {
  NodeState node("n", {MakeGpu("GPU-a"), MakeGpu("GPU-b")});
  ASSERT_TRUE(node.Apply(AllocOn("n", "GPU-a", 1000, 100)).ok());
  ASSERT_TRUE(node.Apply(AllocOn("n", "GPU-b", 1000, 10)).ok());
  FitResult shared = FitNode(node, AppRequest(1000, 10));
  ASSERT_TRUE(shared.fits);
  EXPECT_EQ(shared.placement.containers[0].slices[0].gpu, 1);  // not the held GPU
  FitResult exclusive = FitNode(node, AppRequest(1000, 100));
  ASSERT_FALSE(exclusive.fits);
  ASSERT_EQ(exclusive.rejections.size(), 2u);
  EXPECT_EQ(exclusive.rejections[0].check.reason, GpuReason::kHeldExclusively);
  EXPECT_EQ(exclusive.rejections[1].check.reason, GpuReason::kNeedsExclusive);
}

TEST(FitTest, HostCpuAndMemoryAreNodeLevelReasons) {
  NodeState node("n", {MakeGpu("GPU-a")}, {4000, 8192});
  PodRequest p = AppRequest(1000, 10);
  p.cpu_milli = 5000;
  FitResult r = FitNode(node, p);
  EXPECT_FALSE(r.fits);
  EXPECT_EQ(r.node_reason, NodeReason::kInsufficientCpu);
  p.cpu_milli = 1000;
  p.host_memory_mib = 10000;
  r = FitNode(node, p);
  EXPECT_EQ(r.node_reason, NodeReason::kInsufficientHostMemory);
  EXPECT_THAT(r.message, HasSubstr("10000 MiB asked, 8192 MiB free"));
}

TEST(FitTest, MemoryPercentResolvesPerGpuAndZeroMeansWholeGpu) {
  NodeState node("n", {MakeGpu("GPU-a", "A10", 24000), MakeGpu("GPU-b", "A100", 80000)});
  PodRequest p = AppRequest(0, 10, 2);
  p.containers[0].memory_percent = 25;
  FitResult r = FitNode(node, p);
  ASSERT_TRUE(r.fits);
  auto slices = r.placement.containers[0].slices;
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0].memory_mib, 6000);
  EXPECT_EQ(slices[1].memory_mib, 20000);
  FitResult whole = FitNode(node, AppRequest(0, 10));
  ASSERT_TRUE(whole.fits);
  int g = whole.placement.containers[0].slices[0].gpu;
  EXPECT_EQ(whole.placement.containers[0].slices[0].memory_mib, node.gpus()[g].gpu.memory_mib);
}

TEST(FitTest, MultiGpuContainerUsesDistinctGpusAndNeedsEnough) {
  NodeState node("n", {MakeGpu("GPU-a"), MakeGpu("GPU-b")});
  FitResult two = FitNode(node, AppRequest(1000, 10, 2));
  ASSERT_TRUE(two.fits);
  EXPECT_NE(two.placement.containers[0].slices[0].gpu, two.placement.containers[0].slices[1].gpu);
  FitResult three = FitNode(node, AppRequest(1000, 10, 3));
  EXPECT_FALSE(three.fits);
  EXPECT_EQ(three.node_reason, NodeReason::kNotEnoughGpus);
  EXPECT_THAT(three.message, HasSubstr("needs 3 GPU(s); 2 of 2 fit"));
}

TEST(FitTest, PrefersNvlinkConnectedSetThenOneNumaNode) {
  // GPUs 0..3; 1 and 3 are NVLinked; 0 and 2 share NUMA node 0 without links.
  std::vector<Gpu> gpus = {MakeGpu("GPU-0", "A100", 80000, 0), MakeGpu("GPU-1", "A100", 80000, 1),
                           MakeGpu("GPU-2", "A100", 80000, 0), MakeGpu("GPU-3", "A100", 80000, 0)};
  gpus[1].links.push_back({"GPU-3", LinkKind::kNvlink, 4});
  gpus[3].links.push_back({"GPU-1", LinkKind::kNvlink, 4});
  NodeState node("n", gpus);
  FitResult r = FitNode(node, AppRequest(1000, 10, 2));
  ASSERT_TRUE(r.fits);
  std::vector<int> chosen;
  for (const auto& s : r.placement.containers[0].slices) chosen.push_back(s.gpu);
  EXPECT_EQ(chosen, (std::vector<int>{1, 3}));

  // Without links, one NUMA node wins over the lowest indices.
  std::vector<Gpu> plain = {MakeGpu("GPU-0", "A100", 80000, 0), MakeGpu("GPU-1", "A100", 80000, 1),
                            MakeGpu("GPU-2", "A100", 80000, 1)};
  NodeState numa("m", plain);
  FitResult q = FitNode(numa, AppRequest(1000, 10, 2));
  ASSERT_TRUE(q.fits);
  chosen.clear();
  for (const auto& s : q.placement.containers[0].slices) chosen.push_back(s.gpu);
  EXPECT_EQ(chosen, (std::vector<int>{1, 2}));
}

TEST(FitTest, ContainersOfOnePodArePlacedInSequence) {
  NodeState node("n", {MakeGpu("GPU-a", "A100", 10000)});
  PodRequest p;
  p.containers.push_back({"one", 1, 6000, std::nullopt, 10, 0});
  p.containers.push_back({"two", 1, 6000, std::nullopt, 10, 0});
  FitResult r = FitNode(node, p);
  EXPECT_FALSE(r.fits);  // 12000 MiB on a 10000 MiB GPU
  EXPECT_THAT(r.message, HasSubstr("container 'two'"));
  p.containers[1].memory_mib = 4000;
  EXPECT_TRUE(FitNode(node, p).fits);
}

TEST(FitTest, InitContainersArePlacedAloneAndDoNotAddUp) {
  NodeState node("n", {MakeGpu("GPU-a", "A100", 10000)});
  PodRequest p;
  p.containers.push_back({"app", 1, 6000, std::nullopt, 10, 0});
  p.init_containers.push_back({"init1", 1, 8000, std::nullopt, 10, 0});
  p.init_containers.push_back({"init2", 1, 9000, std::nullopt, 10, 0});
  FitResult r = FitNode(node, p);
  ASSERT_TRUE(r.fits) << r.message;
  ASSERT_EQ(r.placement.containers.size(), 3u);
  EXPECT_TRUE(r.placement.containers[1].init);
  PodAllocation a = ToAllocation(node, p, r.placement);
  ASSERT_TRUE(node.Apply(a).ok());
  // The pod reserves max(app 6000, init 9000) = 9000 MiB, not the sum.
  EXPECT_EQ(node.gpus()[0].used.memory_mib, 9000);
  EXPECT_EQ(node.gpus()[0].used.slots, 1);  // max(app 1, init 1)
  ASSERT_TRUE(node.Release(a).ok());
  EXPECT_EQ(node.gpus()[0].used, GpuUsage{});
}

TEST(FitTest, EachReasonHasItsOwnName) {
  EXPECT_EQ(ReasonName(GpuReason::kFits), "fits");
  EXPECT_EQ(ReasonName(GpuReason::kNoFreeSlot), "no-free-slot");
  EXPECT_EQ(ReasonName(GpuReason::kUsedBySameContainer), "used-by-same-container");
  std::set<std::string_view> names;
  for (int r = 0; r <= static_cast<int>(GpuReason::kUsedBySameContainer); ++r)
    names.insert(ReasonName(static_cast<GpuReason>(r)));
  EXPECT_EQ(names.size(), static_cast<size_t>(GpuReason::kUsedBySameContainer) + 1);
  EXPECT_EQ(ReasonName(static_cast<GpuReason>(99)), "unknown");
}

}  // namespace
}  // namespace tessera::core

namespace tessera::core {
namespace {

// One GPU per mode, in this order: vgpu, exclusive, timeslice (4 replicas),
// mps sized per request, mps split into 2 replicas.
std::vector<Gpu> OneGpuPerMode() {
  std::vector<Gpu> gpus;
  const std::pair<SharingMode, int> modes[] = {{SharingMode::kVgpu, 0},
                                               {SharingMode::kExclusive, 0},
                                               {SharingMode::kTimeslice, 4},
                                               {SharingMode::kMps, 0},
                                               {SharingMode::kMps, 2}};
  for (const auto& [mode, replicas] : modes) {
    Gpu g = MakeGpu("GPU-" + std::to_string(gpus.size()));
    g.index = static_cast<int>(gpus.size());
    g.mode = mode;
    g.replicas = replicas;
    if (mode == SharingMode::kExclusive) g.slots = 1;
    if (replicas > 0) g.slots = 0;
    gpus.push_back(g);
  }
  return gpus;
}

PodRequest Share(ShareKind share, int64_t memory_mib, int cores, std::optional<int> percent = std::nullopt) {
  PodRequest p = AppRequest(memory_mib, cores);
  p.containers[0].share = share;
  p.containers[0].memory_percent = percent;
  return p;
}

GpuReason ReasonOn(const FitResult& r, int gpu) {
  for (const GpuRejection& rej : r.rejections) {
    if (rej.gpu == gpu) return rej.check.reason;
  }
  return GpuReason::kFits;
}

TEST(SharingModeFitTest, VgpuSlicesGoOnlyOnVgpuGpus) {
  NodeState node("n", OneGpuPerMode());
  FitResult r = FitNode(node, Share(ShareKind::kVgpu, 1000, 10));
  ASSERT_TRUE(r.fits) << r.message;
  EXPECT_EQ(r.placement.containers[0].slices, (std::vector<SlicePlacement>{{0, 1000, 10, false}}));
  // Two vGPUs cannot fit: only one GPU takes slices.
  PodRequest pair = Share(ShareKind::kVgpu, 1000, 10);
  pair.containers[0].gpus = 2;
  FitResult refused = FitNode(node, pair);
  ASSERT_FALSE(refused.fits);
  EXPECT_EQ(ReasonOn(refused, 1), GpuReason::kNeedsWholeGpu);
  EXPECT_EQ(ReasonOn(refused, 2), GpuReason::kReplicasOnly);
  EXPECT_EQ(ReasonOn(refused, 3), GpuReason::kModeMismatch);
  EXPECT_EQ(ReasonOn(refused, 4), GpuReason::kReplicasOnly);
  EXPECT_THAT(refused.message, HasSubstr("in timeslice mode with 4 replicas, which kube-scheduler counts"));
  EXPECT_THAT(refused.message, HasSubstr("in mps mode, which takes only MPS shares"));
  EXPECT_THAT(refused.message, HasSubstr("in exclusive mode: it takes only a request for the whole GPU"));
  EXPECT_EQ(ReasonName(GpuReason::kNeedsWholeGpu), "exclusive-needs-whole-gpu");
  EXPECT_EQ(ReasonName(GpuReason::kReplicasOnly), "gpu-replicas-only");
  EXPECT_EQ(ReasonName(GpuReason::kModeMismatch), "sharing-mode-mismatch");
}

TEST(SharingModeFitTest, MpsSharesGoOnlyOnSizedMpsGpusAndAreAccounted) {
  std::vector<Gpu> gpus = OneGpuPerMode();
  NodeState node("n", gpus);
  FitResult r = FitNode(node, Share(ShareKind::kMps, 30000, 30));
  ASSERT_TRUE(r.fits) << r.message;
  const auto& slices = r.placement.containers[0].slices;
  EXPECT_EQ(slices, (std::vector<SlicePlacement>{{3, 30000, 30, true}}));
  PodAllocation a = ToAllocation(node, Share(ShareKind::kMps, 30000, 30), r.placement);
  ASSERT_EQ(a.containers[0].devices.size(), 1u);
  EXPECT_TRUE(a.containers[0].devices[0].mps);
  EXPECT_EQ(a.containers[0].devices[0].uuid, "GPU-3");
  ASSERT_TRUE(node.Apply(a).ok());
  EXPECT_EQ(node.gpus()[3].used.memory_mib, 30000);
  EXPECT_EQ(node.gpus()[3].used.cores, 30);
  // 50000 MiB fit exactly beside 30000 on 80000; 50001 do not.
  EXPECT_TRUE(FitNode(node, Share(ShareKind::kMps, 50000, 70)).fits);
  FitResult over = FitNode(node, Share(ShareKind::kMps, 50001, 10));
  ASSERT_FALSE(over.fits);
  EXPECT_EQ(ReasonOn(over, 3), GpuReason::kInsufficientMemory);
  FitResult cores = FitNode(node, Share(ShareKind::kMps, 1000, 71));
  EXPECT_EQ(ReasonOn(cores, 3), GpuReason::kInsufficientCores);
  EXPECT_EQ(ReasonOn(cores, 0), GpuReason::kModeMismatch) << "an MPS share never takes a vGPU GPU";
  EXPECT_THAT(cores.message, HasSubstr("in vgpu mode, which takes vGPU slices, not MPS"));
}

TEST(SharingModeFitTest, AnMpsShareLargerThanTheGpuSaysSo) {
  NodeState node("n", OneGpuPerMode());
  FitResult r = FitNode(node, Share(ShareKind::kMps, 90000, 50));
  ASSERT_FALSE(r.fits);
  EXPECT_EQ(ReasonOn(r, 3), GpuReason::kInsufficientMemory);
  EXPECT_THAT(r.message, HasSubstr("90000 MiB asked, more than the GPU's 80000 MiB"));
}

TEST(SharingModeFitTest, ExclusiveGpusTakeWholeGpuRequestsWhole) {
  std::vector<Gpu> gpus = OneGpuPerMode();
  gpus[0].healthy = false;  // leave only the exclusive GPU for vGPU requests
  NodeState node("n", gpus);
  for (const PodRequest& whole :
       {Share(ShareKind::kVgpu, 0, 0), Share(ShareKind::kVgpu, 0, 100), Share(ShareKind::kVgpu, 80000, 100),
        Share(ShareKind::kVgpu, 0, 0, 100), Share(ShareKind::kExclusive, 0, 100)}) {
    FitResult r = FitNode(node, whole);
    ASSERT_TRUE(r.fits) << r.message;
    EXPECT_EQ(r.placement.containers[0].slices, (std::vector<SlicePlacement>{{1, 80000, 100, false}}))
        << "the whole GPU: all its memory, cores 100";
  }
  for (const PodRequest& part : {Share(ShareKind::kVgpu, 1000, 100), Share(ShareKind::kVgpu, 0, 50),
                                 Share(ShareKind::kVgpu, 0, 100, 50)}) {
    FitResult r = FitNode(node, part);
    ASSERT_FALSE(r.fits);
    EXPECT_EQ(ReasonOn(r, 1), GpuReason::kNeedsWholeGpu);
  }
  // Held by one pod, it takes no second.
  PodRequest whole = Share(ShareKind::kExclusive, 0, 100);
  FitResult first = FitNode(node, whole);
  ASSERT_TRUE(node.Apply(ToAllocation(node, whole, first.placement)).ok());
  FitResult second = FitNode(node, whole);
  ASSERT_FALSE(second.fits);
  EXPECT_EQ(ReasonOn(second, 1), GpuReason::kHeldExclusively);
  // kExclusive never takes a vGPU GPU.
  NodeState vgpu_only("v", {MakeGpu("GPU-v")});
  EXPECT_EQ(OnlyReason(FitNode(vgpu_only, whole)), GpuReason::kModeMismatch);
}

TEST(SharingModeFitTest, AReplicaOnlyNodeRefusesEveryTesseraRequestWithTheWayOut) {
  std::vector<Gpu> gpus = OneGpuPerMode();
  NodeState replicas("r", {gpus[2], gpus[4]});
  for (const PodRequest& pod : {AppRequest(0, 0), Share(ShareKind::kVgpu, 1000, 10),
                                Share(ShareKind::kMps, 1000, 10), Share(ShareKind::kExclusive, 0, 100)}) {
    FitResult r = FitNode(replicas, pod);
    ASSERT_FALSE(r.fits);
    EXPECT_EQ(ReasonOn(r, 0), GpuReason::kReplicasOnly);
    EXPECT_EQ(ReasonOn(r, 1), GpuReason::kReplicasOnly);
    EXPECT_THAT(r.message, HasSubstr("ask for the replicas' resource (e.g. nvidia.com/gpu.shared) instead"));
    EXPECT_THAT(r.message, HasSubstr("in mps mode with 2 replicas"));
  }
  // On the mixed node a plain whole-GPU request takes a GPU tessera places;
  // binpack prefers the exclusive GPU (free share 0) and takes it whole.
  FitResult mixed = FitNode(NodeState("n", gpus), AppRequest(0, 0));
  ASSERT_TRUE(mixed.fits) << mixed.message;
  EXPECT_EQ(mixed.placement.containers[0].slices, (std::vector<SlicePlacement>{{1, 80000, 100, false}}));
}

// The scheduler's per-node loops read the compact GPU views (CheckGpuOf,
// FitsNode, GpuFitView::free_milli_with): on random nodes — every sharing
// mode, unhealthy and held GPUs, partly filled — with random containers,
// filters and pending usage, they must answer exactly what CheckGpu,
// FitNode and GpuState::free_milli_with answer.
TEST(FitViewTest, CompactViewsAnswerWhatTheWholeGpuStateAnswers) {
  std::mt19937_64 rng(21);
  auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto container = [&](const std::string& name) {
    ContainerRequest c{
        name, uniform(0, 3), 500 * uniform(0, 40), std::nullopt, uniform(0, 4) == 0 ? 100 : uniform(0, 60),
        0};
    if (uniform(0, 5) == 0) c.memory_percent = uniform(1, 100);
    const int share = uniform(0, 9);
    c.share = share == 0 ? ShareKind::kMps : share == 1 ? ShareKind::kExclusive : ShareKind::kVgpu;
    return c;
  };
  int fitting = 0;
  for (int round = 0; round < 400; ++round) {
    std::vector<Gpu> gpus;
    const int count = uniform(1, 10);
    for (int g = 0; g < count; ++g) {
      Gpu gpu = TestGpu("GPU-" + std::to_string(round) + "-" + std::to_string(g),
                        uniform(0, 1) ? "NVIDIA A100-SXM4-80GB" : "Tesla T4", uniform(0, 1) ? 81920 : 16000,
                        uniform(1, 10));
      gpu.cores = uniform(0, 3) == 0 ? 200 : 100;
      gpu.healthy = uniform(0, 9) != 0;
      if (uniform(0, 14) == 0) gpu.held_by = "other/pod";
      const int mode = uniform(0, 11);
      gpu.mode = mode == 0   ? SharingMode::kMps
                 : mode == 1 ? SharingMode::kExclusive
                 : mode == 2 ? SharingMode::kTimeslice
                 : mode == 3 ? SharingMode::kMigDynamic
                             : SharingMode::kVgpu;
      if (gpu.mode == SharingMode::kTimeslice || (gpu.mode == SharingMode::kMps && uniform(0, 1)))
        gpu.replicas = uniform(1, 4);
      gpus.push_back(gpu);
    }
    HostResources host;
    if (uniform(0, 1)) host.cpu_milli = 1000 * uniform(1, 16);
    NodeState node("n", gpus, host);
    for (int p = 0; p < 2 * count; ++p) {
      PodRequest pod =
          AppRequest(500 * uniform(1, 60), uniform(0, 5) == 0 ? 100 : uniform(1, 60), uniform(1, 2));
      FitResult fit = FitNode(node, pod, uniform(0, 1) ? GpuOrder::kBinpack : GpuOrder::kSpread);
      if (fit.fits) (void)node.Apply(ToAllocation(node, pod, fit.placement), HostDemandOf(pod));
    }
    ASSERT_EQ(node.gpu_views().size(), node.gpus().size());
    for (int q = 0; q < 10; ++q) {
      PodRequest pod;
      pod.cpu_milli = 1000 * uniform(0, 4);
      for (int c = uniform(0, 2); c >= 0; --c) pod.containers.push_back(container("app" + std::to_string(c)));
      if (uniform(0, 4) == 0) pod.init_containers.push_back(container("init"));
      if (uniform(0, 5) == 0) pod.filter.use_types = {uniform(0, 1) ? "A100" : "T4"};
      if (uniform(0, 7) == 0) pod.filter.nouse_uuids = {node.gpus()[0].gpu.uuid};
      const FitResult fit = FitNode(node, pod);
      ASSERT_EQ(FitsNode(node, pod), fit.fits) << "round " << round << " pod " << q << ": " << fit.message;
      fitting += fit.fits;
      for (int g = 0; g < count; ++g) {
        const GpuUsage pending{500 * uniform(0, 20), uniform(0, 50), uniform(0, 2), uniform(0, 6) == 0};
        for (const ContainerRequest& c : pod.containers) {
          const GpuCheck whole = CheckGpu(node.gpus()[g], c, pod.filter, pending);
          const GpuCheck compact = CheckGpuOf(node, g, c, pod.filter, pending);
          ASSERT_EQ(compact.reason, whole.reason) << "round " << round << " GPU " << g;
          EXPECT_EQ(compact.memory_mib, whole.memory_mib);
          EXPECT_EQ(compact.asked, whole.asked);
          EXPECT_EQ(compact.free, whole.free);
          EXPECT_EQ(compact.cores, whole.cores);
        }
        ASSERT_EQ(node.gpu_views()[g].free_milli_with(pending), node.gpus()[g].free_milli_with(pending));
        ASSERT_EQ(node.gpu_views()[g].free_milli, node.gpus()[g].free_milli());
        ASSERT_EQ(node.gpu_views()[g].mps, node.gpus()[g].gpu.mode == SharingMode::kMps);
      }
    }
  }
  // Both answers occur often enough for the comparison to mean something.
  EXPECT_GT(fitting, 400);
  EXPECT_LT(fitting, 3600);
}

}  // namespace
}  // namespace tessera::core
