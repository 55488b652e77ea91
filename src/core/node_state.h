// NodeState: the scheduler's view of one node — its GPUs, what is already
// placed on them, and (optionally) the node's host CPU and memory.
//
// The placement engine (fit.h, policy.h) reads it; Apply/Release account a
// PodAllocation (a running pod or a reservation) into it. No I/O.
//
// Thread-safety: a plain value. Concurrent readers are fine; a writer needs
// exclusive access (the Placer serialises its own writes).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/result.h"
#include "core/allocation.h"
#include "core/device.h"

namespace tessera::core {

// What is in use on one GPU.
struct GpuUsage {
  int64_t memory_mib = 0;
  int cores = 0;           // percent of compute
  int slots = 0;           // vGPUs placed on it
  bool exclusive = false;  // a vGPU with cores = 100 holds it alone
  bool operator==(const GpuUsage&) const = default;
};

struct GpuState {
  Gpu gpu;
  GpuUsage used;

  int64_t free_memory_mib() const { return gpu.memory_mib - used.memory_mib; }
  int free_cores() const { return gpu.cores - used.cores; }
  int free_slots() const { return gpu.slots - used.slots; }
  bool idle() const { return used.slots == 0; }
  // Free share of the GPU in milli-GPU (0..1000): the scarcer of free memory
  // and free compute, 0 when held exclusively, unhealthy or out of slots. The
  // scoring policies reason in this unit (the trace benchmark's unit).
  int free_milli() const;
  // free_milli() once `added` is placed on the GPU too: what a policy asks of
  // every candidate, so it reads the GPU in place instead of copying it.
  int free_milli_with(const GpuUsage& added) const;
  // Why more is placed on the GPU than it offers ("" when it is not): memory,
  // compute or vGPU slots over capacity, or an exclusive slice beside others.
  // Only NodeState::Account can get a GPU there.
  std::string Overcommit() const;
};

// The fields of one GPU that the fit check and the scoring policies read for
// every GPU of every node, side by side: a GpuState spans several cache lines,
// mostly strings and lists those reads never touch, and over 5,000 nodes × 8
// GPUs reading it was most of a cold filter's or prioritize's time. NodeState
// keeps one per GPU in step with gpus() (rebuilt on every change of usage or
// health); each field is the GpuState value named beside it.
struct GpuFitView {
  int64_t memory_mib = 0;       // gpu.memory_mib
  int64_t free_memory_mib = 0;  // free_memory_mib()
  int cores = 0;                // gpu.cores
  int free_cores = 0;           // free_cores()
  int slots = 0;                // gpu.slots
  int slots_used = 0;           // used.slots
  int free_milli = 0;           // free_milli()
  bool usable = false;          // gpu.usable()
  bool exclusive = false;       // used.exclusive
  bool mps = false;             // gpu.mode == SharingMode::kMps
  // GpuState::free_milli_with, the same value (its arithmetic on these
  // fields; inline: the policies call it for every candidate GPU).
  int free_milli_with(const GpuUsage& added) const {
    if (!usable || exclusive || added.exclusive || slots - slots_used - added.slots <= 0) return 0;
    const int free_cores_after = free_cores - added.cores > 0 ? free_cores - added.cores : 0;
    const int by_cores = cores > 0 ? static_cast<int>(free_cores_after * 1000LL / cores) : 0;
    if (memory_mib <= 0) return by_cores;
    const int64_t free_memory_after =
        free_memory_mib - added.memory_mib > 0 ? free_memory_mib - added.memory_mib : 0;
    const int64_t by_memory = free_memory_after * 1000 / memory_mib;
    return static_cast<int>(by_memory < by_cores ? by_memory : by_cores);
  }
};

// Host resources of a node (or asked by a pod). 0 capacity = not tracked.
struct HostResources {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  bool operator==(const HostResources&) const = default;
};

// The kind of GPU workload a pod is, used by policies that group alike pods
// (GPU clustering): 0 = shares a GPU, d = d whole GPUs, -1 = no GPU.
int WorkloadTagOf(const PodAllocation& allocation, const std::vector<GpuState>& gpus);

// GPUs summed, for the views that show a node's or a cluster's capacity next
// to what is allocated of it (the dashboard, kubectl tessera top). GPUs whose
// replicas kube-scheduler counts (timeslice, MPS with replicas) are counted
// in gpus/healthy and in replica_gpus/replicas, not in memory, cores or slots:
// tessera allocates nothing there, so they would read as free capacity.
struct GpuTotals {
  int64_t gpus = 0, healthy = 0;
  int64_t memory_mib = 0, memory_allocated_mib = 0;
  int64_t cores = 0, cores_allocated = 0;  // percent of one GPU's compute, summed
  int64_t slots = 0, slots_used = 0;
  int64_t replica_gpus = 0, replicas = 0;
  void Add(const GpuState& g);
};
GpuTotals TotalsOf(const std::vector<GpuState>& gpus);

class NodeState {
 public:
  NodeState() = default;
  // `host_capacity` with zero fields means that resource is not checked.
  NodeState(std::string name, std::vector<Gpu> gpus, HostResources host_capacity = {});

  const std::string& name() const { return name_; }
  const std::vector<GpuState>& gpus() const { return gpus_; }
  // gpus() as the fit check and the policies read them, by the same index.
  const std::vector<GpuFitView>& gpu_views() const { return views_; }
  const HostResources& host_capacity() const { return host_capacity_; }
  const HostResources& host_used() const { return host_used_; }
  bool tracks_cpu() const { return host_capacity_.cpu_milli > 0; }
  bool tracks_memory() const { return host_capacity_.memory_mib > 0; }
  int64_t free_cpu_milli() const { return host_capacity_.cpu_milli - host_used_.cpu_milli; }
  int64_t free_host_memory_mib() const { return host_capacity_.memory_mib - host_used_.memory_mib; }

  // Index of the GPU with this UUID, or -1.
  int IndexOf(const std::string& uuid) const;

  // Sum of GpuState::free_milli over healthy GPUs, and the number of healthy
  // GPUs with nothing on them. Maintained incrementally.
  int64_t free_milli_total() const { return free_milli_total_; }
  int idle_gpus() const { return idle_gpus_; }
  int64_t milli_capacity() const { return 1000 * static_cast<int64_t>(gpus_.size()); }

  // How many pods of each WorkloadTagOf kind are on the node (GPU pods only).
  const std::map<int, int>& workload_tags() const { return workload_tags_; }

  // Incremented by every successful Apply/Release: a cache of anything derived
  // from this node is valid while the version is unchanged.
  uint64_t version() const { return version_; }

  // Accounts a pod's allocation (and its host resources) into the node.
  // All-or-nothing: on error (unknown UUID, over capacity, exclusivity
  // conflict) the node is unchanged. Init containers reserve, per GPU, the
  // larger of their usage and the app containers' usage (see allocation.h).
  Status Apply(const PodAllocation& allocation, const HostResources& host = {});
  // Accounts `allocation` as Apply does, but without the capacity and
  // exclusivity checks: for views that must show what has been allocated even
  // when it overcommits a GPU (the node agent's gauges), so that an overcommit
  // is seen (GpuState::Overcommit) instead of hidden. Errors, changing
  // nothing, only for an allocation this node cannot hold at all (an unknown
  // GPU UUID, an invalid slice).
  Status Account(const PodAllocation& allocation, const HostResources& host = {});
  // Gives back exactly what Apply took. Errors if it would go below zero.
  Status Release(const PodAllocation& allocation, const HostResources& host = {});

  // Marks a GPU healthy or not (health changes come from the node agent).
  void SetHealthy(int gpu_index, bool healthy);

 private:
  struct Delta {
    int gpu = 0;
    GpuUsage usage;
  };
  Result<std::vector<Delta>> DeltasOf(const PodAllocation& allocation) const;
  Status CheckFits(const std::vector<Delta>& deltas, const HostResources& host) const;
  void Add(const std::vector<Delta>& deltas, const PodAllocation& allocation, const HostResources& host);
  void Recount();

  std::string name_;
  std::vector<GpuState> gpus_;
  std::vector<GpuFitView> views_;  // by GPU index; rebuilt by Recount()
  HostResources host_capacity_;
  HostResources host_used_;
  std::map<int, int> workload_tags_;
  int64_t free_milli_total_ = 0;
  int idle_gpus_ = 0;
  uint64_t version_ = 0;
};

}  // namespace tessera::core
