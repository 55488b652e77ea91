// PrometheusText: builds one document in the Prometheus text exposition format,
// version 0.0.4 (what a /metrics endpoint serves with kContentType).
//
//   PrometheusText text;
//   text.Describe("tessera_container_memory_used_bytes", MetricType::kGauge, "Device memory in use.");
//   text.Add("tessera_container_memory_used_bytes", {{"pod", "a"}, {"container", "app"}}, 1048576);
//   std::string body = text.Render();
//
// What it guarantees, so that a real Prometheus accepts every document it renders:
//  - `# HELP` and `# TYPE` once per family, then all of the family's samples together,
//    even when samples of different families were added interleaved; families come out
//    in Describe order, samples in the order they were added. A family without samples
//    is left out (as the Go client does).
//  - HELP text escapes `\` and newline; label values escape `\`, `"` and newline.
//  - Values are spelled by FormatNumber (base/number_format.h): an integer-valued
//    double below 2^63 in magnitude as an exact integer (1048576, never 1.048576e+06),
//    other finite values in the shortest form that reads back to the same double,
//    infinities and NaN as `+Inf`, `-Inf`, `NaN`. The output never depends on the
//    locale.
//
// Every /metrics endpoint of tessera renders through it (tessera-node's and
// tessera-scheduler's).
//
// Rejections. An invalid metric name (not [a-zA-Z_:][a-zA-Z0-9_:]*), an invalid label
// name (not [a-zA-Z_][a-zA-Z0-9_]*, or starting with "__", which Prometheus reserves
// and drops after relabelling), a label name twice in one sample, a second Describe of
// a name, or a sample of a family never described is a programming error: names are
// constants in the caller's code. Debug builds assert; release builds skip the family
// or sample, count it in rejected() and keep the first reason in first_rejection(), so
// that a metrics endpoint never takes the node agent down and the rest of the document
// is still served. Two rejections depend on data, not only on code, so they never
// assert, in any build: a label value that is not valid UTF-8 (Prometheus 2.42 fails
// the whole scrape: "invalid UTF-8 label value") and a sample whose label set repeats an
// earlier sample of the family, compared regardless of label order (Prometheus keeps the
// first and silently drops the other). Both skip the sample and count it. HELP text must
// be valid UTF-8 too (else the whole scrape fails as well); it is code, so invalid HELP
// is a programming error.
//
// Not supported: histograms, summaries, timestamps, exemplars, OpenMetrics.
//
// Thread-safety: none; build one document per scrape on one thread.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kGauge, kCounter, kUntyped };

class PrometheusText {
 public:
  // The Content-Type header a /metrics response with this body carries.
  static constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

  // Declares a family. Call once per name, before its first Add.
  void Describe(std::string_view name, MetricType type, std::string_view help);

  // Appends one sample to the described family `name`.
  void Add(std::string_view name, const MetricLabels& labels, double value);

  // The document: ends with a newline unless empty (no family has samples).
  std::string Render() const;

  // Families and samples skipped (see "Rejections" above), and why the first one was.
  std::size_t rejected() const { return rejected_; }
  const std::string& first_rejection() const { return first_rejection_; }

 private:
  struct Family {
    std::string name;
    MetricType type;
    std::string help;
    std::vector<std::string> sample_lines;  // rendered, each ending in '\n'
    std::set<std::string> series_keys;      // sorted, escaped label sets already added
  };

  void Reject(std::string reason, bool programming_error);

  std::vector<Family> families_;                           // in Describe order
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in families_
  std::size_t rejected_ = 0;
  std::string first_rejection_;
};

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]* and not starting with "__".
bool IsValidLabelName(std::string_view name);

}  // namespace tessera
