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
// Thread-safety: one SliceLedger may be used from several threads; each call is
// serialised by the file lock (and therefore also across processes).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
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

struct LedgerEntry {
  std::string job_id;                // unique, e.g. "job-3f2a1c"
  std::vector<std::string> command;  // argv of the job, for `tessera ps`
  std::vector<ProcessId> holders;    // the slice is held while any is alive
  core::ContainerAllocation slices;  // devices with memory MiB and cores %
  std::string region_path;           // the job's libvgpu region file
  int64_t started_unix = 0;          // seconds since the epoch
  std::string core_policy;           // --core-policy of the job; empty in entries of older tessera
  bool operator==(const LedgerEntry&) const = default;
};

class SliceLedger {
 public:
  // `dir` holds ledger.json and ledger.lock; it is created (0755) if missing.
  explicit SliceLedger(std::string dir);

  const std::string& dir() const { return dir_; }

  // Runs `mutate` on the live entries (dead ones already dropped) under the
  // lock, then writes the result. If `mutate` returns an error nothing is
  // written and the error is returned. A corrupt ledger file is never
  // overwritten: the error names the file and what is wrong with it.
  Status Update(const std::function<Status(std::vector<LedgerEntry>&)>& mutate);

  // The live entries (dead ones dropped, and the drop persisted).
  Result<std::vector<LedgerEntry>> List();

  // Removes the entry of `job_id` if present.
  Status Remove(const std::string& job_id);

 private:
  std::string dir_;
};

}  // namespace tessera::runner
