// Which GPUs get an MPS control daemon, and with what defaults: the GPUs in
// mps mode of the node's mode assignment (node/sharing/gpu_modes.h).
//   - NVIDIA-style replicas (replicas >= 1): one replica's share, as the
//     mode resolved it (mps_active_thread_percentage, mps_pinned_memory_mib;
//     by default 100 / replicas % and memory / replicas), so a client that
//     drops its variables still gets no more than a replica;
//   - sized per request (replicas 0): 100 % and no memory limit; each client
//     carries its own size.
//
// Thread-safety: a pure function.
#pragma once

#include <vector>

#include "core/device.h"
#include "node/mps/mps_daemons.h"
#include "node/sharing/gpu_modes.h"

namespace tessera::node::mps {

// `discovered`: the node's GPUs with their physical memory.
std::vector<MpsGpu> MpsGpusOf(const sharing::ModeAssignment& modes, const std::vector<core::Gpu>& discovered);

}  // namespace tessera::node::mps
