// FakeControl: a ControlProgram for unit tests (mps_daemons.h) that keeps one
// pretend daemon per pipe directory and records every command sent.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "node/mps/mps_daemons.h"

namespace tessera::node::mps {

// A control program that keeps one simulated daemon per pipe directory and
// records every command it is sent.
class FakeControl final : public ControlProgram {
 public:
  struct Daemon {
    int pid = 0;
    std::string percentage = "100.0";
    std::string pinned = "N/A";
    bool quitting = false;
  };
  std::map<std::string, Daemon> daemons;  // by pipe dir
  std::vector<std::string> log;           // "start <pipe> <visible>", "<pipe>: <command>"
  int next_pid = 100;
  bool fail_start = false;
  bool ignore_percentage = false;  // a daemon that answers but does not take the default

  Status StartDaemon(const std::map<std::string, std::string>& env) override {
    const std::string pipe = env.at("CUDA_MPS_PIPE_DIRECTORY");
    log.push_back("start " + pipe + " " + env.at("CUDA_VISIBLE_DEVICES") + " " +
                  env.at("CUDA_MPS_LOG_DIRECTORY"));
    if (fail_start) return Error{"exited with status 1"};
    daemons[pipe] = Daemon{next_pid++};
    return Status::Ok();
  }

  Result<std::string> Send(const std::map<std::string, std::string>& env,
                           const std::string& commands) override {
    const std::string pipe = env.at("CUDA_MPS_PIPE_DIRECTORY");
    auto it = daemons.find(pipe);
    if (it == daemons.end()) return Error{"Cannot find MPS control daemon process"};
    std::string out;
    size_t start = 0;
    while (start < commands.size()) {
      const size_t end = commands.find('\n', start);
      const std::string line = commands.substr(start, end - start);
      start = end == std::string::npos ? commands.size() : end + 1;
      log.push_back(pipe + ": " + line);
      if (line.rfind("set_default_active_thread_percentage ", 0) == 0) {
        if (!ignore_percentage) it->second.percentage = line.substr(line.rfind(' ') + 1) + ".0";
        out += it->second.percentage + "\n";
      } else if (line == "get_default_active_thread_percentage") {
        out += it->second.percentage + "\n";
      } else if (line.rfind("set_default_device_pinned_mem_limit 0 ", 0) == 0) {
        it->second.pinned = line.substr(line.rfind(' ') + 1);
      } else if (line == "get_default_device_pinned_mem_limit 0") {
        out += it->second.pinned + "\n";
      } else if (line == "quit") {
        daemons.erase(it);  // no clients: it ends at once
        return out;
      } else {
        out += "Unknown command\n";
      }
    }
    return out;
  }

  int LiveDaemonPid(const std::string& pipe_dir) override {
    auto it = daemons.find(pipe_dir);
    return it == daemons.end() ? 0 : it->second.pid;
  }

  void Kill(const std::string& pipe_dir) { daemons.erase(pipe_dir); }
};

}  // namespace tessera::node::mps
