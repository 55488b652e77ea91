#include "runner/mps_job.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "base/files.h"
#include "contract/container_contract.h"
#include "node/mps/mps_daemons.h"

namespace tessera::runner {
namespace {

constexpr const char* kSimControl = "tessera-sim-mps-control";
constexpr const char* kNvidiaControl = "nvidia-cuda-mps-control";

// What the control program runs with: the job's view of the GPUs (the
// simulated ones' state and libraries) and the daemon's directories.
std::map<std::string, std::string> DaemonEnv(const core::Gpu& gpu, const MpsDaemonPlace& place,
                                             const LocalGpus& local) {
  std::map<std::string, std::string> env = local.job_env;
  for (const auto& [name, value] : local.job_path_env) {
    const char* old = std::getenv(name.c_str());
    env[name] = old != nullptr && *old != '\0' ? value + ":" + old : value;
  }
  env[contract::kMpsPipeDirectoryEnv] = place.pipe_dir;
  env[contract::kMpsLogDirectoryEnv] = place.log_dir;
  env[contract::kCudaVisibleDevicesEnv] = gpu.uuid;
  return env;
}

}  // namespace

Status CheckMpsFlags(const SliceRequest& slice) {
  if (slice.gpus != 1) {
    return Error{"--mps runs on one GPU (--gpus " + std::to_string(slice.gpus) +
                 " given): an MPS client reaches one control daemon, and tessera runs one per GPU"};
  }
  if (slice.core_policy != "default") {
    return Error{
        "--mps cannot be combined with --core-policy: MPS holds --gpucores itself, as the client's "
        "active thread percentage"};
  }
  return Status::Ok();
}

MpsDaemonPlace MpsDaemonPlaceOf(const core::Gpu& gpu, const LocalGpus& local, const InstallPaths& paths) {
  MpsDaemonPlace place;
  if (local.simulated) {
    const std::string sim_control = files::Join(paths.bin_dir, kSimControl);
    place.control_binary = ::access(sim_control.c_str(), X_OK) == 0 ? sim_control : kSimControl;
    auto state = local.job_env.find(contract::kSimStateEnv);
    // The simulator's own default when TESSERA_SIM_STATE is not set (docs/sim.md).
    const std::string state_dir =
        state != local.job_env.end() ? state->second : "/dev/shm/tessera-sim-" + std::to_string(::getuid());
    place.pipe_dir = files::Join(files::Join(state_dir, "mps"), "gpu" + std::to_string(gpu.index));
    place.log_dir = files::Join(place.pipe_dir, "log");
  } else {
    place.control_binary = kNvidiaControl;
    const char* root = std::getenv("TESSERA_MPS_ROOT");
    const std::string mps_root = root != nullptr && *root != '\0' ? root : "/run/tessera/mps";
    place.pipe_dir = node::mps::PipeDirectoryOf(mps_root, gpu.uuid);
    place.log_dir = node::mps::LogDirectoryOf(mps_root, gpu.uuid);
  }
  return place;
}

Result<std::string> EnsureMpsDaemon(const core::Gpu& gpu, const MpsDaemonPlace& place,
                                    const LocalGpus& local) {
  auto program = node::mps::SystemControlProgram(place.control_binary, std::chrono::seconds(10));
  if (const int pid = program->LiveDaemonPid(place.pipe_dir); pid != 0) {
    return "reusing the MPS control daemon " + std::to_string(pid) + " of GPU " + std::to_string(gpu.index) +
           " (" + place.pipe_dir + ")";
  }
  TESSERA_RETURN_IF_ERROR(files::MakeDirs(place.pipe_dir, 0755));
  TESSERA_RETURN_IF_ERROR(files::MakeDirs(place.log_dir, 0755));
  TESSERA_RETURN_IF_ERROR_WRAP(program->StartDaemon(DaemonEnv(gpu, place, local)),
                               "cannot start the MPS control daemon of GPU " + std::to_string(gpu.index));
  const int pid = program->LiveDaemonPid(place.pipe_dir);
  if (pid == 0) {
    return Error{"the MPS control daemon of GPU " + std::to_string(gpu.index) +
                 " exited right after starting (see " + place.log_dir + "/control.log)"};
  }
  return "started the MPS control daemon " + std::to_string(pid) + " of GPU " + std::to_string(gpu.index) +
         " (" + place.pipe_dir + ")";
}

Result<JobSpec> BuildMpsJobSpec(const ReservedSlice& slice, const MpsDaemonPlace& place,
                                const LocalGpus& local, const std::vector<std::string>& command) {
  if (slice.entry.slices.devices.size() != 1) return Error{"an --mps job holds exactly one GPU"};
  const core::DeviceSlice& device = slice.entry.slices.devices.front();
  JobSpec spec;
  spec.argv = command;
  spec.set_env = local.job_env;
  spec.prepend_path_env = local.job_path_env;
  spec.set_env[contract::kMpsPipeDirectoryEnv] = place.pipe_dir;
  spec.set_env[contract::kCudaVisibleDevicesEnv] = device.uuid;
  spec.set_env[contract::kJobIdEnv] = slice.entry.job_id;
  // Always set (or cleared), so values inherited from the caller's
  // environment cannot change what the flags promised.
  spec.set_env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=" + std::to_string(device.memory_mib) + "M";
  spec.set_env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string(device.cores == 0 ? 100 : device.cores);
  return spec;
}

Result<JobSpec> PrepareMpsJob(const ReservedSlice& slice, const InstallPaths& paths, const LocalGpus& local,
                              const std::vector<std::string>& command, bool quiet) {
  if (slice.entry.slices.devices.size() != 1) return Error{"an --mps job holds exactly one GPU"};
  const core::DeviceSlice& device = slice.entry.slices.devices.front();
  const core::Gpu* gpu = nullptr;
  for (const auto& g : local.gpus) {
    if (g.uuid == device.uuid) gpu = &g;
  }
  if (gpu == nullptr) return Error{"GPU " + device.uuid + " of the slice is not on this machine"};
  const MpsDaemonPlace place = MpsDaemonPlaceOf(*gpu, local, paths);
  TESSERA_ASSIGN_OR_RETURN(const std::string daemon, EnsureMpsDaemon(*gpu, place, local));
  TESSERA_ASSIGN_OR_RETURN(JobSpec spec, BuildMpsJobSpec(slice, place, local, command));
  if (!quiet) {
    std::cerr << "tessera run: " << daemon << "\n"
              << "tessera run: " << slice.entry.job_id << " as an MPS client on GPU " << gpu->index << " ("
              << device.uuid << ", " << device.memory_mib << " MiB pinned, "
              << (device.cores == 0 ? 100 : device.cores) << "% active threads)\n";
  }
  return spec;
}

}  // namespace tessera::runner
