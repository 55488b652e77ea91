#include "node/mps/mps_gpus.h"

namespace tessera::node::mps {

std::vector<MpsGpu> MpsGpusOf(const sharing::ModeAssignment& modes,
                              const std::vector<core::Gpu>& discovered) {
  std::vector<MpsGpu> out;
  for (const sharing::GpuMode& mode : modes.gpus) {
    if (mode.mode != core::SharingMode::kMps) continue;
    MpsGpu gpu;
    gpu.uuid = mode.uuid;
    gpu.index = mode.index;
    for (const core::Gpu& d : discovered) {
      if (d.uuid == mode.uuid) gpu.memory_mib = d.memory_mib;
    }
    if (mode.replicas > 0) {
      gpu.default_active_thread_percentage =
          mode.mps_active_thread_percentage > 0 ? mode.mps_active_thread_percentage : 100 / mode.replicas;
      gpu.default_pinned_memory_mib =
          mode.mps_pinned_memory_mib > 0 ? mode.mps_pinned_memory_mib : gpu.memory_mib / mode.replicas;
    }
    out.push_back(gpu);
  }
  return out;
}

}  // namespace tessera::node::mps
