// Who else uses a device: the "other tenants" of the default policy and of
// priority.
//
// Source: NVML's per-process utilisation (nvmlDeviceGetProcessUtilization)
// over the last second — every process that ran kernels on the device, with
// its share of device time. Processes of this container are recognised by
// the pids of the container's live region slots as NVML names them: a slot's
// host_pid (NVML reports host pids), or its container pid while that is not
// known; any other pid that used the device is another tenant. When NVML is
// absent, or the query fails with anything but "nothing ran"
// (NVML_ERROR_NOT_FOUND), the answer is "unknown", which the controller
// treats as "others present" (the quota is held). In a pid namespace whose
// host pids nobody has written into the region yet (the node agent does),
// NVML's pids match no slot: then every user of the device, this container
// included, looks like another tenant, and the default policy holds the
// quota (never more than asked).
#pragma once

#include <cstdint>

#include "vgpu/compute/controller.h"

namespace tessera::vgpu::compute {

struct ProcessShare {
  uint32_t pid;
  uint32_t percent;  // share of device time in the window
};

// Summarises per-process samples against this container's pids.
Neighbours summarise_neighbours(const ProcessShare* samples, int count, const uint32_t* own_pids,
                                int own_count);

}  // namespace tessera::vgpu::compute
