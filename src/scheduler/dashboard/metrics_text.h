// Reading the Prometheus text exposition format (version 0.0.4), as
// tessera-node's /metrics writes it (base/prometheus_text.h), into samples.
//
// Only what the dashboard needs: metric name, labels and value of each sample
// line; `# HELP` / `# TYPE` comments and blank lines are skipped, a timestamp
// after the value is accepted and ignored. Label values may carry the three
// escapes the format defines (\\, \", \n). A line that does not parse fails
// the whole document with its line number, so that a corrupt endpoint is
// reported, never half-read.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace tessera::scheduler::dashboard {

struct MetricSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in the order written
  double value = 0;

  // The value of label `name`, "" when absent.
  std::string_view Label(std::string_view name) const;
};

// The samples of `text`, in document order. Errors: "line N: <what>".
Result<std::vector<MetricSample>> ParseMetricsText(std::string_view text);

}  // namespace tessera::scheduler::dashboard
