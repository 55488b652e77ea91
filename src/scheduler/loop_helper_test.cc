#include "scheduler/loop_helper.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace tessera::scheduler {
namespace {

TEST(LoopHelperTest, EveryItemRunsExactlyOnce) {
  LoopHelper helper;
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{5000}}) {
    std::vector<std::atomic<int>> runs(n);
    helper.Run(n, [&](size_t k) { ++runs[k]; });
    for (size_t k = 0; k < n; ++k) ASSERT_EQ(runs[k].load(), 1) << "n " << n << " item " << k;
  }
}

TEST(LoopHelperTest, ConcurrentLoopsEachCompleteWithTheirOwnItems) {
  LoopHelper helper;
  constexpr int kCallers = 4;
  constexpr size_t kItems = 2000;
  std::vector<std::vector<std::atomic<int>>> runs(kCallers);
  for (auto& r : runs) r = std::vector<std::atomic<int>>(kItems);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 20; ++round) helper.Run(kItems, [&](size_t k) { ++runs[c][k]; });
    });
  }
  for (auto& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) {
    for (size_t k = 0; k < kItems; ++k) ASSERT_EQ(runs[c][k].load(), 20) << "caller " << c << " item " << k;
  }
}

TEST(LoopHelperTest, ACallerDoesNotWaitForABusyHelper) {
  // Every item of the first loop blocks until released, so the helper, once
  // it joins that loop, is stuck in it; a second loop still finishes (on its
  // caller alone if need be) instead of waiting for the helper.
  LoopHelper helper;
  std::atomic<bool> release{false};
  std::atomic<bool> helper_stuck{false};
  std::thread first([&] {
    helper.Run(64, [&](size_t) {
      helper_stuck = true;
      while (!release) std::this_thread::yield();
    });
  });
  while (!helper_stuck) std::this_thread::yield();
  std::atomic<size_t> ran{0};
  helper.Run(1000, [&](size_t) { ++ran; });
  EXPECT_EQ(ran.load(), 1000u);
  release = true;
  first.join();
}

}  // namespace
}  // namespace tessera::scheduler
