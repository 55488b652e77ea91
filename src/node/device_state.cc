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
  {
    std::lock_guard lock(mu_);
    gpus_ = std::move(gpus);
    ++version_;
  }
  changed_.notify_all();
}

bool DeviceState::EditEach(const std::function<bool(core::Gpu&)>& edit) {
  {
    std::lock_guard lock(mu_);
    bool changed = false;
    for (auto& gpu : gpus_) changed = edit(gpu) || changed;
    if (!changed) return false;
    ++version_;
  }
  changed_.notify_all();
  return true;
}

bool DeviceState::SetHealth(const std::string& gpu_uuid, bool healthy) {
  return EditEach([&](core::Gpu& gpu) {
    if (gpu.uuid != gpu_uuid || gpu.healthy == healthy) return false;
    gpu.healthy = healthy;
    return true;
  });
}

bool DeviceState::SetHeldBy(const std::map<std::string, std::string>& held) {
  return EditEach([&](core::Gpu& gpu) {
    auto it = held.find(gpu.uuid);
    const std::string holder = it == held.end() ? std::string() : it->second;
    if (gpu.held_by == holder) return false;
    gpu.held_by = holder;
    return true;
  });
}

DeviceState::Snapshot DeviceState::Get() const {
  std::lock_guard lock(mu_);
  return Snapshot{version_, gpus_};
}

uint64_t DeviceState::WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return version_ != seen; });
  return version_;
}

}  // namespace tessera::node
