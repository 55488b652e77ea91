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
// Built-in policies (MakePolicy):
//   node-binpack  nodes whose GPUs are fuller win; GPUs inside: fullest first
//   node-spread   emptier nodes win; GPUs inside: emptiest first
//   gpu-binpack   the chosen GPUs should be as full as possible (any node)
//   gpu-spread    the chosen GPUs should be as empty as possible
//   tessera       fragmentation-aware (the default, see docs/placement.md)
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
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;

  // Scores `pod` on `node` and picks its GPUs; nullopt when it does not fit.
  // Must depend only on (node, pod) and on policy state named by epoch().
  virtual std::optional<Candidate> Evaluate(const NodeState& node, const PodRequest& pod) const = 0;

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
};

// The built-in policies by name (see above); error lists the valid names.
Result<std::unique_ptr<Policy>> MakePolicy(std::string_view name);
std::vector<std::string> PolicyNames();

// Fraction of the node's milli-GPU capacity in use once `placement` is added.
double NodeUtilisationAfter(const NodeState& node, const Placement& placement);

}  // namespace tessera::core
