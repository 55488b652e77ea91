#include "base/number_format.h"

#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <system_error>

namespace tessera {

std::string FormatNumber(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::to_chars_result r{};
  // Every integer-valued double below 2^63 in magnitude converts to int64 exactly, and
  // printing that integer avoids exponent notation (1048576, not 1.048576e+06).
  constexpr double kTwoTo63 = 9223372036854775808.0;
  if (value == std::trunc(value) && std::fabs(value) < kTwoTo63) {
    r = std::to_chars(buf, buf + sizeof(buf), static_cast<std::int64_t>(value));
  } else {
    // Shortest text that reads back to the same double; locale-independent, unlike printf.
    r = std::to_chars(buf, buf + sizeof(buf), value);
  }
  assert(r.ec == std::errc());
  return std::string(buf, r.ptr);
}

}  // namespace tessera
