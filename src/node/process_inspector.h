// ProcessInspector: what the node agent learns about a host process that the
// driver reports on a GPU — which container's region directory it sees, its
// pid inside the container, the limits its environment declares — and the
// one action enforcement takes on it.
//
// How a process is tied to a container without asking the container: every
// GPU container has its region directory bind-mounted at region_container_dir
// (Allocate's mount). Through /proc/<pid>/root the agent looks at that path
// from inside the process's own mount namespace; a bind mount shows the same
// device and inode as the host directory, which identifies the region
// directory — and so the container — even for a process that never loaded
// libvgpu. Needs the agent in the host pid namespace (hostPID) with
// CAP_SYS_PTRACE-level access to /proc (root), as any node monitoring agent.
//
// Killing is guarded against pid reuse: the process is pinned with a pidfd and
// its start time compared with the one inspected before the signal is sent.
//
// Thread-safety: implementations may be called from one thread at a time.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "base/result.h"

namespace tessera::node {

struct ProcessIdentity {
  uint32_t host_pid = 0;
  uint64_t start_ticks = 0;  // /proc/<pid>/stat starttime: with the pid, names the process uniquely
  std::string command;       // /proc/<pid>/comm, for messages
  bool sees_region_dir = false;
  dev_t region_dev = 0;  // of region_container_dir as the process sees it
  ino_t region_ino = 0;
  uint32_t container_pid = 0;  // innermost entry of NSpid: the pid libvgpu records in the region
  // The variables of the container-side contract found in its environment
  // (TESSERA_ALLOCATION, TESSERA_CONTAINER_NAME, CUDA_DEVICE_MEMORY_LIMIT*,
  // ACTIVE_OOM_KILLER, CUDA_DISABLE_CONTROL, ...); empty when unreadable.
  std::map<std::string, std::string> environment;
};

class ProcessInspector {
 public:
  virtual ~ProcessInspector() = default;
  // nullopt when the process is gone (or cannot be read at all).
  virtual std::optional<ProcessIdentity> Inspect(uint32_t host_pid) = 0;
  // SIGKILLs the process if it is still the one inspected.
  virtual Status Kill(const ProcessIdentity& process) = 0;
};

// The real one, reading `proc_root` (normally /proc).
class ProcFsInspector final : public ProcessInspector {
 public:
  explicit ProcFsInspector(std::string region_container_dir, std::string proc_root = "/proc");
  std::optional<ProcessIdentity> Inspect(uint32_t host_pid) override;
  Status Kill(const ProcessIdentity& process) override;

 private:
  const std::string region_container_dir_;
  const std::string proc_root_;
};

// The environment variables Inspect keeps (prefixes end with '_').
bool IsContractVariable(const std::string& name);

}  // namespace tessera::node
