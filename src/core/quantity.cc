#include "core/quantity.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

namespace tessera::core {
namespace {

using Nanos = Quantity::Nanos;

constexpr Nanos kNanosPerUnit = 1'000'000'000;
constexpr Nanos kMaxNanos = static_cast<Nanos>(Quantity::kMaxUnits) * kNanosPerUnit;
// Exponents beyond this are refused outright; no real resource value needs them
// and it bounds the work done on hostile input.
constexpr int kMaxExponent = 1000;

constexpr const char* kAcceptedExamples = "e.g. 3000, 1.5, 250m, 8Gi or 1e3";
constexpr const char* kAcceptedSuffixes =
    "decimal n u m k M G T P E, binary Ki Mi Gi Ti Pi Ei, or an exponent such as e3 or E-2";

Error Fail(std::string_view text, const std::string& what) {
  return Error{"invalid quantity \"" + std::string(text) + "\": " + what};
}

bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}

std::string NanosToDigits(Nanos v) {  // v >= 0
  if (v == 0) return "0";
  std::string out;
  while (v > 0) {
    out.push_back(static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// How the suffix scales the number: value = number * 10^exp10 * 1024^binary_power.
struct Scale {
  int exp10 = 0;
  int binary_power = 0;
};

Result<Scale> ParseSuffix(std::string_view text, std::string_view suffix) {
  if (suffix.empty()) return Scale{};
  if (suffix.size() == 1) {
    static constexpr struct {
      char suffix;
      int exp10;
    } kDecimal[] = {{'n', -9}, {'u', -6}, {'m', -3}, {'k', 3}, {'M', 6},
                    {'G', 9},  {'T', 12}, {'P', 15}, {'E', 18}};
    for (const auto& d : kDecimal)
      if (suffix[0] == d.suffix) return Scale{d.exp10, 0};
    if (suffix[0] == 'e') return Fail(text, "exponent \"e\" has no digits; write it as e.g. 1e3 or 5e-1");
    if (suffix[0] == 'K')
      return Fail(text, "unknown suffix \"K\"; did you mean \"k\" (1000) or \"Ki\" (1024)? e.g. 4k or 4Ki");
  }
  if (suffix.size() == 2 && suffix[1] == 'i') {
    static constexpr std::string_view kBinary = "KMGTPE";
    size_t at = kBinary.find(suffix[0]);
    if (at != std::string_view::npos) return Scale{0, static_cast<int>(at) + 1};
    if (suffix[0] == 'k')
      return Fail(text, "unknown suffix \"ki\"; the binary suffix is written \"Ki\" (1024), e.g. 4Ki");
  }
  if (suffix[0] == 'e' || suffix[0] == 'E') {
    std::string_view exp = suffix.substr(1);
    bool negative = false;
    if (!exp.empty() && (exp[0] == '+' || exp[0] == '-')) {
      negative = exp[0] == '-';
      exp.remove_prefix(1);
    }
    if (exp.empty()) {
      return Fail(text,
                  "exponent \"" + std::string(suffix) + "\" has no digits; write it as e.g. 1e3 or 5e-1");
    }
    if (!std::all_of(exp.begin(), exp.end(), IsDigit)) {
      return Fail(text, "exponent \"" + std::string(suffix) +
                            "\" must be a whole number of digits after e/E, e.g. 1e3, 1.5E2 or 5e-1");
    }
    int value = 0;
    for (char c : exp) {
      value = value * 10 + (c - '0');
      if (value > kMaxExponent) {
        return Fail(text, "exponent is out of range (|exponent| <= " + std::to_string(kMaxExponent) +
                              "); write e.g. 1e3");
      }
    }
    return Scale{negative ? -value : value, 0};
  }
  if (suffix[0] == '.') return Fail(text, "more than one decimal point; write e.g. 1.5 or 1.25");
  if (suffix[0] == '+' || suffix[0] == '-') {
    return Fail(text,
                "a sign may only appear at the start (or after e/E in an exponent); write e.g. -1 or 1e-3");
  }
  return Fail(text, "unknown suffix \"" + std::string(suffix) + "\"; accepted suffixes are " +
                        kAcceptedSuffixes + ", " + kAcceptedExamples);
}

// Multiplies a decimal digit string (most significant first) by a small factor.
void MultiplyDigits(std::string& digits, int factor) {
  int carry = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    int v = (*it - '0') * factor + carry;
    *it = static_cast<char>('0' + v % 10);
    carry = v / 10;
  }
  while (carry > 0) {
    digits.insert(digits.begin(), static_cast<char>('0' + carry % 10));
    carry /= 10;
  }
}

}  // namespace

bool Quantity::InRange(Nanos nanos) {
  return nanos <= kMaxNanos && nanos >= -kMaxNanos;
}

Result<Quantity> Quantity::Parse(std::string_view text) {
  if (text.empty())
    return Error{std::string("invalid quantity: empty; write a number, ") + kAcceptedExamples};
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      return Fail(text, std::string("contains whitespace; write the number and suffix together, ") +
                            kAcceptedExamples);
    }
  }
  size_t pos = 0;
  bool negative = false;
  if (text[pos] == '+' || text[pos] == '-') {
    negative = text[pos] == '-';
    ++pos;
    if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
      return Fail(text, "more than one sign; write at most one, e.g. -1 or +2");
    }
  }
  size_t int_begin = pos;
  while (pos < text.size() && IsDigit(text[pos])) ++pos;
  std::string_view int_digits = text.substr(int_begin, pos - int_begin);
  std::string_view frac_digits;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    size_t frac_begin = pos;
    while (pos < text.size() && IsDigit(text[pos])) ++pos;
    frac_digits = text.substr(frac_begin, pos - frac_begin);
  }
  if (int_digits.empty() && frac_digits.empty()) {
    return Fail(text, std::string("no digits before the suffix; a quantity starts with a number, ") +
                          kAcceptedExamples);
  }
  TESSERA_ASSIGN_OR_RETURN(const Scale scale, ParseSuffix(text, text.substr(pos)));

  // value = digits * 10^(exp10 - |frac|) * 1024^power; in nano-units shift by 9 more.
  std::string digits(int_digits);
  digits.append(frac_digits);
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
  if (digits.empty()) return Quantity();  // zero, whatever the sign and suffix
  for (int i = 0; i < scale.binary_power; ++i) MultiplyDigits(digits, 1024);

  constexpr size_t kMaxDigits = 38;  // 10^38 < 2^127: any 38-digit number fits a Nanos
  const std::string overflow =
      "is larger than the largest quantity (2^63-1 = 9223372036854775807 units), e.g. 8E or 4Ei is the most";
  int shift = scale.exp10 - static_cast<int>(frac_digits.size()) + 9;
  bool round_up = false;
  if (shift >= 0) {
    if (digits.size() + static_cast<size_t>(shift) > kMaxDigits) return Fail(text, overflow);
    digits.append(static_cast<size_t>(shift), '0');
  } else {
    size_t cut = static_cast<size_t>(-shift);
    if (cut >= digits.size()) {
      round_up = true;  // non-zero but below 1n
      digits = "0";
    } else {
      std::string_view rest = std::string_view(digits).substr(digits.size() - cut);
      round_up = rest.find_first_not_of('0') != std::string_view::npos;
      digits.resize(digits.size() - cut);
    }
  }
  if (digits.size() > kMaxDigits) return Fail(text, overflow);
  Nanos magnitude = 0;
  for (char c : digits) magnitude = magnitude * 10 + (c - '0');
  if (round_up) ++magnitude;  // Kubernetes rounds sub-nano precision up, away from zero
  if (magnitude > kMaxNanos) return Fail(text, overflow);
  return Quantity(negative ? -magnitude : magnitude);
}

Result<int64_t> Quantity::ToInteger() const {
  if (!IsInteger()) {
    return Error{ToString() + " is not a whole number; write an integer such as " + (nanos_ < 0 ? "-" : "") +
                 NanosToDigits((nanos_ < 0 ? -nanos_ : nanos_) / kNanosPerUnit + 1)};
  }
  return ToIntegerFloor();
}

Result<int64_t> Quantity::ToIntegerFloor() const {
  Nanos q = nanos_ / kNanosPerUnit;
  if (nanos_ % kNanosPerUnit < 0) --q;
  if (q > INT64_MAX || q < INT64_MIN) return Error{ToString() + " does not fit in a 64-bit integer"};
  return static_cast<int64_t>(q);
}

Result<int64_t> Quantity::ToIntegerCeil() const {
  Nanos q = nanos_ / kNanosPerUnit;
  if (nanos_ % kNanosPerUnit > 0) ++q;
  if (q > INT64_MAX || q < INT64_MIN) return Error{ToString() + " does not fit in a 64-bit integer"};
  return static_cast<int64_t>(q);
}

Result<int64_t> Quantity::ToMilli() const {
  constexpr Nanos kNanosPerMilli = 1'000'000;
  Nanos q = nanos_ / kNanosPerMilli;
  if (nanos_ % kNanosPerMilli > 0) ++q;
  if (q > INT64_MAX || q < INT64_MIN) {
    return Error{ToString() + " is too large to express in thousandths (at most 9223372036854775807m)"};
  }
  return static_cast<int64_t>(q);
}

Result<Quantity> Quantity::Add(const Quantity& other) const {
  Nanos sum = nanos_ + other.nanos_;  // both within +-2^63*10^9: no int128 overflow
  if (!InRange(sum))
    return Error{"quantity " + ToString() + " + " + other.ToString() + " overflows 2^63-1 units"};
  return Quantity(sum);
}

Result<Quantity> Quantity::Subtract(const Quantity& other) const {
  Nanos diff = nanos_ - other.nanos_;
  if (!InRange(diff))
    return Error{"quantity " + ToString() + " - " + other.ToString() + " overflows 2^63-1 units"};
  return Quantity(diff);
}

Result<Quantity> Quantity::Multiply(int64_t factor) const {
  Nanos product = 0;
  if (__builtin_mul_overflow(nanos_, static_cast<Nanos>(factor), &product) || !InRange(product)) {
    return Error{"quantity " + ToString() + " * " + std::to_string(factor) + " overflows 2^63-1 units"};
  }
  return Quantity(product);
}

std::string Quantity::ToString() const {
  Nanos magnitude = nanos_ < 0 ? -nanos_ : nanos_;
  std::string out = nanos_ < 0 ? "-" : "";
  out += NanosToDigits(magnitude / kNanosPerUnit);
  Nanos frac = magnitude % kNanosPerUnit;
  if (frac != 0) {
    std::string f = NanosToDigits(frac);
    f.insert(0, 9 - f.size(), '0');
    f.erase(f.find_last_not_of('0') + 1);
    out += "." + f;
  }
  return out;
}

}  // namespace tessera::core
