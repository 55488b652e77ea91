#include "node/mps/mps_container.h"

#include <chrono>

namespace tessera::node::mps {
namespace {

Result<std::string> PipeOf(const MpsDaemons& daemons, const std::string& uuid) {
  const std::string pipe = daemons.PipeDirectory(uuid);
  if (pipe.empty()) return Error{"GPU " + uuid + " is not in mps mode on this node"};
  if (!daemons.Ready(uuid)) {
    return Error{"the MPS control daemon of GPU " + uuid +
                 " is not running (tessera-node restarts it; see its events): a container started now would "
                 "run without MPS limits"};
  }
  return pipe;
}

void AddPipe(sharing::ContainerEdits& edits, const std::string& host_pipe) {
  // Read-write: clients connect to the daemon's socket/pipes in it.
  edits.mounts.push_back(sharing::ContainerMount{kPipeContainerPath, host_pipe, false});
  edits.env[kPipeDirectoryEnv] = kPipeContainerPath;
}

}  // namespace

Result<std::map<std::string, std::string>> ClientEnv(int ordinal, int percentage, int64_t memory_mib,
                                                     int64_t gpu_memory_mib) {
  if (ordinal < 0) return Error{"an MPS client's device ordinal cannot be negative"};
  if (percentage < 0 || percentage > 100) {
    return Error{"MPS active thread percentage " + std::to_string(percentage) + " is not between 1 and 100"};
  }
  if (memory_mib < 0) return Error{"MPS memory limit " + std::to_string(memory_mib) + " MiB is negative"};
  if (memory_mib > gpu_memory_mib) {
    return Error{"MPS memory limit " + std::to_string(memory_mib) + " MiB is more than the GPU's " +
                 std::to_string(gpu_memory_mib) + " MiB"};
  }
  std::map<std::string, std::string> env;
  if (percentage > 0) env[kActiveThreadPercentageEnv] = std::to_string(percentage);
  if (memory_mib > 0)
    env[kPinnedMemoryLimitEnv] = std::to_string(ordinal) + "=" + std::to_string(memory_mib) + "M";
  return env;
}

sharing::ContainerSetup MpsContainerSetup(const MpsDaemons* daemons, sharing::ContainerSetup with_libvgpu) {
  return [daemons, with_libvgpu](const sharing::ShareRequest& request) -> Result<sharing::ContainerEdits> {
    if (request.gpus.empty()) return Error{"the request names no MPS GPU"};
    if (request.gpus.size() > 1) {
      return Error{"a container gets replicas of one MPS GPU only (it asked for " +
                   std::to_string(request.gpus.size()) +
                   "): each GPU has its own MPS control daemon and a client reaches one"};
    }
    const sharing::SharedGpu& gpu = request.gpus.front();
    TESSERA_ASSIGN_OR_RETURN(const std::string pipe, PipeOf(*daemons, gpu.uuid));
    TESSERA_ASSIGN_OR_RETURN(auto env, ClientEnv(gpu.container_ordinal, gpu.active_thread_percentage,
                                                 gpu.memory_limit_mib, gpu.memory_mib));
    sharing::ContainerEdits edits;
    if (with_libvgpu) {
      TESSERA_ASSIGN_OR_RETURN(edits, with_libvgpu(request));
    }
    for (auto& [name, value] : env) edits.env[name] = std::move(value);
    AddPipe(edits, pipe);
    return edits;
  };
}

Result<sharing::ContainerEdits> PipeDirectoryEdits(const MpsDaemons& daemons, const std::string& gpu_uuid) {
  TESSERA_ASSIGN_OR_RETURN(const std::string pipe, PipeOf(daemons, gpu_uuid));
  sharing::ContainerEdits edits;
  AddPipe(edits, pipe);
  return edits;
}

Result<sharing::ContainerEdits> PipeDirectoryEdits(const std::string& root, const std::string& control_binary,
                                                   const std::string& gpu_uuid) {
  const std::string pipe = PipeDirectoryOf(root, gpu_uuid);
  if (SystemControlProgram(control_binary, std::chrono::seconds(1))->LiveDaemonPid(pipe) == 0) {
    return Error{
        "the MPS control daemon of GPU " + gpu_uuid + " is not running in " + pipe +
        " (tessera-node restarts it; see its events): a container started now would run without MPS"};
  }
  sharing::ContainerEdits edits;
  AddPipe(edits, pipe);
  return edits;
}

}  // namespace tessera::node::mps
