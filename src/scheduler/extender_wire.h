// The extender's wire format on the hot path: reading ExtenderArgs and
// writing the filter and prioritize answers without a JSON tree of the node
// list.
//
// kube-scheduler sends every filter request with the names of all candidate
// nodes (5,000 in a large cluster) and every prioritize request with those that
// passed. Building an nlohmann::json tree of them, and another for the answer,
// costs a few allocations per node and was most of a request's time. Here the
// names stay string_views into the request body, and the answers are written
// straight into a string.
//
// The fast reader only takes the shape kube-scheduler sends: a top-level
// object whose NodeNames is an array of plain strings. Anything else (escapes
// or non-ASCII in a name, a NodeNames that is not an array, a duplicate
// member, invalid JSON anywhere) makes it return false, and the caller parses
// the body with the full parser as before. It never accepts a body that
// nlohmann::json would reject or read differently.
//
// Pure functions; thread-safe; no exception escapes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace tessera::scheduler::wire {

struct ScannedArgs {
  // The JSON text of the Pod member; empty when the member is absent.
  std::string_view pod;
  // The NodeNames members, pointing into the body.
  std::vector<std::string_view> node_names;
};

// Reads `body` as ExtenderArgs. False: not the common shape (see above); `out`
// is then unspecified. The Pod text is left for the caller to parse (it may
// still be invalid JSON, in which case the caller falls back too).
bool ScanExtenderArgs(std::string_view body, ScannedArgs& out);

// Appends `text` as a JSON string, quotes included, escaped as
// nlohmann::json::dump() does (", \, and control characters; UTF-8 as is).
void AppendJsonString(std::string& out, std::string_view text);

// An ExtenderFilterResult answering with NodeNames:
// {"Error":"","FailedAndUnresolvableNodes":{},"FailedNodes":{<name>:<reason>,...},
//  "NodeNames":[<names[i]> for i in feasible],"Nodes":null}
std::string FilterResultText(std::span<const std::string_view> names, std::span<const uint32_t> feasible,
                             std::span<const std::pair<uint32_t, std::string>> failed);

// A HostPriorityList: [{"Host":<names[positions[k]]>,"Score":<scores[k]>},...]
// (scores as long as positions).
std::string HostPriorityListText(std::span<const std::string_view> names, std::span<const uint32_t> positions,
                                 std::span<const int> scores);

// ExtenderPreemptionArgs {Pod, NodeNameToVictims, NodeNameToMetaVictims}
// (k8s.io/kube-scheduler/extender/v1; no json tags, so the Go field names):
// Victims {Pods []Pod, NumPDBViolations}, MetaVictims {Pods [{UID}],
// NumPDBViolations}. kube-scheduler sets NodeNameToMetaVictims when the
// extender is nodeCacheCapable, NodeNameToVictims otherwise; either is read.
// Not the hot path: parsed with nlohmann::json.
struct ProposedVictims {
  std::string node;
  std::vector<std::string> uids;     // every victim's UID, in the order given
  std::vector<nlohmann::json> pods;  // the whole pods (NodeNameToVictims only)
  int64_t pdb_violations = 0;        // NumPDBViolations
};
struct PreemptionArgs {
  nlohmann::json pod;                  // the preemptor
  bool meta = false;                   // the victims came as MetaVictims
  std::vector<ProposedVictims> nodes;  // by node name, ascending
};
// Errors name the member that is wrong.
Result<PreemptionArgs> ParsePreemptionArgs(std::string_view body);

// ExtenderPreemptionResult {NodeNameToMetaVictims: {<node>: {Pods:
// [{UID}...], NumPDBViolations}}}.
struct AgreedVictims {
  std::string node;
  std::vector<std::string> uids;
  int64_t pdb_violations = 0;
};
std::string PreemptionResultText(std::span<const AgreedVictims> nodes);

}  // namespace tessera::scheduler::wire
