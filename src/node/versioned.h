// Versioned<T>: a value that writers change and readers follow: each change
// moves a version number, and a reader that has seen version N waits until it
// moves (a ListAndWatch stream resends its list then). DeviceState keeps the
// advertised GPUs in one; any other advertised set can do the same.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>

namespace tessera::node {

template <typename T>
class Versioned {
 public:
  struct Snapshot {
    uint64_t version = 0;
    T value;
  };

  // Replaces the value; the version moves even if it is equal.
  void Set(T value) {
    Edit([&](T& current) {
      current = std::move(value);
      return true;
    });
  }

  // Calls `edit` on the value under the lock; `edit` returns whether it
  // changed it. When it did, the version moves and waiters wake. Returns that.
  bool Edit(const std::function<bool(T&)>& edit) {
    {
      std::lock_guard lock(mu_);
      if (!edit(value_)) return false;
      ++version_;
    }
    changed_.notify_all();
    return true;
  }

  Snapshot Get() const {
    std::lock_guard lock(mu_);
    return Snapshot{version_, value_};
  }

  // Waits until the version differs from `seen` or `timeout` passes; returns
  // the version then current.
  uint64_t WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mu_);
    changed_.wait_for(lock, timeout, [&] { return version_ != seen; });
    return version_;
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  uint64_t version_ = 0;  // guarded by mu_
  T value_;               // guarded by mu_
};

}  // namespace tessera::node
