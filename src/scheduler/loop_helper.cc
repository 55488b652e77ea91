#include "scheduler/loop_helper.h"

#include <algorithm>
#include <atomic>

namespace tessera::scheduler {

// One call of Run. Shared with the helper, which may take it after Run has
// returned; by then every item is claimed, so it only sees that and lets go
// (`body` is never called once Run has returned).
struct LoopHelper::Loop {
  Loop(size_t count, const std::function<void(size_t)>* fn) : n(count), body(fn) {}
  const size_t n;
  const std::function<void(size_t)>* const body;
  std::atomic<size_t> next{0};  // first unclaimed item
  std::atomic<size_t> done{0};  // items that have run
  std::mutex mu;
  std::condition_variable finished;  // done == n
};

namespace {
// Items per claim: a few microseconds of node evaluations, so the two threads
// end within a chunk of each other and the counter is touched rarely.
constexpr size_t kChunk = 16;
}  // namespace

LoopHelper::~LoopHelper() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LoopHelper::Work(Loop& loop) noexcept {
  for (;;) {
    const size_t begin = loop.next.fetch_add(kChunk);
    if (begin >= loop.n) return;
    const size_t end = std::min(loop.n, begin + kChunk);
    for (size_t k = begin; k < end; ++k) (*loop.body)(k);
    if (loop.done.fetch_add(end - begin) + (end - begin) == loop.n) {
      std::lock_guard lock(loop.mu);
      loop.finished.notify_all();
    }
  }
}

void LoopHelper::ThreadMain() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || posted_; });
    if (stopping_) return;
    std::shared_ptr<Loop> loop = std::move(posted_);
    posted_.reset();
    lock.unlock();
    Work(*loop);
    lock.lock();
  }
}

void LoopHelper::Run(size_t n, const std::function<void(size_t)>& body) {
  if (n == 0) return;
  auto loop = std::make_shared<Loop>(n, &body);
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      if (!thread_.joinable()) thread_ = std::thread([this] { ThreadMain(); });
      posted_ = loop;  // replaces a loop the helper never took (its caller did all of it)
    }
  }
  wake_.notify_one();
  Work(*loop);
  {
    std::unique_lock lock(loop->mu);
    loop->finished.wait(lock, [&] { return loop->done.load() == n; });
  }
  std::lock_guard lock(mu_);
  if (posted_ == loop) posted_.reset();
}

}  // namespace tessera::scheduler
