// Placer: a policy applied over a set of nodes, as `tessera run` and the trace
// benchmark place pods (Choose + Commit); the scheduler extender applies the
// same decision rule through ClusterState (prioritize gives 10 to the node
// Choose would pick).
//
// Decision rule: the feasible node with the highest policy score wins; equal
// scores go to the node that comes first in the Placer's order (its rank).
// A random-fit policy (picks_uniformly) instead draws uniformly among the
// feasible nodes. Deterministic for a given order, policy state and draw.
//
// Caching: a caller that places many pods of the same shape passes a stable
// `shape` id (>= 0); the Placer then keeps each node's evaluation for that shape
// until the node changes (NodeState::version) or the policy's epoch moves.
// With shape = -1 every node is evaluated afresh. Either way the policy may
// keep pod-independent work per node between decisions (NodeMemo).
//
// Thread-safety: not thread-safe; the owner serialises calls.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "core/fit.h"
#include "core/node_state.h"
#include "core/policy.h"

namespace tessera::core {

class Placer {
 public:
  explicit Placer(std::vector<NodeState> nodes);

  const std::vector<NodeState>& nodes() const { return nodes_; }
  const NodeState& node(int i) const { return nodes_[i]; }
  int IndexOf(const std::string& node_name) const;

  struct Decision {
    int node = -1;
    Candidate candidate;
  };

  // The node and GPUs `policy` picks for `pod`, or nullopt when nothing fits.
  // `draw` is required by random-fit policies. Does not change any node.
  std::optional<Decision> Choose(const PodRequest& pod, const Policy& policy, UniformDraw* draw = nullptr,
                                 int shape = -1);

  // Accounts the decision into its node; returns the allocation to record.
  Result<PodAllocation> Commit(const Decision& decision, const PodRequest& pod);

  // Accounts a pod already placed (e.g. rebuilt from annotations) / removes it.
  Status Apply(const PodAllocation& allocation, const HostResources& host);
  Status Release(const PodAllocation& allocation, const HostResources& host);

 private:
  const std::optional<Candidate>& Evaluated(int node, const PodRequest& pod, const Policy& policy, int shape);

  std::vector<NodeState> nodes_;
  std::vector<std::vector<CachedEvaluation>> cache_;  // [shape][node]; node_epoch 1 (nodes are never rebuilt)
  // The policy's per-node memos (NodeMemo), for every shape, and the node
  // version each was kept for.
  std::vector<NodeMemo> memos_;
  std::vector<uint64_t> memo_versions_;
  std::optional<Candidate> scratch_;
};

}  // namespace tessera::core
