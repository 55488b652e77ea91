#include "base/periodic_thread.h"

namespace tessera {

PeriodicThread::PeriodicThread(std::chrono::milliseconds interval, std::function<void()> body)
    : PeriodicThread([interval, body = std::move(body)] {
        body();
        return interval;
      }) {}

PeriodicThread::PeriodicThread(std::function<std::chrono::milliseconds()> body) : body_(std::move(body)) {}

PeriodicThread::~PeriodicThread() {
  Stop();
}

void PeriodicThread::Start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stop_ = false;
    run_now_ = false;
  }
  thread_ = std::thread([this] { Loop(); });
}

void PeriodicThread::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PeriodicThread::RunNow() {
  {
    std::lock_guard lock(mu_);
    run_now_ = true;
  }
  wake_.notify_all();
}

void PeriodicThread::Loop() {
  while (!stop_) {
    const std::chrono::milliseconds wait = body_();
    std::unique_lock lock(mu_);
    wake_.wait_for(lock, wait, [this] { return stop_ || run_now_; });
    run_now_ = false;
  }
}

}  // namespace tessera
