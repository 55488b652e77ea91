// Kubernetes resource quantities ("3000", "1.5Gi", "250m", "1e3"), parsed with
// the grammar of the Kubernetes API reference (resource.Quantity) and held as
// an exact integer: the value in nano-units (value * 10^9) in a 128-bit
// integer. No floating point is involved anywhere, so "0.1" + "0.2" is exactly
// "0.3" and "1Ei" is exactly 2^60.
//
// Accepted (see docs/core-model.md for the full grammar):
//   [+|-] number [suffix]
//   number  = digits | digits "." digits | digits "." | "." digits
//   suffix  = decimal SI: n u m k M G T P E   (10^-9 ... 10^18; none = 1)
//           | binary SI:  Ki Mi Gi Ti Pi Ei   (2^10 ... 2^60)
//           | exponent:   e|E [+|-] digits    (10^exponent), e.g. 1e3, 1.5E-2
//
// Limits, as in Kubernetes: the magnitude may not exceed 2^63-1 units
// (overflow is an error here, where Kubernetes caps), and precision finer than
// 1n is rounded up, away from zero, to the next nano-unit (0.1n -> 1n), which
// is what the API server does before it stores a quantity.
//
// Thread-safety: a Quantity is an immutable value.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace tessera::core {

class Quantity {
 public:
  __extension__ using Nanos = __int128;

  // Largest magnitude a quantity may have, in units (Kubernetes' int64 bound).
  static constexpr int64_t kMaxUnits = INT64_MAX;

  // Zero.
  Quantity() = default;

  // Parses `text` as a Kubernetes quantity. On failure the error says what is
  // wrong with the text and gives an example of an accepted quantity. Nothing
  // around the quantity is tolerated: no spaces, no quotes.
  static Result<Quantity> Parse(std::string_view text);

  // Exact constructors; they cannot overflow.
  static Quantity FromUnits(int64_t units) { return Quantity(static_cast<Nanos>(units) * kNanosPerUnit); }
  static Quantity FromMilli(int64_t milli) { return Quantity(static_cast<Nanos>(milli) * 1'000'000); }

  // The exact value, in units of 10^-9.
  Nanos nanos() const { return nanos_; }

  bool IsZero() const { return nanos_ == 0; }
  bool IsNegative() const { return nanos_ < 0; }
  // True when the value is a whole number of units ("2", "2000m", "1Ki").
  bool IsInteger() const { return nanos_ % kNanosPerUnit == 0; }

  // The value in units when it is a whole number; an error naming the value
  // otherwise ("1.5 is not a whole number").
  Result<int64_t> ToInteger() const;
  // Smallest integer >= the value (mathematical ceiling; 1.2 -> 2, -1.2 -> -1).
  // Note: Kubernetes' Quantity.Value() rounds away from zero, which differs only
  // for negative fractions. Cannot fail for a parsed quantity (|value| <= 2^63-1),
  // but returns a Result to keep callers honest about arithmetic results.
  Result<int64_t> ToIntegerCeil() const;
  // Largest integer <= the value.
  Result<int64_t> ToIntegerFloor() const;
  // The value in thousandths, rounded up (ceiling), like Kubernetes' MilliValue()
  // for non-negative values. Errors when the result does not fit an int64.
  Result<int64_t> ToMilli() const;

  // Exact sum / difference / product by an integer; an error on overflow of
  // the quantity range (|value| > 2^63-1 units).
  Result<Quantity> Add(const Quantity& other) const;
  Result<Quantity> Subtract(const Quantity& other) const;
  Result<Quantity> Multiply(int64_t factor) const;

  // Plain decimal rendering without suffix, exact and parseable again:
  // "3000", "0.25", "-1.000000001".
  std::string ToString() const;

  auto operator<=>(const Quantity&) const = default;
  bool operator==(const Quantity&) const = default;

 private:
  static constexpr Nanos kNanosPerUnit = 1'000'000'000;
  explicit Quantity(Nanos nanos) : nanos_(nanos) {}
  static bool InRange(Nanos nanos);

  Nanos nanos_ = 0;
};

}  // namespace tessera::core
