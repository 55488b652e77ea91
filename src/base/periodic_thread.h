// PeriodicThread: a thread that runs one function again and again, waiting
// between runs, and that stops promptly: the loop every tessera daemon needs
// (the node's monitor, inventory publisher and kubelet registrar, the
// scheduler's expiry loop, the leader elector).
//
//   PeriodicThread monitor(std::chrono::seconds(1), [this] { PassOnce(); });
//   monitor.Start();   // first run at once, then one per second
//   monitor.RunNow();  // e.g. after a change: the next run does not wait
//   monitor.Stop();    // wakes the wait, lets a run in progress finish, joins
//
// A body that decides its own pace returns how long to wait before its next
// run (0: at once); a body that blocks (on I/O or its own condition) should do
// so for bounded times, since Stop() waits for the run in progress.
//
// The interval is measured from the end of one run to the start of the next,
// so slow runs never pile up.
//
// Thread-safety: Start/Stop from one controlling thread (never from the body);
// RunNow and stopping() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace tessera {

class PeriodicThread {
 public:
  // Runs `body` every `interval`.
  PeriodicThread(std::chrono::milliseconds interval, std::function<void()> body);
  // Runs `body` again after the wait each run returns.
  explicit PeriodicThread(std::function<std::chrono::milliseconds()> body);
  ~PeriodicThread();  // Stop()
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  // Starts the thread; the first run is immediate. No-op while running; a
  // stopped thread may be started again.
  void Start();
  // Ends the wait, waits for a run in progress to return, joins. Idempotent.
  void Stop();
  // The next run starts without waiting (at once if the thread is waiting).
  void RunNow();

  bool running() const { return thread_.joinable(); }
  // True from Stop() on: a long body may poll it to return early.
  bool stopping() const { return stop_.load(); }

 private:
  void Loop();

  const std::function<std::chrono::milliseconds()> body_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool run_now_ = false;  // guarded by mu_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tessera
