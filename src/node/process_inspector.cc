#include "node/process_inspector.h"

#include "base/files.h"
#include "contract/container_contract.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace tessera::node {
namespace {

// Field 22 of /proc/<pid>/stat. The command (field 2) may hold spaces and
// parentheses, so fields are counted after the last ')'.
std::optional<uint64_t> StartTicks(const std::string& proc_root, uint32_t pid) {
  auto stat = files::Read(proc_root + "/" + std::to_string(pid) + "/stat");
  if (!stat) return std::nullopt;
  auto close = stat->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat->substr(close + 1));
  std::string field;
  // After ')': field 3 (state) is the first; starttime is field 22.
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return std::nullopt;
  }
  try {
    return std::stoull(field);
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

bool IsContractVariable(const std::string& name) {
  static const char* const kExact[] = {contract::kAllocationEnv, contract::kContainerNameEnv,
                                       contract::kOomKillerEnv, contract::kDisableControlEnv,
                                       contract::kOversubscribeEnv};
  for (const char* exact : kExact) {
    if (name == exact) return true;
  }
  return name.rfind(contract::kMemoryLimitEnv, 0) == 0;  // also CUDA_DEVICE_MEMORY_LIMIT_<i>
}

ProcFsInspector::ProcFsInspector(std::string region_container_dir, std::string proc_root)
    : region_container_dir_(std::move(region_container_dir)), proc_root_(std::move(proc_root)) {}

std::optional<ProcessIdentity> ProcFsInspector::Inspect(uint32_t host_pid) {
  const std::string base = proc_root_ + "/" + std::to_string(host_pid);
  ProcessIdentity p;
  p.host_pid = host_pid;
  auto start = StartTicks(proc_root_, host_pid);
  if (!start) return std::nullopt;
  p.start_ticks = *start;
  if (auto comm = files::Read(base + "/comm")) {
    p.command = *comm;
    while (!p.command.empty() && p.command.back() == '\n') p.command.pop_back();
  }

  struct stat st {};
  if (::stat((base + "/root" + region_container_dir_).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    p.sees_region_dir = true;
    p.region_dev = st.st_dev;
    p.region_ino = st.st_ino;
  }

  p.container_pid = host_pid;
  if (auto status = files::Read(base + "/status")) {
    std::istringstream lines(*status);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind("NSpid:", 0) != 0) continue;
      std::istringstream pids(line.substr(6));
      uint64_t pid = 0;
      while (pids >> pid) p.container_pid = static_cast<uint32_t>(pid);
      break;
    }
  }

  if (auto environ = files::Read(base + "/environ")) {
    size_t at = 0;
    while (at < environ->size()) {
      size_t end = environ->find('\0', at);
      if (end == std::string::npos) end = environ->size();
      const std::string entry = environ->substr(at, end - at);
      auto eq = entry.find('=');
      if (eq != std::string::npos && IsContractVariable(entry.substr(0, eq))) {
        p.environment[entry.substr(0, eq)] = entry.substr(eq + 1);
      }
      at = end + 1;
    }
  }
  // The process may have exited while being read: only a start time that
  // still matches makes the rest trustworthy.
  auto again = StartTicks(proc_root_, host_pid);
  if (!again || *again != p.start_ticks) return std::nullopt;
  return p;
}

Status ProcFsInspector::Kill(const ProcessIdentity& process) {
  const pid_t pid = static_cast<pid_t>(process.host_pid);
  // Pin the process first, then check it is still the one inspected: after
  // pidfd_open the pid cannot be reused under us.
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0 && errno == ESRCH) return Error{"process " + std::to_string(pid) + " has already exited"};
  auto start = StartTicks(proc_root_, process.host_pid);
  if (!start || *start != process.start_ticks) {
    if (pidfd >= 0) ::close(pidfd);
    return Error{"process " + std::to_string(pid) +
                 " has already exited (its pid now names another process)"};
  }
  int rc = 0;
  if (pidfd >= 0) {
    rc = static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0));
    const int saved = errno;
    ::close(pidfd);
    errno = saved;
  } else {
    rc = ::kill(pid, SIGKILL);  // kernels before 5.3: the start-time check above narrows the race
  }
  if (rc != 0) return Error{"cannot kill process " + std::to_string(pid) + ": " + std::strerror(errno)};
  return Status::Ok();
}

}  // namespace tessera::node
