// A small, strict JSON reader for libvgpu's configuration (TESSERA_ALLOCATION).
// libvgpu may not depend on a JSON library (DESIGN.md), and the input is tiny.
//
// Strict RFC 8259: one value, no trailing commas or comments, no trailing
// garbage, strings must be valid escapes, nesting depth at most 32. Numbers keep
// whether they were written as integers, so a caller can insist on one.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera::vgpu {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  bool is_integer = false;  // written without fraction or exponent, and fits int64
  int64_t integer = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;  // in document order

  // User-provided, so that the vector of pairs is not instantiated inside the
  // class: std::pair of the still incomplete JsonValue is undefined, and
  // clang with libstdc++ refuses it (the fuzz build, fuzz/README.md).
  JsonValue() {}

  // The member named `key`, or nullptr. With duplicate keys the last one wins.
  const JsonValue* find(const char* key) const;
};

// Parses `text`. On failure returns false and sets *error to what and where.
bool parse_json(const char* text, JsonValue* out, std::string* error);

}  // namespace tessera::vgpu
