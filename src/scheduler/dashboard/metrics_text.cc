#include "scheduler/dashboard/metrics_text.h"

#include <cmath>
#include <cstdlib>
#include <limits>

namespace tessera::scheduler::dashboard {
namespace {

bool NameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool NameChar(char c) {
  return NameStart(c) || (c >= '0' && c <= '9');
}

Result<double> ParseValue(std::string_view text) {
  if (text == "+Inf" || text == "Inf") return std::numeric_limits<double>::infinity();
  if (text == "-Inf") return -std::numeric_limits<double>::infinity();
  if (text == "NaN") return std::numeric_limits<double>::quiet_NaN();
  std::string copy(text);
  char* end = nullptr;
  const double v = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size()) return Error{"value '" + copy + "' is not a number"};
  return v;
}

// One sample line (not a comment, not blank).
Result<MetricSample> ParseLine(std::string_view line) {
  MetricSample s;
  size_t i = 0;
  if (line.empty() || !NameStart(line[0])) return Error{"expected a metric name"};
  while (i < line.size() && NameChar(line[i])) ++i;
  s.name = std::string(line.substr(0, i));
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      while (i < line.size() && line[i] == ' ') ++i;
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      const size_t start = i;
      while (i < line.size() && NameChar(line[i])) ++i;
      if (i == start) return Error{"expected a label name"};
      std::string label(line.substr(start, i - start));
      if (i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"')
        return Error{"label " + label + ": expected =\"value\""};
      i += 2;
      std::string value;
      bool closed = false;
      while (i < line.size()) {
        char c = line[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\') {
          if (i >= line.size()) break;
          char e = line[i++];
          value += e == 'n' ? '\n' : e;  // \\ and \" stand for themselves
        } else {
          value += c;
        }
      }
      if (!closed) return Error{"label " + label + ": unterminated value"};
      s.labels.emplace_back(std::move(label), std::move(value));
      if (i < line.size() && line[i] == ',') ++i;
    }
  }
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  size_t end = i;
  while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
  if (end == i) return Error{"metric " + s.name + ": no value"};
  TESSERA_ASSIGN_OR_RETURN(s.value, ParseValue(line.substr(i, end - i)));
  return s;
}

}  // namespace

std::string_view MetricSample::Label(std::string_view label) const {
  for (const auto& [k, v] : labels) {
    if (k == label) return v;
  }
  return {};
}

Result<std::vector<MetricSample>> ParseMetricsText(std::string_view text) {
  std::vector<MetricSample> out;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    auto sample = ParseLine(line.substr(first));
    if (!sample.ok()) return Error{"line " + std::to_string(line_no) + ": " + sample.error().message};
    out.push_back(std::move(sample).value());
  }
  return out;
}

}  // namespace tessera::scheduler::dashboard
