#include "kube/selected_json.h"

#include <array>
#include <cstdint>

namespace tessera::kube {

FieldSelection& FieldSelection::Member(std::string_view name) {
  auto it = members.find(name);
  if (it == members.end()) it = members.emplace(std::string(name), FieldSelection{}).first;
  return it->second;
}

FieldSelection& FieldSelection::Members(std::initializer_list<std::string_view> names) {
  for (std::string_view name : names) Member(name);
  return *this;
}

namespace {

using Json = nlohmann::json;

// Bytes that stand for themselves inside a JSON string: printable ASCII but
// the quote and the backslash. Anything else takes the slow path.
constexpr std::array<bool, 256> PlainStringBytes() {
  std::array<bool, 256> plain{};
  for (int c = 0x20; c < 0x80; ++c) plain[c] = c != '"' && c != '\\';
  return plain;
}
constexpr std::array<bool, 256> kPlain = PlainStringBytes();

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  Parser(std::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}

  bool AtEnd() {
    SkipSpace();
    return p_ == end_;
  }

  // A value into `out`, keeping what `s` selects (nullptr: all of it).
  bool Value(const FieldSelection* s, Json& out, int depth) {
    if (depth > kMaxSelectedDepth) return false;
    SkipSpace();
    if (p_ == end_) return false;
    if (s == nullptr || s->whole()) return Whole(out, depth);
    if (*p_ == '{') {
      ++p_;
      out = Json::object();
      SkipSpace();
      if (p_ < end_ && *p_ == '}') {
        ++p_;
        return true;
      }
      for (;;) {
        std::string key;
        if (!Key(key)) return false;
        const FieldSelection* member = nullptr;
        bool keep = false;
        if (auto it = s->members.find(key); it != s->members.end()) {
          member = &it->second;
          keep = true;
        } else {
          for (const std::string& prefix : s->member_prefixes) {
            if (key.starts_with(prefix)) {
              keep = true;
              break;
            }
          }
        }
        if (keep) {
          Json value;
          if (!Value(member, value, depth + 1)) return false;
          out[std::move(key)] = std::move(value);  // the last of duplicate keys wins, as in nlohmann
        } else if (!Skip()) {
          return false;
        }
        switch (AfterMember('}')) {
          case kMore:
            continue;
          case kClosed:
            return true;
          case kBad:
            return false;
        }
      }
    }
    if (*p_ == '[') {
      ++p_;
      out = Json::array();
      SkipSpace();
      if (p_ < end_ && *p_ == ']') {
        ++p_;
        return true;
      }
      for (;;) {
        Json element;
        if (!Value(s, element, depth + 1)) return false;
        out.push_back(std::move(element));
        switch (AfterMember(']')) {
          case kMore:
            continue;
          case kClosed:
            return true;
          case kBad:
            return false;
        }
      }
    }
    return Whole(out, depth);
  }

 private:
  enum Next { kMore, kClosed, kBad };

  // After a member or element: ',' (more follow) or `close`.
  Next AfterMember(char close) {
    SkipSpace();
    if (p_ == end_) return kBad;
    if (*p_ == ',') {
      ++p_;
      return kMore;
    }
    if (*p_ == close) {
      ++p_;
      return kClosed;
    }
    return kBad;
  }

  void SkipSpace() {
    while (p_ < end_ && IsSpace(*p_)) ++p_;
  }

  // An object's key and its colon.
  bool Key(std::string& key) {
    SkipSpace();
    if (p_ == end_ || *p_ != '"') return false;
    const char* start = p_;
    bool escaped = false;
    if (!ScanString(&escaped)) return false;
    if (escaped) {
      key = Json::parse(std::string_view(start, p_ - start)).get<std::string>();
    } else {
      key.assign(start + 1, p_ - 1);
    }
    SkipSpace();
    if (p_ == end_ || *p_ != ':') return false;
    ++p_;
    return true;
  }

  // The string at p_ (its opening quote), checked as nlohmann's lexer checks
  // it; p_ ends past the closing quote. *escaped: it holds an escape.
  bool ScanString(bool* escaped) {
    ++p_;
    while (p_ < end_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (kPlain[c]) {
        ++p_;
        continue;
      }
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c == '\\') {
        *escaped = true;
        if (!Escape()) return false;
        continue;
      }
      if (c < 0x20) return false;  // a control character must be escaped
      if (!Utf8Sequence(c)) return false;
    }
    return false;
  }

  // The escape at p_ (its backslash).
  bool Escape() {
    if (end_ - p_ < 2) return false;
    switch (p_[1]) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't':
        p_ += 2;
        return true;
      case 'u': {
        const int first = CodeUnit(p_ + 2);
        if (first < 0) return false;
        p_ += 6;
        if (first >= 0xDC00 && first <= 0xDFFF) return false;  // a low surrogate alone
        if (first >= 0xD800 && first <= 0xDBFF) {
          // A high surrogate must be followed by \u and a low one.
          if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
          const int second = CodeUnit(p_ + 2);
          if (second < 0xDC00 || second > 0xDFFF) return false;
          p_ += 6;
        }
        return true;
      }
      default:
        return false;
    }
  }

  // The four hex digits at `at`, or -1.
  int CodeUnit(const char* at) const {
    if (end_ - at < 4) return -1;
    int value = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = HexValue(at[i]);
      if (h < 0) return -1;
      value = value * 16 + h;
    }
    return value;
  }

  // A multi-byte UTF-8 sequence starting with `lead` at p_ (RFC 3629's
  // well-formed sequences, which nlohmann's lexer accepts and nothing else).
  bool Utf8Sequence(unsigned char lead) {
    auto in = [&](int i, unsigned char lo, unsigned char hi) {
      if (end_ - p_ <= i) return false;
      const auto b = static_cast<unsigned char>(p_[i]);
      return b >= lo && b <= hi;
    };
    int length = 0;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = in(1, 0x80, 0xBF) ? 2 : 0;
    } else if (lead == 0xE0) {
      length = in(1, 0xA0, 0xBF) && in(2, 0x80, 0xBF) ? 3 : 0;
    } else if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) {
      length = in(1, 0x80, 0xBF) && in(2, 0x80, 0xBF) ? 3 : 0;
    } else if (lead == 0xED) {
      length = in(1, 0x80, 0x9F) && in(2, 0x80, 0xBF) ? 3 : 0;
    } else if (lead == 0xF0) {
      length = in(1, 0x90, 0xBF) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF) ? 4 : 0;
    } else if (lead >= 0xF1 && lead <= 0xF3) {
      length = in(1, 0x80, 0xBF) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF) ? 4 : 0;
    } else if (lead == 0xF4) {
      length = in(1, 0x80, 0x8F) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF) ? 4 : 0;
    }
    p_ += length;
    return length > 0;
  }

  // A number at p_ (JSON's grammar); p_ ends past it.
  bool ScanNumber(bool* integer) {
    *integer = true;
    if (p_ < end_ && *p_ == '-') ++p_;
    if (p_ == end_) return false;
    if (*p_ == '0') {
      ++p_;
    } else if (*p_ >= '1' && *p_ <= '9') {
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    } else {
      return false;
    }
    auto digits = [&] {
      const char* start = p_;
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
      return p_ > start;
    };
    if (p_ < end_ && *p_ == '.') {
      *integer = false;
      ++p_;
      if (!digits()) return false;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      *integer = false;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (!digits()) return false;
    }
    return true;
  }

  bool Literal(std::string_view word) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word)
      return false;
    p_ += word.size();
    return true;
  }

  // A whole value into `out`.
  bool Whole(Json& out, int depth) {
    if (depth > kMaxSelectedDepth) return false;
    SkipSpace();
    if (p_ == end_) return false;
    const char c = *p_;
    if (c == '{' || c == '[') {
      // The same walk, with nothing left out.
      ++p_;
      const bool object = c == '{';
      out = object ? Json::object() : Json::array();
      SkipSpace();
      if (p_ < end_ && *p_ == (object ? '}' : ']')) {
        ++p_;
        return true;
      }
      for (;;) {
        Json value;
        if (object) {
          std::string key;
          if (!Key(key) || !Whole(value, depth + 1)) return false;
          out[std::move(key)] = std::move(value);
        } else {
          if (!Whole(value, depth + 1)) return false;
          out.push_back(std::move(value));
        }
        switch (AfterMember(object ? '}' : ']')) {
          case kMore:
            continue;
          case kClosed:
            return true;
          case kBad:
            return false;
        }
      }
    }
    const char* start = p_;
    if (c == '"') {
      bool escaped = false;
      if (!ScanString(&escaped)) return false;
      if (escaped) {
        out = Json::parse(std::string_view(start, p_ - start));
      } else {
        out = std::string(start + 1, p_ - 1);
      }
      return true;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      bool integer = false;
      if (!ScanNumber(&integer)) return false;
      if (integer && c != '-' && p_ - start <= 18) {
        uint64_t value = 0;
        for (const char* d = start; d < p_; ++d) value = value * 10 + static_cast<uint64_t>(*d - '0');
        out = value;  // what nlohmann makes of it: an unsigned number
      } else {
        out = Json::parse(std::string_view(start, p_ - start));
      }
      return true;
    }
    if (Literal("true")) {
      out = true;
      return true;
    }
    if (Literal("false")) {
      out = false;
      return true;
    }
    if (Literal("null")) {
      out = nullptr;
      return true;
    }
    return false;
  }

  // Skips one value, checking it; iterative, so nesting costs no stack.
  bool Skip() {
    std::string open;  // the closers owed, innermost last
    for (;;) {
      SkipSpace();
      if (p_ == end_) return false;
      const char c = *p_;
      if (c == '{' || c == '[') {
        ++p_;
        SkipSpace();
        const char close = c == '{' ? '}' : ']';
        if (p_ < end_ && *p_ == close) {
          ++p_;  // empty: a whole value
        } else {
          open.push_back(close);
          if (close == '}' && !SkipKey()) return false;
          continue;  // the first value inside
        }
      } else if (c == '"') {
        bool escaped = false;
        if (!ScanString(&escaped)) return false;
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        bool integer = false;
        if (!ScanNumber(&integer)) return false;
      } else if (!Literal("true") && !Literal("false") && !Literal("null")) {
        return false;
      }
      // A value ended: close what it ends, then the next value.
      for (;;) {
        if (open.empty()) return true;
        const Next next = AfterMember(open.back());
        if (next == kBad) return false;
        if (next == kClosed) {
          open.pop_back();
          continue;
        }
        if (open.back() == '}' && !SkipKey()) return false;
        break;
      }
    }
  }

  bool SkipKey() {
    SkipSpace();
    if (p_ == end_ || *p_ != '"') return false;
    bool escaped = false;
    if (!ScanString(&escaped)) return false;
    SkipSpace();
    if (p_ == end_ || *p_ != ':') return false;
    ++p_;
    return true;
  }

  const char* p_;
  const char* const end_;
};

}  // namespace

std::optional<Json> ParseSelected(std::string_view text, const FieldSelection& selection) {
  Parser parser(text);
  Json out;
  if (!parser.Value(&selection, out, 0) || !parser.AtEnd()) return std::nullopt;
  return out;
}

}  // namespace tessera::kube
