#include "core/codec.h"

#include "contract/container_contract.h"

#include <cctype>
#include <string>

namespace tessera::core {
namespace {

const char* TypeName(const nlohmann::json& v) {
  if (v.is_number_float()) return "a fractional number";
  if (v.is_number()) return "an integer";
  return v.type_name();
}

}  // namespace

bool IsValidDeviceUuid(std::string_view uuid) {
  return contract::IsValidDeviceUuid(uuid);
}

Status ValidateDeviceUuid(std::string_view uuid, std::string_view where) {
  if (uuid.empty()) {
    return Error{std::string(where) +
                 ": uuid is empty; expected a device UUID such as GPU-1a2b3c4d-0000-1111-2222-333344445555"};
  }
  if (!IsValidDeviceUuid(uuid)) {
    return Error{std::string(where) + ": uuid \"" + std::string(uuid) +
                 "\" is malformed; expected GPU-<8-4-4-4-12 hex digits> such as "
                 "GPU-1a2b3c4d-0000-1111-2222-333344445555, or a MIG UUID (MIG-<8-4-4-4-12 hex digits>)"};
  }
  return Status::Ok();
}

bool IsRfc3339Timestamp(std::string_view t) {
  // Reads `n` digits at `pos` into `out`.
  auto digits = [&t](size_t pos, size_t n, int& out) {
    if (pos + n > t.size()) return false;
    out = 0;
    for (size_t i = pos; i < pos + n; ++i) {
      if (t[i] < '0' || t[i] > '9') return false;
      out = out * 10 + (t[i] - '0');
    }
    return true;
  };
  int year, month, day, hour, minute, second;
  if (!digits(0, 4, year) || t.size() < 20 || t[4] != '-' || !digits(5, 2, month) || t[7] != '-' ||
      !digits(8, 2, day) || (t[10] != 'T' && t[10] != 't') || !digits(11, 2, hour) || t[13] != ':' ||
      !digits(14, 2, minute) || t[16] != ':' || !digits(17, 2, second)) {
    return false;
  }
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (month < 1 || month > 12) return false;
  bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  int days = kDays[month - 1] + (month == 2 && leap ? 1 : 0);
  if (day < 1 || day > days || hour > 23 || minute > 59 || second > 60) return false;
  size_t pos = 19;
  if (pos < t.size() && t[pos] == '.') {
    size_t start = ++pos;
    while (pos < t.size() && t[pos] >= '0' && t[pos] <= '9') ++pos;
    if (pos == start) return false;
  }
  if (pos >= t.size()) return false;
  if (t[pos] == 'Z' || t[pos] == 'z') return pos + 1 == t.size();
  if (t[pos] != '+' && t[pos] != '-') return false;
  int off_hour, off_minute;
  return pos + 6 == t.size() && digits(pos + 1, 2, off_hour) && t[pos + 3] == ':' &&
         digits(pos + 4, 2, off_minute) && off_hour <= 23 && off_minute <= 59;
}

namespace codec_detail {

Result<std::string> ReadString(const nlohmann::json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) return Error{where + ": \"" + key + "\" is missing; expected a string"};
  if (!it->is_string()) {
    return Error{where + ": \"" + key + "\" is " + TypeName(*it) + "; expected a string"};
  }
  return it->get<std::string>();
}

Result<int64_t> ReadInt(const nlohmann::json& object, const char* key, const std::string& where, int64_t min,
                        int64_t max) {
  const std::string range = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  auto it = object.find(key);
  if (it == object.end()) return Error{where + ": \"" + key + "\" is missing; expected " + range};
  int64_t value = 0;
  if (it->is_number_unsigned()) {
    uint64_t u = it->get<uint64_t>();
    if (u > static_cast<uint64_t>(max)) {
      return Error{where + ": \"" + key + "\" is " + std::to_string(u) + "; expected " + range};
    }
    value = static_cast<int64_t>(u);
  } else if (it->is_number_integer()) {
    value = it->get<int64_t>();
  } else {
    return Error{where + ": \"" + key + "\" is " + TypeName(*it) + "; expected " + range};
  }
  if (value < min || value > max) {
    return Error{where + ": \"" + key + "\" is " + std::to_string(value) + "; expected " + range};
  }
  return value;
}

Result<bool> ReadBool(const nlohmann::json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) return Error{where + ": \"" + key + "\" is missing; expected true or false"};
  if (!it->is_boolean())
    return Error{where + ": \"" + key + "\" is " + TypeName(*it) + "; expected true or false"};
  return it->get<bool>();
}

Result<const nlohmann::json*> ReadArray(const nlohmann::json& object, const char* key,
                                        const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) return Error{where + ": \"" + key + "\" is missing; expected an array"};
  if (!it->is_array()) return Error{where + ": \"" + key + "\" is " + TypeName(*it) + "; expected an array"};
  return &*it;
}

Result<nlohmann::json> ParseJsonText(std::string_view text, std::string_view payload) {
  if (text.size() > kMaxPayloadBytes) {
    return Error{std::string(payload) + ": text is " + std::to_string(text.size()) + " bytes; at most " +
                 std::to_string(kMaxPayloadBytes) + " are accepted"};
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    return Error{std::string(payload) + ": not valid JSON (byte " + std::to_string(e.byte) +
                 "): " + e.what()};
  } catch (const std::exception& e) {
    return Error{std::string(payload) + ": not valid JSON: " + e.what()};
  }
}

Status CheckVersion(const nlohmann::json& object, int64_t supported, std::string_view payload) {
  auto it = object.find("version");
  const std::string accepted = "this build reads version " + std::to_string(supported);
  if (it == object.end()) return Error{std::string(payload) + ": \"version\" is missing; " + accepted};
  if (!it->is_number_integer()) {
    return Error{std::string(payload) + ": \"version\" is " + TypeName(*it) + "; expected the integer " +
                 std::to_string(supported)};
  }
  if (it->get<int64_t>() != supported) {
    return Error{std::string(payload) + ": unsupported version " + it->dump() + "; " + accepted +
                 " (a newer writer? upgrade this component)"};
  }
  return Status::Ok();
}

std::string ElementWhere(std::string_view list, size_t i, std::string_view label) {
  std::string where = std::string(list) + "[" + std::to_string(i) + "]";
  if (!label.empty()) where.append(" (").append(label).append(")");
  return where;
}

Status CheckEnvelope(const nlohmann::json& j, int64_t supported, std::string_view payload) {
  if (!j.is_object()) {
    return Error{std::string(payload) + ": expected a JSON object such as {\"version\":" +
                 std::to_string(supported) + ",...}, got " + j.type_name()};
  }
  return CheckVersion(j, supported, payload);
}

Status CheckRange(const std::string& where, const char* field, int64_t value, int64_t min, int64_t max,
                  std::string_view min_note, std::string_view max_note) {
  if (value >= min && value <= max) return Status::Ok();
  std::string message =
      where + ": \"" + field + "\" is " + std::to_string(value) + "; expected " + std::to_string(min);
  if (!min_note.empty()) message.append(" ").append(min_note);
  message += " to " + std::to_string(max);
  if (!max_note.empty()) message.append(" ").append(max_note);
  return Error{std::move(message)};
}

}  // namespace codec_detail
}  // namespace tessera::core
