// MigXidHealth: which MIG devices critical XIDs took out, for the MIG
// manager (layouts) and DynamicMig alike. An XID naming a GPU instance marks
// that instance (parent GPU, GI id); one naming none marks all of the GPU's.
// Sticky until tessera-node restarts, as for whole GPUs — except Forget, for
// an instance destroyed (its GI id may be given to a new one).
//
// Thread-safety: none; each owner guards it with its own mutex.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <tuple>

#include "host/nvml_mig.h"

namespace tessera::node::mig {

class MigXidHealth {
 public:
  static constexpr uint32_t kWholeGpu = 0xFFFFFFFF;

  // Returns whether it marked anything new.
  bool Record(const host::MigXid& xid) {
    return unhealthy_.insert({xid.gpu_uuid, xid.gpu_instance_id}).second;
  }
  void Forget(const std::string& parent_uuid, uint32_t gpu_instance_id) {
    unhealthy_.erase({parent_uuid, gpu_instance_id});
  }
  bool Healthy(const std::string& parent_uuid, uint32_t gpu_instance_id) const {
    return unhealthy_.count({parent_uuid, gpu_instance_id}) == 0 &&
           unhealthy_.count({parent_uuid, kWholeGpu}) == 0;
  }

 private:
  std::set<std::tuple<std::string, uint32_t>> unhealthy_;
};

}  // namespace tessera::node::mig
