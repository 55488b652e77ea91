// CelSelector: the subset of CEL (the Common Expression Language) that DRA
// device selectors need, evaluated the way kube-scheduler evaluates a
// DeviceClass's or a request's `cel.expression` against one device.
//
// The expression sees one variable, `device`, with
//   device.driver                    string
//   device.attributes["<domain>"]    the device's attributes of that domain,
//                                    by name; unqualified attribute names
//                                    belong to the driver's domain
//   device.capacity["<domain>"]      the capacities, as quantities
//   device.allowMultipleAllocations  bool
// An unknown domain gives an empty map; an unknown attribute is an error
// (guard with has()). Attribute values are int, bool, string or a semantic
// version (version attributes).
//
// Supported:
//  - literals: int (decimal, hex), double, string ('..', "..", r'..' with
//    the usual escapes), true, false, null, lists [..], maps {"k": v};
//  - operators: == != < <= > >= (numbers, strings, bools, versions; ints and
//    doubles compare across), && || ! (with CEL's error absorption:
//    `false && <error>` is false), ?:, + - * / % (ints with overflow
//    checks, doubles, string and list +), unary -, `in` (list, map keys),
//    member access, indexing;
//  - macros: has(x.f), cel.bind(name, init, expr);
//  - functions: size(), s.size(), startsWith, endsWith, contains, matches
//    (ECMAScript regex standing in for RE2: the common syntax only),
//    lowerAscii, upperAscii, int(), string(), double();
//  - Kubernetes quantities: quantity("10Gi"), isQuantity(s), q.compareTo(q),
//    isGreaterThan, isLessThan, add, sub (quantity or int), isInteger,
//    asInteger, asApproximateFloat, sign; == between quantities;
//  - Kubernetes semantic versions: semver("1.2.3"), isSemver(s),
//    v.compareTo(v), isGreaterThan, isLessThan, major, minor, patch; ==.
// Refused with an error naming the construct: comprehension macros (all,
// exists, exists_one, map, filter), optional syntax (.? and [?]), unsigned
// and bytes literals, triple-quoted strings, other functions and identifiers.
// Quantities compare with compareTo()/isGreaterThan(), not <, as in
// Kubernetes' CEL library; `<` between quantities is a type error.
//
// Compile() refuses what the API server would refuse at admission (syntax,
// unknown identifiers or functions); Matches() reports runtime errors
// (missing attribute, type mismatch, a result that is not a bool), which
// abort the allocation in kube-scheduler.
//
// Thread-safety: a compiled selector is immutable and may be shared.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace tessera::testing::dra {

// The device as a selector sees it, built from a ResourceSlice's device.
struct CelDevice {
  std::string driver;
  nlohmann::json attributes = nlohmann::json::object();  // Device.attributes as in the slice
  nlohmann::json capacity = nlohmann::json::object();    // Device.capacity as in the slice
  bool allow_multiple_allocations = false;
};

class CelSelector {
 public:
  struct Node;

  static Result<CelSelector> Compile(std::string_view expression);
  // True when the device matches; an error for a runtime error or a
  // non-bool result.
  Result<bool> Matches(const CelDevice& device) const;
  const std::string& expression() const { return expression_; }

 private:
  CelSelector(std::string expression, std::shared_ptr<const Node> root)
      : expression_(std::move(expression)), root_(std::move(root)) {}

  std::string expression_;
  std::shared_ptr<const Node> root_;
};

}  // namespace tessera::testing::dra
