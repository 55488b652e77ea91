#include "kubectl/hami_allocation.h"

#include <charconv>

namespace tessera::kubectl {
namespace {

std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(separator, start);
    if (end == std::string_view::npos) {
      parts.push_back(text.substr(start));
      return parts;
    }
    parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
}

bool ParseWhole(std::string_view text, int64_t& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && out >= 0;
}

}  // namespace

Result<std::vector<core::ContainerAllocation>> DecodeHamiAllocation(
    std::string_view text, const std::vector<std::string>& container_names) {
  std::vector<core::ContainerAllocation> containers;
  std::vector<std::string_view> per_container = Split(text, ';');
  // "…;" ends every container: the piece after the last ';' is empty.
  if (!per_container.empty() && per_container.back().empty()) per_container.pop_back();
  for (size_t i = 0; i < per_container.size(); ++i) {
    core::ContainerAllocation container;
    container.container = i < container_names.size() ? container_names[i] : "#" + std::to_string(i);
    for (std::string_view device : Split(per_container[i], ':')) {
      if (device.empty()) continue;  // the piece after a device's closing ':'
      const std::vector<std::string_view> fields = Split(device, ',');
      const std::string where = "container " + std::to_string(i) + " device \"" + std::string(device) + "\"";
      if (fields.size() != 4) {
        return Error{where + ": expected UUID,TYPE,MEMORY_MIB,CORES (" + std::to_string(fields.size()) +
                     " fields)"};
      }
      if (fields[0].empty()) return Error{where + ": empty UUID"};
      int64_t memory = 0;
      int64_t cores = 0;
      if (!ParseWhole(fields[2], memory)) return Error{where + ": memory is not a whole number of MiB"};
      if (!ParseWhole(fields[3], cores) || cores > 100) return Error{where + ": cores is not 0..100"};
      container.devices.push_back({std::string(fields[0]), memory, static_cast<int>(cores)});
    }
    if (!container.devices.empty()) containers.push_back(std::move(container));
  }
  return containers;
}

}  // namespace tessera::kubectl
