// Label and field selectors with the Kubernetes string syntax, as the
// API-server stand-in evaluates ?labelSelector= and ?fieldSelector=. The kube
// client only passes these strings through, so this lives beside the stand-in.
//
// Label selectors: comma-separated requirements, all of which must hold:
//   a=b  a==b  a!=b  a  !a  a in (x,y)  a notin (x,y)
// Field selectors: comma-separated `path=value`, `path==value`, `path!=value`
// where path is a dotted JSON path into the object (spec.nodeName,
// metadata.name, status.phase, ...); a missing field compares as "".
//
// Thread-safety: immutable after parsing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace tessera::testing {

class LabelSelector {
 public:
  enum class Op { kEquals, kNotEquals, kExists, kNotExists, kIn, kNotIn };
  struct Requirement {
    std::string key;
    Op op = Op::kEquals;
    std::vector<std::string> values;
  };

  // An empty string selects everything.
  static tessera::Result<LabelSelector> Parse(std::string_view text);

  // `labels` is a JSON object of string values (metadata.labels); null/absent means none.
  bool Matches(const nlohmann::json& labels) const;
  bool Empty() const { return requirements_.empty(); }
  const std::vector<Requirement>& requirements() const { return requirements_; }

 private:
  std::vector<Requirement> requirements_;
};

class FieldSelector {
 public:
  struct Requirement {
    std::string path;  // dotted
    bool negated = false;
    std::string value;
  };

  static tessera::Result<FieldSelector> Parse(std::string_view text);

  bool Matches(const nlohmann::json& object) const;
  bool Empty() const { return requirements_.empty(); }
  const std::vector<Requirement>& requirements() const { return requirements_; }

 private:
  std::vector<Requirement> requirements_;
};

}  // namespace tessera::testing
