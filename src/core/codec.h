// Pieces shared by the JSON codecs (allocation_codec.h, inventory_codec.h):
// device UUID syntax and strict field readers. No I/O; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace tessera::core {

// Largest JSON text a decoder accepts. Kubernetes caps all annotations of an
// object at 256 KiB together, so anything larger is not a real payload.
inline constexpr size_t kMaxPayloadBytes = 1 << 20;

// True for the UUID forms NVIDIA tools print, hex digits in either case:
//   GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx        a physical GPU
//   MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx        a MIG instance (driver R470+)
//   MIG-GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx/<gi>/<ci>   a MIG instance (older drivers)
bool IsValidDeviceUuid(std::string_view uuid);

// OK, or an error "<where>: uuid \"...\" is malformed; expected GPU-<8-4-4-4-12 hex>...".
Status ValidateDeviceUuid(std::string_view uuid, std::string_view where);

// True for an RFC 3339 date-time: 2026-11-22T02:31:53Z, 2026-11-22T02:31:53.25+01:00
// (T/t and Z/z in either case; month, day, hour, minute, second and offset ranges
// checked, leap years included, second 60 allowed for a leap second).
bool IsRfc3339Timestamp(std::string_view text);

namespace codec_detail {

// Strict readers of one member of a JSON object. `where` names the object for
// the error ("containers[0].devices[1]"). A missing member or one of another
// JSON type is an error that names the field and the expected type.
Result<std::string> ReadString(const nlohmann::json& object, const char* key, const std::string& where);
// Integers only: 3000.0, "3000" and true are rejected. Range [min, max] inclusive.
Result<int64_t> ReadInt(const nlohmann::json& object, const char* key, const std::string& where, int64_t min,
                        int64_t max);
Result<bool> ReadBool(const nlohmann::json& object, const char* key, const std::string& where);
// The member must be a JSON array (possibly empty).
Result<const nlohmann::json*> ReadArray(const nlohmann::json& object, const char* key,
                                        const std::string& where);

// Parses JSON text, turning nlohmann's exceptions into an Error that names the
// payload ("allocation") and the byte offset of the problem.
Result<nlohmann::json> ParseJsonText(std::string_view text, std::string_view payload);

// The value of "version": a JSON integer equal to `supported`, else an error.
Status CheckVersion(const nlohmann::json& object, int64_t supported, std::string_view payload);

// `j` is a JSON object (else an error naming the payload and the type found)
// whose "version" passes CheckVersion.
Status CheckEnvelope(const nlohmann::json& j, int64_t supported, std::string_view payload);

// OK when min <= value <= max, else the error
//   <where>: "<field>" is <value>; expected <min>[ <min_note>] to <max>[ <max_note>]
Status CheckRange(const std::string& where, const char* field, int64_t value, int64_t min, int64_t max,
                  std::string_view min_note = {}, std::string_view max_note = {});

// "<list>[<i>]", followed by " (<label>)" when a label is given: where an
// element of a list is, for errors ("inventory: gpus[1] (GPU-...)").
std::string ElementWhere(std::string_view list, size_t i, std::string_view label = {});

// Reads the array member `key` of `object` (ReadArray) element by element:
// each must be a JSON object (else "<list>[i]: expected an object <example>"),
// and `read(element, i, ElementWhere(list, i)) -> Result<T>` reads it. The
// values in order, or the first error.
template <typename T, typename Read>
Result<std::vector<T>> ReadObjects(const nlohmann::json& object, const char* key, const std::string& where,
                                   std::string_view list, std::string_view example, Read read) {
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json* items, ReadArray(object, key, where));
  std::vector<T> out;
  for (size_t i = 0; i < items->size(); ++i) {
    const nlohmann::json& item = (*items)[i];
    const std::string item_where = ElementWhere(list, i);
    if (!item.is_object()) return Error{item_where + ": expected an object " + std::string(example)};
    TESSERA_ASSIGN_OR_RETURN(T value, read(item, i, item_where));
    out.push_back(std::move(value));
  }
  return out;
}

// The JSON spelling of each value of an enum: one table, read both ways, so
// the encoder and the decoder cannot disagree.
template <typename E>
struct EnumSpelling {
  E value;
  std::string_view name;
};

// The spelling of `value`; "?" for a value outside the table (validation
// refuses such a value before anything is encoded).
template <typename E, size_t N>
std::string SpellingOf(const EnumSpelling<E> (&table)[N], E value) {
  for (const EnumSpelling<E>& s : table) {
    if (s.value == value) return std::string(s.name);
  }
  return "?";
}

// The value spelled `name` (exactly), or nothing.
template <typename E, size_t N>
std::optional<E> ValueSpelled(const EnumSpelling<E> (&table)[N], std::string_view name) {
  for (const EnumSpelling<E>& s : table) {
    if (s.name == name) return s.value;
  }
  return std::nullopt;
}

// A JSON array of `to_json(item)` for each item, in order.
template <typename Items, typename ToJson>
nlohmann::json JsonArrayOf(const Items& items, ToJson to_json) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& item : items) out.push_back(to_json(item));
  return out;
}

// The JSON text of `value` as `to_json` builds it (which validates it first).
template <typename T, typename ToJson>
Result<std::string> EncodeWith(const T& value, ToJson to_json) {
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json j, to_json(value));
  return j.dump();
}

// Parses `text` (ParseJsonText) and reads the value with `from_json`.
template <typename FromJson>
auto DecodeWith(std::string_view text, std::string_view payload, FromJson from_json)
    -> decltype(from_json(nlohmann::json())) {
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json j, ParseJsonText(text, payload));
  return from_json(j);
}

}  // namespace codec_detail
}  // namespace tessera::core
