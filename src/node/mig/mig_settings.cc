#include "node/mig/mig_settings.h"

#include <charconv>

#include "node/mig/mig_devices.h"

namespace tessera::node::mig {

Result<MigGpuSelection> ParseMigGpus(const std::string& text, const std::string& key) {
  MigGpuSelection selection;
  if (text == "all") return selection;
  selection.all = false;
  const std::string usage =
      key + " must be 'all' or GPU indices separated by commas (\"0,2\"), got '" + text + "'";
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

Result<MigGpuSelection> ParseMigDynamicGpus(const std::string& text) {
  if (text == "none") return MigGpuSelection{false, {}};
  auto parsed = ParseMigGpus(text, "mig_dynamic_gpus");
  if (!parsed.ok()) {
    return Error{
        "mig_dynamic_gpus must be 'none', 'all' or GPU indices separated by commas (\"0,2\"), got '" + text +
        "'"};
  }
  return parsed;
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
  TESSERA_ASSIGN_OR_RETURN(const MigGpuSelection dynamic, ParseMigDynamicGpus(c.mig_dynamic_gpus));
  if (!dynamic.empty() && !c.kubernetes) {
    return Error{
        "mig_dynamic_gpus needs kubernetes: the instances are created where the pods' allocations "
        "place them"};
  }
  if (!dynamic.empty() && !c.mig_layout_file.empty()) {
    // A GPU follows a layout or takes instances on demand, never both.
    const MigGpuSelection layout = *ParseMigGpus(c.mig_gpus);
    if (layout.all) {
      return Error{"mig_gpus is 'all' (every GPU follows mig_layout_file) and mig_dynamic_gpus is '" +
                   c.mig_dynamic_gpus + "': name the layout's GPUs in mig_gpus"};
    }
    if (dynamic.all) {
      return Error{"mig_dynamic_gpus is 'all' and mig_layout_file manages GPUs " + c.mig_gpus +
                   ": name the dynamic GPUs in mig_dynamic_gpus"};
    }
    for (int index : dynamic.indices) {
      if (layout.indices.count(index) > 0) {
        return Error{"GPU " + std::to_string(index) +
                     " is in both mig_gpus (a MIG layout) and mig_dynamic_gpus (instances on demand): a GPU "
                     "is in one mode"};
      }
    }
  }
  return Status::Ok();
}

}  // namespace tessera::node::mig
