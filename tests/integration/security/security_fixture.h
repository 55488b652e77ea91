// What the security tests share: throwaway certificates made with the openssl
// command, and tessera-scheduler (TESSERA_SCHEDULER_BIN) as a process.
#pragma once

#include <fcntl.h>
#include <httplib.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/testing.h"
#include "testing/ports.h"
#include "testing/process.h"

namespace tessera::security {

// A self-signed EC certificate with common name `name` for 127.0.0.1:
// <prefix>.tls.crt and <prefix>.tls.key.
inline bool MakeSelfSigned(const std::string& prefix, const std::string& name) {
  const std::string command =
      "timeout 60 openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj "
      "/CN=" +
      name + " -addext subjectAltName=IP:127.0.0.1 -keyout " + prefix + ".tls.key -out " + prefix +
      ".tls.crt >/dev/null 2>&1";
  return std::system(command.c_str()) == 0;
}

// tessera-scheduler started with `flags` and its own --port, its output in
// `log_path`; stopped with SIGTERM when destroyed.
class SchedulerProcess {
 public:
  explicit SchedulerProcess(std::string log_path) : log_(std::move(log_path)) {}
  SchedulerProcess(const SchedulerProcess&) = delete;
  SchedulerProcess& operator=(const SchedulerProcess&) = delete;
  ~SchedulerProcess() { Stop(); }

  // True once /healthz answers on its extender port.
  bool Start(std::vector<std::string> flags) {
    if (port_ <= 0) return false;
    // The dashboard would take its fixed port 8889 on every address.
    std::vector<std::string> argv = {TESSERA_SCHEDULER_BIN, "--port=" + std::to_string(port_),
                                     "--set=dashboard.enabled=false"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    pid_ = ::tessera::testing::Spawn({.argv = argv, .stdout_path = log_, .stderr_path = log_});
    return pid_ > 0 && ::tessera::testing::WaitFor([&] {
             httplib::Client http("127.0.0.1", port_);
             http.set_connection_timeout(1);
             auto res = http.Get("/healthz");
             return res && res->status == 200;
           });
  }
  void Stop() { ::tessera::testing::KillAndWait(pid_, SIGTERM); }
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  std::string Log() const { return ::tessera::testing::ReadFileOrEmpty(log_); }

 private:
  const std::string log_;
  const int port_ = ::tessera::testing::FreePort();
  pid_t pid_ = -1;
};

}  // namespace tessera::security
