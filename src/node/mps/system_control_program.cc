// SystemControlProgram: MpsDaemons' ControlProgram over fork/exec of the MPS
// control binary (mps_daemons.h).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "base/files.h"
#include "node/mps/mps_daemons.h"

extern char** environ;

namespace tessera::node::mps {
namespace {

// The process name the kernel keeps for `binary` (/proc/<pid>/comm: the first
// 15 bytes of its file name).
std::string CommOf(const std::string& binary) {
  const auto slash = binary.rfind('/');
  return binary.substr(slash == std::string::npos ? 0 : slash + 1).substr(0, 15);
}

class SystemControl final : public ControlProgram {
 public:
  SystemControl(std::string binary, std::chrono::milliseconds timeout)
      : binary_(std::move(binary)), timeout_(timeout) {}

  Status StartDaemon(const std::map<std::string, std::string>& env) override {
    TESSERA_ASSIGN_OR_RETURN(const Outcome outcome, Run({"-d"}, env, ""));
    if (outcome.status != 0) {
      return Error{binary_ + " -d exited with status " + std::to_string(outcome.status) +
                   (outcome.output.empty() ? "" : ": " + outcome.output)};
    }
    return Status::Ok();
  }

  Result<std::string> Send(const std::map<std::string, std::string>& env,
                           const std::string& commands) override {
    TESSERA_ASSIGN_OR_RETURN(const Outcome outcome, Run({}, env, commands));
    if (outcome.status != 0) {
      return Error{binary_ + " exited with status " + std::to_string(outcome.status) +
                   (outcome.output.empty() ? "" : ": " + outcome.output)};
    }
    return outcome.output;
  }

  int LiveDaemonPid(const std::string& pipe_dir) override {
    auto text = files::Read(files::Join(pipe_dir, "nvidia-cuda-mps-control.pid"));
    if (!text.ok()) return 0;
    const int pid = std::atoi(text->c_str());
    if (pid <= 0) return 0;
    // Alive, not a zombie, and the control program (not a process that got its pid since).
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto paren = content.rfind(')');
    if (paren == std::string::npos || paren + 2 >= content.size()) return 0;
    const char state = content[paren + 2];
    if (state == 'Z' || state == 'X') return 0;
    std::ifstream comm_file("/proc/" + std::to_string(pid) + "/comm");
    std::string comm;
    std::getline(comm_file, comm);
    return comm == CommOf(binary_) ? pid : 0;
  }

 private:
  struct Outcome {
    int status = 0;
    std::string output;  // stdout and stderr together
  };

  Result<Outcome> Run(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                      const std::string& input) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0) return Error{std::string("pipe: ") + std::strerror(errno)};
    if (::pipe2(out, O_CLOEXEC) != 0) {
      ::close(in[0]);
      ::close(in[1]);
      return Error{std::string("pipe: ") + std::strerror(errno)};
    }
    // Everything the child needs is built before fork.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      if (env.count(entry.substr(0, entry.find('='))) == 0) env_strings.push_back(entry);
    }
    for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> arg_strings{binary_};
    arg_strings.insert(arg_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : arg_strings) argv.push_back(s.data());
    argv.push_back(nullptr);

    const pid_t pid = ::fork();
    if (pid < 0) {
      for (int fd : {in[0], in[1], out[0], out[1]}) ::close(fd);
      return Error{std::string("fork: ") + std::strerror(errno)};
    }
    if (pid == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(out[1], 2);
      ::execvpe(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    // The commands are a few short lines: they fit in the pipe's buffer.
    if (!input.empty() && ::write(in[1], input.data(), input.size()) < 0) {
      // The program may have exited without reading: its status says why.
    }
    ::close(in[1]);

    Outcome outcome;
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    bool timed_out = false;
    char buffer[4096];
    // A daemonizing `-d` leaves its daemon holding stdout: read until the
    // launcher itself has exited and the pipe has nothing more right now.
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        timed_out = true;
        break;
      }
      pollfd pfd{out[0], POLLIN, 0};
      const int ready = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 50)));
      if (ready > 0) {
        const ssize_t n = ::read(out[0], buffer, sizeof(buffer));
        if (n > 0) {
          outcome.output.append(buffer, static_cast<size_t>(n));
          continue;
        }
        if (n == 0) break;  // every writer closed
      }
      int status = 0;
      const pid_t done = ::waitpid(pid, &status, WNOHANG);
      if (done == pid) {
        // Collect what is already buffered, then report.
        for (;;) {
          pollfd again{out[0], POLLIN, 0};
          if (::poll(&again, 1, 0) <= 0) break;
          const ssize_t n = ::read(out[0], buffer, sizeof(buffer));
          if (n <= 0) break;
          outcome.output.append(buffer, static_cast<size_t>(n));
        }
        ::close(out[0]);
        outcome.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (outcome.status == 127) return Error{"cannot run the MPS control program '" + binary_ + "'"};
        return outcome;
      }
    }
    ::close(out[0]);
    int status = 0;
    if (timed_out) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return Error{binary_ + " did not finish within " + std::to_string(timeout_.count()) + " ms"};
    }
    ::waitpid(pid, &status, 0);
    outcome.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (outcome.status == 127) return Error{"cannot run the MPS control program '" + binary_ + "'"};
    return outcome;
  }

  const std::string binary_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<ControlProgram> SystemControlProgram(std::string binary, std::chrono::milliseconds timeout) {
  return std::make_unique<SystemControl>(std::move(binary), timeout);
}

}  // namespace tessera::node::mps
