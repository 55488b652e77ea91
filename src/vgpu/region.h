// SharedRegion: one container's memory ledger, shared by all of its processes
// through a file mapped MAP_SHARED (layout in region_layout.h).
//
// Contract:
//  - Memory is reserved before the driver is asked for it: reserve() adds the
//    request to this process's slot and to the container's sum for that device
//    atomically (under the region's robust mutex) only if it fits the limit.
//    release() gives it back. Two processes racing cannot jointly pass a limit.
//  - A process that dies holding reservations gives them back: its slot's
//    liveness lock (an open-file-description lock) is dropped by the kernel, and
//    reclaim_dead() — run by any process before refusing an allocation and
//    periodically from the memory views — returns the slot's bytes.
//  - A file that is not a valid region (foreign, corrupt, other version) is
//    refused, never trusted.
//
// Thread-safety: every method may be called from any thread. No method throws,
// allocates on the heap, or calls exit(). Errors come back as values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "vgpu/region_layout.h"

namespace tessera::vgpu {

// What a check of the shared file found changed from outside libvgpu's code
// and put right (ReserveOutcome::repaired, SharedRegion::verify). The file is
// writable by every process of the container, a hostile one included
// (docs/security.md); each check logs what it repaired.
inline constexpr uint32_t kRepairedLimit =
    1;  // memory_limit differed from this process's authoritative limit
inline constexpr uint32_t kRepairedOwnSlot = 2;  // this process's slot differed from its own record
// The device's sum differed from the sum of the live slots: raised to it when
// lower; left when higher (the slots were lowered), which is reported too.
inline constexpr uint32_t kRepairedSum = 4;

struct ReserveOutcome {
  bool ok = false;
  uint64_t limit = 0;     // the device's limit at the time of the decision (0 = unlimited)
  uint64_t used = 0;      // container-wide usage before the request
  uint32_t repaired = 0;  // kRepaired* bits: found tampered with, and restored, before deciding
};

class SharedRegion {
 public:
  SharedRegion() = default;
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  // Opens the region file at `path`, creating and initialising it when it does
  // not exist or is empty (the parent directory is created if missing). With
  // `create` false (a reader such as the node agent), an absent, empty or
  // unfinished file is an error instead and nothing is created. On failure
  // returns false and writes a human-readable reason into `error`.
  bool open_file(const char* path, char* error, size_t error_len, bool create = true);

  // A region in anonymous memory, private to this process (and its forks).
  // Used when the region file is refused, so limits still hold per process.
  bool open_private(char* error, size_t error_len);

  bool is_open() const { return region_ != nullptr; }
  bool is_private() const { return private_; }
  Region* raw() const { return region_; }

  // Claims a process slot for the calling process (idempotent). Returns false
  // when every slot is held by a live process.
  bool claim_slot();
  int slot_index() const { return slot_.load(std::memory_order_acquire); }

  // Finds the entry for `uuid`, adding it with `limit` when absent. When the
  // entry exists with a different limit, the region's value is kept (every
  // process of a container is configured alike; the first one wins) and
  // *existing_limit reports it. Returns -1 when the device table is full.
  int find_or_add_device(const char* uuid, uint64_t limit, uint64_t* existing_limit = nullptr);

  // The limit this process holds `device` to, from a source the other
  // processes cannot write (the limits file, or this process's own
  // configuration). Once set, memory_limit() answers it, and every reserve()
  // and verify() restores the region's memory_limit to it when they differ.
  // With `apply`, the region's memory_limit is set to it at once (a limit
  // this process was given anew, not a repair).
  void set_authoritative_limit(int device, uint64_t limit, bool apply = false);

  // Reserves `bytes` on device `device` for this process. With `force`, the
  // limit is not checked (used for memory the driver already handed out).
  // Retries once after reclaiming dead processes when the request does not fit.
  // Before deciding, checks the device's entry as verify() does.
  ReserveOutcome reserve(int device, uint64_t bytes, bool force = false);
  // Checks, under the region lock, what a process writing the file directly
  // could have changed: the device's memory_limit against the authoritative
  // limit, this process's slot against its private record of what it
  // reserved, and the device's sum against the sum of the live slots; puts
  // each right and logs it. Returns the kRepaired* bits.
  uint32_t verify(int device);
  // Whether another live process holds a slot (its liveness lock taken).
  bool others_active();
  // Returns bytes reserved by this process. Never underflows.
  void release(int device, uint64_t bytes);
  // Marks `bytes` of this process's usage as context overhead / spilled
  // (informational breakdown; they stay included in memory_used).
  void note_context_bytes(int device, int64_t delta);
  void note_spilled_bytes(int device, int64_t delta);

  // Matching NVML's per-process data (which names processes by their pid in
  // the driver's, i.e. the host's, pid namespace) to the region's slots:
  // a slot's process is reported under its host_pid when that is known
  // (non-zero), else under its container pid (right only when the container
  // shares the host's pid namespace).
  //
  // The pid NVML reports for slot `index`'s process (0 for a free slot).
  uint32_t slot_driver_pid(uint32_t index) const;
  // The pid NVML reports for the calling process: its slot's host_pid, else getpid().
  uint32_t own_driver_pid() const;
  // The active slot whose process NVML reports as `pid`, or -1.
  int slot_for_driver_pid(uint32_t pid) const;
  // Whether the process owning slot `index` is alive (its liveness lock is held).
  bool slot_owner_alive(uint32_t index);

  uint64_t memory_limit(int device) const;
  uint64_t memory_used(int device) const;
  uint64_t process_memory_used(int device) const;  // this process's share

  // Frees the slots of processes that have died, returning their bytes.
  // Returns how many slots were reclaimed.
  int reclaim_dead();
  // Like reclaim_dead() but at most once per `interval_ns` per process.
  void reclaim_dead_throttled(uint64_t interval_ns);

  // Call in the child after fork(): the child owns no reservations and must
  // claim its own slot (the parent's liveness lock stays the parent's).
  void after_fork_child();

 private:
  bool lock();
  void unlock();
  void repair_sums_locked();
  uint32_t verify_locked(int device);
  void note_seen_locked(int device);
  bool slot_owner_alive_locked(uint32_t index);
  void free_slot_locked(uint32_t index);
  bool ensure_lock_fd();

  Region* region_ = nullptr;
  bool private_ = false;
  int lock_fd_ = -1;           // open file description carrying this process's liveness lock
  std::atomic<int> slot_{-1};  // written once per process under claim_mu_
  std::mutex claim_mu_;
  char path_[512] = {};
  std::atomic<uint64_t> last_reclaim_ns_{0};
  // This process's own record of what it reserved per device: its slot in the
  // file should say the same (verify_locked). Written under the region lock.
  std::atomic<uint64_t> own_used_[kRegionMaxDevices] = {};
  // set_authoritative_limit(); authority_set_ bit d says whether device d has one.
  std::atomic<uint64_t> authority_[kRegionMaxDevices] = {};
  std::atomic<uint32_t> authority_set_{0};
  // The change counter and the per-device sums as this process's own last
  // locked operation left them: verify_locked() scans the slots only when
  // they moved. ~0 = not seen yet.
  std::atomic<uint64_t> seen_seq_{~0ull};
  std::atomic<uint64_t> seen_sum_[kRegionMaxDevices] = {};
};

// Initialises a zeroed Region in place (header, robust mutex). Exposed for the
// node agent's tests and for open_private.
bool initialise_region(Region* region, char* error, size_t error_len);

}  // namespace tessera::vgpu
