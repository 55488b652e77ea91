#include "testing/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "base/testing.h"

extern char** environ;

namespace tessera::testing {
namespace {

// The child's environment as NAME=value strings.
std::vector<std::string> ChildEnvironment(const Command& command) {
  Env merged;
  if (!command.clear_env) {
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const size_t eq = entry.find('=');
      if (eq != std::string::npos) merged[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
  }
  for (const auto& [name, value] : command.env) merged[name] = value;
  std::vector<std::string> out;
  for (const auto& [name, value] : merged) out.push_back(name + "=" + value);
  return out;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// In the child: points `target` (1 or 2) at `path` or `fd`.
bool Redirect(int target, const std::string& path, int fd) {
  if (!path.empty()) {
    const int opened = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (opened < 0) return false;
    ::dup2(opened, target);
    ::close(opened);
  } else if (fd >= 0) {
    ::dup2(fd, target);
  }
  return true;
}

}  // namespace

pid_t Spawn(const Command& command) {
  std::vector<std::string> args = command.argv;
  std::vector<std::string> env = ChildEnvironment(command);
  std::vector<char*> argv = Pointers(args);
  std::vector<char*> envp = Pointers(env);
  const bool merged = !command.stdout_path.empty() && command.stdout_path == command.stderr_path;
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (!Redirect(1, command.stdout_path, command.stdout_fd)) ::_exit(125);
  if (merged) {
    ::dup2(1, 2);
  } else if (!Redirect(2, command.stderr_path, command.stderr_fd)) {
    ::_exit(125);
  }
  if (command.in_child) command.in_child();
  if (!argv.empty() && argv[0] != nullptr) ::execve(argv[0], argv.data(), envp.data());
  ::_exit(127);
}

int WaitStatus(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

int ExitCode(int wait_status) {
  if (wait_status < 0) return -1;
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

void KillAndWait(pid_t& pid, int signal) {
  if (pid <= 0) return;
  ::kill(pid, signal);
  ::waitpid(pid, nullptr, 0);
  pid = -1;
}

Outcome RunToEnd(Command command, const std::string& scratch_dir) {
  static int serial = 0;
  const std::string stem =
      scratch_dir + "/run-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
  command.stdout_path = stem + ".out";
  command.stderr_path = stem + ".err";
  Outcome outcome;
  const pid_t pid = Spawn(command);
  if (pid < 0) return outcome;
  outcome.exit_code = ExitCode(WaitStatus(pid));
  outcome.out = ReadFileOrEmpty(command.stdout_path);
  outcome.err = ReadFileOrEmpty(command.stderr_path);
  std::remove(command.stdout_path.c_str());
  std::remove(command.stderr_path.c_str());
  return outcome;
}

ShellOutcome RunShell(const std::string& command_line) {
  ShellOutcome outcome;
  // A group, so that stderr of every command of the line is merged, not only
  // the last one's.
  FILE* pipe = ::popen(("{ " + command_line + "\n} 2>&1").c_str(), "r");
  if (pipe == nullptr) return outcome;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) outcome.output.append(buffer, n);
  outcome.exit_code = ExitCode(::pclose(pipe));
  return outcome;
}

std::string ShellQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace tessera::testing
