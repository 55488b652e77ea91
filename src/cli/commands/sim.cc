// `tessera sim`: inspect and drive the simulated GPUs (src/sim).
//   tessera sim status                      nvidia-smi-like view of the shared state
//   tessera sim inject-xid --gpu N --xid 79 deliver an XID error event to NVML clients
//                [--gpu-instance G --compute-instance C]   ... from a MIG device
//   tessera sim reset [--force]             delete the state (devices, MIG layout, events)
//   tessera sim reset --gpu N [--force]     reset one GPU: its pending MIG mode takes effect
//   tessera sim mig --gpu N on|off          set a GPU's MIG mode through NVML, as `nvidia-smi -i N -mig 1|0`
//   tessera sim mps start|stop|status [--gpu N] [--pipe-dir D]
//                                           the simulated MPS control daemon (tessera-sim-mps-control)
// All take --state DIR, before or after the action (default $TESSERA_SIM_STATE, else
// /dev/shm/tessera-sim-<uid>).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "cli/command_registry.h"
#include "contract/container_contract.h"
#include "host/nvml_api.h"
#include "host/nvml_mig.h"
#include "host/paths.h"
#include "runner/local_gpus.h"
#include "sim/catalog.h"
#include "sim/mps_protocol.h"
#include "sim/state.h"

namespace tessera::cli {
namespace {

using sim::SimState;
using sim::StateLock;

std::string Mib(uint64_t bytes) {
  return std::to_string(bytes >> 20) + "MiB";
}

int Status(const std::string& dir) {
  auto opened = SimState::OpenExisting(dir);
  if (!opened.ok()) {
    std::cerr << "tessera sim status: " << opened.error().message << "\n";
    return 1;
  }
  SimState& st = **opened;
  StateLock lock(st);
  st.ReclaimDeadLocked();
  const sim::StateFile* f = st.file();
  const int64_t now = sim::MonotonicNs();
  std::printf("tessera simulated GPUs   state: %s\n", dir.c_str());
  std::printf("Driver Version: %s   CUDA Version: %d.%d\n", f->driver_version_string,
              f->driver_version / 1000, (f->driver_version % 1000) / 10);
  std::printf("+-----+------------------------------+------------------------------------------+\n");
  std::printf("| GPU | Name                         | Bus-Id            Memory-Usage   GPU-Util |\n");
  std::printf("|     | UUID                                       MIG     Processes            |\n");
  std::printf("+=====+==============================+==========================================+\n");
  struct Row {
    int gpu;
    int pid;
    std::string name;
    uint64_t used;
  };
  std::vector<Row> rows;
  bool pending = false;
  for (int g = 0; g < st.gpu_count(); ++g) {
    const sim::GpuRecord& r = f->gpus[g];
    const uint64_t used = st.UsedBytesLocked(g);
    int64_t busy = 0;
    for (auto& [pid, ns] : st.BusyByProcessLocked(g, now - 1000000000LL, now)) busy += ns;
    const int util = static_cast<int>(std::min<int64_t>(100, busy / 10000000));
    int procs = 0;
    for (const sim::ProcessRecord& p : f->processes) {
      if (p.in_use && (p.contexts[g] > 0 || p.used_bytes[g] > 0)) {
        ++procs;
        rows.push_back({g, p.pid, p.name, p.used_bytes[g]});
      }
    }
    int gis = 0;
    for (const sim::GpuInstanceRecord& gi : r.gis) gis += gi.in_use ? 1 : 0;
    std::string mig = r.mig_mode ? "On(" + std::to_string(gis) + " GI)" : "Off";
    if (r.mig_mode_pending != r.mig_mode) mig = r.mig_mode ? "On*" : "Off*";
    pending = pending || r.mig_mode_pending != r.mig_mode;
    const sim::GpuModel* m = st.model(g);
    if (m == nullptr || m->mig_memory_slices == 0) mig = "N/A";
    std::printf("| %3d | %-28.28s | %-16s %6s / %-8s %4d%% |\n", g, r.name, r.pci_bus_id + 4,
                Mib(used).c_str(), Mib(r.total_bytes).c_str(), util);
    std::printf("|     | %-42s %-7s %3d process(es)     |\n", r.uuid, mig.c_str(), procs);
    std::printf("+-----+------------------------------+------------------------------------------+\n");
  }
  if (pending) std::printf("* MIG mode change pending until the GPU is reset (tessera sim reset --gpu N)\n");
  std::printf("\nProcesses:\n  GPU   PID       Process name                Used memory\n");
  if (rows.empty()) std::printf("  No running processes found\n");
  for (const Row& row : rows) {
    std::printf("  %3d   %-8d  %-26.26s  %s\n", row.gpu, row.pid, row.name.c_str(), Mib(row.used).c_str());
  }
  return 0;
}

// Opens the state in `dir` for `action` on GPU `gpu`; nullptr (with a message) if there is none or no such
// GPU.
std::unique_ptr<SimState> OpenForGpu(const std::string& dir, const char* action, int gpu) {
  auto opened = SimState::OpenExisting(dir);
  if (!opened.ok()) {
    std::cerr << "tessera sim " << action << ": " << opened.error().message << "\n";
    return nullptr;
  }
  if (gpu < 0 || gpu >= (*opened)->gpu_count()) {
    std::cerr << "tessera sim " << action << ": no GPU " << gpu << " (the state has "
              << (*opened)->gpu_count() << ")\n";
    return nullptr;
  }
  return std::move(*opened);
}

// An XID on a GPU, or (with instance ids, as NVML reports them) on one of its MIG devices.
int InjectXid(const std::string& dir, int gpu, uint64_t xid, uint32_t gi_id, uint32_t ci_id) {
  std::unique_ptr<SimState> st = OpenForGpu(dir, "inject-xid", gpu);
  if (st == nullptr) return 1;
  StateLock lock(*st);
  if (gi_id != sim::kNoInstance) {
    bool found = false;
    for (const sim::GpuInstanceRecord& gi : st->file()->gpus[gpu].gis) {
      if (!gi.in_use || gi.id != gi_id) continue;
      for (const sim::ComputeInstanceRecord& ci : gi.cis) found = found || (ci.in_use && ci.id == ci_id);
    }
    if (!found) {
      std::cerr << "tessera sim inject-xid: GPU " << gpu << " has no compute instance " << ci_id
                << " in GPU instance " << gi_id << "\n";
      return 1;
    }
  }
  st->AppendXidLocked(gpu, xid, gi_id, ci_id);
  std::printf("XID %llu injected on GPU %d (%s)", static_cast<unsigned long long>(xid), gpu,
              st->file()->gpus[gpu].uuid);
  if (gi_id != sim::kNoInstance) std::printf(", GPU instance %u, compute instance %u", gi_id, ci_id);
  std::printf("\n");
  return 0;
}

// A GPU reset: its pending MIG mode takes effect; the rest of the state stays.
int ResetGpu(const std::string& dir, int gpu, bool force) {
  std::unique_ptr<SimState> st = OpenForGpu(dir, "reset", gpu);
  if (st == nullptr) return 1;
  StateLock lock(*st);
  std::string what;
  if (::tessera::Status s = st->ResetGpuLocked(gpu, force, &what); !s.ok()) {
    std::cerr << "tessera sim reset: " << s.error().message << "\n";
    return 1;
  }
  std::printf("GPU %d (%s) reset: %s\n", gpu, st->file()->gpus[gpu].uuid, what.c_str());
  return 0;
}

// The MIG mode through the simulated GPU's own NVML (nvmlDeviceSetMigMode), so
// it follows the same rules as on a real GPU: Hopper at once (refused while a
// process uses the GPU), Ampere pending until `tessera sim reset --gpu N`.
int SetMigMode(const std::string& dir, int gpu, const std::string& mode) {
  if (mode != "on" && mode != "off") {
    std::cerr << "tessera sim mig: the mode is 'on' or 'off', not '" << mode << "'\n";
    return 2;
  }
  {
    std::unique_ptr<SimState> st = OpenForGpu(dir, "mig", gpu);
    if (st == nullptr) return 1;
    const sim::GpuModel* model = st->model(gpu);
    if (model == nullptr || model->mig_memory_slices == 0) {
      std::cerr << "tessera sim mig: GPU " << gpu << " (" << st->file()->gpus[gpu].name << ") has no MIG\n";
      return 1;
    }
  }
  // Attach to this state as it is: a configuration in the environment could
  // otherwise ask for a different one.
  ::setenv(contract::kSimStateEnv, dir.c_str(), 1);
  ::unsetenv(contract::kSimGpusEnv);
  ::unsetenv("TESSERA_SIM_CONFIG");
  const std::string lib = runner::DiscoverInstallPaths().sim_lib_dir + "/" + host::kNvmlLibraryName;
  auto library = host::NvmlLibrary::Load(lib);
  if (!library.ok()) {
    std::cerr << "tessera sim mig: " << library.error().message << "\n";
    return 1;
  }
  auto driver = host::NvmlMigDriver::Load((*library)->api(), lib);
  if (!driver.ok()) {
    std::cerr << "tessera sim mig: " << driver.error().message << "\n";
    return 1;
  }
  auto changed = (*driver)->SetMigMode(gpu, mode == "on");
  if (!changed.ok()) {
    std::cerr << "tessera sim mig: " << changed.error().message << "\n";
    return 1;
  }
  if (changed->reset_required) {
    std::printf("GPU %d: MIG mode %s is pending until the GPU is reset: tessera sim reset --gpu %d\n", gpu,
                mode.c_str(), gpu);
  } else {
    std::printf("GPU %d: MIG mode %s\n", gpu, mode.c_str());
  }
  return 0;
}

int Reset(const std::string& dir, bool force) {
  {
    auto opened = SimState::OpenExisting(dir);
    if (opened.ok()) {
      SimState& st = **opened;
      StateLock lock(st);
      st.ReclaimDeadLocked();
      int live = 0;
      for (const sim::ProcessRecord& p : st.file()->processes) live += p.in_use ? 1 : 0;
      if (live > 0 && !force) {
        std::cerr << "tessera sim reset: " << live
                  << " process(es) still use the simulated GPUs; stop them or pass --force\n";
        return 1;
      }
    }
  }
  int removed = 0;
  for (const char* name : {"state", "lock"}) {
    if (unlink((dir + "/" + name).c_str()) == 0) ++removed;
  }
  rmdir(dir.c_str());
  std::printf(removed > 0 ? "simulator state %s removed\n" : "no simulator state at %s\n", dir.c_str());
  return 0;
}

// ----- tessera sim mps: the simulated MPS control daemon -----

// Where `tessera sim mps` finds its daemon: --pipe-dir, else one directory per
// GPU (--gpu N) or for all GPUs, in the state directory.
std::string MpsPipeDir(const std::string& state_dir, int gpu, const std::string& pipe_dir) {
  if (!pipe_dir.empty()) return pipe_dir;
  return state_dir + "/mps" + (gpu >= 0 ? "/gpu" + std::to_string(gpu) : "");
}

// tessera-sim-mps-control: next to this program (the build and install
// layouts), else on PATH.
std::string MpsControlProgram() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir.erase(dir.rfind('/') + 1);
    if (access((dir + "tessera-sim-mps-control").c_str(), X_OK) == 0) return dir + "tessera-sim-mps-control";
  }
  return "tessera-sim-mps-control";
}

// Starts the daemon (`tessera-sim-mps-control -d`) for the simulator state
// `state_dir`, serving GPU `gpu` (-1: every GPU the environment shows it).
int MpsStart(const std::string& state_dir, int gpu, const std::string& pipe_dir) {
  std::string visible;
  if (gpu >= 0) {
    visible = std::to_string(gpu);
    if (auto st = SimState::OpenExisting(state_dir); st.ok()) {
      if (gpu >= (*st)->gpu_count()) {
        std::cerr << "tessera sim mps start: no GPU " << gpu << " (the state has " << (*st)->gpu_count()
                  << ")\n";
        return 1;
      }
      visible = (*st)->file()->gpus[gpu].uuid;
    }
  }
  const std::string program = MpsControlProgram();
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    setenv(contract::kSimStateEnv, state_dir.c_str(), 1);
    setenv(contract::kMpsPipeDirectoryEnv, pipe_dir.c_str(), 1);
    setenv(contract::kMpsLogDirectoryEnv, (pipe_dir + "/log").c_str(), 1);
    if (!visible.empty()) setenv(contract::kCudaVisibleDevicesEnv, visible.c_str(), 1);
    execlp(program.c_str(), program.c_str(), "-d", static_cast<char*>(nullptr));
    std::fprintf(stderr, "tessera sim mps start: cannot run %s: %s\n", program.c_str(), strerror(errno));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  std::printf("MPS control daemon started in %s (log %s/log)\nclients: export CUDA_MPS_PIPE_DIRECTORY=%s\n",
              pipe_dir.c_str(), pipe_dir.c_str(), pipe_dir.c_str());
  return 0;
}

int DaemonPid(const std::string& pipe_dir) {
  int pid = 0;
  if (FILE* f = std::fopen(sim::mps::PidFilePath(pipe_dir).c_str(), "r")) {
    if (std::fscanf(f, "%d", &pid) != 1) pid = 0;
    std::fclose(f);
  }
  return pid;
}

// `quit`, then waits (10 s at most) for the daemon to end: it ends once its
// server's clients are gone.
int MpsStop(const std::string& pipe_dir) {
  const int pid = DaemonPid(pipe_dir);
  if (sim::mps::Request(pipe_dir, "quit").reach != sim::mps::Reach::kAnswered) {
    std::cerr << "tessera sim mps stop: no MPS control daemon in " << pipe_dir << "\n";
    return 1;
  }
  for (int i = 0; i < 500 && pid > 0 && kill(pid, 0) == 0; ++i) usleep(20000);
  if (pid > 0 && kill(pid, 0) == 0) {
    std::cerr << "tessera sim mps stop: the daemon (" << pid
              << ") waits for its clients to exit; it quits when they have\n";
    return 1;
  }
  std::printf("MPS control daemon in %s stopped\n", pipe_dir.c_str());
  return 0;
}

// The daemon, its defaults, its server and the server's clients.
int MpsStatus(const std::string& pipe_dir) {
  auto ask = [&](const std::string& command) { return sim::mps::Request(pipe_dir, command); };
  const sim::mps::Reply servers = ask("get_server_list");
  if (servers.reach != sim::mps::Reach::kAnswered) {
    std::cerr << "tessera sim mps status: no MPS control daemon in " << pipe_dir
              << (servers.reach == sim::mps::Reach::kDaemonGone ? " (it is gone; its clients fail)" : "")
              << "\n";
    return 1;
  }
  std::string percentage = ask("get_default_active_thread_percentage").text;
  percentage.erase(percentage.find_last_not_of('\n') + 1);
  std::printf("MPS control daemon %d in %s\n  default active thread percentage %s\n", DaemonPid(pipe_dir),
              pipe_dir.c_str(), percentage.c_str());
  std::istringstream list(servers.text);
  std::string server;
  bool any = false;
  while (list >> server) {
    any = true;
    std::string clients = ask("get_client_list " + server).text;
    std::replace(clients.begin(), clients.end(), '\n', ' ');
    std::printf("  server %s, clients: %s\n", server.c_str(), clients.empty() ? "none" : clients.c_str());
  }
  if (!any) std::printf("  no server yet (one starts with the first client)\n");
  return 0;
}

// --state is accepted both before the action (`tessera sim --state D status`)
// and after it (`tessera sim status --state D`); giving two different
// directories is an error rather than a silent pick.
struct StateFlags {
  std::string parent;
  std::string leaf;
};

int WithStateDir(const StateFlags& flags, const char* action,
                 const std::function<int(const std::string&)>& fn) {
  if (!flags.parent.empty() && !flags.leaf.empty() && flags.parent != flags.leaf) {
    std::cerr << "tessera sim " << action << ": --state given twice (" << flags.parent << ", " << flags.leaf
              << "); give it once\n";
    return 2;
  }
  const std::string& dir = !flags.leaf.empty() ? flags.leaf : flags.parent;
  return fn(dir.empty() ? SimState::DefaultDir() : dir);
}

constexpr const char* kStateHelp =
    "State directory (default $TESSERA_SIM_STATE or /dev/shm/tessera-sim-<uid>)";

const CommandRegistration kSim{
    {"sim", 60, [](CLI::App& root) {
       auto* cmd = root.add_subcommand("sim", "Inspect and drive the simulated GPUs (libcuda/NVML sim)");
       cmd->footer(
           "\nSee docs/sim.md for the simulated GPU's model and configuration (TESSERA_SIM_GPUS,\n"
           "TESSERA_SIM_CONFIG).");
       cmd->require_subcommand(1);
       static StateFlags state;
       cmd->add_option("--state", state.parent, kStateHelp);

       auto* status =
           cmd->add_subcommand("status", "nvidia-smi-like view: devices, memory, utilisation, processes");
       status->add_option("--state", state.leaf, kStateHelp);
       status->callback([] { SetExitCode(WithStateDir(state, "status", Status)); });

       static int gpu = 0;
       static uint64_t xid = 0;
       static uint32_t gi_id = sim::kNoInstance, ci_id = sim::kNoInstance;
       auto* inject = cmd->add_subcommand("inject-xid", "Deliver an XID error event to NVML event sets");
       inject->add_option("--gpu", gpu, "GPU index")->required();
       inject->add_option("--xid", xid, "XID number (e.g. 79: GPU fallen off the bus)")->required();
       auto* gi_opt = inject->add_option("--gpu-instance", gi_id, "GPU instance id of the MIG device it hit");
       auto* ci_opt =
           inject->add_option("--compute-instance", ci_id, "Compute instance id of the MIG device it hit");
       gi_opt->needs(ci_opt);
       ci_opt->needs(gi_opt);
       inject->add_option("--state", state.leaf, kStateHelp);
       inject->callback([] {
         SetExitCode(WithStateDir(state, "inject-xid", [](const std::string& dir) {
           return InjectXid(dir, gpu, xid, gi_id, ci_id);
         }));
       });

       static bool force = false;
       static int reset_gpu = -1;
       auto* reset = cmd->add_subcommand(
           "reset",
           "Delete the simulator state (devices are re-created on next use), or with --gpu reset one GPU");
       reset->add_flag("--force", force, "Reset even while processes use the simulated GPUs (or that GPU)");
       reset->add_option("--gpu", reset_gpu,
                         "Reset only this GPU: its pending MIG mode takes effect, nothing else is deleted");
       reset->add_option("--state", state.leaf, kStateHelp);
       reset->callback([] {
         SetExitCode(WithStateDir(state, "reset", [](const std::string& dir) {
           return reset_gpu >= 0 ? ResetGpu(dir, reset_gpu, force) : Reset(dir, force);
         }));
       });

       static int mig_gpu = 0;
       static std::string mig_mode;
       auto* mig = cmd->add_subcommand(
           "mig",
           "Turn a GPU's MIG mode on or off, as `nvidia-smi -i N -mig 1|0` (A100/A30: at the next reset)");
       mig->add_option("--gpu", mig_gpu, "GPU index")->required();
       mig->add_option("mode", mig_mode, "on or off")->required();
       mig->add_option("--state", state.leaf, kStateHelp);
       mig->callback([] {
         SetExitCode(WithStateDir(state, "mig",
                                  [](const std::string& dir) { return SetMigMode(dir, mig_gpu, mig_mode); }));
       });

       static int mps_gpu = -1;
       static std::string pipe_dir;
       auto* mps =
           cmd->add_subcommand("mps", "Run the simulated MPS control daemon (tessera-sim-mps-control)");
       mps->require_subcommand(1);
       using MpsAction = int (*)(const std::string& state_dir, int gpu, const std::string& pipe_dir);
       static const std::pair<const char*, const char*> kMpsActions[] = {
           {"start", "Start a control daemon (one per GPU with --gpu): `nvidia-cuda-mps-control -d`"},
           {"stop", "Stop the control daemon (`quit`; it ends once its clients have)"},
           {"status", "The daemon, its default active thread percentage, its server and clients"},
       };
       static const MpsAction kMpsRun[] = {
           MpsStart,
           [](const std::string&, int, const std::string& dir) { return MpsStop(dir); },
           [](const std::string&, int, const std::string& dir) { return MpsStatus(dir); },
       };
       for (size_t i = 0; i < std::size(kMpsActions); ++i) {
         auto* action = mps->add_subcommand(kMpsActions[i].first, kMpsActions[i].second);
         action->add_option("--gpu", mps_gpu,
                            "The GPU the daemon serves (its pipe directory: <state>/mps/gpuN)");
         action->add_option("--pipe-dir", pipe_dir, "The daemon's pipe directory (CUDA_MPS_PIPE_DIRECTORY)");
         action->add_option("--state", state.leaf, kStateHelp);
         action->callback([i] {
           SetExitCode(WithStateDir(state, kMpsActions[i].first, [i](const std::string& dir) {
             return kMpsRun[i](dir, mps_gpu, MpsPipeDir(dir, mps_gpu, pipe_dir));
           }));
         });
       }
     }}};

}  // namespace
}  // namespace tessera::cli
