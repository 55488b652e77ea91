// JobWatch: `tessera run`'s enforcement of last resort, the job's own
// tessera-node (docs/security.md). libvgpu inside the job holds it to the
// limits file `tessera run` wrote; a job can get around libvgpu (a static
// binary, LD_PRELOAD cleared) and, being the file's owner, can make the file
// writable and change it. From the supervising `tessera run` process, every
// interval, the watch
//   1. puts the limits file back (content and mode 0444) when it differs from
//      what `tessera run` wrote, and says so;
//   2. samples the GPUs (NVML) and, per GPU of the slice, adds up the device
//      memory of the job's processes — every descendant of the supervisor,
//      which is made a child subreaper so that processes the job detaches
//      stay its descendants — and when the sum passes the slice by more than
//      the tolerance, kills (SIGKILL) processes until the rest fits: first
//      those whose memory libvgpu did not account (the job's region), then
//      the largest. Each kill is reported with why;
//   3. per GPU of the slice with a compute quota, adds up the job's SM
//      utilisation (NVML, per process) and judges it as tessera-node judges a
//      container (host/compute_check.h): over quota + tolerance while another
//      tenant used the GPU or a busy process of the job runs without
//      libvgpu, for compute_window_passes passes in a row, kills the
//      offenders (those libvgpu does not know first, then the busiest) until
//      the rest is within the quota.
//
// It guards against a job that means to get around its slice, not against the
// machine's user, who can run the program without `tessera run` at all.
//
// Thread-safety: Start/Stop from one thread; PassOnce (tests) not concurrently
// with Start; counters from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/periodic_thread.h"
#include "host/inventory.h"
#include "runner/local_gpus.h"
#include "runner/run_job.h"

namespace tessera::runner {

// One process of the job on one GPU.
struct JobProcessUsage {
  uint32_t pid = 0;
  uint64_t used_bytes = 0;       // the driver's figure
  uint64_t accounted_bytes = 0;  // what libvgpu accounted for it (0 without libvgpu)
};

// Pure: the processes to kill so that the rest fits `limit_bytes`; none when
// the sum is within limit + tolerance. Order: most unaccounted memory first,
// then most memory, then lowest pid.
std::vector<JobProcessUsage> ChooseOffenders(std::vector<JobProcessUsage> processes, uint64_t limit_bytes,
                                             uint64_t tolerance_bytes);

// Pure: the descendants of `root` (not `root` itself) in a pid → parent map.
std::set<uint32_t> Descendants(uint32_t root, const std::map<uint32_t, uint32_t>& parent_of);
// pid → parent pid of every process under `proc` (/proc); unreadable entries are skipped.
std::map<uint32_t, uint32_t> ReadParents(const std::string& proc = "/proc");

struct JobWatchOptions {
  std::chrono::milliseconds interval{1000};
  uint64_t tolerance_bytes = 64ull << 20;
  std::string limits_path;                        // the job's limits file
  std::string limits_text;                        // what it must hold
  std::string region_path;                        // the job's region (libvgpu's accounting)
  std::map<std::string, uint64_t> memory_limits;  // GPU uuid -> the slice's bytes (0 = none)
  std::map<std::string, int> core_quotas;         // GPU uuid -> the slice's cores (0 or 100 = none)
  int compute_tolerance_percent = 10;             // as tessera-node's defaults
  int compute_window_passes = 3;
  uint32_t root_pid = 0;  // the supervisor: the job is its descendants
  std::string proc_root = "/proc";
};

class JobWatch {
 public:
  using Report = std::function<void(const std::string& line)>;
  using Killer = std::function<bool(uint32_t pid)>;  // true when the signal was sent
  // `gpus` (Discover already called; null: only the limits file is kept)
  // must outlive the watch. `kill` defaults to SIGKILL.
  JobWatch(JobWatchOptions options, host::InventorySource* gpus, Report report, Killer kill = nullptr);
  ~JobWatch();
  JobWatch(const JobWatch&) = delete;
  JobWatch& operator=(const JobWatch&) = delete;

  void Start() { thread_.Start(); }
  void Stop() { thread_.Stop(); }
  void PassOnce();

  uint64_t passes() const { return passes_.load(); }
  uint64_t kills() const { return kills_.load(); }
  uint64_t restores() const { return restores_.load(); }

 private:
  void RestoreLimitsFile();
  void CheckCompute(const host::GpuSample& gpu, const std::set<uint32_t>& job,
                    const std::set<uint32_t>& in_region);

  const JobWatchOptions options_;
  host::InventorySource* const gpus_;
  const Report report_;
  const Killer kill_;
  std::atomic<uint64_t> passes_{0}, kills_{0}, restores_{0};
  std::map<std::string, int> compute_over_;  // GPU uuid -> passes over the quota in a row (watch thread)
  PeriodicThread thread_;                    // last: stopped first
};

// What `tessera run` runs beside a job in a libvgpu slice: the watch over
// this machine's NVML (the simulated one in simulated mode), its supervisor
// made a child subreaper. Null with a line on stderr when NVML cannot be
// opened (the limits file is then still kept).
struct RunningJobWatch {
  std::unique_ptr<host::InventorySource> gpus;
  std::unique_ptr<JobWatch> watch;
};
std::unique_ptr<RunningJobWatch> StartJobWatch(const ReservedSlice& slice, const LocalGpus& local);

}  // namespace tessera::runner
