#include "base/prometheus_text.h"

#include "base/number_format.h"

#include <algorithm>
#include <cassert>

namespace tessera {
namespace {

bool IsAsciiLetter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool IsAsciiDigit(char c) {
  return c >= '0' && c <= '9';
}

// Go's utf8.ValidString, which Prometheus applies to label values and HELP text:
// no overlong forms, no surrogates, nothing above U+10FFFF.
bool IsValidUtf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    unsigned char lo = 0x80;
    unsigned char hi = 0xBF;  // bounds of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      length = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      length = 3;
      if (b0 == 0xE0) lo = 0xA0;  // overlong
      if (b0 == 0xED) hi = 0x9F;  // surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      length = 4;
      if (b0 == 0xF0) lo = 0x90;  // overlong
      if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return false;
    }
    if (s.size() - i < length) return false;
    const auto b1 = static_cast<unsigned char>(s[i + 1]);
    if (b1 < lo || b1 > hi) return false;
    for (std::size_t k = 2; k < length; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < 0x80 || b > 0xBF) return false;
    }
    i += length;
  }
  return true;
}

// HELP text escapes `\` and newline; a label value `"` as well.
void AppendEscaped(std::string_view text, bool label_value, std::string* out) {
  for (char c : text) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '"' && label_value) {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
  }
}

// Indexed by MetricType.
constexpr std::string_view kTypeNames[] = {"gauge", "counter", "untyped"};

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = IsAsciiLetter(c) || c == '_' || c == ':' || (i > 0 && IsAsciiDigit(c));
    if (!ok) return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__") return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = IsAsciiLetter(c) || c == '_' || (i > 0 && IsAsciiDigit(c));
    if (!ok) return false;
  }
  return true;
}

void PrometheusText::Reject(std::string reason, bool programming_error) {
  ++rejected_;
  if (first_rejection_.empty()) first_rejection_ = std::move(reason);
  // Release builds skip and count; debug builds stop at the caller's mistake.
  assert(!programming_error && "PrometheusText: invalid use, see first_rejection()");
  (void)programming_error;
}

void PrometheusText::Describe(std::string_view name, MetricType type, std::string_view help) {
  if (!IsValidMetricName(name)) {
    Reject("invalid metric name '" + std::string(name) + "'", true);
    return;
  }
  if (index_.find(name) != index_.end()) {
    Reject("metric family '" + std::string(name) + "' described twice", true);
    return;
  }
  if (!IsValidUtf8(help)) {
    Reject("HELP text of '" + std::string(name) + "' is not valid UTF-8", true);
    return;
  }
  index_.emplace(std::string(name), families_.size());
  families_.push_back(Family{std::string(name), type, std::string(help), {}, {}});
}

void PrometheusText::Add(std::string_view name, const MetricLabels& labels, double value) {
  const auto it = index_.find(name);
  if (it == index_.end()) {
    Reject("sample of undescribed metric family '" + std::string(name) + "'", true);
    return;
  }
  Family& family = families_[it->second];

  std::vector<const std::pair<std::string, std::string>*> sorted;
  sorted.reserve(labels.size());
  for (const auto& label : labels) {
    if (!IsValidLabelName(label.first)) {
      Reject("invalid label name '" + label.first + "' on '" + family.name + "'", true);
      return;
    }
    if (!IsValidUtf8(label.second)) {
      Reject("label " + label.first + " of '" + family.name + "' is not valid UTF-8", false);
      return;
    }
    sorted.push_back(&label);
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->first == sorted[i - 1]->first) {
      Reject("label name '" + sorted[i]->first + "' twice on '" + family.name + "'", true);
      return;
    }
  }

  // The series identity: label names are plain identifiers and escaped values hold no
  // bare '"', so name="value", pairs cannot run into each other.
  std::string key;
  for (const auto* label : sorted) {
    key.append(label->first).append("=\"");
    AppendEscaped(label->second, /*label_value=*/true, &key);
    key.append("\",");
  }
  if (!family.series_keys.insert(key).second) {
    Reject("duplicate series '" + family.name + "{" + key + "}'", false);
    return;
  }

  std::string line = family.name;
  if (!labels.empty()) {
    line.push_back('{');
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) line.push_back(',');
      line.append(labels[i].first).append("=\"");
      AppendEscaped(labels[i].second, /*label_value=*/true, &line);
      line.push_back('"');
    }
    line.push_back('}');
  }
  line.push_back(' ');
  line.append(FormatNumber(value));
  line.push_back('\n');
  family.sample_lines.push_back(std::move(line));
}

std::string PrometheusText::Render() const {
  std::string out;
  for (const Family& family : families_) {
    if (family.sample_lines.empty()) continue;
    out.append("# HELP ").append(family.name).push_back(' ');
    AppendEscaped(family.help, /*label_value=*/false, &out);
    out.push_back('\n');
    out.append("# TYPE ").append(family.name).push_back(' ');
    out.append(kTypeNames[static_cast<size_t>(family.type)]);
    out.push_back('\n');
    for (const std::string& line : family.sample_lines) out.append(line);
  }
  return out;
}

}  // namespace tessera
