// `tessera run`: place a slice on this machine with the core engine, record it
// in the node-local ledger, run the command with libvgpu enforcing the slice,
// and free the slice when the command ends.
//
// The placement happens inside the ledger's critical section, against the
// slices every other live `tessera run` holds, so concurrent invocations can
// never overcommit a GPU. The slice is recorded under the supervisor's process
// identity; the job dies with its supervisor (job_process.h), so a killed
// `tessera run` frees its slice for the next reader.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "core/allocation.h"
#include "runner/job_process.h"
#include "runner/ledger.h"
#include "runner/local_gpus.h"
#include "runner/mig_job.h"
#include "runner/slice_request.h"

namespace tessera::runner {

inline constexpr int kExitDoesNotFit = 2;

struct ReservedSlice {
  LedgerEntry entry;
  core::PodAllocation allocation;  // node "local", one container "job"
};

// Either a reserved slice, or a refusal saying which GPU lacks what.
struct Reservation {
  std::optional<ReservedSlice> slice;
  std::string refusal;  // set when the request does not fit
};

// Places `request` against the live ledger entries and records it. A request
// that does not fit is a Reservation with a refusal (nothing recorded); an
// Error means the ledger or the request itself is unusable.
Result<Reservation> ReserveSlice(SliceLedger& ledger, const std::vector<core::Gpu>& gpus,
                                 const SliceRequest& request, const std::vector<std::string>& command);

// The command with the environment libvgpu needs to enforce `slice` (and, in
// simulated mode, to reach the same simulated GPUs).
Result<JobSpec> BuildJobSpec(const ReservedSlice& slice, const InstallPaths& paths, const LocalGpus& local,
                             const std::vector<std::string>& command);

// --mig sizes nothing: refuses the slice flags (--gpumem, --gpucores, --gpus,
// --gpu-type) with the reason.
Status CheckMigFlags(const SliceRequest& slice);

struct RunOptions {
  SliceRequest slice;
  std::optional<MigRequest> mig;  // --mig: run in a MIG instance instead of a slice (mig_job.h)
  bool mps = false;               // --mps: the slice held by MPS instead of libvgpu (mps_job.h)
  std::vector<std::string> command;
  std::optional<std::string> sim_spec;
  std::string ledger_dir;  // empty = host::DefaultRunStateDir()
  bool quiet = false;      // no informational lines on stderr
};

// The whole `tessera run` (first removing what crashed --mig jobs left); returns only on a setup error (exit
// code 2 for a request that does not fit or bad input, 1 otherwise). On success it ends the process the way
// the job ended (ExitLike).
int RunAndExit(const RunOptions& options);

}  // namespace tessera::runner
