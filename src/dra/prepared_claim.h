// PreparedClaim: what tessera-dra made on the node for one ResourceClaim, and
// its checkpoint form. The checkpoint (<state dir>/claims/<claim UID>.json)
// is written last, after the region and limits directories and the CDI spec,
// with a write to a temporary file and a rename: a claim with a checkpoint
// is completely prepared; files of a claim without one are leftovers of an
// interrupted NodePrepareResources, which a restarted plugin removes. The
// checkpoint holds the CDI spec itself, so a spec lost with /var/run/cdi (a
// tmpfs, after a reboot) is written again from it.
//
// Thread-safety: plain values and functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace tessera::dra {

struct PreparedDevice {
  std::string request;  // the allocation result's request ("gpu" or "gpu/sub")
  std::string pool;
  std::string device;      // "gpu-0"
  std::string share_id;    // "" = the device is the claim's alone
  std::string cdi_name;    // the CDI device name (without the kind)
  std::string uuid;        // the GPU behind it
  int64_t memory_mib = 0;  // the limit libvgpu holds it to; 0 = no limit
  int cores = 0;           // percent; 0 = no limit
  // A MIG partition (mig_partitions.h): the instance made for it. -1 = a GPU.
  int mig_gpu_index = -1;
  uint32_t mig_profile_id = 0;
  uint32_t mig_start = 0;
  uint32_t mig_gpu_instance_id = 0;
  std::string mig_parent_uuid{};  // the GPU the instance is on
  std::string mig_profile{};      // "1g.10gb"
  bool operator==(const PreparedDevice&) const = default;
};

struct PreparedClaim {
  std::string ns;
  std::string name;
  std::string uid;
  std::vector<PreparedDevice> devices;
  std::string cdi_spec_path;  // "" when the claim has no device of this driver
  std::string region_dir;
  std::string limits_dir;
  nlohmann::json cdi_spec;  // what cdi_spec_path holds
  bool operator==(const PreparedClaim&) const = default;
};

nlohmann::json PreparedClaimToJson(const PreparedClaim& claim);
Result<PreparedClaim> PreparedClaimFromJson(const nlohmann::json& json);

// The fully qualified CDI device ID of a prepared device ("tessera.io/gpu=<name>").
std::string CdiDeviceId(const PreparedDevice& device);

}  // namespace tessera::dra
