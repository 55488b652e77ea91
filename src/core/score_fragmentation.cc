#include "core/score_fragmentation.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <limits>
#include <mutex>

namespace tessera::core {
namespace {

bool ShapeAllowsModel(const TaskShape& shape, std::string_view model) {
  if (shape.use_types.empty()) return true;
  GpuFilter f;
  f.use_types = shape.use_types;
  return TypeAllowed(f, model);
}

}  // namespace

int MilliNeeded(const TaskShape& shape, const Gpu& gpu) {
  int64_t memory = shape.gpu_memory_percent >= 0 ? gpu.memory_mib * shape.gpu_memory_percent / 100
                   : shape.gpu_memory_mib == 0   ? gpu.memory_mib
                                                 : shape.gpu_memory_mib;
  int64_t by_memory = gpu.memory_mib > 0 ? (memory * 1000 + gpu.memory_mib - 1) / gpu.memory_mib : 0;
  int64_t by_cores = gpu.cores > 0 ? int64_t{shape.cores} * 1000 / gpu.cores : 1000;
  int64_t need = std::max<int64_t>(by_memory, by_cores);
  if (shape.cores >= 100) need = 1000;
  return static_cast<int>(std::clamp<int64_t>(need, 1, 1000));
}

TaskShape ShapeOf(const PodRequest& pod) {
  TaskShape s;
  s.cpu_milli = pod.cpu_milli;
  // Host memory is left out of the shape: it rarely binds where GPUs are the
  // scarce resource, and keeping it would split the mix into many rare shapes.
  s.use_types = pod.filter.use_types;
  for (const ContainerRequest& c : pod.containers) {
    if (c.gpus <= 0) continue;
    s.gpus = c.gpus;
    s.gpu_memory_mib = c.memory_mib;
    s.gpu_memory_percent = c.memory_percent ? *c.memory_percent : -1;
    s.cores = c.cores;
    break;
  }
  if (s.gpus == 0) s.use_types.clear();
  return s;
}

void MixCounter::Add(const TaskShape& shape, int64_t count) {
  counts_[shape] += count;
  total_ += count;
}

WorkloadMix MixCounter::Typical(double coverage) const {
  std::vector<std::pair<const TaskShape*, int64_t>> sorted;
  sorted.reserve(counts_.size());
  for (const auto& [shape, n] : counts_) sorted.push_back({&shape, n});
  // Stable: equal counts keep the map's (shape) order.
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  WorkloadMix mix;
  int64_t kept = 0;
  for (const auto& [shape, n] : sorted) {
    if (static_cast<double>(kept) >= coverage * static_cast<double>(total_)) break;
    mix.push_back({*shape, static_cast<double>(n)});
    kept += n;
  }
  for (MixEntry& e : mix) e.weight /= static_cast<double>(kept);
  return mix;
}

struct PreparedMix::Kind {
  bool usable = false;
  int64_t memory_mib = 0;
  int cores = 0;
  std::string model;
  std::vector<int> need;       // per shape, then the shapes by need, then their needs
  std::vector<double> prefix;  // prefix sums of the weights in need order
  const Kind* next = nullptr;
};

struct PreparedMix::Table {
  std::mutex mu;  // serialises additions; readers follow `head` without it
  std::atomic<const Kind*> head{nullptr};
  std::vector<std::unique_ptr<Kind>> owned;  // guarded by mu
};

PreparedMix::PreparedMix(WorkloadMix mix) : mix_(std::move(mix)), table_(std::make_unique<Table>()) {
  static std::atomic<uint64_t> next_serial{1};
  serial_ = next_serial.fetch_add(1, std::memory_order_relaxed);
  weight_.reserve(mix_.size());
  for (const MixEntry& e : mix_) {
    weight_.push_back(e.weight);
    total_weight_ += std::abs(e.weight);
    gpus_.push_back(e.shape.gpus);
    cpu_.push_back(e.shape.cpu_milli);
    memory_.push_back(e.shape.memory_mib);
    filters_models_ = filters_models_ || (e.shape.gpus > 0 && !e.shape.use_types.empty());
  }
}

PreparedMix::~PreparedMix() = default;

const double* PreparedMix::PrefixWeightsOn(const int* needs) const {
  for (const Kind* k = table_->head.load(std::memory_order_acquire); k != nullptr; k = k->next) {
    if (k->need.data() == needs) return k->prefix.data();
  }
  return nullptr;  // not reached for a pointer NeedsOn gave
}

const int* PreparedMix::NeedsOn(const Gpu& gpu) const {
  GpuFitView view;
  view.usable = gpu.usable();
  view.memory_mib = gpu.memory_mib;
  view.cores = gpu.cores;
  return NeedsOn(view, gpu);
}

const int* PreparedMix::NeedsOn(const GpuFitView& view, const Gpu& gpu) const {
  const bool usable = view.usable;
  auto same = [&](const Kind& k) {
    return k.usable == usable && k.memory_mib == view.memory_mib && k.cores == view.cores &&
           (!filters_models_ || k.model == gpu.model);
  };
  for (const Kind* k = table_->head.load(std::memory_order_acquire); k != nullptr; k = k->next) {
    if (same(*k)) return k->need.data();
  }
  std::lock_guard lock(table_->mu);
  for (const Kind* k = table_->head.load(std::memory_order_acquire); k != nullptr; k = k->next) {
    if (same(*k)) return k->need.data();  // added meanwhile by another thread
  }
  auto kind = std::make_unique<Kind>();
  kind->usable = usable;
  kind->memory_mib = gpu.memory_mib;
  kind->cores = gpu.cores;
  kind->model = gpu.model;
  const size_t n = mix_.size();
  kind->need.reserve(3 * n + 1);
  for (const MixEntry& e : mix_) {
    const TaskShape& shape = e.shape;
    kind->need.push_back(
        shape.gpus > 0 && usable && ShapeAllowsModel(shape, gpu.model) ? MilliNeeded(shape, gpu) : INT_MAX);
  }
  // Then the shapes in increasing need (the meter's counting merges them
  // with the node's sorted free shares).
  for (size_t m = 0; m < n; ++m) kind->need.push_back(static_cast<int>(m));
  std::stable_sort(kind->need.begin() + static_cast<std::ptrdiff_t>(n), kind->need.end(),
                   [&](int a, int b) { return kind->need[a] < kind->need[b]; });
  // Then their needs in that order, and the prefix sums of their weights
  // (FragmentationMeter::GrowthEstimates).
  kind->prefix.assign(n + 1, 0.0);
  for (size_t j = 0; j < n; ++j) {
    const int m = kind->need[n + j];
    kind->need.push_back(kind->need[m]);
    kind->prefix[j + 1] = kind->prefix[j] + weight_[m];
  }
  // Then the CPU the mix asks per whole GPU of this kind (Options::strand).
  double cpu = 0;
  double milli = 0;
  for (size_t m = 0; m < n; ++m) {
    if (kind->need[m] == INT_MAX) continue;
    cpu += mix_[m].weight * static_cast<double>(mix_[m].shape.cpu_milli);
    milli += mix_[m].weight * mix_[m].shape.gpus * static_cast<double>(kind->need[m]);
  }
  kind->need.push_back(milli > 0 ? static_cast<int>(std::lround(std::min(1e9, 1000.0 * cpu / milli))) : 0);
  kind->next = table_->head.load(std::memory_order_relaxed);
  const Kind* added = kind.get();
  table_->owned.push_back(std::move(kind));
  table_->head.store(added, std::memory_order_release);
  return added->need.data();
}

FragmentationMeter::FragmentationMeter(const NodeState& node, const WorkloadMix& mix, bool use_memory,
                                       bool demand_weighted)
    : node_(node), owned_(std::make_unique<PreparedMix>(mix)), mix_(*owned_), use_memory_(use_memory) {
  Init(demand_weighted, nullptr);
}

FragmentationMeter::FragmentationMeter(const NodeState& node, const PreparedMix& mix, bool use_memory,
                                       bool demand_weighted, NodeMemo* memo)
    : node_(node), mix_(mix), use_memory_(use_memory) {
  Init(demand_weighted, memo);
}

void FragmentationMeter::Init(bool demand_weighted, NodeMemo* memo) {
  const auto& gpus = node_.gpus();
  const size_t g_count = gpus.size();
  int* free = free_.Reset(g_count);
  const int** need = need_.Reset(g_count);
  const auto& views = node_.gpu_views();
  for (size_t g = 0; g < g_count; ++g) {
    const GpuFitView& v = views[g];
    free[g] = v.free_milli;
    total_free_ += free[g];
    // The same kind of GPU as the previous one (usable alike, same memory and
    // model) takes its needs. Without a model filter in the mix the needs do
    // not depend on the model, so with equal compute too the model need not
    // be read (a string elsewhere in memory: reading it for every GPU was a
    // fifth of a cold prioritize), nor anything outside the compact views.
    bool same_kind = false;
    if (g > 0) {
      const GpuFitView& prev = views[g - 1];
      same_kind =
          v.usable == prev.usable && v.memory_mib == prev.memory_mib &&
          ((!mix_.filters_models() && v.cores == prev.cores) || gpus[g].gpu.model == gpus[g - 1].gpu.model);
    }
    need[g] = same_kind ? need[g - 1] : mix_.NeedsOn(v, gpus[g].gpu);
  }
  shapes_ = mix_.size();
  weight_ = mix_.weights();
  if (demand_weighted) {
    // A shape no GPU here can serve weighs as its GPU count (its fragment is
    // all free GPU whatever is placed; only the total matters).
    double* dw = dw_.Reset(shapes_);
    for (size_t m = 0; m < shapes_; ++m) {
      int64_t demand = -1;
      for (size_t g = 0; g < g_count && demand < 0; ++g) {
        if (need[g][m] != INT_MAX) demand = int64_t{mix_.gpus()[m]} * need[g][m];
      }
      dw[m] =
          weight_[m] * (static_cast<double>(demand < 0 ? int64_t{mix_.gpus()[m]} * 1000 : demand) / 1000.0);
    }
    weight_ = dw;
  }
  int* fit = fit_.Reset(shapes_);
  int64_t* small = small_.Reset(shapes_);
  // What follows depends only on the node's content, the mix and the
  // options: a memo holding it for them gives it as it was computed. It
  // keeps each shape's two counts in one 32-bit word (fit count ≤ 255 in the
  // top byte, small share < 2^24 milli below), a third of the bytes to read
  // for a node in a cold request; larger nodes are not memoised.
  constexpr int64_t kSmallBits = 24;
  const bool packable = g_count <= 255 && total_free_ < (int64_t{1} << kSmallBits);
  const uint64_t key = mix_.serial() * 4 + (use_memory_ ? 2 : 0) + (demand_weighted ? 1 : 0);
  if (memo != nullptr && packable && memo->owner == key) {
    const auto* packed = reinterpret_cast<const uint32_t*>(memo->ints.data());
    for (size_t m = 0; m < shapes_; ++m) {
      fit[m] = static_cast<int>(packed[m] >> kSmallBits);
      small[m] = packed[m] & ((uint32_t{1} << kSmallBits) - 1);
    }
    current_ = memo->value;
    return;
  }
  std::fill(fit, fit + shapes_, 0);
  std::fill(small, small + shapes_, int64_t{0});
  // Per shape: the GPUs with at least its need free fit it, the others'
  // free share is small for it. GPUs of one kind (one needs table) are
  // counted together: their free shares sorted, merged with the shapes in
  // increasing need.
  ScratchArray<int, 16> sorted_buffer;
  ScratchArray<bool, 16> done_buffer;
  int* sorted = sorted_buffer.Reset(g_count);
  bool* done = done_buffer.Reset(g_count);
  std::fill(done, done + g_count, false);
  for (size_t g = 0; g < g_count; ++g) {
    if (done[g]) continue;
    const int* col = need[g];
    size_t count = 0;
    for (size_t h = g; h < g_count; ++h) {
      if (need[h] != col) continue;
      done[h] = true;
      // Insertion into the sorted prefix (a node has a handful of GPUs).
      size_t i = count++;
      while (i > 0 && sorted[i - 1] > free[h]) {
        sorted[i] = sorted[i - 1];
        --i;
      }
      sorted[i] = free[h];
    }
    const int* order = col + shapes_;
    size_t below = 0;  // sorted[0, below) are under the current need
    int64_t below_free = 0;
    for (size_t j = 0; j < shapes_; ++j) {
      const int m = order[j];
      while (below < count && sorted[below] < col[m]) below_free += sorted[below++];
      fit[m] += static_cast<int>(count - below);
      small[m] += below_free;
    }
  }
  current_ =
      Sum([](size_t, int&, int64_t&) {}, total_free_, node_.free_cpu_milli(), node_.free_host_memory_mib());
  if (memo != nullptr && packable) {
    memo->ints.resize(shapes_);
    auto* packed = reinterpret_cast<uint32_t*>(memo->ints.data());
    for (size_t m = 0; m < shapes_; ++m)
      packed[m] = static_cast<uint32_t>(fit[m]) << kSmallBits | static_cast<uint32_t>(small[m]);
    memo->value = current_;
    memo->owner = key;
  } else if (memo != nullptr) {
    memo->Forget();
  }
}

template <typename Adjust>
double FragmentationMeter::Sum(Adjust adjust, int64_t total_free, int64_t cpu_free, int64_t mem_free) const {
  const bool cpu = node_.tracks_cpu();
  const bool mem = use_memory_ && node_.tracks_memory();
  const int* gpus = mix_.gpus();
  const int64_t* cpu_need = mix_.cpu_milli();
  const int64_t* mem_need = mix_.memory_mib();
  double f = 0;
  for (size_t m = 0; m < shapes_; ++m) {
    int fit = fit_[m];
    int64_t small = small_[m];
    adjust(m, fit, small);
    bool fits = gpus[m] > 0 && fit >= gpus[m] && !(cpu && cpu_free < cpu_need[m]) &&
                !(mem && mem_need[m] > 0 && mem_free < mem_need[m]);
    f += weight_[m] * static_cast<double>(fits ? small : total_free);
  }
  return f;
}

namespace {

// A GPU's free milli went from `before` to `after`: moves it between the
// shape's fitting GPUs and its small ones.
inline void MoveGpu(int need, int before, int after, int& fit, int64_t& small) {
  if (before >= need) {
    --fit;
  } else {
    small -= before;
  }
  if (after >= need) {
    ++fit;
  } else {
    small += after;
  }
}

}  // namespace

double FragmentationMeter::AfterOne(int gpu, int milli, int64_t cpu_milli, int64_t memory_mib) const {
  const int64_t cpu_free = node_.free_cpu_milli() - cpu_milli;
  const int64_t mem_free = node_.free_host_memory_mib() - memory_mib;
  if (gpu < 0) return Sum([](size_t, int&, int64_t&) {}, total_free_, cpu_free, mem_free);
  const int before = free_[gpu];
  const int after = before - milli;
  const int* col = need_[gpu];
  return Sum([&](size_t m, int& fit, int64_t& small) { MoveGpu(col[m], before, after, fit, small); },
             total_free_ - milli, cpu_free, mem_free);
}

void FragmentationMeter::AfterEach(std::span<const int> gpus, std::span<const int> milli, int64_t cpu_milli,
                                   int64_t memory_mib, std::span<double> out) const {
  // Shape by shape, every candidate's running sum takes the same operations
  // in the same order as AfterOne's single sum, so the results are identical;
  // the candidates' sums are independent, which the CPU overlaps.
  const size_t n = gpus.size();
  ScratchArray<int, 16> before_buffer;
  ScratchArray<int, 16> after_buffer;
  ScratchArray<int64_t, 16> total_buffer;
  ScratchArray<const int*, 16> col_buffer;
  int* before = before_buffer.Reset(n);
  int* after = after_buffer.Reset(n);
  int64_t* total = total_buffer.Reset(n);
  const int** col = col_buffer.Reset(n);
  for (size_t k = 0; k < n; ++k) {
    before[k] = free_[gpus[k]];
    after[k] = before[k] - milli[k];
    total[k] = total_free_ - milli[k];
    col[k] = need_[gpus[k]];
    out[k] = 0;
  }
  const bool cpu = node_.tracks_cpu();
  const bool mem = use_memory_ && node_.tracks_memory();
  const int64_t cpu_free = node_.free_cpu_milli() - cpu_milli;
  const int64_t mem_free = node_.free_host_memory_mib() - memory_mib;
  const int* shape_gpus = mix_.gpus();
  const int64_t* cpu_need = mix_.cpu_milli();
  const int64_t* mem_need = mix_.memory_mib();
  bool one_kind = total_free_ < INT_MAX / 2;
  for (size_t k = 1; k < n && one_kind; ++k) one_kind = col[k] == col[0];
  if (one_kind && n > 0 && n <= 8) {
    // Usual case, GPUs of one kind and at most eight distinct candidates:
    // 32-bit counts (the sums are at most the node's free milli), four
    // candidates at a time in 128-bit vectors (GCC's vector extensions: SSE2
    // on x86-64, NEON on arm64), the sums held in registers. Every lane takes
    // the scalar steps — fit = fit0 − (b ≥ need) + (a ≥ need), small = small0
    // − (b if b < need) + (a if a < need), v = small if the shape fits else
    // the total, out += w × v — element by element, with no fused
    // multiply-add, so each sum is AfterOne's bit for bit. Lanes past n repeat
    // candidate 0 and are dropped.
    using I4 = int32_t __attribute__((vector_size(16)));
    using D2 = double __attribute__((vector_size(16)));
    using D4 = double __attribute__((vector_size(32)));  // two SSE2 registers without AVX
    I4 b4[2], a4[2], t4[2];
    for (size_t k = 0; k < 8; ++k) {
      const size_t c = k < n ? k : 0;
      b4[k / 4][k % 4] = before[c];
      a4[k / 4][k % 4] = after[c];
      t4[k / 4][k % 4] = static_cast<int32_t>(total[c]);
    }
    const int* need = col[0];
    // One shape's fragment for four candidates (as int lanes).
    auto fragment = [](I4 b, I4 a, I4 t, I4 nd, I4 fit0, I4 small0, I4 want, I4 host) {
      const I4 b_fits = b >= nd;  // -1 where true, 0 where false
      const I4 a_fits = a >= nd;
      const I4 fit = fit0 + b_fits - a_fits;
      const I4 small = small0 - (b & ~b_fits) + (a & ~a_fits);
      const I4 fits = host & (fit >= want);
      return (small & fits) | (t & ~fits);
    };
    // The sums, two candidates each, in registers.
    D2 sum0 = {}, sum1 = {}, sum2 = {}, sum3 = {};
    const bool two = n > 4;
    for (size_t m = 0; m < shapes_; ++m) {
      const int wanted = shape_gpus[m];
      const bool host_ok = wanted > 0 && !(cpu && cpu_free < cpu_need[m]) &&
                           !(mem && mem_need[m] > 0 && mem_free < mem_need[m]);
      const double w = weight_[m];
      const I4 nd = I4{} + need[m];
      const I4 fit0 = I4{} + fit_[m];
      const I4 small0 = I4{} + static_cast<int32_t>(small_[m]);
      const I4 want = I4{} + wanted;
      const I4 host = I4{} + (host_ok ? -1 : 0);
      const D4 v = __builtin_convertvector(fragment(b4[0], a4[0], t4[0], nd, fit0, small0, want, host), D4);
      sum0 += w * __builtin_shufflevector(v, v, 0, 1);
      sum1 += w * __builtin_shufflevector(v, v, 2, 3);
      if (two) {
        const D4 u = __builtin_convertvector(fragment(b4[1], a4[1], t4[1], nd, fit0, small0, want, host), D4);
        sum2 += w * __builtin_shufflevector(u, u, 0, 1);
        sum3 += w * __builtin_shufflevector(u, u, 2, 3);
      }
    }
    const D2 sums[4] = {sum0, sum1, sum2, sum3};
    for (size_t k = 0; k < n; ++k) out[k] = sums[k / 2][k % 2];
    return;
  }
  for (size_t m = 0; m < shapes_; ++m) {
    const int wanted = shape_gpus[m];
    const bool host_ok =
        wanted > 0 && !(cpu && cpu_free < cpu_need[m]) && !(mem && mem_need[m] > 0 && mem_free < mem_need[m]);
    const double w = weight_[m];
    for (size_t k = 0; k < n; ++k) {
      int fit = fit_[m];
      int64_t small = small_[m];
      MoveGpu(col[k][m], before[k], after[k], fit, small);
      const bool fits = host_ok && fit >= wanted;
      out[k] += w * static_cast<double>(fits ? small : total[k]);
    }
  }
}

bool FragmentationMeter::GrowthEstimates(std::span<const int> gpus, std::span<const int> milli,
                                         int64_t cpu_milli, std::span<GrowthEstimate> out,
                                         double& error) const {
  const size_t n = gpus.size();
  // The kind's prefix sums are of the mix's own weights.
  if (n == 0 || (use_memory_ && node_.tracks_memory()) || weight_ != mix_.weights()) return false;
  const int* col = need_[gpus[0]];
  for (size_t k = 1; k < n; ++k) {
    if (need_[gpus[k]] != col) return false;
  }
  const bool cpu = node_.tracks_cpu();
  const int64_t cpu_before = node_.free_cpu_milli();
  const int64_t cpu_after = cpu_before - cpu_milli;
  const int* shape_gpus = mix_.gpus();
  const int64_t* cpu_need = mix_.cpu_milli();
  const int* order = col + shapes_;       // the shapes in increasing need on this kind
  const int* sorted = col + 2 * shapes_;  // their needs
  const double* below = mix_.PrefixWeightsOn(col);
  // The GPU shapes that do not fit the node as it is (usually few: those
  // wanting more GPUs or CPU than it has free).
  ScratchArray<int, 64> unfit_buffer;
  int* unfit = unfit_buffer.Reset(shapes_);
  size_t unfit_count = 0;
  auto fits_now = [&](size_t m) { return !(cpu && cpu_before < cpu_need[m]) && fit_[m] >= shape_gpus[m]; };
  for (size_t m = 0; m < shapes_; ++m) {
    if (shape_gpus[m] <= 0) continue;  // never fits; its need is past every GPU's free share
    const bool host_before = !(cpu && cpu_before < cpu_need[m]);
    if (host_before != !(cpu && cpu_after < cpu_need[m])) return false;
    if (!fits_now(m)) unfit[unfit_count++] = static_cast<int>(m);
  }
  for (size_t k = 0; k < n; ++k) {
    const int before = free_[gpus[k]];
    const int taken = milli[k];
    const int after = before - taken;
    if (taken < 0 || after < 0) return false;
    // Shapes needing at most `after` see no change unless they do not fit
    // (then the total they count falls by `taken`); shapes needing more than
    // `before` see this GPU's small share fall by `taken` whether or not they
    // fit. Only shapes needing (after, before] change otherwise: this GPU
    // stops fitting them.
    const size_t lo = std::upper_bound(sorted, sorted + shapes_, after) - sorted;
    const size_t hi = std::upper_bound(sorted + lo, sorted + shapes_, before) - sorted;
    double unfit_below = 0;
    bool any_unfit_below = false;
    for (size_t u = 0; u < unfit_count; ++u) {
      const int m = unfit[u];
      if (col[m] > after) continue;
      unfit_below += weight_[m];
      any_unfit_below = true;
    }
    const double t = taken;
    double g = -t * (unfit_below + (below[shapes_] - below[hi]));
    for (size_t j = lo; j < hi; ++j) {
      const int m = order[j];
      if (!fits_now(m)) {
        g -= weight_[m] * t;  // counted the total before and after
      } else if (fit_[m] - 1 >= shape_gpus[m]) {
        g += weight_[m] * static_cast<double>(after);  // still fits; this GPU's share is small now
      } else {
        g += weight_[m] * static_cast<double>(total_free_ - taken - small_[m]);  // fits no more
      }
    }
    GrowthEstimate& e = out[k];
    e.growth = g;
    // No shape between after and before: each shape's term is set by the
    // side of (after, before] its need lies on and by `taken` alone, so
    // candidates alike in those have the same exact sums, term for term.
    e.alike = lo == hi ? (uint64_t{1} << 63) | (uint64_t{lo} << 32) | static_cast<uint32_t>(taken) : 0;
    // And with nothing taken (the GPU's free share is bound by what the pod
    // does not use), or every shape needing at most `after` and fitting, no
    // term changes at all: the exact growth is current − current = 0.
    e.unchanged = taken == 0 || (lo == shapes_ && !any_unfit_below);
  }
  // Both this and AfterEach − current() add at most 2·(shapes + 2) rounded
  // terms, each at most the node's free milli × its weight: their rounding
  // is below 1e-13 of that for any realistic mix; 1e-9 leaves a wide margin.
  error = 1e-9 * (1.0 + static_cast<double>(total_free_)) * std::max(1.0, mix_.total_weight());
  return true;
}

double FragmentationMeter::AfterMany(std::span<const int> gpus, std::span<const int> milli, int64_t cpu_milli,
                                     int64_t memory_mib) const {
  int64_t taken = 0;
  for (int m : milli) taken += m;
  auto adjust = [&](size_t m, int& fit, int64_t& small) {
    for (size_t i = 0; i < gpus.size(); ++i) {
      const int before = free_[gpus[i]];
      MoveGpu(need_[gpus[i]][m], before, before - milli[i], fit, small);
    }
  };
  return Sum(adjust, total_free_ - taken, node_.free_cpu_milli() - cpu_milli,
             node_.free_host_memory_mib() - memory_mib);
}

FragmentationPolicy::FragmentationPolicy() : FragmentationPolicy(Options{}) {}

FragmentationPolicy::FragmentationPolicy(Options options) : options_(options) {
  if (options_.sigmoid_scale > 0) {
    band_edges_.resize(100);
    for (int b = 1; b < 100; ++b) band_edges_[b] = options_.sigmoid_scale * std::log(100.0 / b - 1.0);
  }
}

FragmentationPolicy::FragmentationPolicy(Options options, WorkloadMix fixed_mix)
    : FragmentationPolicy(options) {
  learn_ = false;
  SetMix(std::move(fixed_mix));
}

FragmentationPolicy::FragmentationPolicy(Options options, MixCounter prior) : FragmentationPolicy(options) {
  counter_ = std::move(prior);
  if (counter_.total() > 0) {
    SetMix(counter_.Typical(options_.coverage));
    ++epoch_;
    next_relearn_ =
        counter_.total() + std::max<int64_t>(1, options_.relearn_every > 0 ? options_.relearn_every : 512);
  }
}

void FragmentationPolicy::SetMix(WorkloadMix mix) {
  mix_ = std::move(mix);
  prepared_ = std::make_shared<const PreparedMix>(mix_);
}

void FragmentationPolicy::Observe(const PodRequest& pod) {
  if (!learn_) return;
  counter_.Add(ShapeOf(pod));
  if (counter_.total() >= next_relearn_) {
    SetMix(counter_.Typical(options_.coverage));
    ++epoch_;
    int64_t step = options_.relearn_every > 0 ? options_.relearn_every
                   : counter_.total() < 512   ? counter_.total()
                                              : 512;
    next_relearn_ = counter_.total() + step;
  }
}

namespace {

// Milli-GPU each GPU of `placement` loses, as (gpu, milli) lists.
void TakenPerGpu(const NodeState& node, const Placement& placement, std::vector<int>& gpus,
                 std::vector<int>& milli) {
  std::vector<GpuUsage> add(node.gpus().size());
  for (const ContainerPlacement& cp : placement.containers) {
    for (const SlicePlacement& s : cp.slices) {
      GpuUsage& u = add[s.gpu];
      if (cp.init) continue;  // transient; reserved as a max, see NodeState::Apply
      u.memory_mib += s.memory_mib;
      u.cores += s.cores;
      u.slots += 1;
      u.exclusive = u.exclusive || s.cores >= 100;
    }
  }
  for (size_t g = 0; g < add.size(); ++g) {
    if (add[g].slots == 0) continue;
    const GpuFitView& v = node.gpu_views()[g];
    gpus.push_back(static_cast<int>(g));
    milli.push_back(v.free_milli - v.free_milli_with(add[g]));
  }
}

}  // namespace

double FragmentationPolicy::Score(double growth, double util_after) const {
  double base = 0;
  if (options_.sigmoid_scale > 0) {
    base = std::floor(100.0 / (1.0 + std::exp(growth / options_.sigmoid_scale)));
  } else {
    base = options_.tolerance > 0 ? -std::round(growth / options_.tolerance) * options_.tolerance : -growth;
  }
  return base + options_.pack_weight * util_after;
}

std::optional<double> FragmentationPolicy::BandWithin(double growth, double error) const {
  // ⌊100 / (1 + e^(g/s))⌋ ≥ b exactly when g ≤ s·ln(100/b − 1) = edge[b]. Far
  // out, exp over- or underflows (band 0 or 100): left to Score.
  const double scale = options_.sigmoid_scale;
  if (band_edges_.empty() || !(std::abs(growth) < 600 * scale)) return std::nullopt;
  // The highest band b whose edge is at or above the growth (edges fall as
  // b rises), by bisection over 1..99; 0 when none is.
  int lo = 0, hi = 99;  // band in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (growth <= band_edges_[mid]) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  // Every growth within `error` lies strictly inside the band, with room for
  // the edges' and exp's own rounding.
  auto clear_of = [&](int b) {
    const double edge = band_edges_[b];
    return std::abs(growth - edge) > error + 1e-9 * (1.0 + std::abs(edge));
  };
  if (lo >= 1 && !clear_of(lo)) return std::nullopt;
  if (lo + 1 <= 99 && !clear_of(lo + 1)) return std::nullopt;
  return static_cast<double>(lo);
}

double FragmentationPolicy::NodeBias(const NodeState& node) const {
  if (options_.order == 0) return 0;
  double x = 0;
  switch (static_cast<int>(std::abs(options_.order))) {
    case 1:
      x = static_cast<double>(node.gpus().size());
      break;
    case 2:
      x = node.gpus().empty() ? 0
                              : static_cast<double>(node.host_capacity().cpu_milli) / 1000.0 /
                                    static_cast<double>(node.gpus().size());
      break;
    case 3:
      x = static_cast<double>(node.idle_gpus());
      break;
    case 4:
      x = static_cast<double>(node.free_cpu_milli()) / 1000.0;
      break;
  }
  return (options_.order > 0 ? -1e-4 : 1e-4) * x;
}

double FragmentationPolicy::WholeBias(const NodeState& node, int idle_taken) const {
  if (options_.whole == 0 || idle_taken <= 0) return 0;
  const int count = static_cast<int>(node.gpus().size());
  const int idle = node.idle_gpus();
  if (options_.whole == 1) return idle_taken < count && idle == count ? -options_.whole_weight : 0;
  if (options_.whole == 6) {
    // Mode 1 only while no multi-GPU shape is typical (the gradient then
    // ignores them; with one in the mix it accounts for them itself).
    for (size_t m = 0; m < prepared_->size(); ++m) {
      if (prepared_->gpus()[m] > 1) return 0;
    }
    return idle_taken < count && idle == count ? -options_.whole_weight : 0;
  }
  if (options_.whole == 7) {
    // As 6, the bias growing with the node's GPU count (of at most 16): a
    // whole node must be broken, the smallest goes first.
    for (size_t m = 0; m < prepared_->size(); ++m) {
      if (prepared_->gpus()[m] > 1) return 0;
    }
    return idle_taken < count && idle == count ? -options_.whole_weight * std::min(count, 16) / 16.0 : 0;
  }
  if (options_.whole == 4)
    return idle_taken < count && idle == count ? -options_.whole_weight : -options_.whole_weight / 2;
  if (options_.whole == 5)
    return idle - idle_taken < count / 2 && idle >= count / 2 ? -options_.whole_weight : 0;
  // 2: breaks a slot of some multi-GPU shape of the mix; 3: of the largest
  // one that fits the node.
  int largest = 0;
  bool breaks = false;
  const PreparedMix& mix = *prepared_;
  for (size_t m = 0; m < mix.size(); ++m) {
    const int k = mix.gpus()[m];
    if (k < 2 || k > count) continue;
    largest = std::max(largest, k);
    breaks = breaks || (idle - idle_taken) / k < idle / k;
  }
  if (options_.whole == 3) breaks = largest > 0 && (idle - idle_taken) / largest < idle / largest;
  return breaks ? -options_.whole_weight : 0;
}

double FragmentationPolicy::StrandBias(const NodeState& node, const FragmentationMeter& meter,
                                       std::span<const int> gpus, std::span<const int> milli,
                                       int64_t cpu_milli) const {
  if (options_.strand == 0 || !node.tracks_cpu() || node.gpus().empty()) return 0;
  const size_t shapes = prepared_->size();
  const size_t count = node.gpus().size();
  // The CPU the mix asks per milli-GPU, on the kind of the node's first GPU
  // that some shape can use.
  int per_gpu = 0;
  for (size_t g = 0; g < count && per_gpu == 0; ++g)
    per_gpu = meter.needs_of(static_cast<int>(g))[3 * shapes];
  if (per_gpu <= 0) return 0;
  const double rho = static_cast<double>(per_gpu) / 1000.0 * options_.strand_cpu_factor;
  const double cpu_free = static_cast<double>(node.free_cpu_milli());
  // CPU for all the node's free GPU share, even after the pod: nothing strands.
  if ((cpu_free - static_cast<double>(cpu_milli)) / rho >= static_cast<double>(node.free_milli_total()))
    return 0;
  auto usable = [&](size_t g, int free) {
    const int* col = meter.needs_of(static_cast<int>(g));
    const int smallest = shapes > 0 ? col[col[shapes]] : INT_MAX;
    return (free >= smallest || options_.strand == 3) && free > 0 ? free : 0;
  };
  double before = 0;
  double after = 0;
  for (size_t g = 0; g < count; ++g) {
    int free = meter.free_of(static_cast<int>(g));
    before += usable(g, free);
    for (size_t i = 0; i < gpus.size(); ++i) {
      if (static_cast<size_t>(gpus[i]) == g) free -= milli[i];
    }
    after += usable(g, free);
  }
  const double strand_before = std::max(0.0, before - cpu_free / rho);
  const double strand_after = std::max(0.0, after - (cpu_free - static_cast<double>(cpu_milli)) / rho);
  if (strand_after > strand_before + 1e-9) return -options_.strand_weight;
  if (options_.strand == 2 && strand_after < strand_before - 1e-9) return options_.strand_weight;
  return 0;
}

double FragmentationPolicy::SlotFragmentation(const NodeState& node, const int* const* needs, const int* free,
                                              int64_t cpu_free) const {
  const PreparedMix& mix = *prepared_;
  const size_t g_count = node.gpus().size();
  int64_t total = 0;
  for (size_t g = 0; g < g_count; ++g) total += free[g];
  double f = 0;
  for (size_t m = 0; m < mix.size(); ++m) {
    const int k = mix.gpus()[m];
    int64_t usable = 0;
    if (k > 0) {
      int64_t slots = 0;
      int unit = 0;
      for (size_t g = 0; g < g_count; ++g) {
        const int need = needs[g][m];
        if (need == INT_MAX) continue;
        slots += free[g] / need;
        if (unit == 0) unit = need;
      }
      int64_t count = slots / k;
      const int64_t cpu_need = mix.cpu_milli()[m];
      if (node.tracks_cpu() && cpu_need > 0)
        count = std::min(count, std::max<int64_t>(0, cpu_free) / cpu_need);
      usable = count * k * unit;
    }
    f += mix.weights()[m] * static_cast<double>(total - usable);
  }
  return f;
}

double FragmentationPolicy::SlotGrowth(const NodeState& node, std::span<const int> gpus,
                                       std::span<const int> milli, int64_t cpu_milli) const {
  const auto& states = node.gpus();
  std::vector<const int*> needs(states.size());
  std::vector<int> free(states.size());
  for (size_t g = 0; g < states.size(); ++g) {
    needs[g] = prepared_->NeedsOn(states[g].gpu);
    free[g] = states[g].free_milli();
  }
  const double before = SlotFragmentation(node, needs.data(), free.data(), node.free_cpu_milli());
  for (size_t i = 0; i < gpus.size(); ++i) free[gpus[i]] -= milli[i];
  return SlotFragmentation(node, needs.data(), free.data(), node.free_cpu_milli() - cpu_milli) - before;
}

std::optional<Candidate> FragmentationPolicy::Evaluate(const NodeState& node, const PodRequest& pod) const {
  std::optional<Candidate> out;
  EvaluateInto(node, pod, out, nullptr);
  return out;
}

void FragmentationPolicy::EvaluateInto(const NodeState& node, const PodRequest& pod,
                                       std::optional<Candidate>& out, NodeMemo* memo) const {
  const HostResources host = HostDemandOf(pod);
  const int64_t capacity = std::max<int64_t>(1, node.milli_capacity());
  // Fast path: one container with one vGPU, no init containers — every
  // feasible GPU is a candidate and the best one is chosen by its effect.
  const ContainerRequest* single = nullptr;
  int gpu_containers = 0;
  for (const ContainerRequest& c : pod.containers) {
    if (c.gpus > 0) {
      ++gpu_containers;
      single = &c;
    }
  }
  bool init_gpus = false;
  for (const ContainerRequest& c : pod.init_containers) init_gpus = init_gpus || c.gpus > 0;
  if (gpu_containers == 0 && !init_gpus && !mix_.empty()) {
    // No GPU asked: only the host resources change; no placement to choose.
    if (node.tracks_cpu() && host.cpu_milli > node.free_cpu_milli()) return out.reset();
    if (node.tracks_memory() && host.memory_mib > node.free_host_memory_mib()) return out.reset();
    FragmentationMeter meter(node, *prepared_, options_.use_memory, options_.demand_weighted, memo);
    double growth = options_.slots ? SlotGrowth(node, {}, {}, host.cpu_milli)
                                   : meter.AfterOne(-1, 0, host.cpu_milli, host.memory_mib) - meter.current();
    double util = static_cast<double>(capacity - node.free_milli_total()) / static_cast<double>(capacity);
    double bias = NodeBias(node);
    if (options_.cpu_only_away > 0)
      bias -= options_.cpu_only_away * static_cast<double>(node.free_milli_total()) / 1e6;
    if (options_.strand != 0) bias += StrandBias(node, meter, {}, {}, host.cpu_milli);
    out = Candidate{Score(growth, util) + bias, {}};
    return;
  }
  bool simple = gpu_containers == 1 && single->gpus == 1 && pod.init_containers.empty();
  if (!simple || mix_.empty()) {
    FitResult fit = FitNode(node, pod, GpuOrder::kBinpack);
    if (!fit.fits) return out.reset();
    std::vector<int> gpus;
    std::vector<int> milli;
    TakenPerGpu(node, fit.placement, gpus, milli);
    int64_t taken = 0;
    for (int m : milli) taken += m;
    double util_after = static_cast<double>(capacity - node.free_milli_total() + taken) / capacity;
    if (mix_.empty()) {
      out = Candidate{util_after, std::move(fit.placement)};
      return;
    }
    FragmentationMeter meter(node, *prepared_, options_.use_memory, options_.demand_weighted, memo);
    double growth = options_.slots
                        ? SlotGrowth(node, gpus, milli, host.cpu_milli)
                        : meter.AfterMany(gpus, milli, host.cpu_milli, host.memory_mib) - meter.current();
    double bias = NodeBias(node);
    if (gpu_containers == 0 && options_.cpu_only_away > 0) {
      // A pod without GPUs: among equal scores, the node with the least free
      // GPU, where its CPU strands the least GPU later.
      bias -= options_.cpu_only_away * static_cast<double>(node.free_milli_total()) / 1e6;
    }
    if (options_.whole != 0) {
      int idle_taken = 0;
      for (int g : gpus) idle_taken += node.gpus()[g].idle() ? 1 : 0;
      bias += WholeBias(node, idle_taken);
    }
    if (options_.strand != 0) bias += StrandBias(node, meter, gpus, milli, host.cpu_milli);
    out = Candidate{Score(growth, util_after) + bias, std::move(fit.placement)};
    return;
  }

  if (node.tracks_cpu() && host.cpu_milli > node.free_cpu_milli()) return out.reset();
  if (node.tracks_memory() && host.memory_mib > node.free_host_memory_mib()) return out.reset();
  const auto& gpus = node.gpus();
  const size_t g_count = gpus.size();
  // Each GPU checked once: the resolved memory of those that fit, -1 for the
  // others. Most nodes of a busy cluster have no room: find out before
  // building the meter.
  ScratchArray<int64_t, 16> fit_memory;
  int64_t* fits = fit_memory.Reset(g_count);
  bool any = false;
  for (size_t g = 0; g < g_count; ++g) {
    GpuCheck check = CheckGpuOf(node, static_cast<int>(g), *single, pod.filter);
    fits[g] = check.fits() ? check.memory_mib : -1;
    any = any || check.fits();
  }
  if (!any) return out.reset();
  FragmentationMeter meter(node, *prepared_, options_.use_memory, options_.demand_weighted, memo);
  // The candidates: each fitting GPU, what it would have left, and what it
  // would lose. GPUs of one kind with the same free share losing the same
  // milli change the fragmentation alike (idle GPUs, mostly): computed once.
  ScratchArray<int, 16> free_after_buffer;
  ScratchArray<int, 16> taken_buffer;
  ScratchArray<int, 16> distinct_buffer;  // per GPU: index into the distinct candidates
  ScratchArray<int, 16> gpu_buffer;       // distinct candidates: a GPU
  ScratchArray<int, 16> milli_buffer;     // distinct candidates: what it loses
  ScratchArray<double, 16> after_buffer;  // distinct candidates: fragmentation after
  int* free_after = free_after_buffer.Reset(g_count);
  int* taken = taken_buffer.Reset(g_count);
  int* distinct = distinct_buffer.Reset(g_count);
  int* cand_gpu = gpu_buffer.Reset(g_count);
  int* cand_milli = milli_buffer.Reset(g_count);
  double* cand_after = after_buffer.Reset(g_count);
  size_t cands = 0;
  for (size_t g = 0; g < g_count; ++g) {
    if (fits[g] < 0) continue;
    const int gi = static_cast<int>(g);
    free_after[g] =
        node.gpu_views()[g].free_milli_with(GpuUsage{fits[g], single->cores, 1, single->cores >= 100});
    taken[g] = meter.free_of(gi) - free_after[g];
    size_t k = 0;
    while (k < cands && !(meter.needs_of(cand_gpu[k]) == meter.needs_of(gi) &&
                          meter.free_of(cand_gpu[k]) == meter.free_of(gi) && cand_milli[k] == taken[g]))
      ++k;
    if (k == cands) {
      cand_gpu[cands] = gi;
      cand_milli[cands] = taken[g];
      ++cands;
    }
    distinct[g] = static_cast<int>(k);
  }
  int best = -1;
  double best_score = 0;
  int best_free_after = 0;
  int64_t best_memory = 0;
  // With FGD's σ bands alone and exact growth breaking equal bands, the
  // winner is the candidate of least growth, and its band is all the score
  // needs. The meter's estimates find it from the shapes each candidate
  // changes, without summing every shape for every candidate, when one
  // candidate is clearly least (no other within twice the estimates' error)
  // and no band edge lies within the error: then the exact sums below would
  // pick the same GPU and band, bit for bit. Otherwise (near-ties, a growth
  // at a band edge, GPUs of several kinds) the exact sums decide.
  const bool banded = options_.estimates && options_.sigmoid_scale > 0 && options_.pack_weight == 0 &&
                      !options_.slots && options_.inner_exact;
  ScratchArray<FragmentationMeter::GrowthEstimate, 16> estimate_buffer;
  FragmentationMeter::GrowthEstimate* estimate = estimate_buffer.Reset(cands);
  double error = 0;
  if (banded && meter.GrowthEstimates({cand_gpu, cands}, {cand_milli, cands}, host.cpu_milli,
                                      {estimate, cands}, error)) {
    size_t least = 0;
    for (size_t k = 1; k < cands; ++k) {
      if (estimate[k].growth < estimate[least].growth) least = k;
    }
    // Every other candidate clearly above, or provably equal to it: alike,
    // or both changing no term (both exact growths are 0).
    const FragmentationMeter::GrowthEstimate& low = estimate[least];
    auto equal_to_least = [&](size_t k) {
      return k == least || (low.alike != 0 && estimate[k].alike == low.alike) ||
             (low.unchanged && estimate[k].unchanged);
    };
    bool clear = true;
    for (size_t k = 0; k < cands && clear; ++k)
      clear = equal_to_least(k) || estimate[k].growth > low.growth + 2 * error;
    std::optional<double> band;
    if (clear) {
      band = low.unchanged ? std::optional<double>(Score(0.0, 0.0)) : BandWithin(low.growth, error);
    }
    if (band) {
      // Equal growths (and bands) go to the fuller GPU, then the lower index.
      for (size_t g = 0; g < g_count; ++g) {
        if (fits[g] < 0) continue;
        if (!equal_to_least(static_cast<size_t>(distinct[g]))) continue;
        if (best < 0 || free_after[g] < best_free_after) {
          best = static_cast<int>(g);
          best_free_after = free_after[g];
        }
      }
      best_score = *band;
      best_memory = fits[best];
    }
  }
  if (best < 0) {
    meter.AfterEach({cand_gpu, cands}, {cand_milli, cands}, host.cpu_milli, host.memory_mib,
                    {cand_after, cands});
    double best_growth = 0;
    // With FGD's σ bands alone (no packing term, no slot experiment) and exact
    // growth breaking equal bands, the score falls as the growth rises, so no
    // candidate whose growth is clearly above the smallest can win: its band is
    // at most the smallest one's, and an equal band goes to the smaller growth.
    // Only candidates within a hair of the smallest growth are scored (exp is
    // within one ulp, so a band can only invert between nearly equal growths):
    // the same winner as scoring every candidate, with one exp per node
    // instead of one per GPU.
    double growth_bound = std::numeric_limits<double>::infinity();
    if (options_.sigmoid_scale > 0 && options_.pack_weight == 0 && !options_.slots && options_.inner_exact) {
      double least = std::numeric_limits<double>::infinity();
      for (size_t g = 0; g < g_count; ++g) {
        if (fits[g] >= 0) least = std::min(least, cand_after[distinct[g]] - meter.current());
      }
      growth_bound = least + 1e-9 * (1 + std::abs(least));
    }
    for (size_t g = 0; g < g_count; ++g) {
      if (fits[g] < 0) continue;
      double growth = cand_after[distinct[g]] - meter.current();
      if (growth > growth_bound) continue;
      if (options_.slots) {
        const int one_gpu = static_cast<int>(g);
        growth = SlotGrowth(node, {&one_gpu, 1}, {&taken[g], 1}, host.cpu_milli);
      }
      double util_after = static_cast<double>(capacity - node.free_milli_total() + taken[g]) / capacity;
      double score = Score(growth, util_after);
      // Inside the node: the highest score wins; equal scores go to the smaller
      // exact growth (when inner_exact), then the fuller GPU, then the lower index.
      bool better = best < 0 || score > best_score;
      if (!better && score == best_score) {
        if (options_.inner_exact && growth != best_growth) {
          better = growth < best_growth;
        } else {
          better = free_after[g] < best_free_after;
        }
      }
      if (better) {
        best = static_cast<int>(g);
        best_growth = growth;
        best_score = score;
        best_free_after = free_after[g];
        best_memory = fits[g];
      }
    }
  }
  if (best < 0) return out.reset();
  // The slice as FitNode writes it: the GPU's resolved cores (100 on an
  // exclusive GPU) and the MPS mark, which bind commits and the node reads.
  // Written over what `out` held: resize keeps the vectors' storage.
  const GpuCheck chosen = CheckGpuOf(node, best, *single, pod.filter);
  if (!out) out.emplace();
  double hole_bias = 0;
  if (options_.hole > 0) {
    // The smallest need of any shape on this GPU (the needs table's shapes in
    // increasing need come after the per-shape needs).
    const int* col = meter.needs_of(best);
    const int smallest = prepared_->size() > 0 ? col[col[prepared_->size()]] : INT_MAX;
    if (best_free_after > 0 && best_free_after < smallest) hole_bias = -0.3;
    if (options_.hole == 2 && best_free_after == 0) hole_bias = 0.3;
  }
  out->score = best_score + NodeBias(node);
  if (options_.hole > 0 || options_.whole != 0)
    out->score += hole_bias + WholeBias(node, node.gpus()[best].idle() ? 1 : 0);
  if (options_.strand != 0)
    out->score += StrandBias(node, meter, {&best, 1}, {&taken[best], 1}, host.cpu_milli);
  out->placement.containers.resize(1);
  ContainerPlacement& cp = out->placement.containers[0];
  cp.container = static_cast<int>(single - pod.containers.data());
  cp.init = false;
  cp.slices.resize(1);
  cp.slices[0] = {best, best_memory, chosen.cores, node.gpu_views()[best].mps};
}

}  // namespace tessera::core
