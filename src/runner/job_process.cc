#include "runner/job_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace tessera::runner {
namespace {

constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT};

std::atomic<pid_t> g_forward_to{0};

void ForwardSignal(int sig) {
  pid_t pid = g_forward_to.load(std::memory_order_relaxed);
  if (pid > 0) ::kill(pid, sig);  // async-signal-safe
}

// Builds the child's environment before fork, so the child only calls
// async-signal-safe functions between fork and exec.
std::vector<std::string> BuildEnvironment(const JobSpec& spec) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (!eq) continue;
    env[std::string(static_cast<const char*>(*e), eq)] = eq + 1;
  }
  for (const auto& [k, v] : spec.set_env) env[k] = v;
  for (const auto& [k, v] : spec.prepend_path_env) {
    auto it = env.find(k);
    env[k] = (it == env.end() || it->second.empty()) ? v : v + ":" + it->second;
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace

Result<pid_t> StartJob(const JobSpec& spec) {
  if (spec.argv.empty()) return Error{"no command given to run"};
  std::vector<std::string> env_strings = BuildEnvironment(spec);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  // Install forwarding before the child exists so no signal is lost.
  for (int sig : kForwardedSignals) {
    struct sigaction sa {};
    sa.sa_handler = ForwardSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(sig, &sa, nullptr);
  }

  const pid_t supervisor = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return Error{std::string("cannot start the job: fork failed: ") + std::strerror(errno)};
  if (pid == 0) {
    // Child: default signal dispositions, die with the supervisor.
    for (int sig : kForwardedSignals) ::signal(sig, SIG_DFL);
    if (spec.signal_mask) ::sigprocmask(SIG_SETMASK, &*spec.signal_mask, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != supervisor) ::_exit(137);  // supervisor already gone
    ::execvpe(argv[0], argv.data(), envp.data());
    const int code = (errno == ENOENT) ? 127 : 126;
    const char* msg =
        (errno == ENOENT) ? "tessera run: command not found: " : "tessera run: cannot execute: ";
    (void)!::write(STDERR_FILENO, msg, std::strlen(msg));
    (void)!::write(STDERR_FILENO, argv[0], std::strlen(argv[0]));
    (void)!::write(STDERR_FILENO, "\n", 1);
    ::_exit(code);
  }
  g_forward_to.store(pid);
  return pid;
}

JobExit WaitForJob(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return JobExit{1, 0, false};
  }
  g_forward_to.store(0);
  JobExit exit;
  if (WIFEXITED(status)) {
    exit.exit_code = WEXITSTATUS(status);
    exit.spawn_failed = exit.exit_code == 127 || exit.exit_code == 126;
  } else if (WIFSIGNALED(status)) {
    exit.signal = WTERMSIG(status);
    exit.exit_code = 128 + exit.signal;
  }
  return exit;
}

void ExitLike(const JobExit& exit) {
  if (exit.signal != 0) {
    // A job that dumped core (SIGSEGV, SIGABRT, ...) has its own core file;
    // the supervisor's would only overwrite or bury it (as `timeout` avoids).
    struct rlimit no_core {};
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::signal(exit.signal, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, exit.signal);
    ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
    ::raise(exit.signal);
  }
  std::exit(exit.exit_code);
}

}  // namespace tessera::runner
