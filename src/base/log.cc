#include "base/log.h"

#include "base/number_format.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <mutex>

namespace tessera::log {
namespace {

std::atomic<Level> g_level{Level::kInfo};

// The active captures (tests only), newest last.
std::mutex g_capture_mu;
std::vector<Capture*>* Captures() {
  static auto* captures = new std::vector<Capture*>();  // never destroyed: logging may outlive main
  return captures;
}
std::atomic<int> g_captures{0};

spdlog::logger& Logger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>("tessera", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
    l->set_level(spdlog::level::trace);  // the facade filters
    l->flush_on(spdlog::level::trace);   // an operator tailing the log sees each line at once
    return l;
  }();
  return *logger;
}

// Indexed by Level.
constexpr std::string_view kLevelNames[] = {"trace", "debug", "info", "warn", "error"};
constexpr spdlog::level::level_enum kSpdlogLevels[] = {
    spdlog::level::trace, spdlog::level::debug, spdlog::level::info, spdlog::level::warn, spdlog::level::err};

size_t IndexOf(Level level) {
  return static_cast<size_t>(level);
}

bool NeedsQuotes(std::string_view value) {
  if (value.empty()) return true;
  return std::any_of(value.begin(), value.end(), [](char c) {
    return c == ' ' || c == '"' || c == '=' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
}

void AppendValue(std::string_view value, std::string& out) {
  if (!NeedsQuotes(value)) {
    out.append(value);
    return;
  }
  out.push_back('"');
  for (char c : value) {
    // '"' and '\\' stand for themselves after a backslash; newline and tab are spelled.
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n' || c == '\t') {
      out.append(c == '\n' ? "\\n" : "\\t");
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

}  // namespace

Result<Level> ParseLevel(std::string_view name) {
  for (Level level : {Level::kTrace, Level::kDebug, Level::kInfo, Level::kWarn, Level::kError}) {
    if (name == LevelName(level)) return level;
  }
  return tessera::Error{"log level '" + std::string(name) + "' must be trace, debug, info, warn or error"};
}

std::string_view LevelName(Level level) {
  return kLevelNames[IndexOf(level)];
}

void SetLevel(Level level) {
  g_level.store(level, std::memory_order_relaxed);
}

Level GetLevel() {
  return g_level.load(std::memory_order_relaxed);
}

bool Enabled(Level level) {
  return level >= g_level.load(std::memory_order_relaxed);
}

Field::Field(std::string_view key, double value) : key_(key), value_(FormatNumber(value)) {}

Field::Field(std::string_view key, std::chrono::duration<double> seconds)
    : key_(key), value_(FormatNumber(seconds.count()) + "s") {}

std::string FormatLine(std::string_view message, Fields fields) {
  std::string line(message);
  for (const Field& f : fields) {
    line.push_back(' ');
    line.append(f.key());
    line.push_back('=');
    AppendValue(f.value(), line);
  }
  return line;
}

void Write(Level level, std::string_view message, Fields fields) {
  if (!Enabled(level)) return;
  const std::string line = FormatLine(message, fields);
  Logger().log(kSpdlogLevels[IndexOf(level)], "{}", line);
  if (g_captures.load() > 0) {
    std::lock_guard lock(g_capture_mu);
    for (Capture* c : *Captures()) c->Record(level, line);
  }
}

struct Capture::State {
  std::vector<Line> lines;  // guarded by g_capture_mu
};

Capture::Capture() : state_(std::make_unique<State>()) {
  std::lock_guard lock(g_capture_mu);
  Captures()->push_back(this);
  ++g_captures;
}

Capture::~Capture() {
  {
    std::lock_guard lock(g_capture_mu);
    std::erase(*Captures(), this);
    --g_captures;
  }
}

void Capture::Record(Level level, const std::string& text) {
  state_->lines.push_back(Line{level, text});
}

std::vector<Capture::Line> Capture::Lines() const {
  std::lock_guard lock(g_capture_mu);
  return state_->lines;
}

std::vector<std::string> Capture::Matching(std::string_view needle) const {
  std::vector<std::string> out;
  for (const Line& line : Lines()) {
    if (line.text.find(needle) != std::string::npos) out.push_back(line.text);
  }
  return out;
}

}  // namespace tessera::log
