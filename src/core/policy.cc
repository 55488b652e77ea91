#include "core/policy.h"

#include <algorithm>

#include "core/score_fragmentation.h"

namespace tessera::core {
namespace {

// Milli-GPU the placement takes from each GPU it touches (app containers).
std::vector<std::pair<int, int>> MilliTaken(const NodeState& node, const Placement& placement) {
  std::vector<GpuUsage> add(node.gpus().size());
  for (const ContainerPlacement& cp : placement.containers) {
    if (cp.init) continue;
    for (const SlicePlacement& s : cp.slices) {
      add[s.gpu].memory_mib += s.memory_mib;
      add[s.gpu].cores += s.cores;
      add[s.gpu].slots += 1;
      add[s.gpu].exclusive = add[s.gpu].exclusive || s.cores >= 100;
    }
  }
  std::vector<std::pair<int, int>> taken;
  for (size_t g = 0; g < add.size(); ++g) {
    if (add[g].slots == 0) continue;
    const GpuState& gs = node.gpus()[g];
    taken.push_back({static_cast<int>(g), gs.free_milli() - gs.free_milli_with(add[g])});
  }
  return taken;
}

enum class Goal { kNodeBinpack, kNodeSpread, kGpuBinpack, kGpuSpread };

// The four classic policies: the node score is how full the node (or the
// chosen GPUs) end up, 0..1, negated for spreading.
class UtilisationPolicy : public Policy {
 public:
  UtilisationPolicy(std::string name, Goal goal) : name_(std::move(name)), goal_(goal) {}
  std::string_view name() const override { return name_; }

  std::optional<Candidate> Evaluate(const NodeState& node, const PodRequest& pod) const override {
    bool spread = goal_ == Goal::kNodeSpread || goal_ == Goal::kGpuSpread;
    FitResult fit = FitNode(node, pod, spread ? GpuOrder::kSpread : GpuOrder::kBinpack);
    if (!fit.fits) return std::nullopt;
    double score = 0;
    if (goal_ == Goal::kNodeBinpack || goal_ == Goal::kNodeSpread) {
      score = NodeUtilisationAfter(node, fit.placement);
    } else {
      // Mean fullness of the chosen GPUs after placement.
      auto taken = MilliTaken(node, fit.placement);
      double sum = 0;
      for (auto [g, milli] : taken) sum += (1000.0 - (node.gpus()[g].free_milli() - milli)) / 1000.0;
      score =
          taken.empty() ? NodeUtilisationAfter(node, fit.placement) : sum / static_cast<double>(taken.size());
    }
    return Candidate{spread ? -score : score, std::move(fit.placement)};
  }

  std::optional<GpuOrder> gpu_order() const override {
    return goal_ == Goal::kNodeSpread || goal_ == Goal::kGpuSpread ? GpuOrder::kSpread : GpuOrder::kBinpack;
  }

 private:
  std::string name_;
  Goal goal_;
};

// A policy's node choice with FitNode's GPUs in a fixed order.
class GpuOrderedPolicy : public Policy {
 public:
  GpuOrderedPolicy(std::shared_ptr<const Policy> inner, GpuOrder order)
      : inner_(std::move(inner)),
        order_(order),
        name_(std::string(inner_->name()) + "+gpu-" + std::string(GpuOrderName(order))) {}
  std::string_view name() const override { return name_; }

  std::optional<Candidate> Evaluate(const NodeState& node, const PodRequest& pod) const override {
    std::optional<Candidate> c;
    EvaluateInto(node, pod, c, nullptr);
    return c;
  }
  // The inner policy's score, with the node's memo (its own work).
  void EvaluateInto(const NodeState& node, const PodRequest& pod, std::optional<Candidate>& out,
                    NodeMemo* memo) const override {
    inner_->EvaluateInto(node, pod, out, memo);
    if (!out) return;
    FitResult fit = FitNode(node, pod, order_);
    if (!fit.fits) return out.reset();  // not reached: fit does not depend on the order
    out->placement = std::move(fit.placement);
  }
  uint64_t epoch() const override { return inner_->epoch(); }
  bool picks_uniformly() const override { return inner_->picks_uniformly(); }
  std::optional<GpuOrder> gpu_order() const override { return order_; }

 private:
  std::shared_ptr<const Policy> inner_;
  GpuOrder order_;
  std::string name_;
};

}  // namespace

std::string_view GpuOrderName(GpuOrder order) {
  return order == GpuOrder::kSpread ? "spread" : "binpack";
}

std::shared_ptr<const Policy> WithGpuOrder(std::shared_ptr<const Policy> policy, GpuOrder order) {
  if (policy->gpu_order() == order) return policy;
  return std::make_shared<GpuOrderedPolicy>(std::move(policy), order);
}

double NodeUtilisationAfter(const NodeState& node, const Placement& placement) {
  if (node.gpus().empty()) return 0;
  int64_t taken = 0;
  for (auto [g, milli] : MilliTaken(node, placement)) taken += milli;
  double used = static_cast<double>(node.milli_capacity() - node.free_milli_total() + taken);
  return used / static_cast<double>(node.milli_capacity());
}

std::vector<std::string> PolicyNames() {
  return {"tessera", "node-binpack", "node-spread", "gpu-binpack", "gpu-spread"};
}

Result<std::unique_ptr<Policy>> MakePolicy(std::string_view name) {
  if (name == "tessera") return std::unique_ptr<Policy>(new FragmentationPolicy());
  if (name == "node-binpack")
    return std::unique_ptr<Policy>(new UtilisationPolicy("node-binpack", Goal::kNodeBinpack));
  if (name == "node-spread")
    return std::unique_ptr<Policy>(new UtilisationPolicy("node-spread", Goal::kNodeSpread));
  if (name == "gpu-binpack")
    return std::unique_ptr<Policy>(new UtilisationPolicy("gpu-binpack", Goal::kGpuBinpack));
  if (name == "gpu-spread")
    return std::unique_ptr<Policy>(new UtilisationPolicy("gpu-spread", Goal::kGpuSpread));
  std::string all;
  for (const std::string& n : PolicyNames()) all += (all.empty() ? "" : ", ") + n;
  return Error{"unknown policy '" + std::string(name) + "' (valid: " + all + ")"};
}

}  // namespace tessera::core
