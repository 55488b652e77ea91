// GPU fragmentation of a node as seen by a workload mix, and the policy built
// on it (tessera's default).
//
// Fragmentation follows the definition of Weng et al., "Beware of
// Fragmentation" (USENIX ATC '23): for a task shape m, the free GPU share of a
// node that m could not use is a fragment — all of it when m cannot run on the
// node at all (no GPU asked, model filtered out, too few GPUs with enough free,
// not enough CPU/memory), otherwise the free share of the GPUs too small for
// it. A node's fragmentation is the mix-weighted sum over shapes. Units:
// milli-GPU (1000 = one whole GPU).
//
// FragmentationMeter evaluates it for a node and, cheaply, for the same node
// after one hypothetical placement (O(shapes) per candidate GPU).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include "core/node_state.h"
#include "core/policy.h"
#include "core/request.h"

namespace tessera::core {

// A kind of task in a workload mix: `gpus` vGPUs of the same size, in the
// request's own units so that one mix serves GPUs of different memory sizes.
struct TaskShape {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;      // host memory; 0 = not considered
  int gpus = 0;                // 0 = CPU-only
  int64_t gpu_memory_mib = 0;  // per vGPU; 0 with gpu_memory_percent < 0 = whole GPU
  int gpu_memory_percent = -1;
  int cores = 0;
  std::vector<std::string> use_types;  // model filter (any of), empty = any
  bool operator==(const TaskShape&) const = default;
  auto operator<=>(const TaskShape&) const = default;
};

// The milli-GPU a vGPU of `shape` needs on `gpu` (max of its memory and
// compute share, rounded up), 1000 for a whole GPU.
int MilliNeeded(const TaskShape& shape, const Gpu& gpu);

struct MixEntry {
  TaskShape shape;
  double weight = 0;  // popularity; weights of a mix sum to 1
};
using WorkloadMix = std::vector<MixEntry>;

// The shape of a pod: its first app container that asks for GPUs (pods with
// several GPU containers are rare; the mix is a summary, not an account).
TaskShape ShapeOf(const PodRequest& pod);

// Counts shapes and keeps the most frequent ones covering `coverage` of all
// tasks seen (ties by shape order, so it is deterministic).
class MixCounter {
 public:
  void Add(const TaskShape& shape, int64_t count = 1);
  int64_t total() const { return total_; }
  WorkloadMix Typical(double coverage = 0.95) const;

 private:
  std::map<TaskShape, int64_t> counts_;
  int64_t total_ = 0;
};

// A workload mix prepared for evaluating many nodes: the per-shape constants
// side by side, and for each kind of GPU met (model, memory, compute,
// usability) the milli-GPU each shape needs on it, computed the first time the
// kind is met. Apart from that per-kind table it is immutable; the table is
// filled under a lock and read without one, so one PreparedMix may serve
// several threads at once (the extender's helper thread does).
class PreparedMix {
 public:
  explicit PreparedMix(WorkloadMix mix);
  ~PreparedMix();
  PreparedMix(const PreparedMix&) = delete;
  PreparedMix& operator=(const PreparedMix&) = delete;

  const WorkloadMix& mix() const { return mix_; }
  size_t size() const { return mix_.size(); }
  const double* weights() const { return weight_.data(); }
  const int* gpus() const { return gpus_.data(); }
  const int64_t* cpu_milli() const { return cpu_.data(); }
  const int64_t* memory_mib() const { return memory_.data(); }

  // Per shape (mix order): the milli-GPU one vGPU of it needs on `gpu`
  // (MilliNeeded), INT_MAX when it cannot use the GPU (no GPU asked, GPU not
  // usable, model filtered out); followed by the shape indices in increasing
  // need (stable), then their needs in that order; then the mix's CPU milli
  // per whole GPU of this kind (the weight-averaged CPU of the shapes that
  // can use it over their weight-averaged milli-GPU, × 1000, rounded; 0 when
  // none can), so 3 × size() + 1 ints. Valid as long as this object.
  const int* NeedsOn(const Gpu& gpu) const;
  // The same for the GPU whose compact view is `view` (NodeState::gpu_views):
  // `gpu` is read only when the mix filters models or the kind is new.
  const int* NeedsOn(const GpuFitView& view, const Gpu& gpu) const;

  // For a table NeedsOn gave: size() + 1 prefix sums of the shapes' weights
  // in its need order (element j: the shapes before position j).
  const double* PrefixWeightsOn(const int* needs) const;
  // The weights' sum of magnitudes.
  double total_weight() const { return total_weight_; }

  // Whether a shape of the mix asks for GPU models (use_types): without one,
  // a shape's need depends on a GPU's memory and compute only.
  bool filters_models() const { return filters_models_; }

  // A number no other PreparedMix of this process has: what a NodeMemo
  // filled for this mix is marked with (an address could be reused).
  uint64_t serial() const { return serial_; }

 private:
  struct Kind;
  WorkloadMix mix_;
  std::vector<double> weight_;
  std::vector<int> gpus_;
  std::vector<int64_t> cpu_;
  std::vector<int64_t> memory_;
  bool filters_models_ = false;
  uint64_t serial_ = 0;
  double total_weight_ = 0;
  struct Table;
  std::unique_ptr<Table> table_;
};

// Fixed room for `N` elements, more on the heap: the meter's per-node arrays
// without an allocation for the usual sizes.
template <typename T, size_t N>
class ScratchArray {
 public:
  ScratchArray() = default;
  ScratchArray(const ScratchArray&) = delete;
  ScratchArray& operator=(const ScratchArray&) = delete;
  T* Reset(size_t n) {
    if (n > N) {
      heap_ = std::make_unique<T[]>(n);
      data_ = heap_.get();
    }
    return data_;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  T local_[N];
  std::unique_ptr<T[]> heap_;
  T* data_ = local_;
};

class FragmentationMeter {
 public:
  // `use_memory`: whether host memory counts when deciding if a shape fits.
  // `demand_weighted`: weigh each shape by its GPU demand on this node
  // (popularity × gpus × milli / 1000) instead of its popularity alone, so a
  // fragment counts by how much of the expected GPU demand cannot use it.
  // Holds references to `node` and `mix`: they must outlive the meter.
  FragmentationMeter(const NodeState& node, const WorkloadMix& mix, bool use_memory,
                     bool demand_weighted = false);
  // The same with a prepared mix (what a policy evaluating many nodes uses):
  // identical results, without recomputing each shape's need per node. With
  // `memo` (the node's, see NodeMemo) the per-shape counts and the current
  // fragmentation are taken from it when it holds them for this mix and
  // options, else computed and kept there.
  FragmentationMeter(const NodeState& node, const PreparedMix& mix, bool use_memory,
                     bool demand_weighted = false, NodeMemo* memo = nullptr);
  FragmentationMeter(const FragmentationMeter&) = delete;
  FragmentationMeter& operator=(const FragmentationMeter&) = delete;

  // Fragmentation of the node as it is.
  double current() const { return current_; }

  // Fragmentation after taking `milli` from GPU `gpu` (or nothing, gpu = -1)
  // and cpu/memory from the host.
  double AfterOne(int gpu, int milli, int64_t cpu_milli, int64_t memory_mib) const;

  // For each k on its own: the fragmentation after taking milli[k] from GPU
  // gpus[k] (and cpu/memory from the host) into out[k] — AfterOne(gpus[k],
  // milli[k], ...) bit for bit, the candidates computed side by side.
  void AfterEach(std::span<const int> gpus, std::span<const int> milli, int64_t cpu_milli, int64_t memory_mib,
                 std::span<double> out) const;

  // For each k, the growth AfterEach(...)[k] − current() would give, worked
  // out from the few shapes whose state changes (the ones whose need lies
  // between the GPU's free share before and after) and prefix sums over the
  // others, in another order than AfterEach's sums: the two differ by at
  // most `error` (set here; far above floating-point rounding), so they rank
  // candidates alike except within 2·error of each other. Returns false,
  // writing nothing, where it does not apply: candidates on GPUs of
  // different kinds, host memory counted, or a shape whose host fit the
  // pod's CPU changes.
  // Set by GrowthEstimates (no initialisers: kept in scratch arrays that
  // are not cleared).
  struct GrowthEstimate {
    double growth;
    // Non-zero: candidates with equal `alike` have bitwise equal exact
    // growths (the same terms in the same order).
    uint64_t alike;
    bool unchanged;  // no shape's term changes: the exact growth is 0
  };
  bool GrowthEstimates(std::span<const int> gpus, std::span<const int> milli, int64_t cpu_milli,
                       std::span<GrowthEstimate> out, double& error) const;

  // Fragmentation after taking milli[k] from each GPU listed.
  double AfterMany(std::span<const int> gpus, std::span<const int> milli, int64_t cpu_milli,
                   int64_t memory_mib) const;

  // Per-shape needs of GPU `gpu` (the same pointer for GPUs of one kind), and
  // its free milli as the meter counts it (GpuState::free_milli).
  const int* needs_of(int gpu) const { return need_[gpu]; }
  int free_of(int gpu) const { return free_[gpu]; }

 private:
  void Init(bool demand_weighted, NodeMemo* memo);
  // Sum over shapes of weight × fragment, given each shape's fit count and
  // small-GPU free share (`fit`, `small`, adjusted per shape by `adjust`).
  template <typename Adjust>
  double Sum(Adjust adjust, int64_t total_free, int64_t cpu_free, int64_t mem_free) const;

  const NodeState& node_;
  std::unique_ptr<PreparedMix> owned_;  // the generic constructor's
  const PreparedMix& mix_;
  bool use_memory_;
  size_t shapes_ = 0;
  ScratchArray<int, 16> free_;         // per GPU free milli
  ScratchArray<const int*, 16> need_;  // per GPU: per-shape needs (PreparedMix::NeedsOn)
  ScratchArray<int, 64> fit_;          // per shape: GPUs that can host one vGPU of it
  ScratchArray<int64_t, 64> small_;    // per shape: free milli of the other GPUs
  ScratchArray<double, 64> dw_;        // demand-weighted weights (demand_weighted only)
  const double* weight_ = nullptr;     // per shape
  int64_t total_free_ = 0;
  double current_ = 0;
};

// tessera's default policy; see docs/placement.md for the reasoning and the
// measurements behind each choice.
//
// Score = FGD's banded fragmentation gradient ⌊100·σ(−growth/1000)⌋ over a
// workload mix learned online from the pods observed (optionally starting from
// a prior count); equal bands go to the Placer's node order. GPU-less pods
// prefer, among equal bands, nodes with less free GPU; inside a node equal
// bands go to the smaller exact growth, then the fuller GPU, then the lower
// index. A placement that leaves the node's usable free GPU with less of the
// CPU the mix needs for it goes behind every placement that does not
// (Options::strand). Before any pod has been observed it packs (best fit).
class FragmentationPolicy : public Policy {
 public:
  struct Options {
    double coverage = 0.95;       // the typical shapes cover this share of pods
    int64_t relearn_every = 512;  // recompute the mix after this many pods
    bool use_memory = false;      // host memory in a shape's fit (the pod's own fit always checks it)
    double sigmoid_scale = 1000;  // > 0: score = floor(100 σ(−growth / scale)), FGD's bands
    bool inner_exact = true;      // equal bands inside a node: smaller exact growth first
    // With σ bands and inner_exact: rank a node's candidates by the meter's
    // GrowthEstimates where they settle it (the same choice and band, a
    // third of the work); false = always the exact sums (tests compare).
    bool estimates = true;
    double cpu_only_away = 1;  // > 0: GPU-less pods prefer nodes with less free GPU among equal bands
    // Experiments (docs/placement.md, "what did not work"); 0 = off.
    double tolerance = 0;          // linear bands of this width instead of σ bands (sigmoid_scale = 0)
    double pack_weight = 0;        // + weight × node utilisation after placement
    bool demand_weighted = false;  // shape weight × its GPU demand
    double order = 0;  // tie-break by a node property (1 GPUs, 2 CPU/GPU, 3 idle GPUs, 4 free CPU)
    // > 0: a shape's fragment is the free share that repeated tasks of it
    // could not use (GPU slots in whole multiples of its need, capped by the
    // node's free CPU) — "the typical tasks a placement prevents".
    bool slots = false;
    // Issue 18 item 5 experiments: discrete biases (|total| < 1) that only
    // reorder nodes inside one band, so rank still breaks the rest of ties.
    // hole 1: a one-vGPU share pod whose chosen GPU would keep a hole no shape
    // of the mix fits (0 < left < smallest need) loses 0.3; hole 2: also a
    // GPU left exactly full gains 0.3.
    int hole = 0;
    // whole (ties only, whole nodes kept for multi-GPU shapes): 1: a GPU pod
    // taking idle GPUs from an entirely idle node, not all of them, loses 0.3
    // there; 2: one that leaves fewer idle k-GPU groups on the node for some
    // multi-GPU shape (k GPUs) of the mix; 3: the same for the largest such
    // shape only; 4: as 1, and −0.15 for taking any idle GPU elsewhere; 5:
    // taking the node's idle GPUs below half its GPUs; 6: as 1 while the mix
    // holds no multi-GPU shape, else nothing; 7: as 6, the bias × the node's
    // GPU count / 16 (smaller idle nodes broken first).
    int whole = 0;
    // The bias `whole` subtracts (0.3: inside a band; 1 or more moves the node
    // down that many bands).
    double whole_weight = 0.3;
    // strand (the default since issue 18 item 5; CPU kept for the GPU it
    // must serve): on a node that tracks CPU, a pod whose placement leaves
    // more of the node's usable free GPU share (GPUs with room for some shape
    // of the mix) without the CPU the mix's tasks need for it (the mix's CPU
    // per milli-GPU × that share) loses strand_weight. 0: off (the policy
    // before). Experiments: 2: also one that leaves less of it gains
    // strand_weight; 3: as 1, counting all free GPU share.
    int strand = 1;
    // The bias `strand` subtracts: 100 (more than any band difference, bands
    // being 0–99) puts a stranding placement behind every other feasible one,
    // FGD's band deciding within each group; below 1 it only reorders a band.
    double strand_weight = 100;
    // Experiment: the mix's CPU per milli-GPU that strand reserves, × this.
    double strand_cpu_factor = 1;
  };
  FragmentationPolicy();
  explicit FragmentationPolicy(Options options);
  // A fixed mix (nothing is learned).
  FragmentationPolicy(Options options, WorkloadMix fixed_mix);
  // Learns online, starting from `prior` counts (e.g. the cluster's history).
  FragmentationPolicy(Options options, MixCounter prior);

  std::string_view name() const override { return "tessera"; }
  std::optional<Candidate> Evaluate(const NodeState& node, const PodRequest& pod) const override;
  // A one-vGPU pod's placement is written into the storage `out` holds.
  void EvaluateInto(const NodeState& node, const PodRequest& pod, std::optional<Candidate>& out,
                    NodeMemo* memo) const override;
  uint64_t epoch() const override { return epoch_; }
  // The σ band ⌊100·σ(−g/scale)⌋ (Score's, without a packing term) of every
  // growth g within `error` of `growth`, found among the band edges without
  // exp; nullopt when an edge (or exp's range end) lies that close, where only
  // Score can tell, or without σ bands.
  std::optional<double> BandWithin(double growth, double error) const;
  void Observe(const PodRequest& pod) override;
  const WorkloadMix& mix() const { return mix_; }

 private:
  double Score(double growth, double util_after) const;

  void SetMix(WorkloadMix mix);
  double NodeBias(const NodeState& node) const;
  // Options::whole's bias for a placement taking `idle_taken` idle GPUs.
  double WholeBias(const NodeState& node, int idle_taken) const;
  // Options::strand's bias for taking milli[k] from gpus[k] and `cpu_milli`.
  double StrandBias(const NodeState& node, const FragmentationMeter& meter, std::span<const int> gpus,
                    std::span<const int> milli, int64_t cpu_milli) const;
  // Options::slots: the mix-weighted free share repeated tasks of each shape
  // could not use, for GPU free shares `free` and free CPU `cpu_free`.
  double SlotFragmentation(const NodeState& node, const int* const* needs, const int* free,
                           int64_t cpu_free) const;
  // Options::slots: growth of SlotFragmentation when milli[k] leaves gpus[k].
  double SlotGrowth(const NodeState& node, std::span<const int> gpus, std::span<const int> milli,
                    int64_t cpu_milli) const;

  Options options_;
  bool learn_ = true;
  MixCounter counter_;
  int64_t next_relearn_ = 1;
  WorkloadMix mix_;
  // mix_ prepared for the meter; replaced (never changed) when mix_ changes,
  // so copies of the policy share it.
  std::shared_ptr<const PreparedMix> prepared_;
  uint64_t epoch_ = 0;
  // With σ bands: edge[b] = scale·ln(100/b − 1), b = 1..99, the largest
  // growth still in band b or above (edge[0] unused); decreasing in b.
  std::vector<double> band_edges_;
};

}  // namespace tessera::core
