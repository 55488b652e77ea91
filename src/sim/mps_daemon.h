// The simulated MPS control daemon (the daemon side of
// tessera-sim-mps-control; mps_protocol.h says how it is reached).
//
// Like nvidia-cuda-mps-control -d, it serves the GPUs the environment gives it
// (NVIDIA_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES), answers the control commands
// (set/get_default_active_thread_percentage, set/get_default_device_pinned_mem_limit,
// get_server_list, get_client_list, start_server, set/get_active_thread_percentage,
// set/get_device_pinned_mem_limit, get_server_status, quit), and starts the MPS
// server when the first client connects (or on start_server). The server is a
// child process named nvidia-cuda-mps-server that holds a context on each of
// the daemon's GPUs in the shared state, so NVML lists it as the GPU's compute
// process; it dies with the daemon. Clients account their own memory and
// kernels in the shared state (cuda_mps.cc) with the share and limits the
// daemon gives them.
//
// Thread-safety: single-threaded; one daemon per pipe directory.
#pragma once

#include <memory>
#include <string>

#include "sim/state.h"

namespace tessera::sim::mps {

struct DaemonOptions {
  std::string pipe_dir;
  std::string log_dir;
  bool background = true;  // -d: detach; -f: stay in the foreground
};

// Runs the daemon until `quit`; returns the process's exit status. In the
// background the caller's process returns 0 as soon as the daemon listens (or
// 1, with a message on stderr, when it cannot start).
int RunControlDaemon(const DaemonOptions& options);

// The command-line client: sends each line of `in` to the daemon of `pipe_dir`
// and prints the answers; 1 when there is no daemon to talk to.
int RunControlClient(const std::string& pipe_dir, std::FILE* in);

}  // namespace tessera::sim::mps
