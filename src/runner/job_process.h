// JobProcess: runs a `tessera run` job as a child process and passes its fate
// through: signals sent to `tessera run` are forwarded to the job, and the
// job's exit status becomes ours.
//
// The job is bound to its supervisor with PR_SET_PDEATHSIG(SIGKILL): if
// `tessera run` itself dies (even by SIGKILL) the job dies with it, so the
// slice recorded in the ledger under the supervisor's identity is never
// outlived by a process still using the GPU.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace tessera::runner {

struct JobSpec {
  std::vector<std::string> argv;                        // argv[0] looked up in PATH
  std::map<std::string, std::string> set_env;           // added to / replacing the inherited environment
  std::map<std::string, std::string> prepend_path_env;  // e.g. LD_PRELOAD, LD_LIBRARY_PATH: "value:old"
  // The job's signal mask; unset: the caller's. A caller that blocks signals
  // while it starts the job (so that none is lost) gives the mask it had.
  std::optional<sigset_t> signal_mask{};
};

// How a job ended, in the shell's terms.
struct JobExit {
  int exit_code = 0;          // when it exited normally
  int signal = 0;             // when killed by a signal (exit_code is then 128 + signal)
  bool spawn_failed = false;  // the command could not be executed (exit_code 127 / 126)
};

// Starts the job. Returns its pid. Errors (fork failure) are returned; an
// exec failure is reported by Wait() as exit code 127 (not found) or 126.
Result<pid_t> StartJob(const JobSpec& spec);

// Forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT
// to `pid` until Wait returns, then waits for it.
JobExit WaitForJob(pid_t pid);

// Ends the calling process the way the job ended: same exit code, or the same
// signal (re-raised with its default action, without a core dump of its own;
// 128 + signal only if the signal does not end the process), as GNU `timeout`
// does: a caller sees the job's signal as if it had run the job itself (a
// shell reports 128 + N, Python's returncode -N).
[[noreturn]] void ExitLike(const JobExit& exit);

}  // namespace tessera::runner
