// MpsDaemons: one MPS control daemon per GPU in `mps` mode, as tessera-node
// runs them (issue 15; docs/sharing.md#mps).
//
// Each daemon is `<control binary> -d` (nvidia-cuda-mps-control on a real
// node, tessera-sim-mps-control in tests) started with
//   CUDA_MPS_PIPE_DIRECTORY=<root>/<gpu uuid>/pipe
//   CUDA_MPS_LOG_DIRECTORY=<root>/<gpu uuid>/log
//   CUDA_VISIBLE_DEVICES=<gpu uuid>
// so it serves that GPU alone, as its device 0. Its defaults are set with the
// daemon's own commands, by device index — NVIDIA found that pinned limits
// given by UUID are not applied:
//   set_default_active_thread_percentage <pct>
//   set_default_device_pinned_mem_limit 0 <MiB>M
// and read back (get_default_*) to make sure they took. They apply to the
// next server the daemon starts, which is why they are set before any client
// can connect.
//
// Check() (the monitor's pass) restarts a daemon that died — its clients died
// with its server; new ones need a daemon — and reports it (log, the `on_event`
// callback, the restart counter in Metrics()). A GPU that leaves `mps` mode,
// and every GPU at StopAll(), gets `quit` through the control program's stdin;
// the daemon then stops taking clients and ends once its clients are gone.
//
// A daemon found alive in a GPU's pipe directory at Apply (left by a previous
// tessera-node) is adopted: its defaults are set again, it is not restarted.
//
// Thread-safety: every method may be called from any thread (guarded by mu_);
// the control program is only ever run under mu_, one command at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/periodic_thread.h"
#include "base/result.h"

namespace tessera::node::mps {

// A GPU in `mps` mode and the defaults its daemon gives the servers it starts.
struct MpsGpu {
  std::string uuid;
  int index = 0;           // NVML index on the node (for messages and metrics)
  int64_t memory_mib = 0;  // the GPU's memory
  // 1–100: the share of the GPU's threads a client may use by default.
  int default_active_thread_percentage = 100;
  // The pinned device-memory limit every client gets by default; 0 = none.
  int64_t default_pinned_memory_mib = 0;
  bool operator==(const MpsGpu&) const = default;
};

// NVIDIA's sharing.mps split of a GPU into `replicas` equal clients:
// 100/replicas percent (rounded down, at least 1) and memory/replicas MiB
// (rounded down). Errors for replicas < 1 and for more replicas than percent
// points (NVIDIA's plugin caps MPS replicas at 48; a share under 1 % cannot be
// expressed).
Result<MpsGpu> EqualSplit(std::string uuid, int index, int64_t memory_mib, int replicas);

// The directories of a GPU's daemon under `root`.
std::string PipeDirectoryOf(const std::string& root, const std::string& uuid);
std::string LogDirectoryOf(const std::string& root, const std::string& uuid);

// What MpsDaemons needs of the operating system: the seam the unit tests
// replace (SystemControlProgram is the real one).
class ControlProgram {
 public:
  virtual ~ControlProgram() = default;
  // Runs `<binary> -d` with `env` added to tessera-node's environment; Ok once
  // it exited 0 (the daemon then runs in the background).
  virtual Status StartDaemon(const std::map<std::string, std::string>& env) = 0;
  // Runs `<binary>` with `env` added and `commands` (one per line) on its
  // stdin; returns what it printed. An error when it cannot run, exits
  // non-zero (no daemon to talk to) or does not finish in time.
  virtual Result<std::string> Send(const std::map<std::string, std::string>& env,
                                   const std::string& commands) = 0;
  // The pid of the daemon whose pid file (nvidia-cuda-mps-control.pid) is in
  // `pipe_dir`, if that process is alive and is the control program; else 0.
  virtual int LiveDaemonPid(const std::string& pipe_dir) = 0;
};

// Runs `binary` (a path, or a name looked up in PATH). A command that has not
// finished after `timeout` is killed and reported as an error.
std::unique_ptr<ControlProgram> SystemControlProgram(std::string binary, std::chrono::milliseconds timeout);

struct MpsDaemonsOptions {
  std::string root = "/run/tessera/mps";  // <root>/<uuid>/{pipe,log}
  // How long StopAll / a GPU leaving mps mode waits for a daemon to end after
  // `quit` (it waits for its clients); past it the daemon is left to finish.
  std::chrono::milliseconds quit_wait{10000};
};

// What happened to a daemon, for an Event on the Node: type ("Normal" or
// "Warning"), reason (CamelCase), message.
using MpsEventSink =
    std::function<void(const std::string& type, const std::string& reason, const std::string& message)>;

class MpsDaemons {
 public:
  MpsDaemons(MpsDaemonsOptions options, std::unique_ptr<ControlProgram> program,
             MpsEventSink on_event = nullptr);
  ~MpsDaemons();  // stops the checking thread; does not stop the daemons: StopAll() does
  MpsDaemons(const MpsDaemons&) = delete;
  MpsDaemons& operator=(const MpsDaemons&) = delete;

  // Makes the daemons those of `gpus`: starts (or adopts) a daemon for each
  // new GPU and sets its defaults, sets new defaults for a GPU whose defaults
  // changed, quits the daemons of GPUs no longer listed. Every GPU is tried;
  // the error names each that failed (a failed one is retried by Check()).
  // Refuses a list with a GPU twice or a default outside 1–100 % / above the
  // GPU's memory, changing nothing.
  Status Apply(const std::vector<MpsGpu>& gpus);

  // Restarts each daemon that is not alive (and one that never started).
  void Check();
  // Runs Check() every `interval` on a thread of its own (tessera-node: its
  // monitor interval) until StopAll.
  void StartChecking(std::chrono::milliseconds interval);

  // Stops the checking thread, quits every daemon (waiting up to quit_wait
  // for each) and forgets them.
  void StopAll();

  // The host pipe directory of `uuid`'s daemon; "" when the GPU is not in mps mode.
  std::string PipeDirectory(const std::string& uuid) const;
  // Whether `uuid`'s daemon runs with its defaults set (as of the last Apply/Check).
  bool Ready(const std::string& uuid) const;

  struct DaemonStatus {
    MpsGpu gpu;
    int pid = 0;        // 0: not running
    int restarts = 0;   // times Check() found it dead and started it again
    std::string error;  // the last failure to start or configure it ("" = none)
  };
  std::vector<DaemonStatus> Daemons() const;

  // tessera_mps_daemon_up{gpu,uuid} and tessera_mps_daemon_restarts_total{gpu,uuid},
  // in the Prometheus text format.
  std::string Metrics() const;

 private:
  struct Daemon {
    MpsGpu gpu;
    int pid = 0;
    int restarts = 0;
    bool configured = false;  // defaults set on the running daemon
    std::string error;
  };
  std::map<std::string, std::string> EnvOf(const MpsGpu& gpu) const;
  // Starts the daemon unless one is alive, then sets its defaults.
  Status StartLocked(Daemon& daemon);
  Status ConfigureLocked(Daemon& daemon);
  void QuitLocked(const Daemon& daemon);
  void Report(const std::string& type, const std::string& reason, const std::string& message);

  const MpsDaemonsOptions options_;
  const std::unique_ptr<ControlProgram> program_;
  const MpsEventSink on_event_;
  mutable std::mutex mu_;
  std::map<std::string, Daemon> daemons_;    // by GPU uuid; guarded by mu_
  std::unique_ptr<PeriodicThread> checker_;  // StartChecking/StopAll, from the controlling thread
};

}  // namespace tessera::node::mps
