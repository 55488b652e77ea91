// Fuzz target: core::Quantity::Parse, the reader of every Kubernetes quantity
// tessera takes from a pod ("3000", "1.5Gi", "250m", "1e3").
//
// Properties checked for an accepted quantity: its plain rendering parses back
// to the same value; the conversions and arithmetic answer (value or error)
// without undefined behaviour. A refusal must say why.
#include <cstddef>
#include <cstdint>

#include "core/quantity.h"
#include "fuzz_support.h"

using tessera::core::Quantity;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = Quantity::Parse(tessera::fuzz::AsText(data, size));
  if (!parsed.ok()) {
    FUZZ_CHECK(!parsed.error().message.empty(), "");
    return 0;
  }
  const Quantity q = *parsed;
  const std::string text = q.ToString();
  auto again = Quantity::Parse(text);
  FUZZ_CHECK(again.ok(), text + ": " + (again.ok() ? "" : again.error().message));
  FUZZ_CHECK(*again == q, text);

  (void)q.ToInteger();
  auto ceil = q.ToIntegerCeil();
  auto floor = q.ToIntegerFloor();
  FUZZ_CHECK(ceil.ok() && floor.ok(), text);  // the header: cannot fail for a parsed quantity
  FUZZ_CHECK(*floor <= *ceil, text);
  FUZZ_CHECK(q.IsInteger() == (*floor == *ceil), text);
  (void)q.ToMilli();
  (void)q.Add(q);
  (void)q.Subtract(q);
  (void)q.Multiply(-3);
  auto zero = q.Subtract(q);
  FUZZ_CHECK(zero.ok() && zero->IsZero(), text);
  return 0;
}
