#include "prometheus/prometheus_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <utility>

#include <httplib.h>

namespace tessera::testing {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kDefaultBinary = "/usr/bin/prometheus";
constexpr int kLaunchAttempts = 3;  // a free port can be taken between probe and bind

std::string ErrnoText(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// A port of 127.0.0.1 that was free a moment ago.
Result<int> FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Error{ErrnoText("socket")};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Error error{ErrnoText("binding a free port on 127.0.0.1")};
    ::close(fd);
    return error;
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

// Prometheus' duration syntax: "1s", "250ms".
std::string Duration(std::chrono::milliseconds d) {
  const auto ms = d.count();
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + "s" : std::to_string(ms) + "ms";
}

// prometheus.yml: one scrape config per job. Strings are written as JSON strings,
// which YAML reads as double-quoted scalars, so no target text can break the file.
Result<std::string> ConfigYaml(const PrometheusOptions& options) {
  if (options.scrape_interval.count() <= 0) return Error{"scrape_interval must be positive"};
  std::map<std::string, std::pair<std::string, std::vector<std::string>>> jobs;  // job -> path, addresses
  std::vector<std::string> job_order;
  for (const ScrapeTarget& target : options.targets) {
    if (target.address.empty() || target.job.empty() || target.metrics_path.empty() ||
        target.metrics_path[0] != '/') {
      return Error{"scrape target '" + target.address + "' (job '" + target.job + "', path '" +
                   target.metrics_path + "'): address and job must be set, the path must start with '/'"};
    }
    auto [it, inserted] = jobs.try_emplace(target.job, target.metrics_path, std::vector<std::string>{});
    if (inserted) job_order.push_back(target.job);
    if (it->second.first != target.metrics_path) {
      return Error{"job '" + target.job + "' has targets with different metrics paths ('" + it->second.first +
                   "', '" + target.metrics_path + "'); give them different jobs"};
    }
    it->second.second.push_back(target.address);
  }
  std::ostringstream yaml;
  yaml << "global:\n"
       << "  scrape_interval: " << Duration(options.scrape_interval) << "\n"
       << "  scrape_timeout: " << Duration(options.scrape_interval) << "\n"
       << "  evaluation_interval: 1m\n"
       << "scrape_configs:\n";
  if (job_order.empty()) yaml << "  []\n";
  for (const std::string& job : job_order) {
    const auto& [path, addresses] = jobs[job];
    yaml << "  - job_name: " << Json(job).dump() << "\n"
         << "    metrics_path: " << Json(path).dump() << "\n"
         << "    scheme: http\n"
         << "    static_configs:\n"
         << "      - targets: " << Json(addresses).dump() << "\n";
  }
  return yaml.str();
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + ::strsignal(WTERMSIG(status));
  return "ended with wait status " + std::to_string(status);
}

}  // namespace

std::string PrometheusServer::BinaryPath() {
  const char* env = std::getenv("TESSERA_PROMETHEUS");
  return env != nullptr && *env != '\0' ? env : kDefaultBinary;
}

bool PrometheusServer::Available() {
  const std::string path = BinaryPath();
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::string PrometheusServer::NotAvailableMessage() {
  return "no Prometheus binary at " + BinaryPath() +
         ": install Debian's prometheus package (scripts/install-deps.sh does) or point TESSERA_PROMETHEUS "
         "at one";
}

Result<std::unique_ptr<PrometheusServer>> PrometheusServer::Start(const PrometheusOptions& options) {
  try {
    if (!Available()) return Error{NotAvailableMessage()};
    Result<std::string> yaml = ConfigYaml(options);
    if (!yaml.ok()) return yaml.error();

    std::unique_ptr<PrometheusServer> server(new PrometheusServer());
    server->stop_grace_ = options.stop_grace;
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tessera-prometheus-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) return Error{ErrnoText("mkdtemp " + pattern)};
    server->dir_ = pattern;  // the destructor removes it from here on
    server->stderr_path_ = server->dir_ + "/prometheus.log";
    {
      std::ofstream config(server->dir_ + "/prometheus.yml");
      config << *yaml;
      if (!config.flush()) return Error{"writing " + server->dir_ + "/prometheus.yml failed"};
    }

    Error last{"not started"};
    for (int attempt = 1; attempt <= kLaunchAttempts; ++attempt) {
      Status launched = server->Launch();
      if (!launched.ok()) return launched.error();
      Status ready = server->WaitReady(options.start_timeout);
      if (ready.ok()) return server;
      last = ready.error();
      const bool port_taken = server->StderrTail().find("address already in use") != std::string::npos;
      server->Stop();
      if (!port_taken) break;
    }
    return last.Wrap("starting " + BinaryPath());
  } catch (const std::exception& e) {
    return Error{std::string("starting prometheus: ") + e.what()};
  }
}

Status PrometheusServer::Launch() {
  Result<int> port = FreeLoopbackPort();
  if (!port.ok()) return port.error();
  port_ = *port;
  exit_status_.clear();

  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls are allowed (the test process may have threads).
  const std::string binary = BinaryPath();
  std::vector<std::string> args = {
      binary,
      "--config.file=" + dir_ + "/prometheus.yml",
      "--storage.tsdb.path=" + dir_ + "/data",
      "--storage.tsdb.retention.time=1h",
      "--web.listen-address=127.0.0.1:" + std::to_string(port_),
      "--query.max-concurrency=4",  // sizes the active-query log file it maps
      "--log.level=info",
  };
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  const int log_fd = ::open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return Error{ErrnoText("open " + stderr_path_)};
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int exec_pipe[2];  // the child reports a failed exec through it; closes on success
  if (null_fd < 0 || ::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    Error error{ErrnoText("preparing to start prometheus")};
    ::close(log_fd);
    if (null_fd >= 0) ::close(null_fd);
    return error;
  }
  long max_fd = ::sysconf(_SC_OPEN_MAX);
  if (max_fd < 0 || max_fd > 65536) max_fd = 65536;
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) {
    Error error{ErrnoText("fork")};
    ::close(log_fd);
    ::close(null_fd);
    ::close(exec_pipe[0]);
    ::close(exec_pipe[1]);
    return error;
  }
  if (pid == 0) {
    // Dies with the thread that started it; if that already happened, do not run at all.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    // No descriptor of the test (listening sockets, files) leaks into Prometheus; the
    // exec pipe is moved to fd 3 first and closes itself on exec.
    int report_fd = exec_pipe[1];
    if (report_fd != 3 && ::dup3(exec_pipe[1], 3, O_CLOEXEC) == 3) report_fd = 3;
    if (report_fd != 3 || ::syscall(SYS_close_range, 4U, ~0U, 0U) != 0) {
      for (long fd = 3; fd < max_fd; ++fd) {
        if (fd != report_fd) ::close(static_cast<int>(fd));
      }
    }
    ::execv(argv[0], argv.data());
    const int error = errno;
    ssize_t written = ::write(report_fd, &error, sizeof(error));
    (void)written;
    ::_exit(127);
  }

  pid_ = pid;
  ::close(log_fd);
  ::close(null_fd);
  ::close(exec_pipe[1]);
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(exec_pipe[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  ::close(exec_pipe[0]);
  if (n > 0) {
    Reap(0);
    return Error{"cannot execute " + binary + ": " + std::strerror(exec_errno)};
  }
  return Status::Ok();
}

Status PrometheusServer::WaitReady(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string last = "no answer yet";
  while (true) {
    if (!Running()) return Error{"prometheus " + exit_status_ + " before it was ready:\n" + StderrTail()};
    httplib::Client client("127.0.0.1", port_);
    client.set_connection_timeout(2, 0);
    client.set_read_timeout(5, 0);
    if (auto response = client.Get("/-/ready")) {
      if (response->status == 200) return Status::Ok();
      last = "HTTP " + std::to_string(response->status) + " " + response->body;
    } else {
      last = httplib::to_string(response.error());
    }
    if (Clock::now() >= deadline) {
      return Error{"not ready at " + base_url() + "/-/ready after " + std::to_string(timeout.count()) +
                   " ms (last: " + last + "):\n" + StderrTail()};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

PrometheusServer::~PrometheusServer() {
  Stop();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

void PrometheusServer::Reap(int wait_flags) {
  if (pid_ <= 0) return;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, wait_flags);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    exit_status_ = DescribeWaitStatus(status);
    pid_ = -1;
  } else if (r < 0) {  // not our child any more (ECHILD): nothing left to wait for
    exit_status_ = ErrnoText("waitpid");
    pid_ = -1;
  }
}

bool PrometheusServer::Running() {
  Reap(WNOHANG);
  return pid_ > 0;
}

void PrometheusServer::Stop() {
  if (!Running()) return;
  ::kill(pid_, SIGTERM);
  const auto deadline = Clock::now() + stop_grace_;
  while (Clock::now() < deadline) {
    if (!Running()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!Running()) return;
  ::kill(pid_, SIGKILL);
  Reap(0);
}

std::string PrometheusServer::base_url() const {
  return "http://127.0.0.1:" + std::to_string(port_);
}

Result<Json> PrometheusServer::GetApi(const std::string& path, const std::string& query_name,
                                      const std::string& query_value) {
  try {
    httplib::Client client("127.0.0.1", port_);
    client.set_connection_timeout(5, 0);
    client.set_read_timeout(30, 0);
    httplib::Params params;
    if (!query_name.empty()) params.emplace(query_name, query_value);
    auto response = client.Get(path, params, httplib::Headers{});
    if (!response) {
      return Error{"GET " + base_url() + path + ": " + httplib::to_string(response.error())};
    }
    Json body = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
      return Error{"GET " + path + ": HTTP " + std::to_string(response->status) +
                   ", not a JSON object: " + response->body.substr(0, 300)};
    }
    const auto status = body.find("status");
    if (status == body.end() || *status != "success") {
      const auto text = [&](const char* key) {
        const auto it = body.find(key);
        return it != body.end() && it->is_string() ? it->get<std::string>() : std::string("?");
      };
      return Error{"prometheus answered HTTP " + std::to_string(response->status) + " " + text("errorType") +
                   ": " + text("error")};
    }
    const auto data = body.find("data");
    if (data == body.end()) return Error{"GET " + path + ": success without data"};
    return *data;
  } catch (const std::exception& e) {
    return Error{"GET " + path + ": " + e.what()};
  }
}

Result<Json> PrometheusServer::Query(const std::string& promql) {
  Result<Json> data = GetApi("/api/v1/query", "query", promql);
  if (!data.ok()) {
    last_error_ = "query " + promql + ": " + data.error().message;
    return data.error().Wrap("query " + promql);
  }
  const auto result = data->find("result");
  if (result == data->end()) return Error{"query " + promql + ": data without result"};
  return Json(*result);
}

bool PrometheusServer::WaitForSeries(const std::string& promql, std::chrono::milliseconds timeout,
                                     Json* out) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    if (!Running()) {
      last_error_ = "waiting for " + promql + ": prometheus " + exit_status_;
      return false;
    }
    Result<Json> result = Query(promql);
    if (result.ok() && result->is_array() && !result->empty()) {
      if (out != nullptr) *out = std::move(*result);
      return true;
    }
    if (!result.ok() && result.error().message.find("bad_data") != std::string::npos) {
      return false;  // malformed PromQL never becomes valid; last_error_ says why
    }
    if (Clock::now() >= deadline) {
      if (result.ok()) {
        last_error_ = "no series for " + promql + " after " + std::to_string(timeout.count()) + " ms";
      }
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

Result<Json> PrometheusServer::Targets() {
  Result<Json> data = GetApi("/api/v1/targets", "state", "active");
  if (!data.ok()) return data.error().Wrap("targets");
  const auto active = data->find("activeTargets");
  if (active == data->end() || !active->is_array()) return Error{"targets: no activeTargets array"};
  return Json(*active);
}

std::string PrometheusServer::StderrTail(std::size_t max_bytes) const {
  std::ifstream in(stderr_path_, std::ios::binary | std::ios::ate);
  if (!in) return "(no output file " + stderr_path_ + ")";
  const std::streamoff size = in.tellg();
  const std::streamoff start = size > static_cast<std::streamoff>(max_bytes) ? size - max_bytes : 0;
  in.seekg(start);
  std::string tail(static_cast<std::size_t>(size - start), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  return tail;
}

std::string PrometheusServer::Diagnostics() {
  std::ostringstream text;
  try {
    text << "prometheus at " << base_url() << " (" << stderr_path_
         << "): " << (Running() ? "running, pid " + std::to_string(pid_) : exit_status_) << "\n";
    if (!last_error_.empty()) text << "last failure: " << last_error_ << "\n";
    if (pid_ > 0) {
      Result<Json> targets = Targets();
      if (!targets.ok()) {
        text << targets.error().message << "\n";
      } else {
        for (const Json& target : *targets) {
          text << "target " << target.value("scrapeUrl", "?") << ": health " << target.value("health", "?")
               << ", last error '" << target.value("lastError", "") << "'\n";
        }
      }
    }
    text << "output (tail):\n" << StderrTail();
  } catch (const std::exception& e) {
    text << "(diagnostics incomplete: " << e.what() << ")";
  }
  return text.str();
}

}  // namespace tessera::testing
