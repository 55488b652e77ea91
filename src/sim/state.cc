#include "sim/state.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>

namespace tessera::sim {
namespace {

// Deterministic 64-bit mixing (splitmix64), so a config always yields the same UUIDs.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t HashString(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

void CopyString(char* dst, size_t cap, const std::string& src) {
  std::snprintf(dst, cap, "%s", src.c_str());
}

// PCI bus numbers of an 8-GPU HGX board, then a simple continuation.
uint32_t PciBus(int i) {
  static const uint32_t kBuses[] = {0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD};
  return i < 8 ? kBuses[i] : static_cast<uint32_t>(0xC0 + (i - 8) * 8);
}

void InitState(StateFile* f, const SimConfig& config) {
  std::memset(static_cast<void*>(f), 0, sizeof(StateFile));
  f->magic = kStateMagic;
  f->version = kStateVersion;
  f->file_size = sizeof(StateFile);
  const std::string canonical = config.Canonical();
  CopyString(f->config, sizeof(f->config), canonical);
  f->gpu_count = static_cast<uint32_t>(config.gpus.size());
  f->driver_version = config.driver_version;
  CopyString(f->driver_version_string, sizeof(f->driver_version_string), config.driver_version_string);
  f->context_overhead_bytes = config.context_overhead_mib << 20;
  f->copy_bandwidth_bytes_per_s = config.copy_bandwidth_mb_per_s * 1000000ull;
  f->default_kernel_ns = config.default_kernel_ns;
  f->flags = config.managed_oversubscription ? kStateFlagManagedOversubscription : 0;

  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&f->mutex, &attr);
  pthread_mutexattr_destroy(&attr);

  const uint64_t seed = HashString(canonical);
  for (size_t i = 0; i < config.gpus.size(); ++i) {
    const SimGpuConfig& g = config.gpus[i];
    GpuRecord& r = f->gpus[i];
    CopyString(r.model_key, sizeof(r.model_key), g.model->key);
    CopyString(r.name, sizeof(r.name), g.model->name);
    if (!g.uuid.empty()) {
      CopyString(r.uuid, sizeof(r.uuid), g.uuid);
    } else {
      const uint64_t a = Mix(seed + i * 2 + 1), b = Mix(seed + i * 2 + 2);
      char buf[48];
      std::snprintf(buf, sizeof(buf), "GPU-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                    static_cast<unsigned>((a >> 16) & 0xFFFF), static_cast<unsigned>(a & 0xFFFF),
                    static_cast<unsigned>(b >> 48), static_cast<unsigned long long>(b & 0xFFFFFFFFFFFFull));
      CopyString(r.uuid, sizeof(r.uuid), buf);
    }
    char serial[32];
    std::snprintf(serial, sizeof(serial), "1%012llu",
                  static_cast<unsigned long long>(Mix(seed ^ (i + 77)) % 1000000000000ull));
    CopyString(r.serial, sizeof(r.serial), serial);
    r.pci_bus = PciBus(static_cast<int>(i));
    char bus[32];
    std::snprintf(bus, sizeof(bus), "00000000:%02X:00.0", r.pci_bus);
    CopyString(r.pci_bus_id, sizeof(r.pci_bus_id), bus);
    r.total_bytes = g.memory_mib << 20;
    r.sm_count = g.sm_count;
    r.numa_node = g.numa_node;
    r.minor = static_cast<uint32_t>(i);
    r.mig_mode = g.mig_enabled ? 1 : 0;
    r.mig_mode_pending = r.mig_mode;
    r.next_gi_id = 1;
  }
  for (const NvlinkPair& p : config.nvlinks) {
    f->gpus[p.a].nvlink_links[p.b] = static_cast<uint32_t>(p.links);
    f->gpus[p.b].nvlink_links[p.a] = static_cast<uint32_t>(p.links);
  }
}

Result<StateFile*> MapFile(int fd) {
  void* p = mmap(nullptr, sizeof(StateFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Error{std::string("mmap of simulator state: ") + strerror(errno)};
  return static_cast<StateFile*>(p);
}

Status Validate(const StateFile* f, const std::string& path) {
  if (f->magic != kStateMagic || f->version != kStateVersion || f->file_size != sizeof(StateFile)) {
    return Error{"simulator state " + path +
                 " has an incompatible layout (another tessera version?); run `tessera sim "
                 "reset` when no simulated GPU program is running"};
  }
  return Status::Ok();
}

bool AnyLiveProcess(StateFile* f) {
  for (const ProcessRecord& p : f->processes) {
    if (p.in_use && ProcessAlive(p.pid, p.start_time)) return true;
  }
  return false;
}

// A process-wide lock file serialises creation and validation of the state.
class CreationLock {
 public:
  explicit CreationLock(const std::string& dir) {
    fd_ = open((dir + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ >= 0) {
      while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~CreationLock() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace

Status MakeDirectories(const std::string& dir, mode_t mode) {
  std::string path;
  std::stringstream ss(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/') path = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    path += part + "/";
    if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
      return Error{"cannot create directory " + path + ": " + strerror(errno)};
    }
  }
  return Status::Ok();
}

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

int64_t RealtimeUs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000LL + ts.tv_nsec / 1000;
}

const char* ProcRoot() {
  static const std::string root = [] {
    const char* env = std::getenv("TESSERA_SIM_PROC");
    return std::string(env != nullptr && env[0] != '\0' ? env : "/proc");
  }();
  return root.c_str();
}

int SelfPid() {
  char path[512], target[32];
  std::snprintf(path, sizeof(path), "%s/self", ProcRoot());
  const ssize_t n = readlink(path, target, sizeof(target) - 1);
  if (n <= 0) return getpid();
  target[n] = '\0';
  const int pid = std::atoi(target);
  return pid > 0 ? pid : getpid();
}

uint64_t ProcessStartTime(int pid) {
  char path[512];
  std::snprintf(path, sizeof(path), "%s/%d/stat", ProcRoot(), pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // The command name may contain spaces and ')': fields resume after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  p += 2;  // ") "
  const char state = *p;
  if (state == 'Z' || state == 'X' || state == 'x') return 0;  // dead, not yet reaped
  // Field 3 is the state; starttime is field 22.
  int field = 3;
  while (*p != '\0' && field < 22) {
    if (*p == ' ') ++field;
    ++p;
  }
  return std::strtoull(p, nullptr, 10);
}

bool ProcessAlive(int pid, uint64_t start_time) {
  if (pid <= 0) return false;
  // kill() speaks the caller's pid namespace, which is not ProcRoot()'s when
  // TESSERA_SIM_PROC names another one; the stat file alone decides then.
  if (std::getenv("TESSERA_SIM_PROC") == nullptr && kill(pid, 0) != 0 && errno == ESRCH) return false;
  const uint64_t st = ProcessStartTime(pid);
  return st != 0 && st == start_time;
}

StateLock::StateLock(SimState& state) : state_(state) {
  state_.LockMutex();
}
StateLock::~StateLock() {
  state_.UnlockMutex();
}

void SimState::LockMutex() {
  int rc = pthread_mutex_lock(&file_->mutex);
  if (rc == EOWNERDEAD) {
    // The previous owner died inside a critical section. Every critical section
    // leaves the records consistent field by field, so mark the mutex usable and
    // drop the dead owner's records.
    pthread_mutex_consistent(&file_->mutex);
    ReclaimDeadLocked();
  }
}

void SimState::UnlockMutex() {
  pthread_mutex_unlock(&file_->mutex);
}

std::string SimState::DefaultDir() {
  if (const char* d = std::getenv("TESSERA_SIM_STATE"); d != nullptr && *d != '\0') return d;
  return "/dev/shm/tessera-sim-" + std::to_string(getuid());
}

Result<std::unique_ptr<SimState>> SimState::Open(const std::string& dir, const SimConfig& config,
                                                 bool config_is_explicit) {
  if (Status s = MakeDirectories(dir, 0700); !s.ok()) return s.error();
  CreationLock creation(dir);
  if (!creation.ok()) {
    return Error{"cannot lock simulator state directory " + dir + ": " + strerror(errno)};
  }
  const std::string path = dir + "/state";
  const std::string canonical = config.Canonical();
  std::unique_ptr<SimState> state(new SimState());
  state->dir_ = dir;

  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd >= 0) {
    struct stat st {};
    if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == sizeof(StateFile)) {
      auto mapped = MapFile(fd);
      if (!mapped.ok()) {
        close(fd);
        return mapped.error();
      }
      StateFile* f = *mapped;
      if (Status v = Validate(f, path); !v.ok()) {
        munmap(f, sizeof(StateFile));
        close(fd);
        return v.error();
      }
      if (!config_is_explicit || canonical == f->config) {
        state->fd_ = fd;
        state->file_ = f;
        return state;
      }
      const bool busy = AnyLiveProcess(f);
      const std::string existing = f->config;
      munmap(f, sizeof(StateFile));
      close(fd);
      if (busy) {
        return Error{"simulator state " + path + " was created with a different configuration (" + existing +
                     ") and is in use; the configuration is fixed while simulated GPU "
                     "programs run (unset TESSERA_SIM_GPUS/TESSERA_SIM_CONFIG, use another "
                     "TESSERA_SIM_STATE, or `tessera sim reset` when they have exited)"};
      }
      unlink(path.c_str());  // unused: re-create it with the new configuration
    } else {
      close(fd);
      return Error{"simulator state " + path +
                   " has an incompatible size (another tessera version?); run `tessera sim "
                   "reset` when no simulated GPU program is running"};
    }
  }

  // Create: initialise a temporary file completely, then publish it by rename.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Error{"cannot create " + tmp + ": " + strerror(errno)};
  if (ftruncate(fd, sizeof(StateFile)) != 0) {
    const std::string err = strerror(errno);
    close(fd);
    unlink(tmp.c_str());
    return Error{"cannot size " + tmp + ": " + err};
  }
  auto mapped = MapFile(fd);
  if (!mapped.ok()) {
    close(fd);
    unlink(tmp.c_str());
    return mapped.error();
  }
  InitState(*mapped, config);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = strerror(errno);
    munmap(*mapped, sizeof(StateFile));
    close(fd);
    unlink(tmp.c_str());
    return Error{"cannot publish " + path + ": " + err};
  }
  state->fd_ = fd;
  state->file_ = *mapped;
  return state;
}

Result<std::unique_ptr<SimState>> SimState::OpenExisting(const std::string& dir) {
  const std::string path = dir + "/state";
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return Error{"no simulator state at " + path +
                 " (it is created by the first program that uses the simulated GPUs)"};
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != sizeof(StateFile)) {
    close(fd);
    return Error{"simulator state " + path + " has an incompatible size; run `tessera sim reset`"};
  }
  auto mapped = MapFile(fd);
  if (!mapped.ok()) {
    close(fd);
    return mapped.error();
  }
  if (Status v = Validate(*mapped, path); !v.ok()) {
    munmap(*mapped, sizeof(StateFile));
    close(fd);
    return v.error();
  }
  std::unique_ptr<SimState> state(new SimState());
  state->dir_ = dir;
  state->fd_ = fd;
  state->file_ = *mapped;
  return state;
}

SimState::~SimState() {
  if (file_ != nullptr) munmap(file_, sizeof(StateFile));
  if (fd_ >= 0) close(fd_);
}

const GpuModel* SimState::model(int gpu) const {
  return FindModel(file_->gpus[gpu].model_key);
}

void SimState::ReclaimDeadLocked() {
  for (ProcessRecord& p : file_->processes) {
    if (p.in_use && !ProcessAlive(p.pid, p.start_time)) {
      std::memset(static_cast<void*>(&p), 0, sizeof(p));
    }
  }
}

uint64_t SimState::UsedBytesLocked(int gpu) const {
  uint64_t used = 0;
  for (const ProcessRecord& p : file_->processes) {
    if (p.in_use) used += p.used_bytes[gpu];
  }
  return used;
}

int SimState::ProcessSlotLocked(int pid, bool create) {
  int free_slot = -1;
  for (int i = 0; i < kMaxProcesses; ++i) {
    ProcessRecord& p = file_->processes[i];
    if (p.in_use && p.pid == pid) return i;
    if (!p.in_use && free_slot < 0) free_slot = i;
  }
  if (!create) return -1;
  if (free_slot < 0) {
    ReclaimDeadLocked();
    for (int i = 0; i < kMaxProcesses && free_slot < 0; ++i) {
      if (!file_->processes[i].in_use) free_slot = i;
    }
    if (free_slot < 0) return -1;
  }
  ProcessRecord& p = file_->processes[free_slot];
  std::memset(static_cast<void*>(&p), 0, sizeof(p));
  p.pid = pid;
  p.start_time = ProcessStartTime(pid);
  char path[512];
  std::snprintf(path, sizeof(path), "%s/%d/comm", ProcRoot(), pid);
  std::ifstream comm(path);
  std::string name;
  std::getline(comm, name);
  CopyString(p.name, sizeof(p.name), name);
  p.in_use = 1;
  return free_slot;
}

uint64_t SimState::UsedBytesInInstanceLocked(int gpu, uint32_t gi_id) const {
  uint64_t used = 0;
  for (const ProcessRecord& p : file_->processes) {
    if (p.in_use && p.gpu_instance[gpu] == gi_id) used += p.used_bytes[gpu];
  }
  return used;
}

std::string MigDeviceUuid(const GpuRecord& gpu, const GpuInstanceRecord& gi,
                          const ComputeInstanceRecord& ci) {
  std::string u = std::string("MIG-") + (gpu.uuid + 4);
  char tail[16];
  std::snprintf(tail, sizeof(tail), "%02x%02x", gi.id & 0xFF, ci.id & 0xFF);
  u.replace(u.size() - 4, 4, tail);
  return u;
}

Status SimState::ResetGpuLocked(int gpu, bool force, std::string* what) {
  ReclaimDeadLocked();
  std::string users;
  for (ProcessRecord& p : file_->processes) {
    if (!p.in_use || (p.contexts[gpu] == 0 && p.used_bytes[gpu] == 0)) continue;
    users += (users.empty() ? "" : ", ") + std::to_string(p.pid);
    if (!force) continue;
    p.contexts[gpu] = 0;
    p.used_bytes[gpu] = 0;
    p.gpu_instance[gpu] = 0;
    p.compute_instance[gpu] = 0;
  }
  if (!users.empty() && !force) {
    return Error{"GPU " + std::to_string(gpu) + " is in use by process(es) " + users +
                 "; stop them or pass --force"};
  }
  GpuRecord& g = file_->gpus[gpu];
  std::string done = users.empty() ? "" : "processes " + users + " lost the GPU; ";
  if (g.mig_mode_pending != g.mig_mode) {
    g.mig_mode = g.mig_mode_pending;
    std::memset(static_cast<void*>(g.gis), 0, sizeof(g.gis));  // no instance survives a mode change
    done += std::string("MIG mode now ") + (g.mig_mode ? "enabled" : "disabled");
  } else {
    done += "no pending MIG mode change";
  }
  const int64_t now = MonotonicNs();
  g.busy_until_ns = std::min(g.busy_until_ns, now);  // work in flight is gone
  for (GpuInstanceRecord& gi : g.gis) gi.busy_until_ns = std::min(gi.busy_until_ns, now);
  if (what != nullptr) *what = done;
  return Status::Ok();
}

void SimState::AppendXidLocked(int gpu, uint64_t xid, uint32_t gi, uint32_t ci) {
  GpuRecord& g = file_->gpus[gpu];
  XidRecord& r = g.xids[g.xid_count % kMaxXidEvents];
  r.xid = xid;
  r.time_ns = MonotonicNs();
  r.gpu_instance = gi;
  r.compute_instance = ci;
  ++g.xid_count;
}

}  // namespace tessera::sim
