// The MIG-managed GPUs as the node's inventory annotation lists them
// (core/inventory_codec.h): each with its MIG mode and MIG devices, and no
// vGPU slots, so the scheduler places no vGPU slice there and can see which
// instances exist and which container holds each.
//
// Pure function; thread-safe.
#pragma once

#include <vector>

#include "core/device.h"
#include "node/mig/mig_devices.h"

namespace tessera::node::mig {

// `managed`: the GPUs as discovered (core::Gpu, whole-GPU figures), every one
// MIG-managed; `devices`: the MIG devices listed now. Each GPU comes back with
// `mode`, slots 0, and the devices whose parent it is, by start. A GPU whose
// MIG mode is still pending (an A100 waiting for a reset) is listed in MIG
// mode with no devices: the node does not offer it as vGPU slices either.
std::vector<core::Gpu> MigInventoryGpus(const std::vector<core::Gpu>& managed,
                                        const std::vector<MigDevice>& devices, core::SharingMode mode);

}  // namespace tessera::node::mig
