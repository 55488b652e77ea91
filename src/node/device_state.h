// DeviceState: the GPUs tessera-node advertises, as one versioned snapshot that
// every ListAndWatch stream follows. Writers (discovery, health events) bump the
// version; each stream sends a full list whenever the version moves.
//
// Thread-safety: all members may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/result.h"
#include "core/device.h"
#include "node/versioned.h"

namespace tessera::node {

// Device IDs the kubelet sees: "<GPU uuid>::<replica>", replica in [0, slots).
// The UUID (not the ordinal) keys the device, as everywhere in tessera.
std::string MakeDeviceId(const std::string& gpu_uuid, int replica);

struct DeviceId {
  std::string gpu_uuid;
  int replica = 0;
};
// Parses "<uuid>::<n>"; the error names the offending ID.
Result<DeviceId> ParseDeviceId(const std::string& id);

class DeviceState {
 public:
  struct Snapshot {
    uint64_t version = 0;
    std::vector<core::Gpu> gpus;
  };

  // Replaces the whole inventory (version moves even if equal: a rediscovery
  // is cheap to resend and keeps the logic obvious).
  void SetGpus(std::vector<core::Gpu> gpus);

  // Marks one GPU; returns true when its health actually changed (and the
  // version moved). Unknown UUIDs are ignored and return false.
  bool SetHealth(const std::string& gpu_uuid, bool healthy);

  // Sets every GPU's held_by from `held` (UUID -> "<namespace>/<pod>"; GPUs
  // not named are held by nobody). Returns true when anything changed (and
  // the version moved, so the inventory is republished).
  bool SetHeldBy(const std::map<std::string, std::string>& held);

  Snapshot Get() const;

  // Waits until the version differs from `seen` or `timeout` passes; returns
  // the version then current. Streams use a bounded wait so they also notice
  // cancellation and shutdown.
  uint64_t WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) const;

 private:
  Versioned<std::vector<core::Gpu>> gpus_;
};

}  // namespace tessera::node
