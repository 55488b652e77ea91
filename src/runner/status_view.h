// The tables `tessera ps` and `tessera smi` print: running slices from the
// ledger joined with what their regions say they use.
#pragma once

#include <string>
#include <vector>

#include "core/device.h"
#include "runner/ledger.h"

namespace tessera::runner {

// One row per (job, GPU): job, holder pid, GPU, memory used/limit, peak, OOM
// refusals, compute quota and GPU time used, command.
std::string RenderJobTable(const std::vector<LedgerEntry>& entries);

// One block per GPU: model, memory, and the slices on it with their usage.
std::string RenderGpuTable(const std::vector<core::Gpu>& gpus, const std::vector<LedgerEntry>& entries);

}  // namespace tessera::runner
