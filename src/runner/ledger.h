// SliceLedger: the node-local record of which GPU slices `tessera run` jobs
// hold, so that concurrent invocations on one machine never overcommit a GPU.
//
// The ledger is a JSON file guarded by an flock(2) on a sibling lock file.
// Every mutation runs as one critical section: lock, read, drop entries whose
// processes are gone, change, write to a temp file, rename, unlock. flock is
// released by the kernel when its holder dies, so a crashed `tessera run`
// never wedges the others, and its slice is freed by the next reader because
// its processes are no longer alive.
//
// An entry of a `tessera run --mig` job names a MIG instance that outlives a
// crashed runner on the GPU. Such an entry is not dropped when its holders
// are gone: it stays, orphaned (IsOrphaned), until a caller that can reach
// the GPU destroys the instance (mig_job.h: CleanOrphanedInstances).
//
// Thread-safety: one SliceLedger may be used from several threads; each call is
// serialised by the file lock (and therefore also across processes).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "core/allocation.h"

namespace tessera::runner {

// A process identity that survives pid reuse: the pid plus its start time in
// clock ticks since boot (field 22 of /proc/<pid>/stat).
struct ProcessId {
  pid_t pid = 0;
  uint64_t start_ticks = 0;
  bool operator==(const ProcessId&) const = default;
};

// The identity of the calling process.
ProcessId SelfProcessId();
// Identity of `pid`, or an error when it does not exist.
Result<ProcessId> LookupProcessId(pid_t pid);
// True while that exact process (not a later one with the same pid) runs.
bool IsAlive(const ProcessId& id);

// The MIG instance of a `tessera run --mig` job: recorded (with its
// placement) before the instance is created, so that a placement is never
// given twice and a runner that dies while creating leaves a record to clean.
struct MigInstanceRecord {
  std::string parent_uuid;  // the GPU the instance is on
  int gpu_index = 0;        // its NVML index when reserved
  std::string profile;      // "1g.10gb"
  uint32_t profile_id = 0;  // nvmlGpuInstanceProfileInfo_t::id
  uint32_t start = 0;       // placement, in memory slices
  uint32_t size = 0;
  bool created = false;  // the instance exists; the members below are set
  uint32_t gpu_instance_id = 0;
  std::string mig_uuid;  // "MIG-..." the job is given
  uint64_t memory_mib = 0;
  uint32_t sm_count = 0;
  bool operator==(const MigInstanceRecord&) const = default;
};

struct LedgerEntry {
  std::string job_id;                    // unique, e.g. "job-3f2a1c"
  std::vector<std::string> command;      // argv of the job, for `tessera ps`
  std::vector<ProcessId> holders;        // the slice is held while any is alive
  core::ContainerAllocation slices;      // devices with memory MiB and cores %
  std::string region_path;               // the job's libvgpu region file
  int64_t started_unix = 0;              // seconds since the epoch
  std::string core_policy;               // --core-policy of the job; empty in entries of older tessera
  std::optional<MigInstanceRecord> mig;  // a --mig job's instance (its `slices` are then empty)
  bool operator==(const LedgerEntry&) const = default;
};

// True while some holder of `e` runs.
bool AnyHolderAlive(const LedgerEntry& e);
// An entry of a MIG job whose holders are all gone: its instance is left to destroy.
bool IsOrphaned(const LedgerEntry& e);

// A new job's entry: a new id ("job-" and 8 hex digits), `command`, the
// calling process as its holder, started now.
LedgerEntry NewEntry(const std::vector<std::string>& command);

class SliceLedger {
 public:
  // `dir` holds ledger.json and ledger.lock; it is created (0755) if missing.
  explicit SliceLedger(std::string dir);

  const std::string& dir() const { return dir_; }

  // Runs `mutate` on the live entries (dead ones already dropped, orphaned
  // MIG entries kept) under the lock, then writes the result. If `mutate` returns an error nothing is
  // written and the error is returned. A corrupt ledger file is never
  // overwritten: the error names the file and what is wrong with it.
  Status Update(const std::function<Status(std::vector<LedgerEntry>&)>& mutate);

  // The live and orphaned entries (dead ones dropped, and the drop persisted).
  Result<std::vector<LedgerEntry>> List();

  // Removes the entry of `job_id` if present.
  Status Remove(const std::string& job_id);

 private:
  std::string dir_;
};

}  // namespace tessera::runner
