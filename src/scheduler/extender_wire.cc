#include "scheduler/extender_wire.h"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace tessera::scheduler::wire {
namespace {

constexpr size_t kNone = std::string_view::npos;

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';  // JSON's whitespace, nothing else
}

size_t SkipSpace(std::string_view s, size_t pos) {
  while (pos < s.size() && IsSpace(s[pos])) ++pos;
  return pos;
}

// A string at `pos` (s[pos] == '"') made of printable ASCII without escapes:
// its content goes to `out`; returns the position after the closing quote, or
// kNone for any other string (the full parser then decides).
size_t PlainString(std::string_view s, size_t pos, std::string_view& out) {
  const size_t start = pos + 1;
  for (size_t i = start; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"') {
      out = s.substr(start, i - start);
      return i + 1;
    }
    if (c == '\\' || c < 0x20 || c >= 0x7f) return kNone;
  }
  return kNone;
}

// The end of the JSON value starting at `pos`, found by matching brackets
// outside strings; the value is not validated here. kNone when it runs off the
// end.
size_t SkipValue(std::string_view s, size_t pos) {
  size_t i = pos;
  int depth = 0;
  do {
    if (i >= s.size()) return kNone;
    const char c = s[i];
    if (c == '"') {
      ++i;
      while (i < s.size() && s[i] != '"') i += s[i] == '\\' ? 2 : 1;
      if (i >= s.size()) return kNone;
      ++i;
    } else if (c == '{' || c == '[') {
      ++depth;
      ++i;
    } else if (c == '}' || c == ']') {
      if (depth == 0) return kNone;
      --depth;
      ++i;
    } else if (depth == 0) {  // a number, true, false or null
      while (i < s.size() && !IsSpace(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']') ++i;
      return i;
    } else {
      ++i;
    }
  } while (depth > 0);
  return i;
}

// The NodeNames array at `pos` (s[pos] == '['), every element a plain string.
size_t ScanNames(std::string_view s, size_t pos, std::vector<std::string_view>& names) {
  pos = SkipSpace(s, pos + 1);
  if (pos < s.size() && s[pos] == ']') return pos + 1;
  for (;;) {
    if (pos >= s.size() || s[pos] != '"') return kNone;
    std::string_view name;
    pos = PlainString(s, pos, name);
    if (pos == kNone) return kNone;
    names.push_back(name);
    pos = SkipSpace(s, pos);
    if (pos >= s.size()) return kNone;
    if (s[pos] == ']') return pos + 1;
    if (s[pos] != ',') return kNone;
    pos = SkipSpace(s, pos + 1);
  }
}

}  // namespace

bool ScanExtenderArgs(std::string_view body, ScannedArgs& out) {
  out.pod = {};
  out.node_names.clear();
  bool have_names = false;
  bool have_pod = false;
  size_t pos = SkipSpace(body, 0);
  if (pos >= body.size() || body[pos] != '{') return false;
  pos = SkipSpace(body, pos + 1);
  if (pos < body.size() && body[pos] == '}') {
    ++pos;
  } else {
    for (;;) {
      if (pos >= body.size() || body[pos] != '"') return false;
      std::string_view key;
      pos = PlainString(body, pos, key);
      if (pos == kNone) return false;
      pos = SkipSpace(body, pos);
      if (pos >= body.size() || body[pos] != ':') return false;
      pos = SkipSpace(body, pos + 1);
      if (pos >= body.size()) return false;
      if (key == "NodeNames") {
        if (have_names || body[pos] != '[') return false;  // a second NodeNames, or null/other: full parser
        have_names = true;
        pos = ScanNames(body, pos, out.node_names);
        if (pos == kNone) return false;
      } else {
        const size_t end = SkipValue(body, pos);
        // No value at all ("Pod":,): not JSON, and an empty Pod would read as none.
        if (end == kNone || end == pos) return false;
        const std::string_view value = body.substr(pos, end - pos);
        if (key == "Pod") {
          if (have_pod) return false;
          have_pod = true;
          out.pod = value;  // parsed (and so validated) by the caller
        } else if (!nlohmann::json::accept(value.begin(), value.end())) {
          return false;
        }
        pos = end;
      }
      pos = SkipSpace(body, pos);
      if (pos >= body.size()) return false;
      if (body[pos] == '}') {
        ++pos;
        break;
      }
      if (body[pos] != ',') return false;
      pos = SkipSpace(body, pos + 1);
    }
  }
  return have_names && SkipSpace(body, pos) == body.size();
}

void AppendJsonString(std::string& out, std::string_view text) {
  out.push_back('"');
  size_t run = 0;  // start of the characters not yet copied
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(text.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default: {
        char escaped[8];
        std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
        out += escaped;
      }
    }
  }
  out.append(text.data() + run, text.size() - run);
  out.push_back('"');
}

std::string FilterResultText(std::span<const std::string_view> names, std::span<const uint32_t> feasible,
                             std::span<const std::pair<uint32_t, std::string>> failed) {
  size_t size = 128;
  for (uint32_t i : feasible) size += names[i].size() + 3;
  for (const auto& [i, reason] : failed) size += names[i].size() + reason.size() + 6;
  std::string out;
  out.reserve(size);
  // Members in the order nlohmann::json writes them (sorted), so the answer
  // reads the same as before this writer existed.
  out += R"({"Error":"","FailedAndUnresolvableNodes":{},"FailedNodes":{)";
  for (size_t k = 0; k < failed.size(); ++k) {
    if (k) out.push_back(',');
    AppendJsonString(out, names[failed[k].first]);
    out.push_back(':');
    AppendJsonString(out, failed[k].second);
  }
  out += R"(},"NodeNames":[)";
  for (size_t k = 0; k < feasible.size(); ++k) {
    if (k) out.push_back(',');
    AppendJsonString(out, names[feasible[k]]);
  }
  out += R"(],"Nodes":null})";
  return out;
}

std::string HostPriorityListText(std::span<const std::string_view> names, std::span<const uint32_t> positions,
                                 std::span<const int> scores) {
  size_t size = 2;
  for (uint32_t i : positions) size += names[i].size() + 28;
  std::string out;
  out.reserve(size);
  out.push_back('[');
  for (size_t k = 0; k < positions.size(); ++k) {
    if (k) out.push_back(',');
    out += R"({"Host":)";
    AppendJsonString(out, names[positions[k]]);
    out += R"(,"Score":)";
    out += std::to_string(k < scores.size() ? scores[k] : 0);
    out.push_back('}');
  }
  out.push_back(']');
  return out;
}

Result<PreemptionArgs> ParsePreemptionArgs(std::string_view body) {
  using Json = nlohmann::json;
  Json tree = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (tree.is_discarded()) return Error{"request body is not valid JSON"};
  if (!tree.is_object()) return Error{"request body is not an ExtenderPreemptionArgs object"};
  PreemptionArgs args;
  auto pod = tree.find("Pod");
  if (pod == tree.end() || !pod->is_object()) return Error{"ExtenderPreemptionArgs carries no Pod"};
  args.pod = std::move(*pod);
  auto meta = tree.find("NodeNameToMetaVictims");
  auto full = tree.find("NodeNameToVictims");
  const bool has_meta = meta != tree.end() && !meta->is_null();
  const bool has_full = full != tree.end() && !full->is_null();
  if (!has_meta && !has_full) {
    return Error{"ExtenderPreemptionArgs carries neither NodeNameToMetaVictims nor NodeNameToVictims"};
  }
  args.meta = has_meta;
  const Json& map = has_meta ? *meta : *full;
  const char* member = has_meta ? "NodeNameToMetaVictims" : "NodeNameToVictims";
  if (!map.is_object()) return Error{std::string(member) + " is not an object"};
  for (const auto& [node, victims] : map.items()) {  // nlohmann keeps object keys sorted
    const std::string where = std::string(member) + "[" + node + "]";
    if (victims.is_null()) continue;  // a nil *Victims: nothing proposed there
    if (!victims.is_object()) return Error{where + " is not an object"};
    ProposedVictims proposed;
    proposed.node = node;
    if (auto n = victims.find("NumPDBViolations"); n != victims.end() && !n->is_null()) {
      if (!n->is_number_integer()) return Error{where + ".NumPDBViolations is not an integer"};
      proposed.pdb_violations = n->get<int64_t>();
    }
    if (auto pods = victims.find("Pods"); pods != victims.end() && !pods->is_null()) {
      if (!pods->is_array()) return Error{where + ".Pods is not an array"};
      for (const Json& p : *pods) {
        if (!p.is_object()) return Error{where + ".Pods has a member that is not an object"};
        std::string uid;
        if (has_meta) {
          auto u = p.find("UID");
          if (u == p.end() || !u->is_string())
            return Error{where + ".Pods has a MetaPod without a UID string"};
          uid = *u;
        } else {
          auto m = p.find("metadata");
          if (m != p.end() && m->is_object()) uid = m->value("uid", "");
          proposed.pods.push_back(p);
        }
        proposed.uids.push_back(std::move(uid));
      }
    }
    args.nodes.push_back(std::move(proposed));
  }
  return args;
}

std::string PreemptionResultText(std::span<const AgreedVictims> nodes) {
  std::string out = R"({"NodeNameToMetaVictims":{)";
  for (size_t k = 0; k < nodes.size(); ++k) {
    if (k) out.push_back(',');
    AppendJsonString(out, nodes[k].node);
    out += R"(:{"NumPDBViolations":)";
    out += std::to_string(nodes[k].pdb_violations);
    out += R"(,"Pods":[)";
    for (size_t i = 0; i < nodes[k].uids.size(); ++i) {
      if (i) out.push_back(',');
      out += R"({"UID":)";
      AppendJsonString(out, nodes[k].uids[i]);
      out.push_back('}');
    }
    out += "]}";
  }
  out += "}}";
  return out;
}

}  // namespace tessera::scheduler::wire
