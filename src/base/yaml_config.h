// YamlConfig: the one reader of tessera's YAML configuration files
// (tessera-node's --config and per-node overrides, tessera-scheduler's
// --config and --set), with one set of rules:
//
//  - keys are declared, each bound to a field; a dotted key ("server.port")
//    is written as nested mappings (server: {port: 8888});
//  - an unknown key is an error naming it: "f.yaml: unknown key 'server.prot'";
//  - a value of the wrong type is an error naming the key and what it must
//    be: "f.yaml: 'split_count' must be an integer, got 'ten'"; a key written
//    with no value is such an error too (a mapping with none is empty);
//  - booleans are `true` or `false`, nothing else (no yes/no/on/off/True);
//  - integers are decimal ([-+]?[0-9]+, no hex or octal) and must fit the field;
//  - numbers are finite decimals (1, 0.5, 1e3; no inf or nan);
//  - durations are a number of seconds (0.5 = 500 ms), positive unless the
//    key says 0 switches something off;
//  - strings are any scalar, as written.
//
// The value rules are also functions (ParseBool, ...) so that a file in a
// foreign format read with yaml-cpp (a kubeconfig) applies the same ones.
//
//   YamlConfig keys(" (see --help for the keys)");
//   keys.Int("server.port", &config.port, "port of the extender");
//   keys.Bool("leaderElection.enabled", &config.leader_elect, "elect one leader");
//   TESSERA_RETURN_IF_ERROR(keys.Apply(yaml_text, "config.yaml"));
//
// Thread-safety: a YamlConfig writes through the pointers it was given; use
// one per thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace YAML {
class Node;
}

namespace tessera::config {

// The value rules. The error says what the value must be and quotes it, e.g.
// "must be true or false, got 'yes'"; a caller prefixes the key.
Result<bool> ParseBool(std::string_view text);
Result<int64_t> ParseInteger(std::string_view text, int64_t min = INT64_MIN, int64_t max = INT64_MAX);
Result<double> ParseNumber(std::string_view text);
// Seconds as milliseconds (rounded); 0 only when `zero_allowed`.
Result<std::chrono::milliseconds> ParseSeconds(std::string_view text, bool zero_allowed = false);

class YamlConfig {
 public:
  // `unknown_key_hint` follows the unknown-key message, e.g.
  // " (see --help for the keys)".
  explicit YamlConfig(std::string unknown_key_hint = "");

  // Declares a key bound to `field`, which must outlive the reader. `help`
  // is what Help() prints.
  YamlConfig& String(std::string path, std::string* field, std::string help = "");
  YamlConfig& Bool(std::string path, bool* field, std::string help = "");
  YamlConfig& Int(std::string path, int* field, std::string help = "");
  YamlConfig& Int(std::string path, int64_t* field, std::string help = "");
  YamlConfig& Number(std::string path, double* field, std::string help = "");
  YamlConfig& Seconds(std::string path, std::chrono::milliseconds* field, std::string help = "",
                      bool zero_allowed = false);
  // A string that must be one of `choices`; `set` stores it.
  YamlConfig& Choice(std::string path, std::vector<std::string> choices,
                     std::function<void(const std::string&)> set, std::function<std::string()> show,
                     std::string help = "");
  // Any other shape. `parse` stores the value or says what it must be ("must
  // be ..., got '...'"); `type` names it in Help(), `expected` in the error
  // for a value that is not a scalar ("an integer"), `show` gives its value.
  YamlConfig& Custom(std::string path, std::string type, std::string expected,
                     std::function<Status(std::string_view text)> parse, std::function<std::string()> show,
                     std::string help = "");

  // Applies a YAML document (a mapping of keys; an empty document sets
  // nothing). `source` names it in errors ("config.yaml", "--set server.port").
  Status Apply(std::string_view yaml, const std::string& source) const;
  // Applies a mapping already parsed (a section of a larger file). `allow`,
  // when set, may refuse a declared key with a reason ("cannot be overridden
  // per node").
  Status Apply(const YAML::Node& mapping, const std::string& source,
               const std::function<Status(const std::string& key)>& allow = nullptr) const;

  // Sets one key from its text, by the same rules (a command-line
  // `--set server.port=8888`). `source` names it in errors.
  Status Set(std::string_view path, std::string_view text, const std::string& source) const;

  // One entry per key, in declaration order:
  //   "  server.port (integer, default 8888)\n      port of the extender\n"
  std::string Help() const;

 private:
  struct Key {
    std::string path;
    std::string type;      // for Help(): string, integer, number, bool, seconds
    std::string expected;  // what a value must be: "an integer", "true or false"
    std::string help;
    std::function<Status(std::string_view text)> parse;
    std::function<std::string()> show;
  };
  template <typename T>
  static Key IntegerKey(std::string path, T* field, std::string help);
  YamlConfig& Add(Key key);
  const Key* Find(std::string_view path) const;
  bool IsGroup(std::string_view path) const;
  Status Walk(const YAML::Node& node, const std::string& prefix, const std::string& source,
              const std::function<Status(const std::string& key)>& allow) const;

  std::string unknown_key_hint_;
  std::vector<Key> keys_;
};

}  // namespace tessera::config
