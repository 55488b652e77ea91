// libvgpu's logging: one line per event, prefixed "[tessera]", to stderr.
// The level comes from LIBCUDA_LOG_LEVEL (HAMi's name): 0 = silent,
// 1 = errors, 2 = warnings (default), 3 = info, 4 = debug.
//
// Safe from any thread; formats into a stack buffer and issues one write(2),
// so lines from concurrent threads and processes do not interleave.
// Never allocates.
#pragma once

namespace tessera::vgpu {

enum class LogLevel : int { kSilent = 0, kError = 1, kWarn = 2, kInfo = 3, kDebug = 4 };

void set_log_level(int level);
int log_level();
inline bool log_enabled(LogLevel level) {
  return static_cast<int>(level) <= log_level();
}

void log_event(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace tessera::vgpu
