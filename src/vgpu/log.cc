#include "vgpu/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace tessera::vgpu {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};
}  // namespace

void set_log_level(int level) {
  if (level < 0) level = 0;
  if (level > 4) level = 4;
  g_level.store(level, std::memory_order_relaxed);
}

int log_level() {
  return g_level.load(std::memory_order_relaxed);
}

void log_event(LogLevel level, const char* format, ...) {
  if (!log_enabled(level)) return;
  static const char* const kNames[] = {"", "error", "warn", "info", "debug"};
  char line[1024];
  int n = snprintf(line, sizeof(line), "[tessera] %s pid %d: ", kNames[static_cast<int>(level)],
                   static_cast<int>(getpid()));
  if (n < 0) return;
  va_list args;
  va_start(args, format);
  int m = vsnprintf(line + n, sizeof(line) - static_cast<size_t>(n) - 1, format, args);
  va_end(args);
  if (m < 0) m = 0;
  size_t len = static_cast<size_t>(n) + static_cast<size_t>(m);
  if (len > sizeof(line) - 2) len = sizeof(line) - 2;
  line[len++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, len);
  (void)ignored;
}

}  // namespace tessera::vgpu
