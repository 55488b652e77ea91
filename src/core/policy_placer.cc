#include "core/policy_placer.h"

#include <cstdint>

namespace tessera::core {

Placer::Placer(std::vector<NodeState> nodes) : nodes_(std::move(nodes)) {}

int Placer::IndexOf(const std::string& node_name) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].name() == node_name) return static_cast<int>(i);
  }
  return -1;
}

const std::optional<Candidate>& Placer::Evaluated(int node, const PodRequest& pod, const Policy& policy,
                                                  int shape) {
  if (memos_.empty()) {
    memos_.resize(nodes_.size());
    memo_versions_.assign(nodes_.size(), UINT64_MAX);
  }
  // The nodes are never rebuilt: their version alone names their content.
  NodeMemo& memo = memos_[node];
  if (memo_versions_[node] != nodes_[node].version()) {
    memo.Forget();
    memo_versions_[node] = nodes_[node].version();
  }
  if (shape < 0) {
    policy.EvaluateInto(nodes_[node], pod, scratch_, &memo);
    return scratch_;
  }
  if (static_cast<size_t>(shape) >= cache_.size()) cache_.resize(shape + 1);
  std::vector<CachedEvaluation>& row = cache_[shape];
  if (row.empty()) row.resize(nodes_.size());
  return row[node].Refresh(/*epoch=*/1, nodes_[node].version(), nodes_[node], pod, policy, &memo);
}

std::optional<Placer::Decision> Placer::Choose(const PodRequest& pod, const Policy& policy, UniformDraw* draw,
                                               int shape) {
  const int n = static_cast<int>(nodes_.size());
  if (policy.picks_uniformly()) {
    std::vector<int> feasible;
    for (int i = 0; i < n; ++i) {
      if (Evaluated(i, pod, policy, shape)) feasible.push_back(i);
    }
    if (feasible.empty() || draw == nullptr) return std::nullopt;
    int pick = feasible[draw->Below(feasible.size())];
    Decision d{pick, *Evaluated(pick, pod, policy, shape)};
    policy.Refine(nodes_[pick], pod, d.candidate, *draw);
    return d;
  }
  int best = -1;
  double best_score = 0;
  for (int i = 0; i < n; ++i) {
    const std::optional<Candidate>& c = Evaluated(i, pod, policy, shape);
    if (c && (best < 0 || Outranks(c->score, i, best_score, best))) {
      best = i;
      best_score = c->score;
    }
  }
  if (best < 0) return std::nullopt;
  return Decision{best, *Evaluated(best, pod, policy, shape)};
}

Result<PodAllocation> Placer::Commit(const Decision& decision, const PodRequest& pod) {
  if (decision.node < 0 || decision.node >= static_cast<int>(nodes_.size())) {
    return Error{"decision names no node of this placer"};
  }
  NodeState& node = nodes_[decision.node];
  PodAllocation allocation = ToAllocation(node, pod, decision.candidate.placement);
  TESSERA_RETURN_IF_ERROR(node.Apply(allocation, HostDemandOf(pod)));
  return allocation;
}

Status Placer::Apply(const PodAllocation& allocation, const HostResources& host) {
  int i = IndexOf(allocation.node);
  if (i < 0) return Error{"unknown node '" + allocation.node + "'"};
  return nodes_[i].Apply(allocation, host);
}

Status Placer::Release(const PodAllocation& allocation, const HostResources& host) {
  int i = IndexOf(allocation.node);
  if (i < 0) return Error{"unknown node '" + allocation.node + "'"};
  return nodes_[i].Release(allocation, host);
}

}  // namespace tessera::core
