#include "dra/quantity.h"

#include <cctype>
#include <limits>

namespace tessera::testing::dra {
namespace {

using Int = Int128;

constexpr Int kNano = 1'000'000'000;
// Magnitudes beyond 10^36 nano units (10^27 units; 1000 Ei is ~1.15e21) are
// refused rather than risking overflow in sums.
constexpr Int kMaxNanos =
    static_cast<Int>(1'000'000'000'000'000'000ULL) * static_cast<Int>(1'000'000'000'000'000'000ULL);

Int Pow10(int exponent) {
  Int out = 1;
  for (int i = 0; i < exponent; ++i) out *= 10;
  return out;
}

// a * b, false on leaving [-kMaxNanos, kMaxNanos].
bool CheckedMul(Int a, Int b, Int* out) {
  if (a == 0 || b == 0) {
    *out = 0;
    return true;
  }
  const Int abs_a = a < 0 ? -a : a;
  const Int abs_b = b < 0 ? -b : b;
  if (abs_a > kMaxNanos / abs_b) return false;
  *out = a * b;
  return true;
}

std::string ToDecimal(Int value) {
  if (value == 0) return "0";
  const bool negative = value < 0;
  if (negative) value = -value;
  std::string digits;
  while (value > 0) {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(value % 10)));
    value /= 10;
  }
  return negative ? "-" + digits : digits;
}

Error BadQuantity(std::string_view text, const std::string& why) {
  return Error{"quantity \"" + std::string(text) + "\" " + why +
               " (accepted: a number with an optional suffix Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or eN)"};
}

}  // namespace

Quantity Quantity::FromInt(int64_t value, Format format) {
  return Quantity(static_cast<Int>(value) * kNano, format);
}

Quantity Quantity::WithFormat(Format format) const {
  return Quantity(nanos_, format);
}

Result<Quantity> Quantity::Parse(std::string_view text) {
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  Int mantissa = 0;
  int fraction_digits = 0;
  int digits = 0;
  bool seen_dot = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.') {
      if (seen_dot) return BadQuantity(text, "has two decimal points");
      seen_dot = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c))) break;
    if (!CheckedMul(mantissa, 10, &mantissa)) return BadQuantity(text, "is too large");
    mantissa += c - '0';
    ++digits;
    if (seen_dot) ++fraction_digits;
  }
  if (digits == 0) return BadQuantity(text, "has no digits");
  const std::string_view suffix = text.substr(i);

  Format format = Format::kDecimalSI;
  int decimal_exponent =
      0;  // value = mantissa * 10^-fraction_digits * 10^decimal_exponent * 1024^binary_power
  int binary_power = 0;
  static constexpr std::pair<const char*, int> kDecimal[] = {{"n", -9}, {"u", -6}, {"m", -3}, {"", 0},
                                                             {"k", 3},  {"M", 6},  {"G", 9},  {"T", 12},
                                                             {"P", 15}, {"E", 18}};
  static constexpr std::pair<const char*, int> kBinary[] = {{"Ki", 1}, {"Mi", 2}, {"Gi", 3},
                                                            {"Ti", 4}, {"Pi", 5}, {"Ei", 6}};
  bool known = false;
  for (const auto& [name, exponent] : kDecimal) {
    if (suffix == name) {
      decimal_exponent = exponent;
      known = true;
    }
  }
  for (const auto& [name, power] : kBinary) {
    if (suffix == name) {
      binary_power = power;
      format = Format::kBinarySI;
      known = true;
    }
  }
  if (!known && suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    size_t j = 1;
    bool exponent_negative = false;
    if (suffix[j] == '+' || suffix[j] == '-') exponent_negative = suffix[j++] == '-';
    int exponent = 0;
    size_t exponent_digits = 0;
    for (; j < suffix.size() && std::isdigit(static_cast<unsigned char>(suffix[j])); ++j, ++exponent_digits) {
      exponent = exponent * 10 + (suffix[j] - '0');
      if (exponent > 60) return BadQuantity(text, "has an exponent out of range");
    }
    if (exponent_digits > 0 && j == suffix.size()) {
      decimal_exponent = exponent_negative ? -exponent : exponent;
      format = Format::kDecimalExponent;
      known = true;
    }
  }
  if (!known) return BadQuantity(text, "has an unknown suffix \"" + std::string(suffix) + "\"");

  // nanos = mantissa * 1024^binary_power * 10^(decimal_exponent + 9 - fraction_digits)
  Int value = mantissa;
  for (int p = 0; p < binary_power; ++p) {
    if (!CheckedMul(value, 1024, &value)) return BadQuantity(text, "is too large");
  }
  const int scale = decimal_exponent + 9 - fraction_digits;
  if (scale >= 0) {
    if (scale > 38 || !CheckedMul(value, Pow10(scale), &value)) return BadQuantity(text, "is too large");
  } else {
    // Finer than a nano: round up, as the API server does.
    const Int divisor = -scale > 38 ? 0 : Pow10(-scale);
    if (divisor == 0) {
      value = value > 0 ? 1 : 0;
    } else {
      const bool remainder = value % divisor != 0;
      value = value / divisor + (remainder ? 1 : 0);
    }
  }
  return Quantity(negative ? -value : value, format);
}

int Quantity::Compare(const Quantity& other) const {
  return nanos_ < other.nanos_ ? -1 : (nanos_ > other.nanos_ ? 1 : 0);
}

Quantity Quantity::operator+(const Quantity& other) const {
  return Quantity(nanos_ + other.nanos_, format_);
}

Quantity Quantity::operator-(const Quantity& other) const {
  return Quantity(nanos_ - other.nanos_, format_);
}

bool Quantity::IsInteger() const {
  return nanos_ % kNano == 0;
}

int64_t Quantity::CeilValue() const {
  Int units = nanos_ / kNano;
  if (nanos_ % kNano != 0) units += nanos_ > 0 ? 1 : -1;
  if (units > std::numeric_limits<int64_t>::max()) return std::numeric_limits<int64_t>::max();
  if (units < std::numeric_limits<int64_t>::min()) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(units);
}

bool Quantity::ToInt64(int64_t* out) const {
  if (!IsInteger()) return false;
  const Int units = nanos_ / kNano;
  if (units > std::numeric_limits<int64_t>::max() || units < std::numeric_limits<int64_t>::min())
    return false;
  *out = static_cast<int64_t>(units);
  return true;
}

double Quantity::ToDouble() const {
  return static_cast<double>(nanos_) / 1e9;
}

std::string Quantity::String() const {
  if (nanos_ == 0) return "0";
  const bool negative = nanos_ < 0;
  const Int magnitude = negative ? -nanos_ : nanos_;
  const std::string sign = negative ? "-" : "";

  if (format_ == Format::kBinarySI && magnitude % kNano == 0 && magnitude / kNano >= 1024) {
    static constexpr const char* kSuffixes[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
    Int units = magnitude / kNano;
    int power = 0;
    while (power < 6 && units % 1024 == 0) {
      units /= 1024;
      ++power;
    }
    return sign + ToDecimal(units) + kSuffixes[power];
  }
  // Decimal: the largest power of 1000 (from nano up) that leaves an integer.
  static constexpr const char* kSi[] = {"n", "u", "m", "", "k", "M", "G", "T", "P", "E"};
  Int mantissa = magnitude;
  int step = 0;  // kSi index; exponent = 3 * step - 9
  while (step < 9 && mantissa % 1000 == 0) {
    mantissa /= 1000;
    ++step;
  }
  if (format_ == Format::kDecimalExponent) {
    const int exponent = 3 * step - 9;
    return sign + ToDecimal(mantissa) + (exponent == 0 ? "" : "e" + std::to_string(exponent));
  }
  return sign + ToDecimal(mantissa) + kSi[step];
}

}  // namespace tessera::testing::dra
