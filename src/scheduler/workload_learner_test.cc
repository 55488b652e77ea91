#include "scheduler/workload_learner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/pod_request.h"
#include "scheduler/testing.h"

namespace tessera::scheduler {
namespace {

core::PodRequest Slice(int gpus, int64_t memory_mib, int cores) {
  auto r = core::DerivePodRequest(testing::GpuPod("d", "p", gpus, memory_mib, cores), {});
  EXPECT_TRUE(r.ok());
  return r.ok() ? *r : core::PodRequest{};
}

// The mixes of two policies, shape by shape.
void ExpectSameMix(const core::WorkloadMix& a, const core::WorkloadMix& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].shape, b[i].shape) << i;
    EXPECT_EQ(a[i].weight, b[i].weight) << i;
  }
}

TEST(SchedulerWorkloadLearnerTest, EachUidCountsOnceUntilForgotten) {
  WorkloadLearner learner;
  EXPECT_EQ(learner.Current()->epoch(), 0u);
  EXPECT_TRUE(learner.Current()->mix().empty());  // nothing seen: best fit
  auto first = learner.Observe("uid-1", Slice(1, 8000, 20));
  EXPECT_TRUE(first.counted);
  EXPECT_TRUE(first.relearned);  // the first pod gives the first mix
  for (int retry = 0; retry < 50; ++retry) {
    auto again = learner.Observe("uid-1", Slice(1, 8000, 20));
    EXPECT_FALSE(again.counted);
    EXPECT_FALSE(again.relearned);
  }
  EXPECT_EQ(learner.stats().counted, 1u);
  EXPECT_EQ(learner.stats().remembered, 1u);
  learner.Forget("uid-1");
  learner.Forget("never-seen");
  EXPECT_EQ(learner.stats().remembered, 0u);
  EXPECT_EQ(learner.stats().counted, 1u);  // the count stays in the mix
}

// The published policy is core's FragmentationPolicy told about the same pods
// in the same order: same epoch, same mix. It changes only when the mix is
// relearned (at the 1st pod, then every relearn_every), and a policy held by
// a request is not changed under it.
TEST(SchedulerWorkloadLearnerTest, PublishesExactlyWhenCoreRelearns) {
  core::FragmentationPolicy::Options options;
  options.relearn_every = 16;
  WorkloadLearner learner(options);
  core::FragmentationPolicy reference(options);
  auto held = learner.Current();
  int relearns = 0;
  for (int i = 0; i < 100; ++i) {
    core::PodRequest pod = Slice(1 + (i % 5 == 0), 4000 + 2000 * (i % 3), 10 * (i % 4));
    const uint64_t before = reference.epoch();
    reference.Observe(pod);
    auto previous = learner.Current();
    auto o = learner.Observe("uid-" + std::to_string(i), pod);
    EXPECT_EQ(o.relearned, reference.epoch() != before) << i;
    EXPECT_EQ(learner.Current() != previous, o.relearned) << i;
    relearns += o.relearned;
    EXPECT_EQ(learner.Current()->epoch(), reference.epoch());
    ExpectSameMix(learner.Current()->mix(), reference.mix());
  }
  EXPECT_EQ(relearns, 7);  // pods 1, 17, 33, 49, 65, 81, 97
  EXPECT_EQ(held->epoch(), 0u);
  EXPECT_TRUE(held->mix().empty());
}

TEST(SchedulerWorkloadLearnerTest, ObserveAllEqualsObservingOneByOne) {
  std::vector<WorkloadLearner::Arrival> arrivals;
  for (int i = 0; i < 1200; ++i) {
    arrivals.push_back({"uid-" + std::to_string(i % 1100), Slice(1 + (i % 7 == 0), 2000 * (1 + i % 5), 25)});
  }
  WorkloadLearner one_by_one;
  for (const auto& a : arrivals) one_by_one.Observe(a.uid, a.pod);
  WorkloadLearner at_once;
  auto o = at_once.ObserveAll(arrivals);
  EXPECT_EQ(o.counted, 1100u);
  EXPECT_TRUE(o.relearned);
  EXPECT_EQ(at_once.stats().counted, 1100u);  // 100 repeated UIDs
  EXPECT_EQ(at_once.Current()->epoch(), one_by_one.Current()->epoch());
  EXPECT_EQ(at_once.Current()->epoch(), 3u);  // pods 1, 513, 1025
  ExpectSameMix(at_once.Current()->mix(), one_by_one.Current()->mix());
}

// Observers and scorers at once (run under TSan in the sanitizer build):
// every pod counts once, and every policy a scorer holds stays readable.
TEST(SchedulerWorkloadLearnerTest, ConcurrentObserversCountEachPodOnce) {
  core::FragmentationPolicy::Options options;
  options.relearn_every = 8;
  WorkloadLearner learner(options);
  std::atomic<bool> done{false};
  std::thread scorer([&] {
    while (!done.load()) {
      auto p = learner.Current();
      double sum = 0;
      for (const auto& e : p->mix()) sum += e.weight;
      EXPECT_TRUE(p->mix().empty() || (sum > 0.999 && sum < 1.001));
    }
  });
  std::vector<std::thread> observers;
  for (int t = 0; t < 4; ++t) {
    observers.emplace_back([&learner] {
      for (int i = 0; i < 400; ++i)
        learner.Observe("uid-" + std::to_string(i), Slice(1, 1000 * (1 + i % 9), 10));
    });
  }
  for (auto& t : observers) t.join();
  done = true;
  scorer.join();
  EXPECT_EQ(learner.stats().counted, 400u);
  EXPECT_EQ(learner.Current()->epoch(), 1u + (400 - 1) / 8);
}

// Pods of ever new sizes (every other one here) cannot grow the shapes
// counted past the bound, and a shape that keeps coming is never the one
// dropped: it leads the mix.
TEST(SchedulerWorkloadLearnerTest, ShapesCountedAreBoundedAndFrequentOnesStay) {
  core::FragmentationPolicy::Options options;
  options.relearn_every = 100;
  WorkloadLearner learner(options, WorkloadLearner::kDefaultMaxRemembered, /*max_shapes=*/8);
  const core::PodRequest frequent = Slice(1, 4000, 25);
  for (int i = 0; i < 2000; ++i) {
    const core::PodRequest pod = i % 2 == 0 ? frequent : Slice(1, 1000 + i, 10);
    learner.Observe("uid-" + std::to_string(i), pod);
    ASSERT_LE(learner.stats().shapes, 8u) << i;
  }
  const WorkloadLearner::Stats stats = learner.stats();
  EXPECT_EQ(stats.counted, 2000u);
  EXPECT_EQ(stats.shapes, 8u);
  EXPECT_EQ(stats.shapes_replaced, 1000u - 7u);  // every new size past the first seven
  const auto policy = learner.Current();
  ASSERT_FALSE(policy->mix().empty());
  EXPECT_EQ(policy->mix().front().shape, core::ShapeOf(frequent));
  EXPECT_GE(policy->mix().front().weight, 0.5);
  double sum = 0;
  for (const auto& e : policy->mix()) sum += e.weight;
  EXPECT_NEAR(sum, 1.0, 1e-9);
}

// Below the bound the learner is core's `tessera-online` policy: the same
// mix at the same epochs, whatever the bound.
TEST(SchedulerWorkloadLearnerTest, BelowTheShapeBoundTheMixIsCores) {
  core::FragmentationPolicy::Options options;
  options.relearn_every = 50;
  core::FragmentationPolicy reference(options);
  WorkloadLearner learner(options, WorkloadLearner::kDefaultMaxRemembered, /*max_shapes=*/128);
  for (int i = 0; i < 600; ++i) {
    const core::PodRequest pod = Slice(1 + (i % 11 == 0), 1000 * (1 + i % 13), 10 + 5 * (i % 3));
    reference.Observe(pod);
    learner.Observe("uid-" + std::to_string(i), pod);
    ASSERT_EQ(learner.Current()->epoch(), reference.epoch()) << i;
  }
  EXPECT_EQ(learner.stats().shapes_replaced, 0u);
  EXPECT_GT(learner.stats().shapes, 64u);  // (2 GPU counts x 13 sizes x 3 core shares)
  ExpectSameMix(learner.Current()->mix(), reference.mix());
}

}  // namespace
}  // namespace tessera::scheduler
