// tessera-sim-mps-control: the simulated GPUs' nvidia-cuda-mps-control.
//
//   tessera-sim-mps-control -d    start the control daemon in the background
//   tessera-sim-mps-control -f    run it in the foreground
//   tessera-sim-mps-control       send the commands read on stdin to the daemon
//
// As with NVIDIA's, the daemon and its clients meet in CUDA_MPS_PIPE_DIRECTORY
// (default /tmp/nvidia-mps) and it logs to CUDA_MPS_LOG_DIRECTORY (default
// /var/log/nvidia-mps). See docs/sim.md.
#include <cstdio>
#include <cstring>
#include <string>

#include "sim/mps_daemon.h"
#include "sim/mps_protocol.h"

int main(int argc, char** argv) {
  using namespace tessera::sim::mps;
  DaemonOptions options;
  options.pipe_dir = PipeDirectory();
  options.log_dir = LogDirectory();
  bool daemon = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-d" || arg == "-f") {
      daemon = true;
      options.background = arg == "-d";
    } else if (arg == "-M" || arg == "--multi-user") {
      // Clients of every user share the one server here.
    } else if (arg == "-h" || arg == "--help") {
      std::printf(
          "usage: %s [-d | -f]\n"
          "  -d  start the MPS control daemon in the background\n"
          "  -f  run the MPS control daemon in the foreground\n"
          "  without either, send the commands read on stdin to the running daemon\n"
          "CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps), CUDA_MPS_LOG_DIRECTORY (default "
          "/var/log/nvidia-mps)\n",
          argv[0]);
      return 0;
    } else {
      std::fprintf(stderr, "%s: option %s is not simulated (try -h)\n", argv[0], argv[i]);
      return 1;
    }
  }
  return daemon ? RunControlDaemon(options) : RunControlClient(options.pipe_dir, stdin);
}
