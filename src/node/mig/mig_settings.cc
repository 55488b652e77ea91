#include "node/mig/mig_settings.h"

#include <charconv>

#include "node/mig/mig_devices.h"

namespace tessera::node::mig {

Result<MigGpuSelection> ParseMigGpus(const std::string& text) {
  MigGpuSelection selection;
  if (text == "all") return selection;
  selection.all = false;
  const std::string usage =
      "mig_gpus must be 'all' or GPU indices separated by commas (\"0,2\"), got '" + text + "'";
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(begin, end - begin);
    int index = -1;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), index);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || index < 0 || index > 1023) {
      return Error{usage};
    }
    selection.indices.insert(index);
    begin = end + 1;
  }
  return selection;
}

Status ValidateMigSettings(const NodeConfig& c) {
  MigStrategy strategy;
  if (!ParseMigStrategy(c.mig_strategy, strategy)) {
    return Error{"mig_strategy must be single or mixed, got '" + c.mig_strategy + "'"};
  }
  if (auto gpus = ParseMigGpus(c.mig_gpus); !gpus.ok()) return gpus.error();
  if (c.mig_retry_seconds < 1 || c.mig_retry_seconds > 3600) {
    return Error{"mig_retry_seconds must be between 1 and 3600, got " + std::to_string(c.mig_retry_seconds)};
  }
  if (!c.mig_layout_file.empty() && c.mig_layout_file.front() != '/') {
    return Error{"mig_layout_file must be an absolute path, got '" + c.mig_layout_file + "'"};
  }
  if (c.mig_layout_file.empty() && !c.mig_config.empty()) {
    return Error{"mig_config names a configuration but no mig_layout_file is set"};
  }
  return Status::Ok();
}

}  // namespace tessera::node::mig
