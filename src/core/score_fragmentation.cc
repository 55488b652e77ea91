#include "core/score_fragmentation.h"

#include <algorithm>
#include <climits>
#include <cmath>

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

FragmentationMeter::FragmentationMeter(const NodeState& node, const WorkloadMix& mix, bool use_memory,
                                       bool demand_weighted)
    : node_(node), mix_(mix), use_memory_(use_memory) {
  const auto& gpus = node.gpus();
  const size_t g_count = gpus.size();
  free_.resize(g_count);
  for (size_t g = 0; g < g_count; ++g) {
    free_[g] = gpus[g].free_milli();
    total_free_ += free_[g];
  }
  need_.assign(mix.size() * g_count, INT_MAX);
  per_.resize(mix.size());
  weight_.resize(mix.size());
  for (size_t m = 0; m < mix.size(); ++m) {
    const TaskShape& shape = mix[m].shape;
    PerShape& p = per_[m];
    weight_[m] = mix[m].weight;
    int64_t demand = -1;
    for (size_t g = 0; g < g_count; ++g) {
      int need = INT_MAX;
      if (g > 0 && gpus[g].gpu.usable() == gpus[g - 1].gpu.usable() &&
          gpus[g].gpu.memory_mib == gpus[g - 1].gpu.memory_mib &&
          gpus[g].gpu.model == gpus[g - 1].gpu.model) {
        need = need_[m * g_count + g - 1];  // same kind of GPU as the previous one
      } else if (shape.gpus > 0 && gpus[g].gpu.usable() && ShapeAllowsModel(shape, gpus[g].gpu.model)) {
        need = MilliNeeded(shape, gpus[g].gpu);
        if (demand < 0) demand = int64_t{shape.gpus} * need;
      }
      need_[m * g_count + g] = need;
      p.Count(free_[g], need, +1);
    }
    if (demand_weighted) {
      // A shape no GPU here can serve weighs as its GPU count (its fragment is
      // all free GPU whatever is placed; only the total matters).
      weight_[m] *= static_cast<double>(demand < 0 ? int64_t{shape.gpus} * 1000 : demand) / 1000.0;
    }
  }
  current_ =
      Sum([&](size_t m) { return per_[m]; }, total_free_, node.free_cpu_milli(), node.free_host_memory_mib());
}

template <typename PerOf>
double FragmentationMeter::Sum(PerOf per_of, int64_t total_free, int64_t cpu_free, int64_t mem_free) const {
  const bool cpu = node_.tracks_cpu();
  const bool mem = use_memory_ && node_.tracks_memory();
  double f = 0;
  for (size_t m = 0; m < mix_.size(); ++m) {
    const TaskShape& s = mix_[m].shape;
    PerShape p = per_of(m);
    bool fits = s.gpus > 0 && p.fit_gpus >= s.gpus && !(cpu && cpu_free < s.cpu_milli) &&
                !(mem && s.memory_mib > 0 && mem_free < s.memory_mib);
    f += weight_[m] * static_cast<double>(fits ? p.small_free : total_free);
  }
  return f;
}

double FragmentationMeter::AfterOne(int gpu, int milli, int64_t cpu_milli, int64_t memory_mib) const {
  const size_t g_count = free_.size();
  const int before = gpu >= 0 ? free_[gpu] : 0;
  const int after = before - milli;
  auto per_of = [&](size_t m) {
    PerShape p = per_[m];
    if (gpu >= 0) p.Move(need_[m * g_count + gpu], before, after);
    return p;
  };
  return Sum(per_of, total_free_ - (gpu >= 0 ? milli : 0), node_.free_cpu_milli() - cpu_milli,
             node_.free_host_memory_mib() - memory_mib);
}

double FragmentationMeter::AfterMany(std::span<const int> gpus, std::span<const int> milli, int64_t cpu_milli,
                                     int64_t memory_mib) const {
  const size_t g_count = free_.size();
  int64_t taken = 0;
  for (int m : milli) taken += m;
  auto per_of = [&](size_t m) {
    PerShape p = per_[m];
    for (size_t i = 0; i < gpus.size(); ++i) {
      const int before = free_[gpus[i]];
      p.Move(need_[m * g_count + gpus[i]], before, before - milli[i]);
    }
    return p;
  };
  return Sum(per_of, total_free_ - taken, node_.free_cpu_milli() - cpu_milli,
             node_.free_host_memory_mib() - memory_mib);
}

FragmentationPolicy::FragmentationPolicy() : FragmentationPolicy(Options{}) {}

FragmentationPolicy::FragmentationPolicy(Options options) : options_(options) {}

FragmentationPolicy::FragmentationPolicy(Options options, WorkloadMix fixed_mix)
    : options_(options), learn_(false), mix_(std::move(fixed_mix)) {}

FragmentationPolicy::FragmentationPolicy(Options options, MixCounter prior)
    : options_(options), counter_(std::move(prior)) {
  if (counter_.total() > 0) {
    mix_ = counter_.Typical(options_.coverage);
    ++epoch_;
    next_relearn_ =
        counter_.total() + std::max<int64_t>(1, options_.relearn_every > 0 ? options_.relearn_every : 512);
  }
}

void FragmentationPolicy::Observe(const PodRequest& pod) {
  if (!learn_) return;
  counter_.Add(ShapeOf(pod));
  if (counter_.total() >= next_relearn_) {
    mix_ = counter_.Typical(options_.coverage);
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
    const GpuState& gs = node.gpus()[g];
    gpus.push_back(static_cast<int>(g));
    milli.push_back(gs.free_milli() - gs.free_milli_with(add[g]));
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

std::optional<Candidate> FragmentationPolicy::Evaluate(const NodeState& node, const PodRequest& pod) const {
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
    if (node.tracks_cpu() && host.cpu_milli > node.free_cpu_milli()) return std::nullopt;
    if (node.tracks_memory() && host.memory_mib > node.free_host_memory_mib()) return std::nullopt;
    FragmentationMeter meter(node, mix_, options_.use_memory, options_.demand_weighted);
    double growth = meter.AfterOne(-1, 0, host.cpu_milli, host.memory_mib) - meter.current();
    double util = static_cast<double>(capacity - node.free_milli_total()) / static_cast<double>(capacity);
    double bias = NodeBias(node);
    if (options_.cpu_only_away > 0)
      bias -= options_.cpu_only_away * static_cast<double>(node.free_milli_total()) / 1e6;
    return Candidate{Score(growth, util) + bias, {}};
  }
  bool simple = gpu_containers == 1 && single->gpus == 1 && pod.init_containers.empty();
  if (!simple || mix_.empty()) {
    FitResult fit = FitNode(node, pod, GpuOrder::kBinpack);
    if (!fit.fits) return std::nullopt;
    std::vector<int> gpus;
    std::vector<int> milli;
    TakenPerGpu(node, fit.placement, gpus, milli);
    int64_t taken = 0;
    for (int m : milli) taken += m;
    double util_after = static_cast<double>(capacity - node.free_milli_total() + taken) / capacity;
    if (mix_.empty()) return Candidate{util_after, std::move(fit.placement)};
    FragmentationMeter meter(node, mix_, options_.use_memory, options_.demand_weighted);
    double growth = meter.AfterMany(gpus, milli, host.cpu_milli, host.memory_mib) - meter.current();
    double bias = NodeBias(node);
    if (gpu_containers == 0 && options_.cpu_only_away > 0) {
      // A pod without GPUs: among equal scores, the node with the least free
      // GPU, where its CPU strands the least GPU later.
      bias -= options_.cpu_only_away * static_cast<double>(node.free_milli_total()) / 1e6;
    }
    return Candidate{Score(growth, util_after) + bias, std::move(fit.placement)};
  }

  if (node.tracks_cpu() && host.cpu_milli > node.free_cpu_milli()) return std::nullopt;
  if (node.tracks_memory() && host.memory_mib > node.free_host_memory_mib()) return std::nullopt;
  const auto& gpus = node.gpus();
  // Most nodes of a busy cluster have no room: find out before building the meter.
  bool any = false;
  for (size_t g = 0; g < gpus.size() && !any; ++g) any = CheckGpu(gpus[g], *single, pod.filter).fits();
  if (!any) return std::nullopt;
  FragmentationMeter meter(node, mix_, options_.use_memory, options_.demand_weighted);
  int best = -1;
  double best_score = 0;
  int best_free_after = 0;
  int64_t best_memory = 0;
  double best_growth = 0;
  for (size_t g = 0; g < gpus.size(); ++g) {
    GpuCheck check = CheckGpu(gpus[g], *single, pod.filter);
    if (!check.fits()) continue;
    int free_after =
        gpus[g].free_milli_with(GpuUsage{check.memory_mib, single->cores, 1, single->cores >= 100});
    int taken = gpus[g].free_milli() - free_after;
    double growth =
        meter.AfterOne(static_cast<int>(g), taken, host.cpu_milli, host.memory_mib) - meter.current();
    double util_after = static_cast<double>(capacity - node.free_milli_total() + taken) / capacity;
    double score = Score(growth, util_after);
    // Inside the node: the highest score wins; equal scores go to the smaller
    // exact growth (when inner_exact), then the fuller GPU, then the lower index.
    bool better = best < 0 || score > best_score;
    if (!better && score == best_score) {
      if (options_.inner_exact && growth != best_growth) {
        better = growth < best_growth;
      } else {
        better = free_after < best_free_after;
      }
    }
    if (better) {
      best = static_cast<int>(g);
      best_growth = growth;
      best_score = score;
      best_free_after = free_after;
      best_memory = check.memory_mib;
    }
  }
  if (best < 0) return std::nullopt;
  Candidate c;
  c.score = best_score + NodeBias(node);
  int index = static_cast<int>(single - pod.containers.data());
  c.placement.containers.push_back({index, false, {{best, best_memory, single->cores}}});
  return c;
}

}  // namespace tessera::core
