// ParseSelected: reads a JSON text into a tree of only the members a caller
// names (a FieldSelection), validating the rest without building it. The
// informers' objects are ~2 KB (a Pod) to ~7 KB (a Node) of which the
// scheduler keeps a tenth; building the whole tree and then dropping most of
// it was the largest part of the scheduler's start (docs/benchmarks.md,
// "Scheduler at scale").
//
// Contract: ParseSelected(text, s) succeeds exactly when nlohmann::json::parse
// (text) would (the same grammar: RFC 8259, UTF-8 checked in every string,
// skipped or not), and then gives that tree with every member the selection
// does not name removed. It fails (nullopt) on anything it cannot read; a
// caller that needs the reason, or the rare input this parser does not take
// (a UTF-8 byte-order mark, nesting deeper than kMaxSelectedDepth in a kept
// value), parses the text with nlohmann::json to get the same answer as before.
//
// Thread-safety: pure functions; a FieldSelection is immutable once built.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::kube {

// Which parts of a JSON value to keep. A selection with no members and no
// prefixes keeps the whole value. Otherwise, for an object: the members named
// in `members` (each by its own selection) and, whole, those whose key starts
// with one of `member_prefixes`; the other members are skipped. For an array:
// each element by this same selection. A scalar is kept as it is.
struct FieldSelection {
  std::map<std::string, FieldSelection, std::less<>> members;
  std::vector<std::string> member_prefixes;

  bool whole() const { return members.empty() && member_prefixes.empty(); }
  // Adds (or returns) the member `name`, kept whole until it is given members.
  FieldSelection& Member(std::string_view name);
  // Adds members kept whole.
  FieldSelection& Members(std::initializer_list<std::string_view> names);
};

// Kept values nested deeper than this are left to nlohmann::json (nullopt).
inline constexpr int kMaxSelectedDepth = 512;

std::optional<nlohmann::json> ParseSelected(std::string_view text, const FieldSelection& selection);

}  // namespace tessera::kube
