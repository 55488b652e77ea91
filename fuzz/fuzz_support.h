// What the fuzz targets share: a check that aborts with a message (an
// abort is what libFuzzer records as a crash, and what the replay fails on),
// and the text views of the input bytes.
//
// Targets check properties the parser's header promises (a value that was
// accepted encodes and decodes to itself, an error has a message, ...), not
// only the absence of memory errors. Header-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace tessera::fuzz {

[[noreturn]] inline void Fail(const char* file, int line, const char* condition, const std::string& detail) {
  std::fprintf(stderr, "%s:%d: fuzz check failed: %s%s%s\n", file, line, condition,
               detail.empty() ? "" : ": ", detail.c_str());
  std::abort();
}

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits the input at the first occurrence of `separator` (a byte the
// corpus uses between parts, e.g. '\0'); without one, all is `first`.
inline void SplitOnce(std::string_view input, char separator, std::string_view& first,
                      std::string_view& rest) {
  const size_t at = input.find(separator);
  if (at == std::string_view::npos) {
    first = input;
    rest = {};
  } else {
    first = input.substr(0, at);
    rest = input.substr(at + 1);
  }
}

}  // namespace tessera::fuzz

// FUZZ_CHECK(condition, detail): `detail` is a std::string expression,
// evaluated only on failure.
#define FUZZ_CHECK(condition, detail)                                                \
  do {                                                                               \
    if (!(condition)) ::tessera::fuzz::Fail(__FILE__, __LINE__, #condition, detail); \
  } while (false)
