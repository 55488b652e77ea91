// The MIG settings of tessera-node's configuration (NodeConfig::mig_*): which
// GPUs tessera manages MIG on, and their checks.
#pragma once

#include <set>
#include <string>

#include "base/result.h"
#include "node/config.h"

namespace tessera::node::mig {

// `mig_gpus`: "all" or a comma-separated list of GPU indices.
struct MigGpuSelection {
  bool all = true;
  std::set<int> indices;
  bool Contains(int index) const { return all || indices.count(index) > 0; }
  bool empty() const { return !all && indices.empty(); }
};

// The error names the key (`key`) and the offending text.
Result<MigGpuSelection> ParseMigGpus(const std::string& text, const std::string& key = "mig_gpus");

// `mig_dynamic_gpus`: "none" (an empty selection), "all" or GPU indices.
Result<MigGpuSelection> ParseMigDynamicGpus(const std::string& text);

// mig_strategy single|mixed, mig_gpus, mig_retry_seconds 1-3600,
// mig_layout_file an absolute path when set, and mig_dynamic_gpus: parsed,
// only with kubernetes (the instances come from the pods' allocations), and
// no GPU both in the layout's mig_gpus and dynamic. The layout file itself is read
// (and may be fixed) while the agent runs: its errors are reported on the
// node, not at start.
Status ValidateMigSettings(const NodeConfig& config);

}  // namespace tessera::node::mig
