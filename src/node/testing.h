// Builders shared by tessera-node's unit tests (header-only, uses core's test
// builders; never part of tessera_node).
#pragma once

#include <string>

#include "core/device.h"
#include "core/testing.h"

namespace tessera::node {

// An 80 GB A100 as discovery reports it, advertised as the default 10 vGPUs.
inline core::Gpu TestA100(const std::string& uuid, int index) {
  core::Gpu gpu = core::TestGpu(uuid, "NVIDIA A100-SXM4-80GB", 81920, 10);
  gpu.index = index;
  return gpu;
}

}  // namespace tessera::node
