// Running programs from tests: the built binaries, a probe under LD_PRELOAD, a
// shell one-liner. One way to start a process, wait for it and read what it
// printed, so a test says what it runs rather than how fork/exec works.
//
// Thread-safety: the functions keep no state. A child gets its environment and
// argv prepared before fork(), so only exec-safe calls run between fork and
// exec (unless the caller's `in_child` does more).
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tessera::testing {

using Env = std::map<std::string, std::string>;

// What to run and where its output goes.
struct Command {
  // argv[0] is the program's path (no PATH search).
  std::vector<std::string> argv{};
  // Set on top of this process's environment, or the whole environment when
  // `clear_env` is set.
  Env env{};
  bool clear_env = false;
  // Output to files (created or truncated); the same path for both merges them.
  // Empty: the child keeps this process's stream, unless a descriptor is given.
  std::string stdout_path{};
  std::string stderr_path{};
  // Output to descriptors this process holds (a pipe, an append-mode log); used
  // when >= 0 and the path is empty.
  int stdout_fd = -1;
  int stderr_fd = -1;
  // Runs in the child just before exec (setrlimit, chdir, ...). The program's
  // environment is made before fork: a setenv here does not reach it (use `env`).
  std::function<void()> in_child{};
};

// Starts `command`; returns its pid, or -1 when fork failed. A child that
// cannot exec exits 127; one that cannot open its output files exits 125.
pid_t Spawn(const Command& command);

// Waits for `pid` and returns its raw wait status (WIFEXITED, WTERMSIG, ...).
int WaitStatus(pid_t pid);

// A wait status as a shell reports it: the exit code, or 128 + the signal.
int ExitCode(int wait_status);

// Sends `signal` to `pid` (when > 0), waits for it, and sets it to -1.
void KillAndWait(pid_t& pid, int signal);

// What a finished program did.
struct Outcome {
  int exit_code = -1;  // exit code, or 128 + signal
  std::string out;
  std::string err;
};

// Runs `command` to its end with stdout and stderr captured apart, in files
// under `scratch_dir` (the command's own paths, if any, are ignored).
Outcome RunToEnd(Command command, const std::string& scratch_dir);

// Runs `command_line` with /bin/sh -c; `output` holds stdout and stderr merged,
// `exit_code` is the shell's (or 128 + signal; -1 when it could not start).
struct ShellOutcome {
  int exit_code = -1;
  std::string output;
};
ShellOutcome RunShell(const std::string& command_line);

// `text` quoted for /bin/sh (single quotes, embedded ones escaped).
std::string ShellQuote(const std::string& text);

}  // namespace tessera::testing
