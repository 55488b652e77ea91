// Fuzz target: libvgpu's own JSON reader (vgpu/json.h), which reads
// TESSERA_ALLOCATION inside every GPU container. It claims strict RFC 8259;
// nlohmann::json (the reader everywhere else in tessera) is held up as the
// reference.
//
// Properties, for input without a NUL byte (libvgpu reads C strings):
//  - what libvgpu accepts, nlohmann accepts, with the same value (objects by
//    member, the last of duplicate keys winning in both);
//  - what nlohmann accepts within libvgpu's depth limit (32), libvgpu accepts;
//  - a refusal says what and where.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "vgpu/json.h"

using namespace tessera;
using nlohmann::json;

namespace {

constexpr int kVgpuMaxDepth = 32;

int Depth(const json& j) {
  int deepest = 0;
  if (j.is_structured()) {
    for (const auto& child : j) deepest = std::max(deepest, 1 + Depth(child));
  }
  return deepest;
}

// Whether libvgpu's value `v` means what nlohmann's `j` means.
bool Same(const vgpu::JsonValue& v, const json& j) {
  using Kind = vgpu::JsonValue::Kind;
  switch (v.kind) {
    case Kind::kNull:
      return j.is_null();
    case Kind::kBool:
      return j.is_boolean() && j.get<bool>() == v.boolean;
    case Kind::kString:
      return j.is_string() && j.get_ref<const std::string&>() == v.string;
    case Kind::kNumber:
      if (!j.is_number()) return false;
      if (v.is_integer) {
        if (j.is_number_integer() && !j.is_number_unsigned()) return j.get<int64_t>() == v.integer;
        if (j.is_number_unsigned())
          return v.integer >= 0 && j.get<uint64_t>() == static_cast<uint64_t>(v.integer);
        return false;
      }
      return j.get<double>() == v.number;
    case Kind::kArray:
      if (!j.is_array() || j.size() != v.array.size()) return false;
      for (size_t i = 0; i < v.array.size(); ++i) {
        if (!Same(v.array[i], j[i])) return false;
      }
      return true;
    case Kind::kObject:
      if (!j.is_object()) return false;
      // By member, the last of duplicate keys winning. Not JsonValue::find: it
      // takes a C string, and a key may hold "\u0000".
      for (const auto& [key, value] : v.object) {
        const vgpu::JsonValue* last = nullptr;
        for (const auto& [other, candidate] : v.object) {
          if (other == key) last = &candidate;
        }
        auto it = j.find(key);
        if (it == j.end() || !Same(*last, *it)) return false;
      }
      for (const auto& [key, value] : j.items()) {
        bool found = false;
        for (const auto& member : v.object) found = found || member.first == key;
        if (!found) return false;
      }
      return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::AsText(data, size));
  if (text.find('\0') != std::string::npos) return 0;
  vgpu::JsonValue value;
  std::string error;
  const bool vgpu_ok = vgpu::parse_json(text.c_str(), &value, &error);
  const json reference = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (vgpu_ok) {
    FUZZ_CHECK(!reference.is_discarded(), "libvgpu accepts what nlohmann refuses");
    FUZZ_CHECK(
        Same(value, reference),
        "libvgpu reads " + reference.dump(-1, ' ', false, json::error_handler_t::replace) + " differently");
  } else {
    FUZZ_CHECK(!error.empty(), "");
    FUZZ_CHECK(reference.is_discarded() || Depth(reference) > kVgpuMaxDepth,
               "libvgpu refuses (" + error + ") what nlohmann accepts");
  }
  return 0;
}
