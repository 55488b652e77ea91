// Scoring policies: how the placement engine ranks the nodes (and the GPUs
// inside a node) that fit a pod.
//
// Every policy answers one question, Evaluate(node, pod): does the pod fit,
// where on the node would it go, and how good is that (higher is better)?
// The Placer (policy_placer.h) asks it of every node and takes the highest
// score; equal scores go to the node that comes first in the Placer's order
// (its tie-break rank). Scores are only compared within one decision; the
// extender maps them to 0–10 (ExtenderScores).
//
// Built-in policies (MakePolicy), one vocabulary for the scheduler, `tessera
// run` and `tessera simulate` (docs/placement.md, "Policy names"):
//   tessera       fragmentation-aware (the default, see docs/placement.md)
//   node-binpack  nodes whose GPUs are fuller win; GPUs inside: fullest first
//   node-spread   emptier nodes win; GPUs inside: emptiest first
//   gpu-binpack   the chosen GPUs should be as full as possible (any node)
//   gpu-spread    the chosen GPUs should be as empty as possible
// and WithGpuOrder(policy, order): the node `policy` chooses, with the GPUs
// inside it picked binpack or spread (HAMi's node and GPU levels set apart,
// e.g. node-binpack with gpu spread, or tessera's node with gpu binpack).
//
// One decision rule (Outranks) and one evaluation cache (CachedEvaluation)
// serve every caller: the Placer (run, simulate) and the scheduler extender,
// whose bind commits the candidate Evaluate gave for the chosen node.
//
// Thread-safety: Evaluate is const and may run concurrently; Observe mutates.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "core/fit.h"
#include "core/node_state.h"
#include "core/request.h"

namespace tessera::core {

// Source of uniform random numbers for policies that draw (random-fit).
class UniformDraw {
 public:
  virtual ~UniformDraw() = default;
  // A uniform integer in [0, n), n > 0, without modulo bias.
  virtual uint64_t Below(uint64_t n) = 0;
};

// One way to place a pod on one node, with its score.
struct Candidate {
  double score = 0;
  Placement placement;
  bool operator==(const Candidate&) const = default;
};

// What a policy may keep per node between its evaluations for different
// pods: the part of an evaluation that depends on the node's content and the
// policy's own state but not on the pod (the tessera policy's per-shape fit
// counts, a fifth of a cold evaluation). The caller keeps one per node and
// knows the node's identity (as for CachedEvaluation), the policy does not: the
// caller Forget()s the memo whenever the node's content changes and gives it
// to one evaluation at a time. The policy marks what it stores with a key of
// its own state and ignores a memo holding another key.
struct NodeMemo {
  uint64_t owner = 0;  // the storing policy's key; 0 = nothing held
  double value = 0;
  std::vector<int> ints;
  void Forget() { owner = 0; }
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;

  // Scores `pod` on `node` and picks its GPUs; nullopt when it does not fit.
  // Must depend only on (node, pod) and on policy state named by epoch().
  virtual std::optional<Candidate> Evaluate(const NodeState& node, const PodRequest& pod) const = 0;
  // `out = Evaluate(node, pod)`, the same value, where a policy may reuse the
  // storage of the candidate `out` holds (an evaluation cache's earlier entry)
  // instead of allocating a placement for each of thousands of nodes, and
  // keep or reuse pod-independent work in `memo` (this node's, or nullptr).
  virtual void EvaluateInto(const NodeState& node, const PodRequest& pod, std::optional<Candidate>& out,
                            NodeMemo* memo) const {
    (void)memo;
    out = Evaluate(node, pod);
  }

  // Changes whenever internal state that Evaluate reads changes (e.g. a
  // learned workload mix), so that cached evaluations can be dropped.
  virtual uint64_t epoch() const { return 0; }

  // Told about every pod that arrives (placed or not) before it is placed.
  // Policies that learn the workload mix online use it; default: nothing.
  virtual void Observe(const PodRequest& pod) { (void)pod; }

  // True for policies that pick uniformly at random among feasible nodes
  // instead of by score (random-fit).
  virtual bool picks_uniformly() const { return false; }

  // Last say on the chosen node's candidate, with randomness (random-fit
  // draws the GPU). Default: unchanged.
  virtual void Refine(const NodeState& node, const PodRequest& pod, Candidate& chosen,
                      UniformDraw& draw) const {
    (void)node, (void)pod, (void)chosen, (void)draw;
  }

  // The fixed order this policy picks a node's GPUs in, when it has one
  // (node-binpack: kBinpack); nullopt when it chooses them its own way.
  virtual std::optional<GpuOrder> gpu_order() const { return std::nullopt; }
};

// The built-in policies by name (see above); error lists the valid names.
Result<std::unique_ptr<Policy>> MakePolicy(std::string_view name);
std::vector<std::string> PolicyNames();

// "binpack" or "spread".
std::string_view GpuOrderName(GpuOrder order);

// `policy` choosing the node, with the GPUs inside the node picked in
// `order` (core::FitNode's placement) instead of the policy's own way: the
// score is `policy`'s, the placement FitNode's. Returns `policy` itself when
// it picks GPUs in that order already. Named "<policy>+gpu-<order>", epoch
// and uniform picking are `policy`'s; Observe does nothing (the inner policy
// is shared and const: whoever owns it feeds it).
std::shared_ptr<const Policy> WithGpuOrder(std::shared_ptr<const Policy> policy, GpuOrder order);

// The decision rule every placement uses: a candidate scoring `score` at
// tie-break rank `rank` (lower ranks first: the Placer's index, the
// extender's node name) beats the best so far when its score is higher, or
// equal with a lower rank.
template <typename Rank>
bool Outranks(double score, const Rank& rank, double best_score, const Rank& best_rank) {
  return score > best_score || (score == best_score && rank < best_rank);
}

// One node's evaluation by one policy for one pod shape, kept while the
// node and the policy's epoch are unchanged. The node is identified by the
// caller: `node_epoch` names its content (ClusterState's rebuild epoch, a
// constant for the Placer's own nodes; never 0 once filled) and
// `node_version` its usage (NodeState::version(), plus anything else that
// changes what fits). Evaluate depends only on (node, pod, epoch), so a
// held candidate is exactly what evaluating anew would give.
struct CachedEvaluation {
  uint64_t node_epoch = 0;  // 0 = empty
  uint64_t node_version = 0;
  uint64_t policy_epoch = 0;
  std::optional<Candidate> candidate;  // nullopt: the pod does not fit

  bool Holds(uint64_t epoch, uint64_t version, uint64_t for_policy_epoch) const {
    return node_epoch != 0 && node_epoch == epoch && node_version == version &&
           policy_epoch == for_policy_epoch;
  }
  // The candidate for (node, pod, policy), evaluated only when not held
  // (with the node's memo, when the caller keeps one).
  const std::optional<Candidate>& Refresh(uint64_t epoch, uint64_t version, const NodeState& node,
                                          const PodRequest& pod, const Policy& policy,
                                          NodeMemo* memo = nullptr) {
    if (!Holds(epoch, version, policy.epoch())) {
      policy.EvaluateInto(node, pod, candidate, memo);
      node_epoch = epoch;
      node_version = version;
      policy_epoch = policy.epoch();
    }
    return candidate;
  }
};

// Fraction of the node's milli-GPU capacity in use once `placement` is added.
double NodeUtilisationAfter(const NodeState& node, const Placement& placement);

}  // namespace tessera::core
