// log: the one logging facade of tessera's daemons (tessera-scheduler,
// tessera-node) and of the libraries they run (kube's informer and leader
// elector, the node's parts). A line is a level, a sentence written for the
// operator, then structured key=value fields a log pipeline can pick apart:
//
//   log::Info("bound pod", {{"pod", "team/train-0"}, {"node", "gpu-1"}, {"gpus", gpus}});
//   [2025-03-01 12:00:00.123] [info] bound pod pod=team/train-0 node=gpu-1 gpus=app:GPU-…:2000MiB:30%
//
// A value that is empty or holds a space, '"', '=' or a control character is
// written in double quotes, with '"', '\' and newlines escaped, so every
// line parses back. Lines go to stderr (spdlog underneath). The level
// (default info) is set once at start from --log-level; lines below it cost
// one atomic load — but their fields are built by the caller, so a hot path
// guards a costly line with Enabled().
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <chrono>
#include <concepts>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace tessera::log {

enum class Level { kTrace, kDebug, kInfo, kWarn, kError };

// "trace", "debug", "info", "warn" or "error".
Result<Level> ParseLevel(std::string_view name);
std::string_view LevelName(Level level);
void SetLevel(Level level);
Level GetLevel();
bool Enabled(Level level);

// One key=value field. Keys are identifiers written in the caller's code.
class Field {
 public:
  Field(std::string_view key, std::string_view value) : key_(key), value_(value) {}
  Field(std::string_view key, const std::string& value) : key_(key), value_(value) {}
  Field(std::string_view key, const char* value) : key_(key), value_(value) {}
  Field(std::string_view key, bool value) : key_(key), value_(value ? "true" : "false") {}
  template <std::integral T>
  Field(std::string_view key, T value) : key_(key), value_(std::to_string(value)) {}
  Field(std::string_view key, double value);
  // A duration, in seconds ("2.5s").
  template <typename Rep, typename Period>
  Field(std::string_view key, std::chrono::duration<Rep, Period> value)
      : Field(key, std::chrono::duration<double>(value)) {}
  Field(std::string_view key, std::chrono::duration<double> seconds);

  std::string_view key() const { return key_; }
  const std::string& value() const { return value_; }

 private:
  std::string_view key_;
  std::string value_;
};

using Fields = std::initializer_list<Field>;

// The message and its fields as one line would carry them (no time, no level).
std::string FormatLine(std::string_view message, Fields fields);

void Write(Level level, std::string_view message, Fields fields = {});

inline void Trace(std::string_view message, Fields fields = {}) {
  if (Enabled(Level::kTrace)) Write(Level::kTrace, message, fields);
}
inline void Debug(std::string_view message, Fields fields = {}) {
  if (Enabled(Level::kDebug)) Write(Level::kDebug, message, fields);
}
inline void Info(std::string_view message, Fields fields = {}) {
  if (Enabled(Level::kInfo)) Write(Level::kInfo, message, fields);
}
inline void Warn(std::string_view message, Fields fields = {}) {
  if (Enabled(Level::kWarn)) Write(Level::kWarn, message, fields);
}
inline void Error(std::string_view message, Fields fields = {}) {
  if (Enabled(Level::kError)) Write(Level::kError, message, fields);
}

// For tests: while alive, the lines written at or above the level (formatted
// by FormatLine) are recorded here as well as logged. Captures may nest.
class Capture {
 public:
  Capture();
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  struct Line {
    Level level;
    std::string text;
  };
  std::vector<Line> Lines() const;
  // The lines whose text contains `needle`.
  std::vector<std::string> Matching(std::string_view needle) const;

 private:
  friend void Write(Level, std::string_view, Fields);
  void Record(Level level, const std::string& text);
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tessera::log
