#include "vgpu/compute/neighbours.h"

namespace tessera::vgpu::compute {

Neighbours summarise_neighbours(const ProcessShare* samples, int count, const uint32_t* own_pids,
                                int own_count) {
  Neighbours n;
  n.known = true;
  for (int i = 0; i < count; ++i) {
    bool own = false;
    for (int j = 0; j < own_count && !own; ++j) own = own_pids[j] == samples[i].pid;
    if (own) {
      n.own_percent += samples[i].percent;
      continue;
    }
    n.others += 1;
    n.others_percent += samples[i].percent;
  }
  if (n.others_percent > 100) n.others_percent = 100;
  if (n.own_percent > 100) n.own_percent = 100;
  return n;
}

}  // namespace tessera::vgpu::compute
