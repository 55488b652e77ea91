#include "vgpu/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tessera::vgpu {
namespace {

constexpr int kMaxDepth = 32;

class Parser {
 public:
  explicit Parser(const char* text) : p_(text), start_(text) {}

  bool parse(JsonValue* out, std::string* error) {
    skip_space();
    if (!value(out, 0)) return fail_out(error);
    skip_space();
    if (*p_ != '\0') {
      why_ = "trailing characters after the value";
      return fail_out(error);
    }
    return true;
  }

 private:
  bool fail_out(std::string* error) {
    char buf[160];
    snprintf(buf, sizeof(buf), "%s at offset %td", why_, p_ - start_);
    *error = buf;
    return false;
  }
  bool fail(const char* why) {
    why_ = why;
    return false;
  }
  void skip_space() {
    while (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r') ++p_;
  }
  bool literal(const char* word) {
    size_t n = strlen(word);
    if (strncmp(p_, word, n) != 0) return fail("invalid literal");
    p_ += n;
    return true;
  }

  bool value(JsonValue* out, int depth) {
    if (depth > kMaxDepth) return fail("nesting too deep");
    switch (*p_) {
      case '{':
        return object(out, depth);
      case '[':
        return array(out, depth);
      case '"':
        out->kind = JsonValue::Kind::kString;
        return string(&out->string);
      case 't':
        out->kind = JsonValue::Kind::kBool;
        out->boolean = true;
        return literal("true");
      case 'f':
        out->kind = JsonValue::Kind::kBool;
        out->boolean = false;
        return literal("false");
      case 'n':
        out->kind = JsonValue::Kind::kNull;
        return literal("null");
      default:
        if (*p_ == '-' || (*p_ >= '0' && *p_ <= '9')) return number(out);
        return fail(*p_ == '\0' ? "unexpected end of input" : "unexpected character");
    }
  }

  // The elements of an object or array after its opening bracket, each read
  // by `element`, separated by commas, up to `close`.
  template <typename Element>
  bool elements(char close, const char* expected_separator, Element element) {
    ++p_;
    skip_space();
    if (*p_ == close) {
      ++p_;
      return true;
    }
    for (;;) {
      skip_space();
      if (!element()) return false;
      skip_space();
      if (*p_ == ',') {
        ++p_;
        continue;
      }
      if (*p_ == close) {
        ++p_;
        return true;
      }
      return fail(expected_separator);
    }
  }

  bool object(JsonValue* out, int depth) {
    out->kind = JsonValue::Kind::kObject;
    return elements('}', "expected ',' or '}'", [&] {
      if (*p_ != '"') return fail("expected a string key");
      std::string key;
      if (!string(&key)) return false;
      skip_space();
      if (*p_ != ':') return fail("expected ':'");
      ++p_;
      skip_space();
      JsonValue v;
      if (!value(&v, depth + 1)) return false;
      out->object.emplace_back(std::move(key), std::move(v));
      return true;
    });
  }

  bool array(JsonValue* out, int depth) {
    out->kind = JsonValue::Kind::kArray;
    return elements(']', "expected ',' or ']'", [&] {
      JsonValue v;
      if (!value(&v, depth + 1)) return false;
      out->array.push_back(std::move(v));
      return true;
    });
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  bool hex4(unsigned* out) {
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      int h = hex(p_[i]);
      if (h < 0) return fail("invalid \\u escape");
      v = v * 16 + static_cast<unsigned>(h);
    }
    p_ += 4;
    *out = v;
    return true;
  }

  static void append_utf8(std::string* s, unsigned cp) {
    if (cp < 0x80) {
      s->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      s->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  // The length of the well-formed UTF-8 sequence at `s` (RFC 3629: no
  // overlong forms, no surrogates, nothing past U+10FFFF), or 0.
  static size_t utf8_sequence_length(const unsigned char* s) {
    const unsigned char c = s[0];
    auto cont = [&](int i) { return (s[i] & 0xC0) == 0x80; };
    if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
      const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
      return s[1] >= lo && s[1] <= hi && cont(2) ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
      const unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
      return s[1] >= lo && s[1] <= hi && cont(2) && cont(3) ? 4 : 0;
    }
    return 0;
  }

  bool string(std::string* out) {
    ++p_;  // opening quote
    for (;;) {
      unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '\0') return fail("unterminated string");
      if (c < 0x20) return fail("control character in string");
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c >= 0x80) {  // JSON text is UTF-8 (RFC 8259 section 8.1): one well-formed sequence
        const size_t n = utf8_sequence_length(reinterpret_cast<const unsigned char*>(p_));
        if (n == 0) return fail("invalid UTF-8 in string");
        out->append(p_, n);
        p_ += n;
        continue;
      }
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        ++p_;
        continue;
      }
      ++p_;
      // The one-character escapes, and what each stands for.
      static constexpr char kEscaped[] = "\"\\/bfnrt";
      static constexpr char kMeaning[] = "\"\\/\b\f\n\r\t";
      const char e = *p_++;
      if (const char* hit = e != '\0' ? strchr(kEscaped, e) : nullptr) {
        out->push_back(kMeaning[hit - kEscaped]);
        continue;
      }
      if (e != 'u') {
        --p_;
        return fail("invalid escape");
      }
      unsigned cp = 0;
      if (!hex4(&cp)) return false;
      if (cp >= 0xD800 && cp < 0xDC00) {
        unsigned low = 0;
        if (p_[0] != '\\' || p_[1] != 'u') return fail("unpaired surrogate");
        p_ += 2;
        if (!hex4(&low) || low < 0xDC00 || low >= 0xE000) return fail("unpaired surrogate");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
      } else if (cp >= 0xDC00 && cp < 0xE000) {
        return fail("unpaired surrogate");
      }
      append_utf8(out, cp);
    }
  }

  bool number(JsonValue* out) {
    const char* begin = p_;
    bool integral = true;
    if (*p_ == '-') ++p_;
    if (*p_ == '0') {
      ++p_;
    } else if (*p_ >= '1' && *p_ <= '9') {
      while (*p_ >= '0' && *p_ <= '9') ++p_;
    } else {
      return fail("invalid number");
    }
    if (*p_ == '.') {
      integral = false;
      ++p_;
      if (!(*p_ >= '0' && *p_ <= '9')) return fail("invalid number");
      while (*p_ >= '0' && *p_ <= '9') ++p_;
    }
    if (*p_ == 'e' || *p_ == 'E') {
      integral = false;
      ++p_;
      if (*p_ == '+' || *p_ == '-') ++p_;
      if (!(*p_ >= '0' && *p_ <= '9')) return fail("invalid number");
      while (*p_ >= '0' && *p_ <= '9') ++p_;
    }
    std::string text(begin, static_cast<size_t>(p_ - begin));
    out->kind = JsonValue::Kind::kNumber;
    out->number = strtod(text.c_str(), nullptr);
    if (!std::isfinite(out->number)) return fail("number out of range");
    if (integral) {
      errno = 0;
      char* end = nullptr;
      long long v = strtoll(text.c_str(), &end, 10);
      if (errno == 0 && end != nullptr && *end == '\0') {
        out->is_integer = true;
        out->integer = v;
      }
    }
    return true;
  }

  const char* p_;
  const char* start_;
  const char* why_ = "invalid JSON";
};

}  // namespace

const JsonValue* JsonValue::find(const char* key) const {
  const JsonValue* found = nullptr;
  for (const auto& [k, v] : object)
    if (k == key) found = &v;
  return found;
}

bool parse_json(const char* text, JsonValue* out, std::string* error) {
  *out = JsonValue{};
  if (text == nullptr) {
    *error = "no input";
    return false;
  }
  return Parser(text).parse(out, error);
}

}  // namespace tessera::vgpu
