// Quantity: a Kubernetes resource quantity ("80Gi", "100", "500m", "1e3"), as
// the DRA API carries capacities, counters, request policies and consumed
// capacity, with exact arithmetic.
//
// The value is held exactly in units of 10^-9 (nano), the finest precision a
// Kubernetes quantity keeps; a value with finer digits is rounded up to the
// next nano, as the API server does. Parsing follows the published grammar:
// an optional sign, digits with at most one '.', then one suffix: binary
// (Ki Mi Gi Ti Pi Ei), decimal SI (n u m "" k M G T P E) or a decimal
// exponent (e3, E-2). The suffix sets the format a value is written back in
// (String()), which Kubernetes keeps when it computes with a quantity.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace tessera::testing::dra {

// GCC/Clang's 128-bit integer (__extension__ keeps -Wpedantic quiet).
__extension__ typedef __int128 Int128;

class Quantity {
 public:
  enum class Format { kDecimalSI, kBinarySI, kDecimalExponent };

  Quantity() = default;
  // `value` whole units in `format`, e.g. FromInt(1 << 30, kBinarySI) is 1Gi.
  static Quantity FromInt(int64_t value, Format format = Format::kDecimalSI);
  // The quantity's text, or an error naming it and the accepted forms.
  static Result<Quantity> Parse(std::string_view text);

  // Exact value in nano units (10^-9).
  Int128 nanos() const { return nanos_; }
  Format format() const { return format_; }
  Quantity WithFormat(Format format) const;

  // -1, 0 or 1, by value (the format does not matter).
  int Compare(const Quantity& other) const;
  bool operator==(const Quantity& other) const { return Compare(other) == 0; }
  bool operator<(const Quantity& other) const { return Compare(other) < 0; }
  bool operator<=(const Quantity& other) const { return Compare(other) <= 0; }
  bool operator>(const Quantity& other) const { return Compare(other) > 0; }
  bool operator>=(const Quantity& other) const { return Compare(other) >= 0; }

  // The result keeps this quantity's format.
  Quantity operator+(const Quantity& other) const;
  Quantity operator-(const Quantity& other) const;

  int Sign() const { return nanos_ > 0 ? 1 : (nanos_ < 0 ? -1 : 0); }
  bool IsInteger() const;
  // Whole units rounded up, away from zero (Kubernetes' Quantity.Value()).
  // Saturates at the int64 limits.
  int64_t CeilValue() const;
  // Whole units when IsInteger() and within int64.
  bool ToInt64(int64_t* out) const;
  double ToDouble() const;

  // Canonical text in this quantity's format, as Kubernetes writes it:
  // binary values as the largest exact power-of-1024 suffix (1536Mi, 1Gi),
  // falling back to decimal; decimal values as integer mantissas with a
  // suffix of a power of 1000 (1500, 1k, 500m, 1500k).
  std::string String() const;

 private:
  explicit Quantity(Int128 nanos, Format format) : nanos_(nanos), format_(format) {}

  Int128 nanos_ = 0;
  Format format_ = Format::kDecimalSI;
};

}  // namespace tessera::testing::dra
