#include "apiserver/selector.h"

#include <algorithm>
#include <cctype>

namespace tessera::testing {
namespace {

std::string_view TrimView(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits on commas that are not inside parentheses.
tessera::Result<std::vector<std::string_view>> SplitTopLevel(std::string_view text) {
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '(') {
      if (++depth > 1) return tessera::Error{"nested '(' in selector \"" + std::string(text) + "\""};
    } else if (text[i] == ')') {
      if (--depth < 0) return tessera::Error{"unbalanced ')' in selector \"" + std::string(text) + "\""};
    } else if (text[i] == ',' && depth == 0) {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return tessera::Error{"unbalanced '(' in selector \"" + std::string(text) + "\""};
  parts.push_back(text.substr(start));
  return parts;
}

bool ValidKey(std::string_view key) {
  if (key.empty() || key.size() > 317) return false;
  for (char c : key) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '/'))
      return false;
  }
  return true;
}

bool ValidValue(std::string_view v) {
  if (v.size() > 63) return false;
  for (char c : v) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

// Finds a standalone word operator (" in ", " notin ") followed by '('.
bool SplitSetOp(std::string_view part, std::string_view word, std::string_view* key, std::string_view* rest) {
  size_t pos = 0;
  while ((pos = part.find(word, pos)) != std::string_view::npos) {
    const bool left_ok = pos > 0 && std::isspace(static_cast<unsigned char>(part[pos - 1]));
    std::string_view after = TrimView(part.substr(pos + word.size()));
    if (left_ok && !after.empty() && after.front() == '(') {
      *key = TrimView(part.substr(0, pos));
      *rest = after;
      return true;
    }
    pos += word.size();
  }
  return false;
}

}  // namespace

tessera::Result<LabelSelector> LabelSelector::Parse(std::string_view text) {
  LabelSelector selector;
  text = TrimView(text);
  if (text.empty()) return selector;
  TESSERA_ASSIGN_OR_RETURN(const auto parts, SplitTopLevel(text));
  for (std::string_view raw : parts) {
    std::string_view part = TrimView(raw);
    const std::string quoted = "\"" + std::string(part) + "\"";
    if (part.empty())
      return tessera::Error{"empty requirement in label selector \"" + std::string(text) + "\""};
    Requirement req;
    std::string_view key, rest;
    const bool not_in = SplitSetOp(part, "notin", &key, &rest);
    if (not_in || SplitSetOp(part, "in", &key, &rest)) {
      req.op = not_in ? Op::kNotIn : Op::kIn;
      if (rest.back() != ')') return tessera::Error{"label selector requirement " + quoted + ": missing ')'"};
      std::string_view inner = rest.substr(1, rest.size() - 2);
      size_t start = 0;
      for (size_t i = 0; i <= inner.size(); ++i) {
        if (i == inner.size() || inner[i] == ',') {
          std::string_view v = TrimView(inner.substr(start, i - start));
          if (!ValidValue(v))
            return tessera::Error{"label selector requirement " + quoted + ": invalid value"};
          req.values.emplace_back(v);
          start = i + 1;
        }
      }
      if (req.values.empty() || (req.values.size() == 1 && req.values[0].empty())) {
        return tessera::Error{"label selector requirement " + quoted + ": empty value set"};
      }
    } else if (size_t ne = part.find("!="); ne != std::string_view::npos) {
      req.op = Op::kNotEquals;
      key = TrimView(part.substr(0, ne));
      req.values.emplace_back(TrimView(part.substr(ne + 2)));
    } else if (size_t eq = part.find('='); eq != std::string_view::npos) {
      req.op = Op::kEquals;
      key = TrimView(part.substr(0, eq));
      std::string_view value = part.substr(eq + 1);
      if (!value.empty() && value.front() == '=') value.remove_prefix(1);
      req.values.emplace_back(TrimView(value));
    } else if (part.front() == '!') {
      req.op = Op::kNotExists;
      key = TrimView(part.substr(1));
    } else {
      req.op = Op::kExists;
      key = part;
    }
    if (!ValidKey(key)) return tessera::Error{"label selector requirement " + quoted + ": invalid key"};
    if ((req.op == Op::kEquals || req.op == Op::kNotEquals) && !ValidValue(req.values[0])) {
      return tessera::Error{"label selector requirement " + quoted + ": invalid value"};
    }
    req.key = std::string(key);
    selector.requirements_.push_back(std::move(req));
  }
  return selector;
}

bool LabelSelector::Matches(const nlohmann::json& labels) const {
  for (const Requirement& req : requirements_) {
    const bool has = labels.is_object() && labels.contains(req.key) && labels[req.key].is_string();
    const std::string value = has ? labels[req.key].get<std::string>() : std::string();
    const bool in_set = has && std::find(req.values.begin(), req.values.end(), value) != req.values.end();
    switch (req.op) {
      case Op::kEquals:
      case Op::kIn:
        if (!in_set) return false;
        break;
      case Op::kNotEquals:
      case Op::kNotIn:
        if (in_set) return false;
        break;
      case Op::kExists:
        if (!has) return false;
        break;
      case Op::kNotExists:
        if (has) return false;
        break;
    }
  }
  return true;
}

tessera::Result<FieldSelector> FieldSelector::Parse(std::string_view text) {
  FieldSelector selector;
  text = TrimView(text);
  if (text.empty()) return selector;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i != text.size() && text[i] != ',') continue;
    std::string_view part = TrimView(text.substr(start, i - start));
    start = i + 1;
    const std::string quoted = "\"" + std::string(part) + "\"";
    Requirement req;
    size_t pos;
    if ((pos = part.find("!=")) != std::string_view::npos) {
      req.negated = true;
      req.path = std::string(TrimView(part.substr(0, pos)));
      req.value = std::string(TrimView(part.substr(pos + 2)));
    } else if ((pos = part.find("==")) != std::string_view::npos) {
      req.path = std::string(TrimView(part.substr(0, pos)));
      req.value = std::string(TrimView(part.substr(pos + 2)));
    } else if ((pos = part.find('=')) != std::string_view::npos) {
      req.path = std::string(TrimView(part.substr(0, pos)));
      req.value = std::string(TrimView(part.substr(pos + 1)));
    } else {
      return tessera::Error{"field selector requirement " + quoted +
                            ": expected field=value or field!=value"};
    }
    if (req.path.empty())
      return tessera::Error{"field selector requirement " + quoted + ": empty field name"};
    selector.requirements_.push_back(std::move(req));
  }
  return selector;
}

bool FieldSelector::Matches(const nlohmann::json& object) const {
  for (const Requirement& req : requirements_) {
    const nlohmann::json* node = &object;
    size_t start = 0;
    const std::string& path = req.path;
    while (node != nullptr && start <= path.size()) {
      const size_t dot = path.find('.', start);
      const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      node = node->is_object() && node->contains(key) ? &(*node)[key] : nullptr;
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    std::string value;
    if (node != nullptr) {
      if (node->is_string()) {
        value = node->get<std::string>();
      } else if (!node->is_null()) {
        value = node->dump();
      }
    }
    if ((value == req.value) == req.negated) return false;
  }
  return true;
}

}  // namespace tessera::testing
