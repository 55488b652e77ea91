// The shared state of the simulated GPUs: one fixed-layout file per state
// directory ($TESSERA_SIM_STATE, default /dev/shm/tessera-sim-<uid>/state),
// mapped by every process that uses the simulated driver or NVML, and by the
// `tessera sim` CLI.
//
// Layout: a versioned header (magic, version, size), the configuration the
// state was created with, a robust process-shared mutex, per-GPU records
// (identity, kernel timeline, busy intervals, MIG instances, XID events) and a
// process table. Everything after the header is guarded by `mutex`; take it with
// StateLock. A process that dies holding the mutex does not wedge the others:
// the next locker gets EOWNERDEAD, marks the mutex consistent and reclaims the
// dead process's records.
//
// Thread-safety: SimState is safe to use from many threads; all access to the
// mapped file goes through StateLock.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "sim/catalog.h"
#include "sim/config.h"

namespace tessera::sim {

inline constexpr uint64_t kStateMagic = 0x3154535341524554ull;  // "TERASST1"
inline constexpr uint32_t kStateVersion = 3;
// StateFile::flags
inline constexpr uint32_t kStateFlagManagedOversubscription = 1;  // SimConfig::managed_oversubscription
inline constexpr int kMaxGpus = 16;
inline constexpr int kMaxProcesses = 256;
inline constexpr int kMaxIntervals = 4096;
inline constexpr int kMaxXidEvents = 64;
inline constexpr int kMaxGpuInstances = 8;
inline constexpr int kMaxComputeInstances = 8;
inline constexpr uint32_t kNoInstance = 0xFFFFFFFFu;

// A span of device time during which one process's kernels ran, on
// `share_percent` of the device (100, or an MPS client's active-thread share).
struct BusyInterval {
  int32_t pid;
  uint32_t gpu_instance;  // GPU-instance id the kernels ran in; 0 = the whole GPU
  int64_t start_ns;       // CLOCK_MONOTONIC
  int64_t end_ns;
  uint32_t share_percent;
  uint32_t reserved;
};

struct XidRecord {
  uint64_t xid;
  int64_t time_ns;  // CLOCK_MONOTONIC
  uint32_t gpu_instance;
  uint32_t compute_instance;
};

struct ComputeInstanceRecord {
  uint32_t in_use;
  uint32_t id;
  uint32_t profile;  // NVML_COMPUTE_INSTANCE_PROFILE_* enumerator
  uint32_t start;    // compute slice
  uint32_t size;     // compute slices
  uint32_t reserved;
};

struct GpuInstanceRecord {
  uint32_t in_use;
  uint32_t id;
  uint32_t profile_id;  // MigProfile::id
  uint32_t start;       // memory slice
  uint32_t size;        // memory slices
  uint32_t next_ci_id;
  int64_t busy_until_ns;  // the instance's own timeline (MIG isolates compute)
  ComputeInstanceRecord cis[kMaxComputeInstances];
};

struct GpuRecord {
  // Fixed when the state is created.
  char model_key[32];
  char name[96];
  char uuid[48];
  char serial[32];
  char pci_bus_id[32];  // "00000000:07:00.0"
  uint64_t total_bytes;
  uint32_t sm_count;
  int32_t numa_node;
  uint32_t pci_bus;
  uint32_t minor;
  uint32_t nvlink_links[kMaxGpus];  // NVLink links to GPU i (0 = none)
  // Dynamic, guarded by StateFile::mutex.
  int64_t busy_until_ns;    // end of the last kernel booked on the timeline
  uint64_t interval_count;  // intervals ever appended; ring slot = count % kMaxIntervals
  BusyInterval intervals[kMaxIntervals];
  uint32_t mig_mode;          // current (NVML_DEVICE_MIG_*)
  uint32_t mig_mode_pending;  // what the next GPU reset applies (Ampere); = mig_mode when none
  uint32_t next_gi_id;
  GpuInstanceRecord gis[kMaxGpuInstances];
  uint64_t xid_count;  // XIDs ever injected; ring slot = count % kMaxXidEvents
  XidRecord xids[kMaxXidEvents];
};

struct ProcessRecord {
  int32_t pid;
  uint32_t in_use;
  uint64_t start_time;  // /proc/<pid>/stat starttime, to survive pid reuse
  char name[64];
  uint64_t used_bytes[kMaxGpus];    // device memory charged to the process, per GPU
  uint32_t contexts[kMaxGpus];      // live contexts, per GPU
  uint32_t gpu_instance[kMaxGpus];  // GPU-instance id its work on that GPU is in; 0 = whole GPU
  uint32_t compute_instance[kMaxGpus];
  uint32_t mps_role;       // kMpsNone, kMpsServer or kMpsClient
  int32_t mps_server_pid;  // a client's server
};

// ProcessRecord::mps_role
inline constexpr uint32_t kMpsNone = 0, kMpsServer = 1, kMpsClient = 2;

struct StateFile {
  uint64_t magic;
  uint32_t version;
  uint32_t flags;      // kStateFlag*; was reserved (0) in earlier builds of version 2
  uint64_t file_size;  // sizeof(StateFile)
  char config[2048];   // SimConfig::Canonical() of the creating configuration
  uint32_t gpu_count;
  uint32_t driver_version;
  char driver_version_string[32];
  uint64_t context_overhead_bytes;
  uint64_t copy_bandwidth_bytes_per_s;
  uint64_t default_kernel_ns;
  alignas(64) pthread_mutex_t mutex;
  GpuRecord gpus[kMaxGpus];
  ProcessRecord processes[kMaxProcesses];
};

static_assert(sizeof(pthread_mutex_t) == 40, "layout assumes the x86-64/aarch64 glibc mutex");
static_assert(offsetof(StateFile, mutex) % 64 == 0);
static_assert(sizeof(BusyInterval) == 32);
static_assert(sizeof(XidRecord) == 24);

// Creates `dir` and the directories above it that are missing, with `mode`.
Status MakeDirectories(const std::string& dir, mode_t mode);

// CLOCK_MONOTONIC now, in ns (shared by all processes of the machine).
int64_t MonotonicNs();
// CLOCK_REALTIME now, in µs (NVML's timestamp unit).
int64_t RealtimeUs();

// The UUID of the MIG device a compute instance forms ("MIG-" + the parent's
// digits with the last four replaced by the GI and CI ids).
std::string MigDeviceUuid(const GpuRecord& gpu, const GpuInstanceRecord& gi, const ComputeInstanceRecord& ci);

// The procfs through which the simulated driver sees processes:
// TESSERA_SIM_PROC, default "/proc". A kernel driver names every process by
// its pid in the initial pid namespace; pointing TESSERA_SIM_PROC at a procfs
// of the host's pid namespace (a bind mount of the host's /proc) makes the
// simulator do the same for processes running in their own pid namespace.
const char* ProcRoot();
// The calling process's pid as the simulated driver names it: the target of
// <ProcRoot()>/self (getpid() when that cannot be read).
int SelfPid();

// <ProcRoot()>/<pid>/stat starttime, or 0 if the process does not exist.
uint64_t ProcessStartTime(int pid);
// Whether `pid` is alive (not a zombie) and started at `start_time`.
bool ProcessAlive(int pid, uint64_t start_time);

class SimState;

// Holds the state mutex; recovers it if its previous owner died.
class StateLock {
 public:
  explicit StateLock(SimState& state);
  ~StateLock();
  StateLock(const StateLock&) = delete;
  StateLock& operator=(const StateLock&) = delete;

 private:
  SimState& state_;
};

class SimState {
 public:
  // The state directory: $TESSERA_SIM_STATE, or /dev/shm/tessera-sim-<uid>.
  static std::string DefaultDir();

  // Attaches to the state in `dir`, creating it from `config` if it does not
  // exist. If it exists with a different configuration and `config_is_explicit`,
  // the state is re-created when no live process uses it, and otherwise an
  // error says so (the configuration is fixed while processes are attached).
  static Result<std::unique_ptr<SimState>> Open(const std::string& dir, const SimConfig& config,
                                                bool config_is_explicit);

  // Attaches to an existing state only (for the CLI); error if there is none.
  static Result<std::unique_ptr<SimState>> OpenExisting(const std::string& dir);

  ~SimState();

  StateFile* file() { return file_; }
  const std::string& dir() const { return dir_; }
  int gpu_count() const { return static_cast<int>(file_->gpu_count); }
  const GpuModel* model(int gpu) const;

  // --- everything below requires a StateLock held by the caller ---

  // Drops the records of processes that no longer exist (their memory and
  // contexts are released, as a real driver does when a process dies).
  void ReclaimDeadLocked();
  // Device memory in use on `gpu` by all live processes.
  uint64_t UsedBytesLocked(int gpu) const;
  // Device memory in use inside GPU instance `gi_id` of `gpu`.
  uint64_t UsedBytesInInstanceLocked(int gpu, uint32_t gi_id) const;
  // The slot of process `pid` (registering it if `create`), or -1.
  int ProcessSlotLocked(int pid, bool create);

  // Books a kernel of `duration_ns` for `pid` on the GPU's timeline, starting no
  // earlier than `earliest_ns` (its stream's previous work) and after all work
  // booked so far; returns its [start, end).
  // `gi_slot` >= 0 books on that MIG GPU instance's own timeline.
  std::pair<int64_t, int64_t> BookKernelLocked(int gpu, int pid, int64_t earliest_ns, int64_t duration_ns,
                                               int gi_slot = -1);

  // Books a kernel of an MPS client that may use `share_percent` of the GPU:
  // `work_ns` of whole-device time run at that share, or at what the work
  // booked before it leaves free (MPS clients run concurrently; booking is
  // first come, first served), starting no earlier than `earliest_ns`. It
  // occupies the client's share for work_ns * 100 / share_percent when the
  // device has room. Returns its [start, end).
  std::pair<int64_t, int64_t> BookSharedKernelLocked(int gpu, int pid, int64_t earliest_ns, int64_t work_ns,
                                                     uint32_t share_percent);

  // Device time (ns of the whole device) each process's kernels occupied
  // within [from_ns, to_ns); only in GPU instance `gi_id` when it is not 0.
  std::map<int, int64_t> BusyByProcessLocked(int gpu, int64_t from_ns, int64_t to_ns,
                                             uint32_t gi_id = 0) const;

  void AppendXidLocked(int gpu, uint64_t xid, uint32_t gi, uint32_t ci);

  // A GPU reset: the pending MIG mode takes effect (its instances go when the
  // mode changes). Refused (an error naming them) while processes use the GPU,
  // unless `force`, which takes their memory and contexts on it away as a
  // reset does. `what` says what changed.
  Status ResetGpuLocked(int gpu, bool force, std::string* what);

 private:
  friend class StateLock;
  SimState() = default;
  void LockMutex();
  void UnlockMutex();

  std::string dir_;
  int fd_ = -1;
  StateFile* file_ = nullptr;
};

}  // namespace tessera::sim
