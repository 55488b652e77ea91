// LoopHelper: a second thread that helps run a loop of independent items
// (a request's node evaluations) without ever being waited for.
//
// Run(n, body) posts the loop to the helper thread and works through it on the
// calling thread too, both taking small chunks from a shared counter. The
// caller waits only for chunks the helper has actually taken, never for the
// helper to be scheduled: on a loaded machine, where a fresh thread may wait
// milliseconds for a core, the caller simply does all the work itself, and a
// request costs no more wall time than running alone. (Splitting the loop in
// two fixed halves, as before, made the caller wait for the half of a thread
// that had not started.) The thread is started on first use and kept, so a
// request also saves a thread start.
//
// Thread-safety: Run may be called from several threads at once; the helper
// works on one loop at a time, the others run on their callers alone.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace tessera::scheduler {

class LoopHelper {
 public:
  LoopHelper() = default;
  ~LoopHelper();  // stops and joins the thread
  LoopHelper(const LoopHelper&) = delete;
  LoopHelper& operator=(const LoopHelper&) = delete;

  // Calls body(k) once for every k in [0, n), on this thread and possibly on
  // the helper, and returns when all have returned. `body` must be safe to
  // call concurrently for different k. An exception from `body` terminates
  // the process (on either thread: the other could still be using what
  // `body` refers to).
  void Run(size_t n, const std::function<void(size_t)>& body);

 private:
  struct Loop;
  static void Work(Loop& loop) noexcept;
  void ThreadMain();

  std::mutex mu_;
  std::condition_variable wake_;
  std::shared_ptr<Loop> posted_;  // guarded by mu_; taken by the helper
  bool stopping_ = false;         // guarded by mu_
  std::thread thread_;            // started under mu_ on first Run
};

}  // namespace tessera::scheduler
