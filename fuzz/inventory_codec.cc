// Fuzz target: core::DecodeInventory, the scheduler's reader of the node
// annotation tessera.io/gpu-inventory (written by tessera-node, but any
// client allowed to patch nodes can write it).
//
// Properties: an accepted inventory passes ValidateInventory and encodes and
// decodes to itself; a refusal says why.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/inventory_codec.h"
#include "fuzz_support.h"

using namespace tessera;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto decoded = core::DecodeInventory(fuzz::AsText(data, size));
  if (!decoded.ok()) {
    FUZZ_CHECK(!decoded.error().message.empty(), "");
    return 0;
  }
  auto valid = core::ValidateInventory(*decoded);
  FUZZ_CHECK(valid.ok(), valid.ok() ? "" : valid.error().message);
  auto encoded = core::EncodeInventory(*decoded);
  FUZZ_CHECK(encoded.ok(), encoded.ok() ? "" : encoded.error().message);
  auto again = core::DecodeInventory(*encoded);
  FUZZ_CHECK(again.ok() && *again == *decoded, *encoded);
  return 0;
}
