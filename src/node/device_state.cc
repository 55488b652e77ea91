#include "node/device_state.h"

#include <charconv>

namespace tessera::node {

namespace {
constexpr std::string_view kReplicaSeparator = "::";
}

std::string MakeDeviceId(const std::string& gpu_uuid, int replica) {
  return gpu_uuid + std::string(kReplicaSeparator) + std::to_string(replica);
}

Result<DeviceId> ParseDeviceId(const std::string& id) {
  auto sep = id.rfind(kReplicaSeparator);
  if (sep == std::string::npos || sep == 0) {
    return Error{"device ID '" + id + "' is not '<GPU uuid>::<replica>'"};
  }
  DeviceId parsed;
  parsed.gpu_uuid = id.substr(0, sep);
  const char* first = id.data() + sep + kReplicaSeparator.size();
  const char* last = id.data() + id.size();
  auto [ptr, ec] = std::from_chars(first, last, parsed.replica);
  if (first == last || ec != std::errc() || ptr != last || parsed.replica < 0) {
    return Error{"device ID '" + id + "' has no valid replica number after '::'"};
  }
  return parsed;
}

void DeviceState::SetGpus(std::vector<core::Gpu> gpus) {
  gpus_.Set(std::move(gpus));
}

bool DeviceState::SetHealth(const std::string& gpu_uuid, bool healthy) {
  return gpus_.Edit([&](std::vector<core::Gpu>& gpus) {
    bool changed = false;
    for (auto& gpu : gpus) {
      if (gpu.uuid != gpu_uuid || gpu.healthy == healthy) continue;
      gpu.healthy = healthy;
      changed = true;
    }
    return changed;
  });
}

bool DeviceState::SetHeldBy(const std::map<std::string, std::string>& held) {
  return gpus_.Edit([&](std::vector<core::Gpu>& gpus) {
    bool changed = false;
    for (auto& gpu : gpus) {
      auto it = held.find(gpu.uuid);
      const std::string holder = it == held.end() ? std::string() : it->second;
      if (gpu.held_by == holder) continue;
      gpu.held_by = holder;
      changed = true;
    }
    return changed;
  });
}

DeviceState::Snapshot DeviceState::Get() const {
  auto snapshot = gpus_.Get();
  return Snapshot{snapshot.version, std::move(snapshot.value)};
}

uint64_t DeviceState::WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) const {
  return gpus_.WaitForChange(seen, timeout);
}

}  // namespace tessera::node
