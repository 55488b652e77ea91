// Test helpers for any part's tests. Header-only; never linked into a
// daemon.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>

namespace tessera::testing {

// Runs `fn`, waiting for it for at most `limit`; a hang ends the binary with a
// message (a test must fail, not hang the run). Generous: it detects a hang,
// it does not measure speed.
inline void ReturnsOrAbort(const std::function<void()>& fn, const char* what,
                           std::chrono::seconds limit = std::chrono::seconds(120)) {
  auto done = std::async(std::launch::async, fn);
  if (done.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: %s did not return within %lld s\n", what,
                 static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::_Exit(1);
  }
  done.get();
}

}  // namespace tessera::testing
