#include "sim/mps_daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <vector>

#include "sim/config.h"
#include "sim/device_list.h"
#include "sim/mps_protocol.h"

namespace tessera::sim::mps {
namespace {

volatile sig_atomic_t g_terminate = 0;

void OnTerminate(int) {
  g_terminate = 1;
}

std::string Now() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t;
  localtime_r(&ts.tv_sec, &t);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02d %02d:%02d:%02d.%03ld", t.tm_year + 1900, t.tm_mon + 1,
                t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ts.tv_nsec / 1000000);
  return buf;
}

void AppendLog(const std::string& path, const std::string& line) {
  if (FILE* f = std::fopen(path.c_str(), "a")) {
    std::fprintf(f, "[%s] %s\n", Now().c_str(), line.c_str());
    std::fclose(f);
  }
}

std::string Percentage(double p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", p);
  return buf;
}

// The MPS server: a child of the daemon that holds a context (and its memory)
// on each of the daemon's GPUs, named as NVIDIA's is, until told to stop or
// the daemon dies.
[[noreturn]] void RunServer(SimState& state, const std::vector<int>& gpus, int ready_fd, pid_t daemon) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != daemon) _exit(1);
  prctl(PR_SET_NAME, "nvidia-cuda-mps-server", 0, 0, 0);  // comm keeps 15 characters
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigaddset(&term, SIGINT);
  sigprocmask(SIG_BLOCK, &term, &old);
  signal(SIGTERM, OnTerminate);
  signal(SIGINT, OnTerminate);
  const int pid = SelfPid();
  char ready = 'F';
  {
    StateLock lock(state);
    const int slot = state.ProcessSlotLocked(pid, true);
    if (slot >= 0) {
      ProcessRecord& p = state.file()->processes[slot];
      p.mps_role = kMpsServer;
      for (int g : gpus) {
        // Its context on each GPU costs what a context costs, when it fits.
        const uint64_t overhead = state.file()->context_overhead_bytes;
        p.contexts[g] = 1;
        if (state.UsedBytesLocked(g) + overhead <= state.file()->gpus[g].total_bytes)
          p.used_bytes[g] += overhead;
      }
      ready = 'R';
    }
  }
  if (write(ready_fd, &ready, 1) != 1 || ready != 'R') _exit(1);
  close(ready_fd);
  while (!g_terminate) sigsuspend(&old);
  {
    StateLock lock(state);
    const int slot = state.ProcessSlotLocked(pid, false);
    if (slot >= 0) std::memset(static_cast<void*>(&state.file()->processes[slot]), 0, sizeof(ProcessRecord));
  }
  _exit(0);
}

class Daemon {
 public:
  Daemon(DaemonOptions options, std::unique_ptr<SimState> state, std::vector<int> gpus, int listen_fd)
      : opt_(std::move(options)), state_(std::move(state)), gpus_(std::move(gpus)), listen_fd_(listen_fd) {}

  void Log(const std::string& line) { AppendLog(opt_.log_dir + "/control.log", line); }

  void Serve() {
    Log("Startup (pipe directory " + opt_.pipe_dir + ")");
    while (true) {
      ReapServer();
      if (g_terminate) BeginQuit(0);
      if (quitting_ && (Clients().empty() || (quit_deadline_ns_ > 0 && MonotonicNs() >= quit_deadline_ns_))) {
        break;
      }
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      const std::string line = ReadLine(fd);
      std::string reply = Handle(line);
      if (!reply.empty() && reply.back() != '\n') reply += "\n";
      if (!reply.empty() && send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) < 0)
        Log("reply lost: " + line);
      close(fd);
    }
    StopServer();
    unlink(ControlSocketPath(opt_.pipe_dir).c_str());
    unlink(PidFilePath(opt_.pipe_dir).c_str());
    Log("Shutdown");
  }

 private:
  using Args = std::vector<std::string>;
  using Command = std::string (Daemon::*)(const Args&);

  // One line from a connection (at most 4 KiB, 2 s).
  static std::string ReadLine(int fd) {
    std::string line;
    char c;
    while (line.size() < 4096) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 2000) <= 0 || read(fd, &c, 1) != 1 || c == '\n') break;
      line += c;
    }
    return line;
  }

  std::string Handle(const std::string& line) {
    static const std::map<std::string, Command> kCommands = {
        {"client_connect", &Daemon::ClientConnect},
        {"start_server", &Daemon::StartServer},
        {"get_server_list", &Daemon::GetServerList},
        {"get_server_status", &Daemon::GetServerStatus},
        {"get_client_list", &Daemon::GetClientList},
        {"set_default_active_thread_percentage", &Daemon::SetDefaultPercentage},
        {"get_default_active_thread_percentage", &Daemon::GetDefaultPercentage},
        {"set_active_thread_percentage", &Daemon::SetServerPercentage},
        {"get_active_thread_percentage", &Daemon::GetServerPercentage},
        {"set_default_device_pinned_mem_limit", &Daemon::SetDefaultLimit},
        {"get_default_device_pinned_mem_limit", &Daemon::GetDefaultLimit},
        {"set_device_pinned_mem_limit", &Daemon::SetServerLimit},
        {"get_device_pinned_mem_limit", &Daemon::GetServerLimit},
        {"quit", &Daemon::Quit},
    };
    std::istringstream in(line);
    std::string name, word;
    in >> name;
    Args args;
    while (in >> word) args.push_back(word);
    if (name.empty()) return "";
    const auto it = kCommands.find(name);
    if (it == kCommands.end()) return "Unknown command: " + name;
    if (name != "client_connect") Log("Cmd: " + line);
    return (this->*it->second)(args);
  }

  // ----- the server -----
  bool ServerAlive() const { return server_pid_ > 0 && ProcessAlive(server_pid_, server_start_); }

  void ReapServer() {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      if (pid == server_pid_) {
        AppendLog(opt_.log_dir + "/server.log", "Server " + std::to_string(pid) + " exited");
        server_pid_ = 0;
      }
    }
  }

  // Starts the server with the defaults in force now, unless one runs.
  std::string EnsureServer() {
    if (ServerAlive()) return "";
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) return "cannot start the MPS server: " + std::string(strerror(errno));
    const pid_t daemon = getpid();
    const pid_t pid = fork();
    if (pid < 0) return "cannot start the MPS server: " + std::string(strerror(errno));
    if (pid == 0) {
      // The server keeps nothing of the daemon's open (a client's connection
      // would not see its answer end); the state stays mapped.
      for (int fd = 3; fd < 1024; ++fd) {
        if (fd != ready[1]) close(fd);
      }
      RunServer(*state_, gpus_, ready[1], daemon);
    }
    close(ready[1]);
    char c = 0;
    pollfd p{ready[0], POLLIN, 0};
    const bool ok = poll(&p, 1, 10000) > 0 && read(ready[0], &c, 1) == 1 && c == 'R';
    close(ready[0]);
    if (!ok) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return "the MPS server failed to start";
    }
    server_pid_ = pid;
    server_start_ = ProcessStartTime(pid);
    server_percentage_ = default_percentage_;
    server_limits_ = default_limits_;
    AppendLog(opt_.log_dir + "/server.log", "Server " + std::to_string(pid) +
                                                " started, active thread percentage " +
                                                Percentage(server_percentage_));
    return "";
  }

  void StopServer() {
    if (server_pid_ <= 0) return;
    kill(server_pid_, SIGTERM);
    for (int i = 0; i < 100 && waitpid(server_pid_, nullptr, WNOHANG) == 0; ++i) usleep(20000);
    kill(server_pid_, SIGKILL);
    waitpid(server_pid_, nullptr, WNOHANG);
    server_pid_ = 0;
  }

  // The live clients of the server.
  std::vector<int> Clients() const {
    std::vector<int> out;
    if (server_pid_ <= 0) return out;
    StateLock lock(*state_);
    state_->ReclaimDeadLocked();
    for (const ProcessRecord& p : state_->file()->processes) {
      if (p.in_use && p.mps_role == kMpsClient && p.mps_server_pid == server_pid_) out.push_back(p.pid);
    }
    return out;
  }

  // A PID argument that names the running server; false with `error` set otherwise.
  bool IsServer(const Args& args, size_t i, std::string* error) const {
    if (args.size() <= i || std::atoi(args[i].c_str()) != server_pid_ || !ServerAlive()) {
      *error = "Server " + (args.size() > i ? args[i] : std::string("?")) + " not found";
      return false;
    }
    return true;
  }

  // A device index argument; false with `error` set otherwise.
  bool DeviceIndex(const Args& args, size_t i, int* dev, std::string* error) const {
    const std::string& a = args.size() > i ? args[i] : "";
    if (a.empty() || a.find_first_not_of("0123456789") != std::string::npos || a.size() > 3 ||
        std::atoi(a.c_str()) >= static_cast<int>(gpus_.size())) {
      *error = "Invalid device '" + a + "': a device index from 0 to " + std::to_string(gpus_.size() - 1) +
               " (MPS applies limits by index)";
      return false;
    }
    *dev = std::atoi(a.c_str());
    return true;
  }

  // ----- commands -----
  std::string ClientConnect(const Args& args) {
    if (quitting_) return "error the MPS control daemon is shutting down";
    if (std::string err = EnsureServer(); !err.empty()) return "error " + err;
    ConnectReply r;
    r.server_pid = server_pid_;
    r.server_start_time = server_start_;
    r.active_thread_percentage = server_percentage_;
    r.gpus = gpus_;
    for (const auto& [dev, bytes] : server_limits_) r.pinned_limit_bytes[gpus_[dev]] = bytes;
    Log("Accepting connection from client " + (args.empty() ? std::string("?") : args[0]) + " to server " +
        std::to_string(server_pid_));
    return r.Encode();
  }

  std::string StartServer(const Args&) { return EnsureServer(); }

  std::string GetServerList(const Args&) { return ServerAlive() ? std::to_string(server_pid_) : ""; }

  std::string GetServerStatus(const Args& args) {
    std::string error;
    return IsServer(args, 0, &error) ? "ACTIVE" : error;
  }

  std::string GetClientList(const Args& args) {
    std::string error;
    if (!IsServer(args, 0, &error)) return error;
    std::string out;
    for (int pid : Clients()) out += std::to_string(pid) + "\n";
    return out;
  }

  std::string SetDefaultPercentage(const Args& args) {
    auto p = ParsePercentage(args.size() == 1 ? args[0] : "");
    if (!p.ok()) return p.error().message;
    default_percentage_ = *p;
    return Percentage(*p);
  }

  std::string GetDefaultPercentage(const Args&) { return Percentage(default_percentage_); }

  std::string SetServerPercentage(const Args& args) {
    std::string error;
    if (!IsServer(args, 0, &error)) return error;
    auto p = ParsePercentage(args.size() == 2 ? args[1] : "");
    if (!p.ok()) return p.error().message;
    server_percentage_ = *p;
    return Percentage(*p);
  }

  std::string GetServerPercentage(const Args& args) {
    std::string error;
    return IsServer(args, 0, &error) ? Percentage(server_percentage_) : error;
  }

  // A pinned-memory limit: DEV VALUE at args[i], args[i + 1], into `limits`.
  std::string SetLimit(const Args& args, size_t i, std::map<int, uint64_t>* limits) {
    int dev;
    std::string error;
    if (!DeviceIndex(args, i, &dev, &error)) return error;
    auto bytes = ParseMemory(args.size() == i + 2 ? args[i + 1] : "");
    if (!bytes.ok()) return bytes.error().message;
    (*limits)[dev] = *bytes;
    return "";
  }

  std::string GetLimit(const Args& args, size_t i, const std::map<int, uint64_t>& limits) {
    int dev;
    std::string error;
    if (!DeviceIndex(args, i, &dev, &error)) return error;
    const auto it = limits.find(dev);
    return it == limits.end() ? "N/A" : FormatMemory(it->second);
  }

  std::string SetDefaultLimit(const Args& args) { return SetLimit(args, 0, &default_limits_); }
  std::string GetDefaultLimit(const Args& args) { return GetLimit(args, 0, default_limits_); }

  std::string SetServerLimit(const Args& args) {
    std::string error;
    return IsServer(args, 0, &error) ? SetLimit(args, 1, &server_limits_) : error;
  }
  std::string GetServerLimit(const Args& args) {
    std::string error;
    return IsServer(args, 0, &error) ? GetLimit(args, 1, server_limits_) : error;
  }

  // quit [-t SECONDS]: no new clients; the daemon and its server end when the
  // server's clients are gone (or after SECONDS).
  std::string Quit(const Args& args) {
    int64_t timeout_s = 0;
    if (args.size() == 2 && args[0] == "-t") timeout_s = std::atoll(args[1].c_str());
    BeginQuit(timeout_s > 0 ? timeout_s : -1);
    return "";
  }

  // 0: at once; < 0: when the clients are gone; else after that many seconds.
  void BeginQuit(int64_t timeout_s) {
    quitting_ = true;
    if (timeout_s == 0) {
      quit_deadline_ns_ = MonotonicNs();
    } else if (timeout_s > 0) {
      quit_deadline_ns_ = MonotonicNs() + timeout_s * 1000000000LL;
    }
  }

  DaemonOptions opt_;
  std::unique_ptr<SimState> state_;
  std::vector<int> gpus_;  // device index -> state GPU index
  int listen_fd_;
  double default_percentage_ = 100;
  std::map<int, uint64_t> default_limits_;  // by device index
  int server_pid_ = 0;
  uint64_t server_start_ = 0;
  double server_percentage_ = 100;
  std::map<int, uint64_t> server_limits_;  // by device index
  bool quitting_ = false;
  int64_t quit_deadline_ns_ = 0;  // 0: none
};

// The daemon's GPUs: those its environment lets it see (MIG devices are not
// served: MPS on MIG is not simulated).
std::vector<int> DaemonGpus(SimState& state) {
  StateLock lock(state);
  std::vector<int> gpus;
  const std::vector<DeviceRef> container =
      ContainerDevices(*state.file(), std::getenv("NVIDIA_VISIBLE_DEVICES"));
  for (const DeviceRef& d : CudaDevices(*state.file(), container, std::getenv("CUDA_VISIBLE_DEVICES"))) {
    if (!d.mig()) gpus.push_back(d.gpu);
  }
  return gpus;
}

int Listen(const std::string& path, std::string* error) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    *error = "pipe directory path too long for a socket: " + path;
    return -1;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  unlink(path.c_str());  // a dead daemon's
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 64) != 0) {
    *error = "cannot listen on " + path + ": " + strerror(errno);
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  return 1;
}

}  // namespace

int RunControlDaemon(const DaemonOptions& options) {
  for (const std::string& dir : {options.pipe_dir, options.log_dir}) {
    if (Status made = MakeDirectories(dir, 0755); !made.ok()) return Fail(made.error().message);
  }
  if (Request(options.pipe_dir, "get_server_list").reach == Reach::kAnswered) {
    return Fail("An instance of this daemon is already running (pipe directory " + options.pipe_dir + ")");
  }
  bool is_explicit = false;
  auto config = ConfigFromEnvironment(&is_explicit);
  if (!config.ok()) return Fail("tessera sim: " + config.error().message);
  auto state = SimState::Open(SimState::DefaultDir(), *config, is_explicit);
  if (!state.ok()) return Fail("tessera sim: " + state.error().message);
  std::vector<int> gpus = DaemonGpus(**state);
  if (gpus.empty()) return Fail("no GPU to serve (NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES name none)");
  std::string error;
  const int listen_fd = Listen(ControlSocketPath(options.pipe_dir), &error);
  if (listen_fd < 0) return Fail(error);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGTERM, OnTerminate);
  signal(SIGINT, OnTerminate);

  int ready[2] = {-1, -1};
  if (options.background) {
    if (pipe2(ready, O_CLOEXEC) != 0) return Fail(std::string("pipe: ") + strerror(errno));
    const pid_t pid = fork();
    if (pid < 0) return Fail(std::string("fork: ") + strerror(errno));
    if (pid > 0) {  // the caller's process: done once the daemon runs
      close(ready[1]);
      char c = 0;
      const bool ok = read(ready[0], &c, 1) == 1 && c == 'R';
      return ok ? 0 : Fail("the MPS control daemon failed to start");
    }
    close(ready[0]);
    setsid();
    const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
      dup2(null, 2);
    }
    if (chdir("/") != 0) {
      // Stay where we are: nothing here depends on the working directory.
    }
  }
  if (FILE* f = std::fopen(PidFilePath(options.pipe_dir).c_str(), "w")) {
    std::fprintf(f, "%d\n", getpid());
    std::fclose(f);
  }
  if (ready[1] >= 0) {
    const char c = 'R';
    if (write(ready[1], &c, 1) != 1) return 1;
    close(ready[1]);
  }
  Daemon daemon(options, std::move(*state), std::move(gpus), listen_fd);
  daemon.Serve();
  close(listen_fd);
  return 0;
}

int RunControlClient(const std::string& pipe_dir, std::FILE* in) {
  if (Request(pipe_dir, "get_server_list").reach != Reach::kAnswered) {
    std::fprintf(stderr, "Cannot find MPS control daemon process\n");
    return 1;
  }
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), in) != nullptr) {
    std::string line = buf;
    line.erase(line.find_last_not_of(" \t\r\n") + 1);
    line.erase(0, line.find_first_not_of(" \t"));
    if (line.empty()) continue;
    const Reply reply = Request(pipe_dir, line);
    if (reply.reach != Reach::kAnswered) {
      std::fprintf(stderr, "Cannot find MPS control daemon process\n");
      return 1;
    }
    std::fputs(reply.text.c_str(), stdout);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace tessera::sim::mps
