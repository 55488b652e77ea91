#include "trace/baselines.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "core/fit.h"

namespace tessera::trace {
namespace {

using core::Candidate;
using core::FitNode;
using core::FitResult;
using core::GpuOrder;
using core::NodeState;
using core::PodRequest;

constexpr double kCpuNorm = 128000.0;
constexpr double kGpuNorm = 8000.0;

// The task as the artifact sees it: CPU c, d GPUs of u milli each.
struct Task {
  int64_t c = 0;
  int d = 0;
  int u = 0;
  const core::ContainerRequest* container = nullptr;
  bool sharing() const { return d == 1 && u < 1000; }
  int64_t r() const { return int64_t{d} * u; }
};

Task TaskOf(const NodeState& node, const PodRequest& pod) {
  Task t;
  t.c = pod.cpu_milli;
  for (const core::ContainerRequest& c : pod.containers) {
    if (c.gpus <= 0) continue;
    t.container = &c;
    t.d = c.gpus;
    core::TaskShape shape = core::ShapeOf(pod);
    t.u = node.gpus().empty() ? 1000 : core::MilliNeeded(shape, node.gpus()[0].gpu);
    break;
  }
  return t;
}

// Fits (host + GPUs) with the default in-node choice: best fit for sharing
// tasks, lowest-index free GPUs for whole-GPU tasks.
std::optional<FitResult> BestFitPlacement(const NodeState& node, const PodRequest& pod) {
  FitResult fit = FitNode(node, pod, GpuOrder::kBinpack);
  if (!fit.fits) return std::nullopt;
  return fit;
}

class RandomFit : public core::Policy {
 public:
  std::string_view name() const override { return "random"; }
  bool picks_uniformly() const override { return true; }
  std::optional<Candidate> Evaluate(const NodeState& node, const PodRequest& pod) const override {
    auto fit = BestFitPlacement(node, pod);
    if (!fit) return std::nullopt;
    return Candidate{0, std::move(fit->placement)};
  }
  void Refine(const NodeState& node, const PodRequest& pod, Candidate& chosen,
              core::UniformDraw& draw) const override {
    Task t = TaskOf(node, pod);
    if (!t.sharing() || chosen.placement.containers.size() != 1) return;
    std::vector<int> fitting;
    for (size_t g = 0; g < node.gpus().size(); ++g) {
      if (core::CheckGpu(node.gpus()[g], *t.container, pod.filter).fits())
        fitting.push_back(static_cast<int>(g));
    }
    if (fitting.empty()) return;
    chosen.placement.containers[0].slices[0].gpu = fitting[draw.Below(fitting.size())];
  }
};

// The baselines that place a task as BestFitPlacement does and differ only in
// how they score the node: each supplies Score, given the task and the fit.
class ScoredBestFit : public core::Policy {
 public:
  std::optional<Candidate> Evaluate(const NodeState& node, const PodRequest& pod) const final {
    auto fit = BestFitPlacement(node, pod);
    if (!fit) return std::nullopt;
    const double score = Score(node, TaskOf(node, pod), *fit);
    return Candidate{score, std::move(fit->placement)};
  }

 protected:
  virtual double Score(const NodeState& node, const Task& t, const FitResult& fit) const = 0;
};

class DotProd : public ScoredBestFit {
 public:
  std::string_view name() const override { return "dotprod"; }

 protected:
  double Score(const NodeState& node, const Task& t, const FitResult&) const override {
    double C = static_cast<double>(node.free_cpu_milli());
    double L = static_cast<double>(node.free_milli_total());
    double product = (C / kCpuNorm) * (static_cast<double>(t.c) / kCpuNorm) +
                     (L / kGpuNorm) * (static_cast<double>(t.r()) / kGpuNorm);
    return std::floor(100.0 * (1.0 - product / 2.0));
  }
};

class Clustering : public ScoredBestFit {
 public:
  std::string_view name() const override { return "clustering"; }

 protected:
  double Score(const NodeState& node, const Task& t, const FitResult&) const override {
    if (t.d == 0) return 0;
    const int tag = t.sharing() ? 0 : t.d;
    const int64_t L = node.free_milli_total();
    int64_t score = 25 * (8000 - L) / 8000;
    const auto& tags = node.workload_tags();
    if (tags.empty()) {
      score += 25;
    } else if (tags.count(tag)) {
      score += tags.size() == 1 ? 75 : 50;
    }
    return static_cast<double>(score);
  }
};

class Packing : public ScoredBestFit {
 public:
  std::string_view name() const override { return "packing"; }

 protected:
  double Score(const NodeState& node, const Task& t, const FitResult& fit) const override {
    if (t.d == 0) return 0;
    const int gpus = static_cast<int>(node.gpus().size());
    const int free = node.idle_gpus();
    int score = 0;
    if (free == gpus) {
      score = std::max(33 - free, free);
    } else {
      int fully_free_used = 0;
      int tenths = 0;
      for (const core::SlicePlacement& s : fit.placement.containers[0].slices) {
        int left = node.gpus()[s.gpu].free_milli();
        if (left == 1000) ++fully_free_used;
        tenths += left * 100 / 1000;
      }
      score = fully_free_used > 0 ? std::max(50 - fully_free_used, 33) : std::max(100 - tenths / 10, 50);
    }
    return static_cast<double>(score);
  }
};

// The artifact min–max normalises the truncated scores over the feasible nodes
// (0–100). Scores here lie in [0, 100] (free CPU ≤ 128 cores in the trace), so
// that normalisation keeps the order and the ties, and is left out.
class BestFit : public ScoredBestFit {
 public:
  std::string_view name() const override { return "bestfit"; }

 protected:
  double Score(const NodeState& node, const Task& t, const FitResult&) const override {
    double s = 0.5 * static_cast<double>(node.free_cpu_milli() - t.c) / kCpuNorm +
               0.5 * static_cast<double>(node.free_milli_total() - t.r()) / kGpuNorm;
    return std::floor((1.0 - s) * 100.0);
  }
};

double Sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

class Fgd : public core::Policy {
 public:
  explicit Fgd(core::WorkloadMix mix) : mix_(std::make_shared<const core::PreparedMix>(std::move(mix))) {}
  std::string_view name() const override { return "fgd"; }
  std::optional<Candidate> Evaluate(const NodeState& node, const PodRequest& pod) const override {
    Task t = TaskOf(node, pod);
    if (t.sharing()) {
      if (node.free_cpu_milli() < pod.cpu_milli || node.free_host_memory_mib() < pod.host_memory_mib) {
        return std::nullopt;
      }
      bool any = false;
      for (size_t g = 0; g < node.gpus().size() && !any; ++g) {
        any = core::CheckGpu(node.gpus()[g], *t.container, pod.filter).fits();
      }
      if (!any) return std::nullopt;
      core::FragmentationMeter meter(node, *mix_, /*use_memory=*/false);
      int best = -1;
      int best_score = -1;
      int64_t best_memory = 0;
      for (size_t g = 0; g < node.gpus().size(); ++g) {
        core::GpuCheck check = core::CheckGpu(node.gpus()[g], *t.container, pod.filter);
        if (!check.fits()) continue;
        double after = meter.AfterOne(static_cast<int>(g), t.u, t.c, 0);
        int s = static_cast<int>(std::floor(100.0 * Sigmoid((meter.current() - after) / 1000.0)));
        if (s > best_score) {
          best = static_cast<int>(g);
          best_score = s;
          best_memory = check.memory_mib;
        }
      }
      if (best < 0) return std::nullopt;
      Candidate c;
      c.score = best_score;
      int index = static_cast<int>(t.container - pod.containers.data());
      c.placement.containers.push_back({index, false, {{best, best_memory, t.container->cores}}});
      return c;
    }
    auto fit = BestFitPlacement(node, pod);
    if (!fit) return std::nullopt;
    core::FragmentationMeter meter(node, *mix_, /*use_memory=*/false);
    double after = 0;
    if (t.d == 0) {
      after = meter.AfterOne(-1, 0, t.c, 0);
    } else {
      std::vector<int> gpus;
      std::vector<int> milli;
      for (const core::SlicePlacement& s : fit->placement.containers[0].slices) {
        gpus.push_back(s.gpu);
        milli.push_back(t.u);
      }
      after = meter.AfterMany(gpus, milli, t.c, 0);
    }
    double score = std::floor(100.0 * Sigmoid((meter.current() - after) / 1000.0));
    return Candidate{score, std::move(fit->placement)};
  }

 private:
  std::shared_ptr<const core::PreparedMix> mix_;  // shared by copies; thread-safe
};

// One option of the experiment variants: its key, what it means, and the
// values it accepts (checked before the policy is built).
struct ExperimentOption {
  std::string_view key;
  std::string_view accepts;  // for the error message
  double min;
  double max;
  bool whole;  // integers only
};

constexpr ExperimentOption kExperimentOptions[] = {
    {"sig", "a number >= 0 (0 = no sigmoid bands)", 0, 1e12, false},
    {"tol", "a number >= 0 (band width of linear bands when sig=0)", 0, 1e12, false},
    {"pack", "a number (packing weight)", -1e12, 1e12, false},
    {"dw", "0 or 1", 0, 1, true},
    {"slots", "0 or 1", 0, 1, true},
    {"cov", "a number in (0, 1], e.g. 0.95", 1e-9, 1, false},
    {"relearn", "a whole number >= 1 (pods between mix updates)", 1, 1e12, true},
    {"prior", "0 or 1", 0, 1, true},
    {"fixed", "0 or 1", 0, 1, true},
    {"inner", "0 or 1", 0, 1, true},
    {"away", "a number >= 0 (0 = off)", 0, 1e12, false},
    {"order", "a whole number from -4 to 4 (0 = off)", -4, 4, true},
    {"mem", "0 or 1", 0, 1, true},
    {"hole", "0, 1 or 2", 0, 2, true},
    {"whole", "a whole number from 0 to 7", 0, 7, true},
    {"wholew", "a number >= 0 (bias of whole=, default 0.3)", 0, 1e12, false},
    {"strand", "a whole number from 0 to 3", 0, 3, true},
    {"strandw", "a number >= 0 (bias of strand=, default 100)", 0, 1e12, false},
    {"strandr", "a number > 0 (factor on the CPU strand= reserves, default 1)", 1e-9, 1e12, false},
};

std::string ExperimentOptionList() {
  std::string keys;
  for (const ExperimentOption& o : kExperimentOptions)
    keys += (keys.empty() ? "" : ", ") + std::string(o.key);
  return keys;
}

// "tessera:k=v,...": every option is parsed and checked (a later option is
// never ignored); errors name the policy text and the option.
Result<std::unique_ptr<core::Policy>> MakeExperimentPolicy(std::string_view name,
                                                           const std::vector<TraceTask>& tasks) {
  const std::string text(name);
  auto bad = [&](const std::string& why) {
    return Error{"policy '" + text + "': " + why + " (options: " + ExperimentOptionList() +
                 "; e.g. tessera:sig=1000,prior=1; see docs/placement.md)"};
  };
  const std::string_view rest = name.substr(std::string_view("tessera:").size());
  if (rest.empty()) return bad("no options after 'tessera:'");
  std::map<std::string, double, std::less<>> given;
  size_t start = 0;
  for (;;) {
    const size_t comma = rest.find(',', start);
    const std::string_view item =
        rest.substr(start, comma == std::string_view::npos ? rest.npos : comma - start);
    const size_t eq = item.find('=');
    if (item.empty()) return bad("empty option (two commas, or a trailing comma?)");
    if (eq == std::string_view::npos) return bad("option '" + std::string(item) + "' is not key=value");
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    const ExperimentOption* spec = nullptr;
    for (const ExperimentOption& o : kExperimentOptions) {
      if (o.key == key) spec = &o;
    }
    if (spec == nullptr) return bad("unknown option '" + std::string(key) + "'");
    if (given.count(key)) return bad("option " + std::string(key) + " is given twice");
    double v = 0;
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    const std::string quoted = "'" + std::string(value) + "'";
    if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() || !std::isfinite(v)) {
      return bad("option " + std::string(key) + ": " + quoted + " is not a number; expected " +
                 std::string(spec->accepts));
    }
    if (v < spec->min || v > spec->max || (spec->whole && v != std::floor(v))) {
      return bad("option " + std::string(key) + ": " + quoted + " is out of range; expected " +
                 std::string(spec->accepts));
    }
    given.emplace(std::string(key), v);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }

  core::FragmentationPolicy::Options o;
  auto option = [&](std::string_view key) -> std::optional<double> {
    auto it = given.find(key);
    return it == given.end() ? std::nullopt : std::optional<double>(it->second);
  };
  if (auto v = option("tol")) o.tolerance = *v;
  if (auto v = option("pack")) o.pack_weight = *v;
  if (auto v = option("mem")) o.use_memory = *v != 0;
  if (auto v = option("cov")) o.coverage = *v;
  if (auto v = option("sig")) o.sigmoid_scale = *v;
  if (auto v = option("away")) o.cpu_only_away = *v;
  if (auto v = option("order")) o.order = *v;
  if (auto v = option("inner")) o.inner_exact = *v != 0;
  if (auto v = option("dw")) o.demand_weighted = *v != 0;
  if (auto v = option("slots")) o.slots = *v != 0;
  if (auto v = option("hole")) o.hole = static_cast<int>(*v);
  if (auto v = option("whole")) o.whole = static_cast<int>(*v);
  if (auto v = option("wholew")) o.whole_weight = *v;
  if (auto v = option("strand")) o.strand = static_cast<int>(*v);
  if (auto v = option("strandw")) o.strand_weight = *v;
  if (auto v = option("strandr")) o.strand_cpu_factor = *v;
  if (auto v = option("relearn")) o.relearn_every = static_cast<int64_t>(*v);
  const bool prior = option("prior").value_or(0) != 0;
  const bool fixed = option("fixed").value_or(0) != 0;
  if (prior && fixed) return bad("prior=1 and fixed=1 exclude each other (a fixed mix learns nothing)");
  if (fixed)
    return std::unique_ptr<core::Policy>(new core::FragmentationPolicy(o, TypicalTasks(tasks, o.coverage)));
  if (prior) {
    core::MixCounter counts;
    for (const TraceTask& t : tasks) counts.Add(core::ShapeOf(ToPodRequest(t)));
    return std::unique_ptr<core::Policy>(new core::FragmentationPolicy(o, std::move(counts)));
  }
  return std::unique_ptr<core::Policy>(new core::FragmentationPolicy(o));
}

}  // namespace

core::WorkloadMix TypicalTasks(const std::vector<TraceTask>& tasks, double coverage) {
  core::MixCounter counter;
  for (const TraceTask& task : tasks) {
    core::TaskShape s;
    s.cpu_milli = task.cpu_milli;
    if (task.num_gpu > 0) {
      s.gpus = task.num_gpu;
      s.gpu_memory_mib = int64_t{task.gpu_milli} * kMibPerMilli;
      s.cores = task.gpu_milli / 10;
      s.use_types = task.gpu_spec;
    }
    counter.Add(s);
  }
  return counter.Typical(coverage);
}

std::vector<std::string> TracePolicyNames() {
  return {"random",  "dotprod",        "clustering",   "packing",     "bestfit",     "fgd",
          "tessera", "tessera-online", "node-binpack", "node-spread", "gpu-binpack", "gpu-spread"};
}

Result<std::unique_ptr<core::Policy>> MakeTracePolicy(std::string_view name,
                                                      const std::vector<TraceTask>& tasks) {
  if (name == "random") return std::unique_ptr<core::Policy>(new RandomFit());
  if (name == "dotprod") return std::unique_ptr<core::Policy>(new DotProd());
  if (name == "clustering") return std::unique_ptr<core::Policy>(new Clustering());
  if (name == "packing") return std::unique_ptr<core::Policy>(new Packing());
  if (name == "bestfit") return std::unique_ptr<core::Policy>(new BestFit());
  if (name == "fgd") return std::unique_ptr<core::Policy>(new Fgd(TypicalTasks(tasks)));
  if (name == "tessera") {
    // The default policy learns its mix from the pods it sees; here it starts
    // from the trace's own task counts, the same information FGD is given.
    core::MixCounter prior;
    for (const TraceTask& t : tasks) prior.Add(core::ShapeOf(ToPodRequest(t)));
    return std::unique_ptr<core::Policy>(new core::FragmentationPolicy({}, std::move(prior)));
  }
  if (name == "tessera-online") return core::MakePolicy("tessera");
  // The placement policies of tessera-scheduler and `tessera run`, by the
  // same names (docs/placement.md, "Policy names").
  for (const std::string& core_name : core::PolicyNames()) {
    if (name == core_name) return core::MakePolicy(name);
  }
  // Experiments: "tessera:sig=1000,inner=1,away=1,prior=1" (docs/placement.md).
  if (name.rfind("tessera:", 0) == 0) return MakeExperimentPolicy(name, tasks);
  std::string all;
  for (const std::string& n : TracePolicyNames()) all += (all.empty() ? "" : ", ") + n;
  return Error{"unknown policy '" + std::string(name) + "' (valid: " + all + ")"};
}

}  // namespace tessera::trace
