#include "vgpu/region.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <new>

#include "vgpu/host_pid.h"
#include "vgpu/log.h"

namespace tessera::vgpu {
namespace {

uint64_t now_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

pthread_mutex_t* region_mutex(Region* r) {
  return reinterpret_cast<pthread_mutex_t*>(r->header.lock);
}

// Creates every missing directory above `path` (best effort; the open that
// follows reports the real problem if this was not enough).
void make_parent_dirs(const char* path) {
  char buf[512];
  size_t n = strnlen(path, sizeof(buf) - 1);
  memcpy(buf, path, n);
  buf[n] = '\0';
  for (size_t i = 1; i < n; ++i) {
    if (buf[i] != '/') continue;
    buf[i] = '\0';
    mkdir(buf, 0777);  // the process umask applies; we never change it
    buf[i] = '/';
  }
}

void sub_saturating(std::atomic<uint64_t>& counter, uint64_t amount) {
  uint64_t v = counter.load(std::memory_order_relaxed);
  counter.store(v > amount ? v - amount : 0, std::memory_order_relaxed);
}

bool uuid_terminated(const char (&uuid)[kRegionUuidBytes]) {
  return memchr(uuid, '\0', kRegionUuidBytes) != nullptr;
}

}  // namespace

bool initialise_region(Region* r, char* error, size_t error_len) {
  RegionHeader& h = r->header;
  h.version = kRegionVersion;
  h.header_bytes = sizeof(RegionHeader);
  h.total_bytes = sizeof(Region);
  h.max_devices = kRegionMaxDevices;
  h.max_processes = kRegionMaxProcesses;
  h.device_entry_bytes = sizeof(DeviceEntry);
  h.process_slot_bytes = sizeof(ProcessSlot);
  h.created_ns = now_ns(CLOCK_REALTIME);
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  int rc = pthread_mutex_init(region_mutex(r), &attr);
  pthread_mutexattr_destroy(&attr);
  if (rc != 0) {
    snprintf(error, error_len, "cannot initialise the region lock: %s", strerror(rc));
    return false;
  }
  h.state.store(kRegionStateReady, std::memory_order_release);
  h.magic.store(kRegionMagic, std::memory_order_release);
  return true;
}

SharedRegion::~SharedRegion() {
  if (region_ != nullptr) munmap(region_, sizeof(Region));
  if (lock_fd_ >= 0) close(lock_fd_);
}

bool SharedRegion::open_private(char* error, size_t error_len) {
  void* p = mmap(nullptr, sizeof(Region), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    snprintf(error, error_len, "cannot map a private region: %s", strerror(errno));
    return false;
  }
  auto* r = static_cast<Region*>(p);
  if (!initialise_region(r, error, error_len)) {
    munmap(p, sizeof(Region));
    return false;
  }
  region_ = r;
  private_ = true;
  return true;
}

bool SharedRegion::open_file(const char* path, char* error, size_t error_len, bool create) {
  if (strlen(path) >= sizeof(path_)) {
    snprintf(error, error_len, "region path too long");
    return false;
  }
  snprintf(path_, sizeof(path_), "%s", path);
  if (create) make_parent_dirs(path);
  int fd = ::open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0666);
  if (fd < 0) {
    snprintf(error, error_len, "cannot open region %s: %s", path, strerror(errno));
    return false;
  }
  // flock serialises initialisation between processes starting together; the
  // kernel drops it if we die half-way, and the next opener re-initialises.
  while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  struct stat st {};
  bool ok = false;
  void* p = MAP_FAILED;
  if (fstat(fd, &st) != 0) {
    snprintf(error, error_len, "cannot stat region %s: %s", path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    snprintf(error, error_len, "region %s is not a regular file; refusing it", path);
  } else if (st.st_size != 0 && static_cast<uint64_t>(st.st_size) != sizeof(Region)) {
    snprintf(error, error_len,
             "region %s has size %lld, expected %zu (foreign or other version); refusing it", path,
             static_cast<long long>(st.st_size), sizeof(Region));
  } else {
    bool fresh = st.st_size == 0;
    if (fresh && !create) {
      snprintf(error, error_len, "region %s is empty (not initialised yet)", path);
    } else if (fresh && ftruncate(fd, sizeof(Region)) != 0) {
      snprintf(error, error_len, "cannot size region %s: %s", path, strerror(errno));
    } else {
      p = mmap(nullptr, sizeof(Region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        snprintf(error, error_len, "cannot map region %s: %s", path, strerror(errno));
      } else {
        auto* r = static_cast<Region*>(p);
        // A creator that died before writing the magic leaves an all-zero
        // header; only then may we (holding the flock) initialise it again.
        bool unfinished = r->header.magic.load(std::memory_order_acquire) == 0 &&
                          r->header.state.load(std::memory_order_acquire) == kRegionStateUninitialised &&
                          r->header.version == 0;
        if ((fresh || unfinished) && !create) {
          snprintf(error, error_len, "region %s is not initialised yet", path);
        } else if (fresh || unfinished) {
          if (unfinished && !fresh) memset(static_cast<void*>(r), 0, sizeof(Region));
          ok = initialise_region(r, error, error_len);
          if (ok) fchmod(fd, 0666);  // every user in the container shares it; failure is harmless
        } else if (const char* why = validate_region_header(r->header, static_cast<uint64_t>(st.st_size))) {
          snprintf(error, error_len, "region %s refused: %s", path, why);
        } else {
          ok = true;
          for (uint32_t i = 0; i < kRegionMaxDevices && ok; ++i) {
            if (!uuid_terminated(r->devices[i].uuid)) {
              snprintf(error, error_len, "region %s refused: device entry %u is corrupt", path, i);
              ok = false;
            }
          }
        }
      }
    }
  }
  flock(fd, LOCK_UN);
  if (!ok) {
    if (p != MAP_FAILED) munmap(p, sizeof(Region));
    close(fd);
    return false;
  }
  region_ = static_cast<Region*>(p);
  lock_fd_ = fd;
  private_ = false;
  return true;
}

bool SharedRegion::ensure_lock_fd() {
  if (private_) return true;
  if (lock_fd_ >= 0) return true;
  lock_fd_ = ::open(path_, O_RDWR | O_CLOEXEC);
  return lock_fd_ >= 0;
}

bool SharedRegion::lock() {
  pthread_mutex_t* m = region_mutex(region_);
  int rc = pthread_mutex_lock(m);
  if (rc == EOWNERDEAD) {
    // The previous holder died inside a critical section: the device sums may
    // be half-updated. The per-process slots are the source of truth.
    repair_sums_locked();
    pthread_mutex_consistent(m);
    log_event(LogLevel::kWarn, "region lock recovered from a dead holder; usage recomputed");
    return true;
  }
  if (rc != 0) {
    log_event(LogLevel::kError, "region lock unusable (%s)", strerror(rc));
    return false;
  }
  return true;
}

void SharedRegion::unlock() {
  pthread_mutex_unlock(region_mutex(region_));
}

void SharedRegion::repair_sums_locked() {
  for (uint32_t d = 0; d < kRegionMaxDevices; ++d) {
    uint64_t used = 0, spilled = 0;
    for (uint32_t i = 0; i < kRegionMaxProcesses; ++i) {
      ProcessSlot& s = region_->processes[i];
      if (s.state.load(std::memory_order_relaxed) != kSlotActive) continue;
      used += s.memory_used[d].load(std::memory_order_relaxed);
      spilled += s.memory_spilled[d].load(std::memory_order_relaxed);
    }
    region_->devices[d].memory_used.store(used, std::memory_order_relaxed);
    region_->devices[d].memory_spilled.store(spilled, std::memory_order_relaxed);
  }
  region_->header.change_seq.fetch_add(1, std::memory_order_relaxed);
}

bool SharedRegion::slot_owner_alive_locked(uint32_t index) {
  if (static_cast<int>(index) == slot_.load(std::memory_order_relaxed)) return true;
  if (private_) return true;  // forks sharing a private region: no way to tell; never reclaim
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(region_slot_lock_offset(index));
  fl.l_len = 1;
  if (!ensure_lock_fd() || fcntl(lock_fd_, F_OFD_GETLK, &fl) != 0) return true;  // unknown: assume alive
  return fl.l_type != F_UNLCK;
}

void SharedRegion::free_slot_locked(uint32_t index) {
  ProcessSlot& s = region_->processes[index];
  for (uint32_t d = 0; d < kRegionMaxDevices; ++d) {
    sub_saturating(region_->devices[d].memory_used, s.memory_used[d].load(std::memory_order_relaxed));
    sub_saturating(region_->devices[d].memory_spilled, s.memory_spilled[d].load(std::memory_order_relaxed));
    s.memory_used[d].store(0, std::memory_order_relaxed);
    s.memory_spilled[d].store(0, std::memory_order_relaxed);
    s.context_bytes[d].store(0, std::memory_order_relaxed);
    s.gpu_time_used_ns[d].store(0, std::memory_order_relaxed);
  }
  s.pid = 0;
  s.host_pid.store(0, std::memory_order_relaxed);
  s.state.store(kSlotFree, std::memory_order_release);
  region_->header.change_seq.fetch_add(1, std::memory_order_relaxed);
}

bool SharedRegion::claim_slot() {
  if (slot_.load(std::memory_order_acquire) >= 0) return true;
  if (region_ == nullptr) return false;
  std::lock_guard<std::mutex> guard(claim_mu_);
  if (slot_.load(std::memory_order_relaxed) >= 0) return true;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!private_ && !ensure_lock_fd()) return false;
    for (uint32_t i = 0; i < kRegionMaxProcesses; ++i) {
      ProcessSlot& s = region_->processes[i];
      if (s.state.load(std::memory_order_relaxed) == kSlotActive) continue;
      if (!private_) {
        // Take the liveness lock first: if we get it, nobody alive owns slot i.
        struct flock fl {};
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start = static_cast<off_t>(region_slot_lock_offset(i));
        fl.l_len = 1;
        if (fcntl(lock_fd_, F_OFD_SETLK, &fl) != 0) continue;
      }
      if (!lock()) return false;
      if (s.state.load(std::memory_order_relaxed) == kSlotActive) {
        if (private_) {
          unlock();
          continue;
        }
        free_slot_locked(i);  // we hold its liveness lock, so its owner is dead
      }
      s.pid = static_cast<uint32_t>(getpid());
      // Known only in the host's pid namespace; otherwise the node agent fills it in.
      s.host_pid.store(host_pid_of_self(), std::memory_order_relaxed);
      s.generation += 1;
      s.started_ns = now_ns(CLOCK_REALTIME);
      s.state.store(kSlotActive, std::memory_order_release);
      region_->header.change_seq.fetch_add(1, std::memory_order_relaxed);
      unlock();
      slot_.store(static_cast<int>(i), std::memory_order_release);
      return true;
    }
    if (reclaim_dead() == 0) break;
  }
  return false;
}

int SharedRegion::find_or_add_device(const char* uuid, uint64_t limit, uint64_t* existing_limit) {
  if (region_ == nullptr || uuid == nullptr || uuid[0] == '\0' || strlen(uuid) >= kRegionUuidBytes) return -1;
  if (!lock()) return -1;
  uint32_t count = region_->header.device_count.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < count; ++i) {
    DeviceEntry& e = region_->devices[i];
    if (strncmp(e.uuid, uuid, kRegionUuidBytes) == 0) {
      uint64_t have = e.memory_limit.load(std::memory_order_relaxed);
      unlock();
      if (existing_limit != nullptr) *existing_limit = have;
      return static_cast<int>(i);
    }
  }
  if (count >= kRegionMaxDevices) {
    unlock();
    return -1;
  }
  DeviceEntry& e = region_->devices[count];
  snprintf(e.uuid, sizeof(e.uuid), "%s", uuid);
  e.memory_limit.store(limit, std::memory_order_relaxed);
  region_->header.device_count.store(count + 1, std::memory_order_release);
  region_->header.change_seq.fetch_add(1, std::memory_order_relaxed);
  unlock();
  if (existing_limit != nullptr) *existing_limit = limit;
  return static_cast<int>(count);
}

void SharedRegion::set_authoritative_limit(int device, uint64_t limit, bool apply) {
  if (device < 0 || device >= static_cast<int>(kRegionMaxDevices)) return;
  if (apply && region_ != nullptr && lock()) {
    authority_[device].store(limit, std::memory_order_relaxed);
    authority_set_.fetch_or(1u << device, std::memory_order_release);
    region_->devices[device].memory_limit.store(limit, std::memory_order_relaxed);
    region_->header.change_seq.fetch_add(1, std::memory_order_relaxed);
    unlock();
    return;
  }
  authority_[device].store(limit, std::memory_order_relaxed);
  authority_set_.fetch_or(1u << device, std::memory_order_release);
}

uint32_t SharedRegion::verify_locked(int device) {
  uint32_t repaired = 0;
  DeviceEntry& e = region_->devices[device];
  if ((authority_set_.load(std::memory_order_acquire) & (1u << device)) != 0) {
    const uint64_t want = authority_[device].load(std::memory_order_relaxed);
    const uint64_t have = e.memory_limit.load(std::memory_order_relaxed);
    if (have != want) {
      e.memory_limit.store(want, std::memory_order_relaxed);
      repaired |= kRepairedLimit;
      log_event(LogLevel::kError,
                "region %s: the memory limit of %s was changed from outside libvgpu (%llu bytes, this "
                "process's limit is %llu); restored",
                path_, e.uuid, static_cast<unsigned long long>(have), static_cast<unsigned long long>(want));
    }
  }
  const int own = slot_.load(std::memory_order_relaxed);
  if (own >= 0 && !private_) {
    // Freed from outside (its liveness lock given up, then reclaimed, or its
    // state cleared): taken back, lock included, unless another process
    // claimed it meanwhile.
    ProcessSlot& slot = region_->processes[own];
    if (slot.state.load(std::memory_order_relaxed) != kSlotActive) {
      struct flock fl {};
      fl.l_type = F_WRLCK;
      fl.l_whence = SEEK_SET;
      fl.l_start = static_cast<off_t>(region_slot_lock_offset(static_cast<uint32_t>(own)));
      fl.l_len = 1;
      if (ensure_lock_fd()) fcntl(lock_fd_, F_OFD_SETLK, &fl);
      slot.pid = static_cast<uint32_t>(getpid());
      slot.host_pid.store(host_pid_of_self(), std::memory_order_relaxed);
      slot.state.store(kSlotActive, std::memory_order_release);
      repaired |= kRepairedOwnSlot;
      log_event(LogLevel::kError,
                "region %s: this process's slot %d was freed from outside libvgpu; taken back", path_, own);
    } else if (slot.pid != static_cast<uint32_t>(getpid())) {
      log_event(LogLevel::kError, "region %s: this process's slot %d is held by process %u", path_, own,
                slot.pid);
    }
  }
  if (own >= 0) {
    std::atomic<uint64_t>& mine = region_->processes[own].memory_used[device];
    const uint64_t have = mine.load(std::memory_order_relaxed);
    const uint64_t want = own_used_[device].load(std::memory_order_relaxed);
    if (have != want) {
      mine.store(want, std::memory_order_relaxed);
      repaired |= kRepairedOwnSlot;
      log_event(LogLevel::kError,
                "region %s: this process's usage of %s was changed from outside libvgpu (%llu bytes, it "
                "reserved %llu); restored",
                path_, e.uuid, static_cast<unsigned long long>(have), static_cast<unsigned long long>(want));
    }
  }
  // The sum against the live slots. The scan (every slot) is skipped when
  // nothing moved since this process's own last operation: the same change
  // counter and the same sum it left. Anything written from outside changes
  // one of the two (or else it did not touch the sum).
  const uint64_t sum = e.memory_used.load(std::memory_order_relaxed);
  if (region_->header.change_seq.load(std::memory_order_relaxed) !=
          seen_seq_.load(std::memory_order_relaxed) ||
      sum != seen_sum_[device].load(std::memory_order_relaxed)) {
    uint64_t slots = 0;
    for (uint32_t i = 0; i < kRegionMaxProcesses; ++i) {
      const ProcessSlot& p = region_->processes[i];
      if (p.state.load(std::memory_order_relaxed) == kSlotActive)
        slots += p.memory_used[device].load(std::memory_order_relaxed);
    }
    if (slots > sum) {
      e.memory_used.store(slots, std::memory_order_relaxed);
      repaired |= kRepairedSum;
      log_event(LogLevel::kError,
                "region %s: the usage sum of %s was changed from outside libvgpu (%llu bytes, its processes "
                "hold %llu); recomputed",
                path_, e.uuid, static_cast<unsigned long long>(sum), static_cast<unsigned long long>(slots));
    } else if (slots < sum) {
      // Lowered records: the sum, the larger figure, stands (the driver's
      // figures are consulted on this doubt).
      repaired |= kRepairedSum;
      log_event(LogLevel::kError,
                "region %s: the usage records of %s's processes were changed from outside libvgpu (they say "
                "%llu bytes, the sum %llu); the sum stands",
                path_, e.uuid, static_cast<unsigned long long>(slots), static_cast<unsigned long long>(sum));
    }
  }
  if (repaired != 0) region_->header.change_seq.fetch_add(1, std::memory_order_relaxed);
  note_seen_locked(device);
  return repaired;
}

void SharedRegion::note_seen_locked(int device) {
  seen_seq_.store(region_->header.change_seq.load(std::memory_order_relaxed), std::memory_order_relaxed);
  seen_sum_[device].store(region_->devices[device].memory_used.load(std::memory_order_relaxed),
                          std::memory_order_relaxed);
}

uint32_t SharedRegion::verify(int device) {
  if (region_ == nullptr || device < 0 || device >= static_cast<int>(kRegionMaxDevices)) return 0;
  if (!lock()) return 0;
  const uint32_t repaired = verify_locked(device);
  unlock();
  return repaired;
}

bool SharedRegion::others_active() {
  if (region_ == nullptr) return false;
  const int own = slot_.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < kRegionMaxProcesses; ++i) {
    if (static_cast<int>(i) == own ||
        region_->processes[i].state.load(std::memory_order_relaxed) != kSlotActive)
      continue;
    if (slot_owner_alive_locked(i)) return true;  // a dead process's slot awaiting reclaim does not count
  }
  return false;
}

ReserveOutcome SharedRegion::reserve(int device, uint64_t bytes, bool force) {
  ReserveOutcome out;
  if (region_ == nullptr || device < 0 || device >= static_cast<int>(kRegionMaxDevices)) {
    out.ok = true;  // not a device we account (no entry): nothing to enforce
    return out;
  }
  if (slot_.load(std::memory_order_acquire) < 0 && !claim_slot()) {
    log_event(LogLevel::kError, "no free process slot in the region; refusing the allocation");
    return out;
  }
  DeviceEntry& e = region_->devices[device];
  ProcessSlot& s = region_->processes[slot_.load(std::memory_order_relaxed)];
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!lock()) return out;
    out.repaired |= verify_locked(device);
    uint64_t used = e.memory_used.load(std::memory_order_relaxed);
    uint64_t limit = e.memory_limit.load(std::memory_order_relaxed);
    out.used = used;
    out.limit = limit;
    bool fits = force || limit == 0 || (bytes <= limit && used <= limit - bytes);
    if (fits) {
      // Slot first, then the sum: repair_sums_locked() rebuilds the sum from
      // the slots if we die between the two.
      own_used_[device].fetch_add(bytes, std::memory_order_relaxed);
      s.memory_used[device].fetch_add(bytes, std::memory_order_relaxed);
      uint64_t now_used = used + bytes;
      e.memory_used.store(now_used, std::memory_order_relaxed);
      if (now_used > e.memory_peak.load(std::memory_order_relaxed))
        e.memory_peak.store(now_used, std::memory_order_relaxed);
      region_->header.change_seq.fetch_add(1, std::memory_order_relaxed);
      note_seen_locked(device);
      unlock();
      out.ok = true;
      return out;
    }
    unlock();
    if (attempt == 0 && reclaim_dead() == 0) break;
  }
  e.oom_refusals.fetch_add(1, std::memory_order_relaxed);
  return out;
}

void SharedRegion::release(int device, uint64_t bytes) {
  if (region_ == nullptr || slot_ < 0 || device < 0 || device >= static_cast<int>(kRegionMaxDevices)) return;
  DeviceEntry& e = region_->devices[device];
  ProcessSlot& s = region_->processes[slot_];
  if (!lock()) return;
  // This process's own record, not its slot in the file, says what it holds.
  uint64_t mine = own_used_[device].load(std::memory_order_relaxed);
  uint64_t give = bytes < mine ? bytes : mine;
  own_used_[device].store(mine - give, std::memory_order_relaxed);
  s.memory_used[device].store(mine - give, std::memory_order_relaxed);
  sub_saturating(e.memory_used, give);
  region_->header.change_seq.fetch_add(1, std::memory_order_relaxed);
  note_seen_locked(device);
  unlock();
}

void SharedRegion::note_context_bytes(int device, int64_t delta) {
  if (region_ == nullptr || slot_ < 0 || device < 0 || device >= static_cast<int>(kRegionMaxDevices)) return;
  region_->processes[slot_].context_bytes[device].fetch_add(static_cast<uint64_t>(delta),
                                                            std::memory_order_relaxed);
}

void SharedRegion::note_spilled_bytes(int device, int64_t delta) {
  if (region_ == nullptr || slot_ < 0 || device < 0 || device >= static_cast<int>(kRegionMaxDevices)) return;
  if (!lock()) return;
  region_->processes[slot_].memory_spilled[device].fetch_add(static_cast<uint64_t>(delta),
                                                             std::memory_order_relaxed);
  region_->devices[device].memory_spilled.fetch_add(static_cast<uint64_t>(delta), std::memory_order_relaxed);
  unlock();
}

uint32_t SharedRegion::slot_driver_pid(uint32_t index) const {
  if (region_ == nullptr || index >= kRegionMaxProcesses) return 0;
  const ProcessSlot& s = region_->processes[index];
  if (s.state.load(std::memory_order_acquire) != kSlotActive) return 0;
  uint64_t host = s.host_pid.load(std::memory_order_relaxed);
  return host != 0 ? static_cast<uint32_t>(host) : s.pid;
}

uint32_t SharedRegion::own_driver_pid() const {
  int slot = slot_.load(std::memory_order_acquire);
  if (region_ != nullptr && slot >= 0) {
    uint64_t host = region_->processes[slot].host_pid.load(std::memory_order_relaxed);
    if (host != 0) return static_cast<uint32_t>(host);
  }
  return static_cast<uint32_t>(getpid());
}

int SharedRegion::slot_for_driver_pid(uint32_t pid) const {
  if (region_ == nullptr || pid == 0) return -1;
  int own = slot_.load(std::memory_order_acquire);
  if (own >= 0 && own_driver_pid() == pid) return own;
  for (uint32_t i = 0; i < kRegionMaxProcesses; ++i) {
    if (static_cast<int>(i) != own && slot_driver_pid(i) == pid) return static_cast<int>(i);
  }
  return -1;
}

bool SharedRegion::slot_owner_alive(uint32_t index) {
  if (region_ == nullptr || index >= kRegionMaxProcesses) return false;
  return slot_owner_alive_locked(index);  // needs no region lock: one fcntl
}

uint64_t SharedRegion::memory_limit(int device) const {
  if (region_ == nullptr || device < 0 || device >= static_cast<int>(kRegionMaxDevices)) return 0;
  if ((authority_set_.load(std::memory_order_acquire) & (1u << device)) != 0)
    return authority_[device].load(std::memory_order_relaxed);
  return region_->devices[device].memory_limit.load(std::memory_order_relaxed);
}

uint64_t SharedRegion::memory_used(int device) const {
  if (region_ == nullptr || device < 0 || device >= static_cast<int>(kRegionMaxDevices)) return 0;
  return region_->devices[device].memory_used.load(std::memory_order_relaxed);
}

uint64_t SharedRegion::process_memory_used(int device) const {
  if (region_ == nullptr || slot_ < 0 || device < 0 || device >= static_cast<int>(kRegionMaxDevices))
    return 0;
  return own_used_[device].load(std::memory_order_relaxed);
}

int SharedRegion::reclaim_dead() {
  if (region_ == nullptr || private_) return 0;
  // Find candidates without the region lock (one fcntl each), then confirm
  // under it: a slot being claimed has its liveness lock taken before it is
  // marked active, so a confirmed unlocked active slot is truly orphaned.
  int reclaimed = 0;
  uint32_t next = 0;
  while (next < kRegionMaxProcesses) {
    uint32_t candidates[64];
    uint32_t n = 0;
    for (; next < kRegionMaxProcesses && n < 64; ++next) {
      if (region_->processes[next].state.load(std::memory_order_relaxed) != kSlotActive) continue;
      if (!slot_owner_alive_locked(next)) candidates[n++] = next;
    }
    if (n == 0) break;
    if (!lock()) break;
    for (uint32_t k = 0; k < n; ++k) {
      uint32_t i = candidates[k];
      if (region_->processes[i].state.load(std::memory_order_relaxed) != kSlotActive) continue;
      if (slot_owner_alive_locked(i)) continue;
      uint32_t pid = region_->processes[i].pid;
      free_slot_locked(i);
      ++reclaimed;
      log_event(LogLevel::kInfo, "reclaimed the memory of dead process %u (slot %u)", pid, i);
    }
    unlock();
  }
  return reclaimed;
}

void SharedRegion::reclaim_dead_throttled(uint64_t interval_ns) {
  uint64_t now = now_ns(CLOCK_MONOTONIC);
  uint64_t last = last_reclaim_ns_.load(std::memory_order_relaxed);
  if (last != 0 && now - last < interval_ns) return;
  if (!last_reclaim_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  reclaim_dead();
}

void SharedRegion::after_fork_child() {
  // Closing our copy of the descriptor leaves the parent's liveness lock in
  // place (it belongs to the open file description, which the parent holds).
  if (lock_fd_ >= 0) close(lock_fd_);
  lock_fd_ = -1;
  slot_.store(-1, std::memory_order_relaxed);
  new (&claim_mu_) std::mutex();  // a thread of the parent may have held it at fork
  last_reclaim_ns_.store(0, std::memory_order_relaxed);
  for (auto& used : own_used_) used.store(0, std::memory_order_relaxed);
  seen_seq_.store(~0ull, std::memory_order_relaxed);
}

}  // namespace tessera::vgpu
