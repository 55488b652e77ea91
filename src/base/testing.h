// Test helpers for any part's tests. Header-only; never linked into a
// daemon. Helpers that need the built binaries (spawning a process on the
// simulated GPU, ...) are in tests/support/testing.
#pragma once

#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <string>
#include <system_error>
#include <thread>

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

// Polls `condition` every 10 ms until it holds or `deadline` passes; returns
// whether it held (asked once more at the deadline). Deadlines are generous:
// they detect a hang on a loaded machine, they do not measure speed.
inline bool WaitFor(const std::function<bool()>& condition,
                    std::chrono::milliseconds deadline = std::chrono::seconds(60)) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

// The contents of the file at `path`; "" when it does not exist or cannot be
// read (a test compares it with what it expected, and prints it).
inline std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A fresh directory `<prefix>-XXXXXX` under $TMPDIR (/tmp when unset), removed
// with everything in it when the object is destroyed; with
// TESSERA_TEST_KEEP_DIRS set in the environment it is left for a post-mortem
// (and its path printed). A directory that cannot be made ends the binary with
// a message: a test cannot go on without it.
//
// Paths given to the helpers are relative to the directory. Not thread-safe
// for writes to the same file; otherwise stateless after construction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "tessera-test") {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/" + prefix + "-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::perror(("mkdtemp " + pattern).c_str());
      std::fflush(stderr);
      std::_Exit(1);
    }
    path_ = pattern;
  }
  ~TempDir() {
    if (std::getenv("TESSERA_TEST_KEEP_DIRS") != nullptr) {
      std::fprintf(stderr, "kept %s\n", path_.c_str());
      return;
    }
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

  // The full path of `relative` (whether or not it exists).
  std::string Path(const std::string& relative) const { return path_ + "/" + relative; }

  // Makes the directory `relative` and its parents; returns its full path.
  std::string MakeDir(const std::string& relative) const {
    std::filesystem::create_directories(Path(relative));
    return Path(relative);
  }

  // Writes `text` to the file `relative` (replacing it, making its parent
  // directories); returns its full path.
  std::string Write(const std::string& relative, const std::string& text) const {
    const std::filesystem::path file = Path(relative);
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
    return file.string();
  }

  // The contents of the file `relative`; "" when it does not exist.
  std::string Read(const std::string& relative) const { return ReadFileOrEmpty(Path(relative)); }

 private:
  std::string path_;
};

}  // namespace tessera::testing
