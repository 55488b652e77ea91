// The simulated MPS (Multi-Process Service): what its control daemon
// (tessera-sim-mps-control, mps_daemon.*), its clients (the simulated libcuda,
// cuda_mps.cc) and `tessera sim mps` share.
//
// As with NVIDIA's nvidia-cuda-mps-control, everything meets in the pipe
// directory (CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps): the daemon
// listens on a socket there (`control`; NVIDIA's uses named pipes) and writes
// its pid (`nvidia-cuda-mps-control.pid`). A request is one line, the answer
// the text the daemon sends back before closing the connection. Besides the
// documented control commands there is one for clients, `client_connect PID`,
// answered by ConnectReply.
//
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/result.h"

namespace tessera::sim::mps {

// CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps; CUDA_MPS_LOG_DIRECTORY, else
// /var/log/nvidia-mps (NVIDIA's defaults).
std::string PipeDirectory();
std::string LogDirectory();
std::string ControlSocketPath(const std::string& pipe_dir);
std::string PidFilePath(const std::string& pipe_dir);

// How a request went: answered, no daemon has ever listened in that directory
// (no socket), or the daemon that did is gone (the socket refuses).
enum class Reach { kAnswered, kNoDaemon, kDaemonGone };
struct Reply {
  Reach reach = Reach::kNoDaemon;
  std::string text;
};
Reply Request(const std::string& pipe_dir, const std::string& command);

// A memory amount as MPS takes it: an integer with a binary unit, "8192M",
// "4G", "512K", "1T", or a plain number of bytes.
Result<uint64_t> ParseMemory(const std::string& text);
// As the daemon prints it: MiB, "8192M".
std::string FormatMemory(uint64_t bytes);
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: "<ordinal>=<amount>[,...]", e.g. "0=8192M,1=4G".
Result<std::map<int, uint64_t>> ParsePinnedLimits(const std::string& text);
// An active thread percentage: a number from 1 to 100.
Result<double> ParsePercentage(const std::string& text);

// The daemon's answer to `client_connect`: the server a client uses, the
// share of each device its clients may use and their default pinned limits.
struct ConnectReply {
  int server_pid = 0;
  uint64_t server_start_time = 0;  // /proc/<pid>/stat starttime, to tell a reused pid
  double active_thread_percentage = 100;
  std::vector<int> gpus;                       // the server's devices (state GPU indices), in order
  std::map<int, uint64_t> pinned_limit_bytes;  // by state GPU index; absent = none
  std::string Encode() const;
  static Result<ConnectReply> Decode(const std::string& text);
};

}  // namespace tessera::sim::mps
