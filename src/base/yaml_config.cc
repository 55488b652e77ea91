#include "base/yaml_config.h"

#include "base/number_format.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <limits>

namespace tessera::config {
namespace {

std::string Got(std::string_view text) {
  return ", got '" + std::string(text) + "'";
}

std::string Join(const std::vector<std::string>& choices) {
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out += i + 1 == choices.size() ? " or " : ", ";
    out += choices[i];
  }
  return out;
}

}  // namespace

Result<bool> ParseBool(std::string_view text) {
  if (text == "true") return true;
  if (text == "false") return false;
  return Error{"must be true or false" + Got(text)};
}

Result<int64_t> ParseInteger(std::string_view text, int64_t min, int64_t max) {
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  const bool negative = !digits.empty() && digits.front() == '-';
  const std::string_view unsigned_part = negative ? digits.substr(1) : digits;
  if (unsigned_part.empty() || unsigned_part.find_first_not_of("0123456789") != std::string_view::npos ||
      (negative && text.front() == '+')) {
    return Error{"must be an integer" + Got(text)};
  }
  int64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size() || value < min || value > max) {
    return Error{"must be an integer from " + std::to_string(min) + " to " + std::to_string(max) + Got(text)};
  }
  return value;
}

Result<double> ParseNumber(std::string_view text) {
  std::string_view body = text;
  if (!body.empty() && body.front() == '+') body.remove_prefix(1);
  double value = 0;
  auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), value);
  if (body.empty() || ec != std::errc() || end != body.data() + body.size() || !std::isfinite(value) ||
      body.front() == '+') {
    return Error{"must be a number" + Got(text)};
  }
  return value;
}

Result<std::chrono::milliseconds> ParseSeconds(std::string_view text, bool zero_allowed) {
  auto seconds = ParseNumber(text);
  if (!seconds.ok() || *seconds < 0 || (*seconds == 0 && !zero_allowed) || *seconds > 1e12) {
    return Error{std::string(zero_allowed ? "must be 0 (off) or a positive number of seconds"
                                          : "must be a positive number of seconds") +
                 Got(text)};
  }
  return std::chrono::milliseconds(std::llround(*seconds * 1000));
}

YamlConfig::YamlConfig(std::string unknown_key_hint) : unknown_key_hint_(std::move(unknown_key_hint)) {}

YamlConfig& YamlConfig::Add(Key key) {
  keys_.push_back(std::move(key));
  return *this;
}

YamlConfig& YamlConfig::String(std::string path, std::string* field, std::string help) {
  return Add({std::move(path), "string", "a string", std::move(help),
              [field](std::string_view text) {
                *field = std::string(text);
                return Status::Ok();
              },
              [field] { return field->empty() ? std::string("\"\"") : *field; }});
}

YamlConfig& YamlConfig::Bool(std::string path, bool* field, std::string help) {
  return Add({std::move(path), "bool", "true or false", std::move(help),
              [field](std::string_view text) -> Status {
                TESSERA_ASSIGN_OR_RETURN(*field, ParseBool(text));
                return Status::Ok();
              },
              [field] { return std::string(*field ? "true" : "false"); }});
}

template <typename T>
YamlConfig::Key YamlConfig::IntegerKey(std::string path, T* field, std::string help) {
  return {std::move(path),
          "integer",
          "an integer",
          std::move(help),
          [field](std::string_view text) -> Status {
            TESSERA_ASSIGN_OR_RETURN(const int64_t v, ParseInteger(text, std::numeric_limits<T>::min(),
                                                                   std::numeric_limits<T>::max()));
            *field = static_cast<T>(v);
            return Status::Ok();
          },
          [field] { return std::to_string(*field); }};
}

YamlConfig& YamlConfig::Int(std::string path, int* field, std::string help) {
  return Add(IntegerKey(std::move(path), field, std::move(help)));
}

YamlConfig& YamlConfig::Int(std::string path, int64_t* field, std::string help) {
  return Add(IntegerKey(std::move(path), field, std::move(help)));
}

YamlConfig& YamlConfig::Number(std::string path, double* field, std::string help) {
  return Add({std::move(path), "number", "a number", std::move(help),
              [field](std::string_view text) -> Status {
                TESSERA_ASSIGN_OR_RETURN(*field, ParseNumber(text));
                return Status::Ok();
              },
              [field] { return FormatNumber(*field); }});
}

YamlConfig& YamlConfig::Seconds(std::string path, std::chrono::milliseconds* field, std::string help,
                                bool zero_allowed) {
  return Add({std::move(path), "seconds", "a number of seconds", std::move(help),
              [field, zero_allowed](std::string_view text) -> Status {
                TESSERA_ASSIGN_OR_RETURN(*field, ParseSeconds(text, zero_allowed));
                return Status::Ok();
              },
              [field] { return FormatNumber(static_cast<double>(field->count()) / 1000.0); }});
}

YamlConfig& YamlConfig::Choice(std::string path, std::vector<std::string> choices,
                               std::function<void(const std::string&)> set, std::function<std::string()> show,
                               std::string help) {
  std::string expected = Join(choices);
  return Add({std::move(path), "string", std::move(expected), std::move(help),
              [choices = std::move(choices), set = std::move(set)](std::string_view text) -> Status {
                for (const std::string& c : choices) {
                  if (text == c) {
                    set(c);
                    return Status::Ok();
                  }
                }
                return Error{"must be " + Join(choices) + Got(text)};
              },
              std::move(show)});
}

YamlConfig& YamlConfig::Custom(std::string path, std::string type, std::string expected,
                               std::function<Status(std::string_view)> parse,
                               std::function<std::string()> show, std::string help) {
  return Add({std::move(path), std::move(type), std::move(expected), std::move(help), std::move(parse),
              std::move(show)});
}

const YamlConfig::Key* YamlConfig::Find(std::string_view path) const {
  for (const Key& k : keys_) {
    if (k.path == path) return &k;
  }
  return nullptr;
}

bool YamlConfig::IsGroup(std::string_view path) const {
  for (const Key& k : keys_) {
    if (k.path.size() > path.size() && k.path.compare(0, path.size(), path) == 0 &&
        k.path[path.size()] == '.') {
      return true;
    }
  }
  return false;
}

Status YamlConfig::Walk(const YAML::Node& node, const std::string& prefix, const std::string& source,
                        const std::function<Status(const std::string& key)>& allow) const {
  if (node.IsNull()) return Status::Ok();  // an empty mapping
  if (!node.IsMap()) {
    if (prefix.empty()) return Error{source + ": expected a mapping of configuration keys"};
    return Error{source + ": '" + prefix + "' must be a mapping"};
  }
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) return Error{source + ": a key must be a plain name"};
    const std::string name = entry.first.Scalar();
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    if (const Key* key = Find(path)) {
      if (allow) TESSERA_RETURN_IF_ERROR_WRAP(allow(path), source);
      const YAML::Node& value = entry.second;
      if (!value.IsScalar()) {
        const char* got = value.IsNull() ? "no value" : value.IsMap() ? "a mapping" : "a list";
        return Error{source + ": '" + path + "' must be " + key->expected + ", got " + got};
      }
      if (Status s = key->parse(value.Scalar()); !s.ok()) {
        return Error{source + ": '" + path + "' " + s.error().message};
      }
      continue;
    }
    if (IsGroup(path)) {
      TESSERA_RETURN_IF_ERROR(Walk(entry.second, path, source, allow));
      continue;
    }
    return Error{source + ": unknown key '" + path + "'" + unknown_key_hint_};
  }
  return Status::Ok();
}

Status YamlConfig::Apply(const YAML::Node& mapping, const std::string& source,
                         const std::function<Status(const std::string& key)>& allow) const {
  try {
    return Walk(mapping, "", source, allow);
  } catch (const YAML::Exception& e) {
    return Error{source + ": " + e.what()};
  }
}

Status YamlConfig::Apply(std::string_view yaml, const std::string& source) const {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return Error{source + ": not valid YAML: " + e.what()};
  }
  return Apply(root, source);
}

Status YamlConfig::Set(std::string_view path, std::string_view text, const std::string& source) const {
  const Key* key = Find(path);
  if (key == nullptr) return Error{source + ": unknown key '" + std::string(path) + "'" + unknown_key_hint_};
  if (Status s = key->parse(text); !s.ok())
    return Error{source + ": '" + std::string(path) + "' " + s.error().message};
  return Status::Ok();
}

std::string YamlConfig::Help() const {
  std::string out;
  for (const Key& k : keys_) {
    out += "  " + k.path + " (" + k.type + ", default " + k.show() + ")\n";
    if (!k.help.empty()) out += "      " + k.help + "\n";
  }
  return out;
}

}  // namespace tessera::config
