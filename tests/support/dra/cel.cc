#include "dra/cel.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <map>
#include <vector>

#include "dra/quantity.h"

namespace tessera::testing::dra {

// cel_regex.cc: matches() (ECMAScript syntax standing in for RE2).
Result<bool> CelRegexSearch(const std::string& text, const std::string& pattern);

namespace {

// ---- values ----------------------------------------------------------------

struct Semver {
  int64_t major = 0, minor = 0, patch = 0;
  std::vector<std::string> prerelease;  // dot-separated identifiers after '-'
  std::string text;
};

// A semantic version (semver.org 2.0.0), build metadata ignored for order.
Result<Semver> ParseSemver(const std::string& text) {
  Semver v;
  v.text = text;
  std::string core = text;
  if (auto plus = core.find('+'); plus != std::string::npos) core = core.substr(0, plus);
  std::string pre;
  if (auto dash = core.find('-'); dash != std::string::npos) {
    pre = core.substr(dash + 1);
    core = core.substr(0, dash);
    if (pre.empty()) return Error{"\"" + text + "\" is not a semantic version (empty pre-release)"};
  }
  std::vector<std::string> numbers;
  for (size_t start = 0;;) {
    const size_t dot = core.find('.', start);
    numbers.push_back(core.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (numbers.size() != 3) return Error{"\"" + text + "\" is not a semantic version (MAJOR.MINOR.PATCH)"};
  int64_t* parts[3] = {&v.major, &v.minor, &v.patch};
  for (int i = 0; i < 3; ++i) {
    const std::string& number = numbers[i];
    if (number.empty() || (number.size() > 1 && number[0] == '0') || number.size() > 18 ||
        number.find_first_not_of("0123456789") != std::string::npos) {
      return Error{"\"" + text + "\" is not a semantic version (MAJOR.MINOR.PATCH)"};
    }
    *parts[i] = std::stoll(number);
  }
  size_t from = 0;
  while (!pre.empty() && from <= pre.size()) {
    size_t dot = pre.find('.', from);
    if (dot == std::string::npos) dot = pre.size();
    if (dot == from) return Error{"\"" + text + "\" is not a semantic version (empty pre-release part)"};
    v.prerelease.push_back(pre.substr(from, dot - from));
    from = dot + 1;
  }
  return v;
}

bool IsNumeric(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

int CompareSemver(const Semver& a, const Semver& b) {
  for (auto [x, y] : {std::pair{a.major, b.major}, {a.minor, b.minor}, {a.patch, b.patch}}) {
    if (x != y) return x < y ? -1 : 1;
  }
  // A pre-release sorts before its release; identifiers compare one by one.
  if (a.prerelease.empty() || b.prerelease.empty()) {
    if (a.prerelease.empty() && b.prerelease.empty()) return 0;
    return a.prerelease.empty() ? 1 : -1;
  }
  for (size_t i = 0; i < std::min(a.prerelease.size(), b.prerelease.size()); ++i) {
    const std::string& x = a.prerelease[i];
    const std::string& y = b.prerelease[i];
    if (x == y) continue;
    const bool nx = IsNumeric(x), ny = IsNumeric(y);
    if (nx && ny) {
      if (x.size() != y.size()) return x.size() < y.size() ? -1 : 1;
      return x < y ? -1 : 1;
    }
    if (nx != ny) return nx ? -1 : 1;
    return x < y ? -1 : 1;
  }
  if (a.prerelease.size() == b.prerelease.size()) return 0;
  return a.prerelease.size() < b.prerelease.size() ? -1 : 1;
}

struct Value {
  enum class Type { kNull, kBool, kInt, kDouble, kString, kList, kMap, kQuantity, kSemver };
  Type type = Type::kNull;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  // The `{}`s let the factories below name only the members they set.
  std::string s{};
  std::shared_ptr<const std::vector<Value>> list{};
  std::shared_ptr<const std::map<std::string, Value>> map{};
  bool map_missing_is_empty = false;  // device.attributes / device.capacity by domain
  Quantity q{};
  Semver v{};

  static Value Bool(bool x) { return {.type = Type::kBool, .b = x}; }
  static Value Int(int64_t x) { return {.type = Type::kInt, .i = x}; }
  static Value Double(double x) { return {.type = Type::kDouble, .d = x}; }
  static Value String(std::string x) { return {.type = Type::kString, .s = std::move(x)}; }
  static Value List(std::vector<Value> x) {
    return {.type = Type::kList, .list = std::make_shared<const std::vector<Value>>(std::move(x))};
  }
  static Value Map(std::map<std::string, Value> x, bool missing_is_empty = false) {
    return {.type = Type::kMap,
            .map = std::make_shared<const std::map<std::string, Value>>(std::move(x)),
            .map_missing_is_empty = missing_is_empty};
  }
  static Value OfQuantity(Quantity x) { return {.type = Type::kQuantity, .q = x}; }
  static Value OfSemver(Semver x) { return {.type = Type::kSemver, .v = std::move(x)}; }
};

const char* TypeName(Value::Type type) {
  switch (type) {
    case Value::Type::kNull:
      return "null_type";
    case Value::Type::kBool:
      return "bool";
    case Value::Type::kInt:
      return "int";
    case Value::Type::kDouble:
      return "double";
    case Value::Type::kString:
      return "string";
    case Value::Type::kList:
      return "list";
    case Value::Type::kMap:
      return "map";
    case Value::Type::kQuantity:
      return "kubernetes.Quantity";
    case Value::Type::kSemver:
      return "kubernetes.Semver";
  }
  return "?";
}

Error NoOverload(const std::string& op, const std::vector<const Value*>& args) {
  std::string types;
  for (size_t i = 0; i < args.size(); ++i) types += (i ? ", " : "") + std::string(TypeName(args[i]->type));
  return Error{"no matching overload for '" + op + "' applied to (" + types + ")"};
}

bool IsNumber(const Value& v) {
  return v.type == Value::Type::kInt || v.type == Value::Type::kDouble;
}

double AsDouble(const Value& v) {
  return v.type == Value::Type::kInt ? static_cast<double>(v.i) : v.d;
}

// CEL equality: false across unrelated types, numbers across int and double.
bool Equal(const Value& a, const Value& b) {
  if (IsNumber(a) && IsNumber(b)) {
    if (a.type == Value::Type::kInt && b.type == Value::Type::kInt) return a.i == b.i;
    return AsDouble(a) == AsDouble(b);
  }
  if (a.type != b.type) return false;
  switch (a.type) {
    case Value::Type::kNull:
      return true;
    case Value::Type::kBool:
      return a.b == b.b;
    case Value::Type::kString:
      return a.s == b.s;
    case Value::Type::kQuantity:
      return a.q == b.q;
    case Value::Type::kSemver:
      return CompareSemver(a.v, b.v) == 0;
    case Value::Type::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i) {
        if (!Equal((*a.list)[i], (*b.list)[i])) return false;
      }
      return true;
    case Value::Type::kMap:
      if (a.map->size() != b.map->size()) return false;
      for (const auto& [key, value] : *a.map) {
        auto it = b.map->find(key);
        if (it == b.map->end() || !Equal(value, it->second)) return false;
      }
      return true;
    default:
      return false;
  }
}

// ---- the device ------------------------------------------------------------

Result<Value> AttributeValue(const std::string& name, const nlohmann::json& attribute) {
  if (!attribute.is_object() || attribute.size() != 1) {
    return Error{"attribute " + name + " must have exactly one of int, bool, string, version"};
  }
  const auto entry = attribute.begin();
  const std::string kind = entry.key();
  const nlohmann::json& raw = entry.value();
  if (kind == "int" && raw.is_number_integer()) return Value::Int(raw.get<int64_t>());
  if (kind == "bool" && raw.is_boolean()) return Value::Bool(raw.get<bool>());
  if (kind == "string" && raw.is_string()) return Value::String(raw.get<std::string>());
  if (kind == "version" && raw.is_string()) {
    auto version = ParseSemver(raw.get<std::string>());
    if (!version.ok()) return version.error().Wrap("attribute " + name);
    return Value::OfSemver(*version);
  }
  return Error{"attribute " + name + ": unsupported value " + attribute.dump()};
}

// Groups a slice's attribute or capacity map by domain; unqualified names are
// the driver's. An explicit driver-domain name wins over the unqualified one.
template <typename Convert>
Result<Value> ByDomain(const std::string& driver, const nlohmann::json& entries, Convert convert) {
  std::map<std::string, std::map<std::string, Value>> domains;
  std::map<std::string, std::map<std::string, bool>> explicitly_qualified;
  if (!entries.is_null() && !entries.is_object()) return Error{"expected a map, got " + entries.dump()};
  for (const auto& [key, raw] : entries.items()) {
    const auto slash = key.find('/');
    const std::string domain = slash == std::string::npos ? driver : key.substr(0, slash);
    const std::string name = slash == std::string::npos ? key : key.substr(slash + 1);
    const bool qualified = slash != std::string::npos;
    if (!qualified && explicitly_qualified[domain][name]) continue;
    auto value = convert(key, raw);
    if (!value.ok()) return value.error();
    domains[domain][name] = *value;
    if (qualified) explicitly_qualified[domain][name] = true;
  }
  std::map<std::string, Value> out;
  for (auto& [domain, values] : domains) out[domain] = Value::Map(std::move(values));
  return Value::Map(std::move(out), /*missing_is_empty=*/true);
}

Result<Value> DeviceValue(const CelDevice& device) {
  auto attributes = ByDomain(device.driver, device.attributes, AttributeValue);
  if (!attributes.ok()) return attributes.error().Wrap("device attributes");
  auto capacity = ByDomain(device.driver, device.capacity,
                           [](const std::string& name, const nlohmann::json& raw) -> Result<Value> {
                             if (!raw.is_object() || !raw.contains("value") || !raw["value"].is_string()) {
                               return Error{"capacity " + name + " has no value"};
                             }
                             auto q = Quantity::Parse(raw["value"].get<std::string>());
                             if (!q.ok()) return q.error().Wrap("capacity " + name);
                             return Value::OfQuantity(*q);
                           });
  if (!capacity.ok()) return capacity.error().Wrap("device capacity");
  std::map<std::string, Value> fields;
  fields["driver"] = Value::String(device.driver);
  fields["attributes"] = *attributes;
  fields["capacity"] = *capacity;
  fields["allowMultipleAllocations"] = Value::Bool(device.allow_multiple_allocations);
  return Value::Map(std::move(fields));
}

// ---- lexer -----------------------------------------------------------------

enum class Tok { kEnd, kInt, kDouble, kString, kIdent, kPunct };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;  // identifier, punctuation, or the decoded string
  int64_t int_value = 0;
  double double_value = 0;
  size_t position = 0;
};

Error SyntaxError(size_t position, const std::string& what) {
  return Error{"Syntax error at column " + std::to_string(position + 1) + ": " + what};
}

Result<std::vector<Token>> Lex(std::string_view in) {
  std::vector<Token> out;
  size_t i = 0;
  auto peek = [&](size_t k) -> char { return i + k < in.size() ? in[i + k] : '\0'; };
  while (true) {
    while (i < in.size() && std::isspace(static_cast<unsigned char>(in[i]))) ++i;
    Token token;
    token.position = i;
    if (i >= in.size()) {
      out.push_back(token);
      return out;
    }
    const char c = in[i];
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && std::isdigit(static_cast<unsigned char>(peek(1))))) {
      size_t start = i;
      if (c == '0' && (peek(1) == 'x' || peek(1) == 'X')) {
        i += 2;
        while (i < in.size() && std::isxdigit(static_cast<unsigned char>(in[i]))) ++i;
        if (i == start + 2) return SyntaxError(start, "hex literal without digits");
        if (i < in.size() && (in[i] == 'u' || in[i] == 'U')) {
          return SyntaxError(start, "unsigned integer literals are outside the supported CEL subset");
        }
        token.kind = Tok::kInt;
        try {
          token.int_value = static_cast<int64_t>(
              std::stoull(std::string(in.substr(start + 2, i - start - 2)), nullptr, 16));
        } catch (...) {
          return SyntaxError(start, "integer literal out of range");
        }
        out.push_back(token);
        continue;
      }
      bool is_double = false;
      while (i < in.size() && std::isdigit(static_cast<unsigned char>(in[i]))) ++i;
      if (i < in.size() && in[i] == '.' && std::isdigit(static_cast<unsigned char>(peek(1)))) {
        is_double = true;
        ++i;
        while (i < in.size() && std::isdigit(static_cast<unsigned char>(in[i]))) ++i;
      }
      if (i < in.size() && (in[i] == 'e' || in[i] == 'E')) {
        size_t j = i + 1;
        if (j < in.size() && (in[j] == '+' || in[j] == '-')) ++j;
        if (j < in.size() && std::isdigit(static_cast<unsigned char>(in[j]))) {
          is_double = true;
          i = j;
          while (i < in.size() && std::isdigit(static_cast<unsigned char>(in[i]))) ++i;
        }
      }
      const std::string text(in.substr(start, i - start));
      if (i < in.size() && (in[i] == 'u' || in[i] == 'U') && !is_double) {
        return SyntaxError(start, "unsigned integer literals are outside the supported CEL subset");
      }
      if (is_double) {
        token.kind = Tok::kDouble;
        token.double_value = std::stod(text);
      } else {
        token.kind = Tok::kInt;
        try {
          token.int_value = std::stoll(text);
        } catch (...) {
          // -9223372036854775808 is lexed as '-' and a too-large literal.
          return SyntaxError(start, "integer literal out of range");
        }
      }
      out.push_back(token);
      continue;
    }
    bool raw = false;
    if ((c == 'r' || c == 'R') && (peek(1) == '"' || peek(1) == '\'')) {
      raw = true;
      ++i;
    } else if ((c == 'b' || c == 'B') && (peek(1) == '"' || peek(1) == '\'')) {
      return SyntaxError(i, "bytes literals are outside the supported CEL subset");
    }
    if (in[i] == '"' || in[i] == '\'') {
      const char quote = in[i];
      if (peek(1) == quote && peek(2) == quote) {
        return SyntaxError(i, "triple-quoted strings are outside the supported CEL subset");
      }
      ++i;
      std::string value;
      bool closed = false;
      while (i < in.size()) {
        char ch = in[i++];
        if (ch == quote) {
          closed = true;
          break;
        }
        if (ch == '\n') break;
        if (ch != '\\' || raw) {
          value += ch;
          continue;
        }
        if (i >= in.size()) break;
        char esc = in[i++];
        switch (esc) {
          case 'n':
            value += '\n';
            break;
          case 't':
            value += '\t';
            break;
          case 'r':
            value += '\r';
            break;
          case 'a':
            value += '\a';
            break;
          case 'b':
            value += '\b';
            break;
          case 'f':
            value += '\f';
            break;
          case 'v':
            value += '\v';
            break;
          case '\\':
          case '\'':
          case '"':
          case '`':
          case '?':
            value += esc;
            break;
          case 'x':
          case 'u': {
            const size_t digits = esc == 'x' ? 2 : 4;
            if (i + digits > in.size()) return SyntaxError(i, "short escape sequence");
            const std::string hex(in.substr(i, digits));
            if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
              return SyntaxError(i, "invalid escape sequence");
            }
            const unsigned code = static_cast<unsigned>(std::stoul(hex, nullptr, 16));
            i += digits;
            if (code < 0x80) {
              value += static_cast<char>(code);
            } else if (code < 0x800) {
              value += static_cast<char>(0xC0 | (code >> 6));
              value += static_cast<char>(0x80 | (code & 0x3F));
            } else {
              value += static_cast<char>(0xE0 | (code >> 12));
              value += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
              value += static_cast<char>(0x80 | (code & 0x3F));
            }
            break;
          }
          default:
            return SyntaxError(i - 2, std::string("invalid escape sequence \\") + esc);
        }
      }
      if (!closed) return SyntaxError(token.position, "unterminated string literal");
      token.kind = Tok::kString;
      token.text = std::move(value);
      out.push_back(token);
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = i;
      while (i < in.size() && (std::isalnum(static_cast<unsigned char>(in[i])) || in[i] == '_')) ++i;
      token.kind = Tok::kIdent;
      token.text = std::string(in.substr(start, i - start));
      out.push_back(token);
      continue;
    }
    static const char* kTwo[] = {"==", "!=", "<=", ">=", "&&", "||"};
    token.kind = Tok::kPunct;
    bool matched = false;
    for (const char* op : kTwo) {
      if (c == op[0] && peek(1) == op[1]) {
        token.text = op;
        i += 2;
        matched = true;
        break;
      }
    }
    if (!matched) {
      if (std::string("()[]{}.,:?!-+*/%<>").find(c) == std::string::npos) {
        return SyntaxError(i, std::string("unexpected character '") + c + "'");
      }
      if ((c == '.' || c == '[') && peek(1) == '?') {
        return SyntaxError(i, "optional field selection is outside the supported CEL subset");
      }
      token.text = std::string(1, c);
      ++i;
    }
    out.push_back(token);
  }
}

}  // namespace

// ---- syntax tree -----------------------------------------------------------

struct CelSelector::Node {
  enum class Kind {
    kLiteral,
    kIdent,
    kSelect,
    kIndex,
    kCall,
    kUnary,
    kBinary,
    kTernary,
    kList,
    kMap,
    kHas,
    kBind
  };
  Kind kind = Kind::kLiteral;
  Value literal;
  std::string name;  // identifier, field, function, operator, bound variable
  bool has_target = false;
  std::vector<std::shared_ptr<const Node>> children;  // target first for member calls
  size_t position = 0;
};

namespace {

using Node = CelSelector::Node;
using NodePtr = std::shared_ptr<const Node>;

const std::vector<std::string>& GlobalFunctions() {
  static const std::vector<std::string> names = {"size",     "int",        "string", "double",
                                                 "quantity", "isQuantity", "semver", "isSemver"};
  return names;
}
const std::vector<std::string>& MemberFunctions() {
  static const std::vector<std::string> names = {
      "size",       "startsWith", "endsWith",  "contains",      "matches",
      "lowerAscii", "upperAscii", "compareTo", "isGreaterThan", "isLessThan",
      "add",        "sub",        "isInteger", "asInteger",     "asApproximateFloat",
      "sign",       "major",      "minor",     "patch"};
  return names;
}
bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Result<NodePtr> ParseAll() {
    auto expr = ParseExpr();
    if (!expr.ok()) return expr;
    if (Peek().kind != Tok::kEnd)
      return SyntaxError(Peek().position, "unexpected '" + Describe(Peek()) + "'");
    return expr;
  }

 private:
  const Token& Peek() const { return tokens_[pos_]; }
  Token Next() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }
  bool IsPunct(const char* text) const { return Peek().kind == Tok::kPunct && Peek().text == text; }
  bool IsIdent(const char* text) const { return Peek().kind == Tok::kIdent && Peek().text == text; }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case Tok::kEnd:
        return "end of expression";
      case Tok::kString:
        return "\"" + t.text + "\"";
      case Tok::kInt:
        return std::to_string(t.int_value);
      case Tok::kDouble:
        return std::to_string(t.double_value);
      default:
        return t.text;
    }
  }
  Result<Token> Expect(const char* punct) {
    if (!IsPunct(punct)) {
      return SyntaxError(Peek().position,
                         std::string("expected '") + punct + "', got '" + Describe(Peek()) + "'");
    }
    return Next();
  }

  static NodePtr Make(Node::Kind kind, std::string name, std::vector<NodePtr> children, size_t position) {
    auto node = std::make_shared<Node>();
    node->kind = kind;
    node->name = std::move(name);
    node->children = std::move(children);
    node->position = position;
    return node;
  }

  Result<NodePtr> ParseExpr() {
    // Nesting (parentheses, arguments, lists, ternaries) is bounded, as in
    // CEL's parser, so that no expression can exhaust the stack.
    if (++depth_ > kMaxDepth) return SyntaxError(Peek().position, "expression nests too deeply");
    auto result = ParseTernary();
    --depth_;
    return result;
  }

  Result<NodePtr> ParseTernary() {
    auto condition = ParseOr();
    if (!condition.ok() || !IsPunct("?")) return condition;
    const size_t position = Next().position;
    auto then = ParseOr();
    if (!then.ok()) return then;
    if (auto colon = Expect(":"); !colon.ok()) return colon.error();
    auto otherwise = ParseExpr();
    if (!otherwise.ok()) return otherwise;
    return Make(Node::Kind::kTernary, "?:", {*condition, *then, *otherwise}, position);
  }

  // One level of left-associative binary operators: operands parsed by
  // `operand` (the next level down), joined by any of `ops` (and, for the
  // relations, the identifier "in").
  Result<NodePtr> ParseBinaryLevel(Result<NodePtr> (Parser::*operand)(),
                                   std::initializer_list<const char*> ops, bool in_operator = false) {
    auto left = (this->*operand)();
    while (left.ok()) {
      std::string op;
      for (const char* candidate : ops) {
        if (IsPunct(candidate)) op = candidate;
      }
      if (op.empty() && in_operator && IsIdent("in")) op = "in";
      if (op.empty()) break;
      const size_t position = Next().position;
      auto right = (this->*operand)();
      if (!right.ok()) return right;
      left = Make(Node::Kind::kBinary, op, {*left, *right}, position);
    }
    return left;
  }

  Result<NodePtr> ParseOr() { return ParseBinaryLevel(&Parser::ParseAnd, {"||"}); }
  Result<NodePtr> ParseAnd() { return ParseBinaryLevel(&Parser::ParseRelation, {"&&"}); }
  Result<NodePtr> ParseRelation() {
    return ParseBinaryLevel(&Parser::ParseAdditive, {"==", "!=", "<", "<=", ">", ">="}, /*in_operator=*/true);
  }
  Result<NodePtr> ParseAdditive() { return ParseBinaryLevel(&Parser::ParseMultiplicative, {"+", "-"}); }
  Result<NodePtr> ParseMultiplicative() { return ParseBinaryLevel(&Parser::ParseUnary, {"*", "/", "%"}); }

  Result<NodePtr> ParseUnary() {
    if (IsPunct("!") || IsPunct("-")) {
      if (++unary_ > kMaxDepth) return SyntaxError(Peek().position, "expression nests too deeply");
      const Token op = Next();
      // A negative literal is a literal (so the smallest int can be written).
      if (op.text == "-" && Peek().kind == Tok::kInt) {
        const Token number = Next();
        auto node = std::make_shared<Node>();
        node->kind = Node::Kind::kLiteral;
        node->literal = Value::Int(-number.int_value);
        node->position = op.position;
        return ParseMember(node);
      }
      auto operand = ParseUnary();
      if (!operand.ok()) return operand;
      return Make(Node::Kind::kUnary, op.text, {*operand}, op.position);
    }
    auto primary = ParsePrimary();
    if (!primary.ok()) return primary;
    return ParseMember(*primary);
  }

  Result<std::vector<NodePtr>> ParseArguments(const char* close) {
    std::vector<NodePtr> args;
    if (IsPunct(close)) {
      Next();
      return args;
    }
    while (true) {
      auto arg = ParseExpr();
      if (!arg.ok()) return arg.error();
      args.push_back(*arg);
      if (IsPunct(",")) {
        Next();
        if (IsPunct(close)) break;  // trailing comma
        continue;
      }
      break;
    }
    if (auto end = Expect(close); !end.ok()) return end.error();
    return args;
  }

  Result<NodePtr> ParseMember(NodePtr operand) {
    while (true) {
      if (IsPunct(".")) {
        const size_t position = Next().position;
        if (Peek().kind != Tok::kIdent)
          return SyntaxError(Peek().position, "expected a field name after '.'");
        const std::string field = Next().text;
        if (IsPunct("(")) {
          Next();
          auto args = ParseArguments(")");
          if (!args.ok()) return args.error();
          auto call = MemberCall(operand, field, *args, position);
          if (!call.ok()) return call;
          operand = *call;
          continue;
        }
        operand = Make(Node::Kind::kSelect, field, {operand}, position);
        continue;
      }
      if (IsPunct("[")) {
        const size_t position = Next().position;
        auto index = ParseExpr();
        if (!index.ok()) return index;
        if (auto close = Expect("]"); !close.ok()) return close.error();
        operand = Make(Node::Kind::kIndex, "[]", {operand, *index}, position);
        continue;
      }
      return operand;
    }
  }

  Result<NodePtr> MemberCall(const NodePtr& target, const std::string& name, std::vector<NodePtr> args,
                             size_t position) {
    static const std::vector<std::string> kMacros = {"all", "exists", "exists_one", "map", "filter"};
    if (Contains(kMacros, name)) {
      return SyntaxError(position, "macro '" + name + "' is outside the supported CEL subset");
    }
    if (target->kind == Node::Kind::kIdent && target->name == "cel" && name == "bind") {
      if (args.size() != 3 || args[0]->kind != Node::Kind::kIdent) {
        return SyntaxError(position, "cel.bind() takes a variable name, a value and an expression");
      }
      const std::string variable = args[0]->name;
      return Make(Node::Kind::kBind, variable, {args[1], args[2]}, position);
    }
    if (!Contains(MemberFunctions(), name)) {
      return SyntaxError(position,
                         "undeclared reference to function '" + name + "' (outside the supported subset)");
    }
    std::vector<NodePtr> children = {target};
    children.insert(children.end(), args.begin(), args.end());
    auto node = std::make_shared<Node>();
    node->kind = Node::Kind::kCall;
    node->name = name;
    node->has_target = true;
    node->children = std::move(children);
    node->position = position;
    return NodePtr(node);
  }

  Result<NodePtr> ParsePrimary() {
    const Token token = Next();
    auto literal = [&](Value value) {
      auto node = std::make_shared<Node>();
      node->kind = Node::Kind::kLiteral;
      node->literal = std::move(value);
      node->position = token.position;
      return NodePtr(node);
    };
    switch (token.kind) {
      case Tok::kInt:
        return literal(Value::Int(token.int_value));
      case Tok::kDouble:
        return literal(Value::Double(token.double_value));
      case Tok::kString:
        return literal(Value::String(token.text));
      case Tok::kEnd:
        return SyntaxError(token.position, "unexpected end of expression");
      case Tok::kIdent:
        break;
      case Tok::kPunct:
        if (token.text == "(") {
          auto inner = ParseExpr();
          if (!inner.ok()) return inner;
          if (auto close = Expect(")"); !close.ok()) return close.error();
          return inner;
        }
        if (token.text == "[") {
          auto items = ParseArguments("]");
          if (!items.ok()) return items.error();
          return Make(Node::Kind::kList, "[]", *items, token.position);
        }
        if (token.text == "{") {
          std::vector<NodePtr> entries;
          while (!IsPunct("}")) {
            auto key = ParseExpr();
            if (!key.ok()) return key;
            if (auto colon = Expect(":"); !colon.ok()) return colon.error();
            auto value = ParseExpr();
            if (!value.ok()) return value;
            entries.push_back(*key);
            entries.push_back(*value);
            if (!IsPunct(",")) break;
            Next();
          }
          if (auto close = Expect("}"); !close.ok()) return close.error();
          return Make(Node::Kind::kMap, "{}", entries, token.position);
        }
        return SyntaxError(token.position, "unexpected '" + token.text + "'");
    }
    // Identifiers: keywords, global functions, macros, variables.
    const std::string& name = token.text;
    if (name == "true" || name == "false") return literal(Value::Bool(name == "true"));
    if (name == "null") return literal(Value());
    if (name == "in") return SyntaxError(token.position, "unexpected 'in'");
    if (IsPunct("(")) {
      Next();
      auto args = ParseArguments(")");
      if (!args.ok()) return args.error();
      if (name == "has") {
        if (args->size() != 1 || (*args)[0]->kind != Node::Kind::kSelect) {
          return SyntaxError(token.position, "has() takes one field selection, e.g. has(a.b)");
        }
        return Make(Node::Kind::kHas, "has", *args, token.position);
      }
      if (!Contains(GlobalFunctions(), name)) {
        return SyntaxError(token.position,
                           "undeclared reference to function '" + name + "' (outside the supported subset)");
      }
      return Make(Node::Kind::kCall, name, *args, token.position);
    }
    return Make(Node::Kind::kIdent, name, {}, token.position);
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  static constexpr int kMaxDepth = 250;
  int depth_ = 0;
  int unary_ = 0;  // unary operators in the whole expression
};

// Depth of the tree: operator chains (a + b + c ...) nest to the left.
size_t Depth(const Node& node) {
  size_t deepest = 0;
  for (const auto& child : node.children) deepest = std::max(deepest, Depth(*child));
  return deepest + 1;
}

// Every identifier must be `device`, `cel` (for cel.bind) or a bound variable.
Status CheckReferences(const Node& node, std::vector<std::string>& scope) {
  if (node.kind == Node::Kind::kIdent) {
    if (node.name == "device" || std::find(scope.begin(), scope.end(), node.name) != scope.end()) {
      return Status::Ok();
    }
    return Error{"undeclared reference to '" + node.name + "' (only 'device' is defined)"};
  }
  if (node.kind == Node::Kind::kBind) {
    TESSERA_RETURN_IF_ERROR(CheckReferences(*node.children[0], scope));
    scope.push_back(node.name);
    Status body = CheckReferences(*node.children[1], scope);
    scope.pop_back();
    return body;
  }
  for (const auto& child : node.children) TESSERA_RETURN_IF_ERROR(CheckReferences(*child, scope));
  return Status::Ok();
}

// ---- evaluation ------------------------------------------------------------

struct Env {
  const Value* device;
  std::vector<std::pair<std::string, Value>> bindings;
};

Result<Value> Eval(const Node& node, Env& env);

Result<Value> Select(const Value& operand, const std::string& field) {
  if (operand.type != Value::Type::kMap)
    return Error{"no such key: " + field + " (on a " + TypeName(operand.type) + ")"};
  auto it = operand.map->find(field);
  if (it == operand.map->end()) {
    if (operand.map_missing_is_empty) return Value::Map({});
    return Error{"no such key: " + field};
  }
  return it->second;
}

Result<Value> Index(const Value& operand, const Value& index) {
  if (operand.type == Value::Type::kMap) {
    if (index.type != Value::Type::kString) return NoOverload("_[_]", {&operand, &index});
    return Select(operand, index.s);
  }
  if (operand.type == Value::Type::kList) {
    if (index.type != Value::Type::kInt) return NoOverload("_[_]", {&operand, &index});
    if (index.i < 0 || static_cast<size_t>(index.i) >= operand.list->size()) {
      return Error{"index out of range: " + std::to_string(index.i)};
    }
    return (*operand.list)[static_cast<size_t>(index.i)];
  }
  return NoOverload("_[_]", {&operand, &index});
}

Result<Value> Compare(const std::string& op, const Value& a, const Value& b) {
  int order = 0;
  if (IsNumber(a) && IsNumber(b)) {
    if (a.type == Value::Type::kInt && b.type == Value::Type::kInt) {
      order = a.i < b.i ? -1 : (a.i > b.i ? 1 : 0);
    } else {
      const double x = AsDouble(a), y = AsDouble(b);
      if (std::isnan(x) || std::isnan(y)) return Value::Bool(false);
      order = x < y ? -1 : (x > y ? 1 : 0);
    }
  } else if (a.type == Value::Type::kString && b.type == Value::Type::kString) {
    order = a.s < b.s ? -1 : (a.s > b.s ? 1 : 0);
  } else if (a.type == Value::Type::kBool && b.type == Value::Type::kBool) {
    order = a.b == b.b ? 0 : (a.b ? 1 : -1);
  } else {
    // Quantities and versions order through compareTo() & co., not operators.
    return NoOverload(op, {&a, &b});
  }
  if (op == "<") return Value::Bool(order < 0);
  if (op == "<=") return Value::Bool(order <= 0);
  if (op == ">") return Value::Bool(order > 0);
  return Value::Bool(order >= 0);
}

Result<Value> Arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.type == Value::Type::kInt && b.type == Value::Type::kInt) {
    const int64_t x = a.i, y = b.i;
    if (op == "+" || op == "-" || op == "*") {
      int64_t result = 0;
      const bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &result)
                            : op == "-" ? __builtin_sub_overflow(x, y, &result)
                                        : __builtin_mul_overflow(x, y, &result);
      if (overflow) return Error{"int overflow in '" + op + "'"};
      return Value::Int(result);
    }
    if (y == 0) return Error{op == "/" ? "division by zero" : "modulus by zero"};
    if (x == std::numeric_limits<int64_t>::min() && y == -1) return Error{"int overflow in '" + op + "'"};
    return Value::Int(static_cast<int64_t>(op == "/" ? x / y : x % y));
  }
  if (a.type == Value::Type::kDouble && b.type == Value::Type::kDouble && op != "%") {
    if (op == "+") return Value::Double(a.d + b.d);
    if (op == "-") return Value::Double(a.d - b.d);
    if (op == "*") return Value::Double(a.d * b.d);
    return Value::Double(a.d / b.d);
  }
  if (op == "+" && a.type == Value::Type::kString && b.type == Value::Type::kString)
    return Value::String(a.s + b.s);
  if (op == "+" && a.type == Value::Type::kList && b.type == Value::Type::kList) {
    std::vector<Value> joined = *a.list;
    joined.insert(joined.end(), b.list->begin(), b.list->end());
    return Value::List(std::move(joined));
  }
  return NoOverload(op, {&a, &b});
}

Result<Value> CallFunction(const Node& node, const std::vector<Value>& args) {
  const std::string& f = node.name;
  auto arity = [&](size_t n) -> Status {
    if (args.size() != n) {
      std::vector<const Value*> ptrs;
      for (const auto& a : args) ptrs.push_back(&a);
      return NoOverload(f, ptrs);
    }
    return Status::Ok();
  };
  auto mismatch = [&]() -> Error {
    std::vector<const Value*> ptrs;
    for (const auto& a : args) ptrs.push_back(&a);
    return NoOverload(f, ptrs);
  };
  const bool member = node.has_target;
  if (f == "size") {
    TESSERA_RETURN_IF_ERROR(arity(1));
    const Value& x = args[0];
    if (x.type == Value::Type::kString) {
      int64_t code_points = 0;
      for (unsigned char c : x.s) code_points += (c & 0xC0) != 0x80;
      return Value::Int(code_points);
    }
    if (x.type == Value::Type::kList) return Value::Int(static_cast<int64_t>(x.list->size()));
    if (x.type == Value::Type::kMap) return Value::Int(static_cast<int64_t>(x.map->size()));
    return mismatch();
  }
  if (!member) {
    TESSERA_RETURN_IF_ERROR(arity(1));
    const Value& x = args[0];
    if (f == "quantity" || f == "isQuantity") {
      if (x.type != Value::Type::kString) return mismatch();
      auto q = Quantity::Parse(x.s);
      if (f == "isQuantity") return Value::Bool(q.ok());
      if (!q.ok()) return q.error();
      return Value::OfQuantity(*q);
    }
    if (f == "semver" || f == "isSemver") {
      if (x.type != Value::Type::kString) return mismatch();
      auto v = ParseSemver(x.s);
      if (f == "isSemver") return Value::Bool(v.ok());
      if (!v.ok()) return v.error();
      return Value::OfSemver(*v);
    }
    if (f == "int") {
      if (x.type == Value::Type::kInt) return x;
      if (x.type == Value::Type::kDouble) {
        if (!(x.d > -9.2233720368547758e18 && x.d < 9.2233720368547758e18))
          return Error{"int overflow in int()"};
        return Value::Int(static_cast<int64_t>(x.d));
      }
      if (x.type == Value::Type::kString) {
        try {
          size_t used = 0;
          const int64_t parsed = std::stoll(x.s, &used);
          if (used == x.s.size()) return Value::Int(parsed);
        } catch (...) {
        }
        return Error{"cannot convert \"" + x.s + "\" to int"};
      }
      return mismatch();
    }
    if (f == "double") {
      if (x.type == Value::Type::kDouble) return x;
      if (x.type == Value::Type::kInt) return Value::Double(static_cast<double>(x.i));
      if (x.type == Value::Type::kString) {
        try {
          size_t used = 0;
          const double parsed = std::stod(x.s, &used);
          if (used == x.s.size()) return Value::Double(parsed);
        } catch (...) {
        }
        return Error{"cannot convert \"" + x.s + "\" to double"};
      }
      return mismatch();
    }
    if (f == "string") {
      switch (x.type) {
        case Value::Type::kString:
          return x;
        case Value::Type::kInt:
          return Value::String(std::to_string(x.i));
        case Value::Type::kBool:
          return Value::String(x.b ? "true" : "false");
        case Value::Type::kQuantity:
          return Value::String(x.q.String());
        case Value::Type::kSemver:
          return Value::String(x.v.text);
        default:
          return mismatch();
      }
    }
    return mismatch();
  }
  // Member functions: args[0] is the target.
  const Value& self = args[0];
  if (self.type == Value::Type::kString) {
    if (f == "lowerAscii" || f == "upperAscii") {
      TESSERA_RETURN_IF_ERROR(arity(1));
      std::string out = self.s;
      for (char& c : out) {
        if (c >= 'a' && c <= 'z' && f == "upperAscii") c = static_cast<char>(c - 'a' + 'A');
        if (c >= 'A' && c <= 'Z' && f == "lowerAscii") c = static_cast<char>(c - 'A' + 'a');
      }
      return Value::String(out);
    }
    TESSERA_RETURN_IF_ERROR(arity(2));
    if (args[1].type != Value::Type::kString) return mismatch();
    const std::string& arg = args[1].s;
    if (f == "startsWith") return Value::Bool(self.s.rfind(arg, 0) == 0);
    if (f == "endsWith") {
      return Value::Bool(self.s.size() >= arg.size() &&
                         self.s.compare(self.s.size() - arg.size(), arg.size(), arg) == 0);
    }
    if (f == "contains") return Value::Bool(self.s.find(arg) != std::string::npos);
    if (f == "matches") {
      TESSERA_ASSIGN_OR_RETURN(bool found, CelRegexSearch(self.s, arg));
      return Value::Bool(found);
    }
    return mismatch();
  }
  if (self.type == Value::Type::kQuantity) {
    const Quantity& q = self.q;
    if (f == "isInteger" || f == "asInteger" || f == "asApproximateFloat" || f == "sign") {
      TESSERA_RETURN_IF_ERROR(arity(1));
      if (f == "isInteger") return Value::Bool(q.IsInteger());
      if (f == "sign") return Value::Int(q.Sign());
      if (f == "asApproximateFloat") return Value::Double(q.ToDouble());
      int64_t whole = 0;
      if (!q.ToInt64(&whole)) return Error{"cannot convert value to integer: " + q.String()};
      return Value::Int(whole);
    }
    TESSERA_RETURN_IF_ERROR(arity(2));
    const Value& other = args[1];
    if (f == "add" || f == "sub") {
      Quantity operand;
      if (other.type == Value::Type::kQuantity) {
        operand = other.q;
      } else if (other.type == Value::Type::kInt) {
        operand = Quantity::FromInt(other.i);
      } else {
        return mismatch();
      }
      return Value::OfQuantity(f == "add" ? q + operand : q - operand);
    }
    if (other.type != Value::Type::kQuantity) return mismatch();
    if (f == "compareTo") return Value::Int(q.Compare(other.q));
    if (f == "isGreaterThan") return Value::Bool(q > other.q);
    if (f == "isLessThan") return Value::Bool(q < other.q);
    return mismatch();
  }
  if (self.type == Value::Type::kSemver) {
    if (f == "major" || f == "minor" || f == "patch") {
      TESSERA_RETURN_IF_ERROR(arity(1));
      return Value::Int(f == "major" ? self.v.major : (f == "minor" ? self.v.minor : self.v.patch));
    }
    TESSERA_RETURN_IF_ERROR(arity(2));
    if (args[1].type != Value::Type::kSemver) return mismatch();
    const int order = CompareSemver(self.v, args[1].v);
    if (f == "compareTo") return Value::Int(order);
    if (f == "isGreaterThan") return Value::Bool(order > 0);
    if (f == "isLessThan") return Value::Bool(order < 0);
    return mismatch();
  }
  return mismatch();
}

Result<Value> Eval(const Node& node, Env& env) {
  switch (node.kind) {
    case Node::Kind::kLiteral:
      return node.literal;
    case Node::Kind::kIdent: {
      for (auto it = env.bindings.rbegin(); it != env.bindings.rend(); ++it) {
        if (it->first == node.name) return it->second;
      }
      if (node.name == "device") return *env.device;
      return Error{"undeclared reference to '" + node.name + "'"};
    }
    case Node::Kind::kSelect: {
      TESSERA_ASSIGN_OR_RETURN(Value operand, Eval(*node.children[0], env));
      return Select(operand, node.name);
    }
    case Node::Kind::kIndex: {
      TESSERA_ASSIGN_OR_RETURN(Value operand, Eval(*node.children[0], env));
      TESSERA_ASSIGN_OR_RETURN(Value index, Eval(*node.children[1], env));
      return Index(operand, index);
    }
    case Node::Kind::kHas: {
      const Node& select = *node.children[0];
      TESSERA_ASSIGN_OR_RETURN(Value operand, Eval(*select.children[0], env));
      if (operand.type != Value::Type::kMap) {
        return Error{"has() applied to a field of a " + std::string(TypeName(operand.type))};
      }
      return Value::Bool(operand.map->count(select.name) > 0);
    }
    case Node::Kind::kBind: {
      TESSERA_ASSIGN_OR_RETURN(Value bound, Eval(*node.children[0], env));
      env.bindings.emplace_back(node.name, std::move(bound));
      Result<Value> body = Eval(*node.children[1], env);
      env.bindings.pop_back();
      return body;
    }
    case Node::Kind::kList: {
      std::vector<Value> items;
      for (const auto& child : node.children) {
        TESSERA_ASSIGN_OR_RETURN(Value item, Eval(*child, env));
        items.push_back(std::move(item));
      }
      return Value::List(std::move(items));
    }
    case Node::Kind::kMap: {
      std::map<std::string, Value> entries;
      for (size_t i = 0; i + 1 < node.children.size(); i += 2) {
        TESSERA_ASSIGN_OR_RETURN(Value key, Eval(*node.children[i], env));
        if (key.type != Value::Type::kString) return Error{"map literal keys must be strings in this subset"};
        TESSERA_ASSIGN_OR_RETURN(Value value, Eval(*node.children[i + 1], env));
        if (entries.count(key.s)) return Error{"repeated map key: " + key.s};
        entries[key.s] = std::move(value);
      }
      return Value::Map(std::move(entries));
    }
    case Node::Kind::kCall: {
      std::vector<Value> args;
      for (const auto& child : node.children) {
        TESSERA_ASSIGN_OR_RETURN(Value arg, Eval(*child, env));
        args.push_back(std::move(arg));
      }
      return CallFunction(node, args);
    }
    case Node::Kind::kUnary: {
      TESSERA_ASSIGN_OR_RETURN(Value operand, Eval(*node.children[0], env));
      if (node.name == "!") {
        if (operand.type != Value::Type::kBool) return NoOverload("!_", {&operand});
        return Value::Bool(!operand.b);
      }
      if (operand.type == Value::Type::kInt) {
        if (operand.i == std::numeric_limits<int64_t>::min()) return Error{"int overflow in '-'"};
        return Value::Int(-operand.i);
      }
      if (operand.type == Value::Type::kDouble) return Value::Double(-operand.d);
      return NoOverload("-_", {&operand});
    }
    case Node::Kind::kTernary: {
      TESSERA_ASSIGN_OR_RETURN(Value condition, Eval(*node.children[0], env));
      if (condition.type != Value::Type::kBool) return NoOverload("_?_:_", {&condition});
      return Eval(*node.children[condition.b ? 1 : 2], env);
    }
    case Node::Kind::kBinary: {
      const std::string& op = node.name;
      if (op == "&&" || op == "||") {
        // CEL's commutative logic: a deciding operand wins over an error on
        // the other side.
        const bool decider = op == "||";
        Result<Value> left = Eval(*node.children[0], env);
        if (left.ok() && left->type == Value::Type::kBool && left->b == decider) return Value::Bool(decider);
        Result<Value> right = Eval(*node.children[1], env);
        if (right.ok() && right->type == Value::Type::kBool && right->b == decider)
          return Value::Bool(decider);
        if (!left.ok()) return left;
        if (!right.ok()) return right;
        if (left->type != Value::Type::kBool || right->type != Value::Type::kBool) {
          return NoOverload(op, {&*left, &*right});
        }
        return Value::Bool(!decider);
      }
      TESSERA_ASSIGN_OR_RETURN(Value a, Eval(*node.children[0], env));
      TESSERA_ASSIGN_OR_RETURN(Value b, Eval(*node.children[1], env));
      if (op == "==") return Value::Bool(Equal(a, b));
      if (op == "!=") return Value::Bool(!Equal(a, b));
      if (op == "<" || op == "<=" || op == ">" || op == ">=") return Compare(op, a, b);
      if (op == "in") {
        if (b.type == Value::Type::kList) {
          for (const auto& item : *b.list) {
            if (Equal(a, item)) return Value::Bool(true);
          }
          return Value::Bool(false);
        }
        if (b.type == Value::Type::kMap) {
          if (a.type != Value::Type::kString) return Value::Bool(false);
          return Value::Bool(b.map->count(a.s) > 0);
        }
        return NoOverload("@in", {&a, &b});
      }
      return Arithmetic(op, a, b);
    }
  }
  return Error{"unsupported expression"};
}

}  // namespace

Result<CelSelector> CelSelector::Compile(std::string_view expression) {
  if (expression.size() > 10 * 1024) return Error{"CEL expression is longer than 10 KiB"};
  auto tokens = Lex(expression);
  if (!tokens.ok()) return tokens.error();
  Parser parser(std::move(*tokens));
  auto root = parser.ParseAll();
  if (!root.ok()) return root.error();
  if (Depth(**root) > 1000) return Error{"Syntax error: expression nests too deeply"};
  std::vector<std::string> scope;
  if (Status refs = CheckReferences(**root, scope); !refs.ok()) return refs.error();
  return CelSelector(std::string(expression), *root);
}

Result<bool> CelSelector::Matches(const CelDevice& device) const {
  auto device_value = DeviceValue(device);
  if (!device_value.ok()) return device_value.error();
  Env env{&*device_value, {}};
  auto result = Eval(*root_, env);
  if (!result.ok()) return result.error();
  if (result->type != Value::Type::kBool) {
    return Error{"expression must evaluate to a bool, got " + std::string(TypeName(result->type))};
  }
  return result->b;
}

}  // namespace tessera::testing::dra
