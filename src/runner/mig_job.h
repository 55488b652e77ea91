// `tessera run --mig PROFILE`: the job runs in a MIG instance created for it
// on this machine and destroyed after it.
//
// The steps, each against the node-local ledger (ledger.h) so that
// concurrent `tessera run --mig` never pick the same placement:
//   1. CleanOrphanedInstances: destroy the instances of MIG jobs whose runner
//      died (the ledger keeps such entries until then).
//   2. ReserveMigInstance, under the ledger's lock: list the GPUs (MigDriver),
//      choose a MIG-capable GPU in MIG mode whose model has the profile and a
//      free placement for it beside the instances already there (NVML's and
//      the ones other runners reserved but have not created yet), placed by
//      core/mig's Placer; record the reservation.
//   3. CreateMigInstance: create the GPU instance at that placement and one
//      compute instance spanning it; record its ids and MIG UUID.
//   4. The job runs with CUDA_VISIBLE_DEVICES = NVIDIA_VISIBLE_DEVICES = the
//      MIG UUID (BuildMigJobSpec). No libvgpu: MIG isolates memory and compute
//      in hardware.
//   5. ReleaseMigInstance: destroy the instance and drop the entry.
// A runner killed at any point leaves an entry whose holder is dead: step 1
// of the next `tessera run` destroys the instance it names.
//
// Thread-safety: as SliceLedger and the MigDriver given.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "host/nvml_mig.h"
#include "runner/job_process.h"
#include "runner/ledger.h"
#include "runner/local_gpus.h"

namespace tessera::runner {

struct MigRequest {
  std::string profile;           // "1g.10gb", as nvidia-smi and mig-parted name it
  std::optional<int> gpu_index;  // --gpu: only this GPU (NVML index)
  bool simulated = false;        // the GPUs are tessera's simulated ones (for how to turn MIG mode on)
};

// Either a reserved instance (recorded, not yet created) or a refusal that
// names the cause for each GPU.
struct MigReservation {
  std::optional<LedgerEntry> entry;
  std::string refusal;
};

// Destroys the instances that orphaned entries name and drops those entries;
// an entry whose instance cannot be destroyed (still in use) stays for the
// next attempt. Returns one line per instance destroyed or left.
Result<std::vector<std::string>> CleanOrphanedInstances(SliceLedger& ledger, host::MigDriver& driver);

// Step 2 above. An Error means the ledger or the driver failed.
Result<MigReservation> ReserveMigInstance(SliceLedger& ledger, host::MigDriver& driver,
                                          const MigRequest& request, const std::vector<std::string>& command);

// Step 3: the entry as recorded with the created instance. On an error the
// reservation is dropped and nothing is left on the GPU.
Result<LedgerEntry> CreateMigInstance(SliceLedger& ledger, host::MigDriver& driver,
                                      const LedgerEntry& reserved);

// Step 5. When the instance cannot be destroyed the entry stays (it is
// orphaned once this runner exits) and the error says why.
Status ReleaseMigInstance(SliceLedger& ledger, host::MigDriver& driver, const LedgerEntry& entry);

// The command with its MIG device (and, in simulated mode, the environment
// that reaches the same simulated GPUs).
JobSpec BuildMigJobSpec(const LedgerEntry& entry, const LocalGpus& local,
                        const std::vector<std::string>& command);

// How to turn MIG mode on for GPU `index` ("sudo nvidia-smi -i 0 -mig 1", or
// `tessera sim mig` on the simulated GPU), and the reset an A100/A30 needs.
std::string HowToEnableMig(int index, bool needs_reset, bool pending, bool simulated);

}  // namespace tessera::runner
