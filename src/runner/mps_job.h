// `tessera run --mps`: the job runs as an MPS client of its GPU, limited by
// MPS itself instead of libvgpu:
//   CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = --gpucores (none: the daemon's default)
//   CUDA_MPS_PINNED_DEVICE_MEM_LIMIT  = 0=<--gpumem>M (the whole GPU by default)
//   CUDA_VISIBLE_DEVICES              = the GPU's UUID (the job's device 0)
//   CUDA_MPS_PIPE_DIRECTORY           = the GPU's daemon's
// The slice is placed and recorded in the node-local ledger like any other
// `tessera run` slice (so --mps jobs and libvgpu jobs never overcommit a GPU
// between them); the GPU's MPS control daemon is started when none runs in
// its pipe directory and reused otherwise, and left running after the job
// for the next client (`tessera sim mps stop --gpu N` on the simulated GPU).
//
// Where a GPU's daemon lives: on the simulated GPU, `<sim state>/mps/gpu<N>`
// (the directory `tessera sim mps --gpu N` uses, logs in its `log`); on a real
// one, tessera-node's layout `<root>/<uuid>/pipe` and `.../log` with root
// $TESSERA_MPS_ROOT, else /run/tessera/mps, so a job on a node shares the
// daemon tessera-node runs.
//
// Thread-safety: plain functions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/result.h"
#include "core/device.h"
#include "runner/job_process.h"
#include "runner/local_gpus.h"
#include "runner/run_job.h"
#include "runner/slice_request.h"

namespace tessera::runner {

// --mps takes one GPU (a client reaches one daemon) and no --core-policy
// (MPS holds the share itself): refuses other flags with the reason.
Status CheckMpsFlags(const SliceRequest& slice);

// Where `gpu`'s daemon lives (see above).
struct MpsDaemonPlace {
  std::string control_binary;  // tessera-sim-mps-control next to tessera, or nvidia-cuda-mps-control
  std::string pipe_dir;
  std::string log_dir;
};
MpsDaemonPlace MpsDaemonPlaceOf(const core::Gpu& gpu, const LocalGpus& local, const InstallPaths& paths);

// Starts `gpu`'s daemon unless one runs in place.pipe_dir. Returns a line
// for the user ("started" / "reused" and the pid).
Result<std::string> EnsureMpsDaemon(const core::Gpu& gpu, const MpsDaemonPlace& place,
                                    const LocalGpus& local);

// The command as an MPS client of the slice's one GPU.
Result<JobSpec> BuildMpsJobSpec(const ReservedSlice& slice, const MpsDaemonPlace& place,
                                const LocalGpus& local, const std::vector<std::string>& command);

// All of the above for a reserved slice: its GPU's daemon ensured, the spec
// built; unless `quiet`, one line on stderr says where the job runs.
Result<JobSpec> PrepareMpsJob(const ReservedSlice& slice, const InstallPaths& paths, const LocalGpus& local,
                              const std::vector<std::string>& command, bool quiet);

}  // namespace tessera::runner
