// What must hold in the API server's objects at every instant of a chaos run,
// whatever failed: no GPU holds more than it offers and no pod is bound
// without the allocation that says what it holds.
//
// Pure functions over one snapshot of the Node and Pod objects (as the
// API-server stand-in lists them); thread-safe.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::chaos {

// The violations in one snapshot, each a sentence naming the pod or GPU;
// empty when everything holds. Checked:
//  - every pod bound to a node (spec.nodeName) and not Succeeded/Failed
//    carries a tessera.io/allocation annotation that decodes, names that
//    node, and names only GPUs of that node's tessera.io/gpu-inventory;
//  - per GPU, over those pods: memory <= the GPU's memory_mib, cores <= its
//    cores, slices <= its slots, and a slice of 100 cores (exclusive) alone.
// Init containers are summed like the others (an over-estimate: the chaos
// pods have none).
std::vector<std::string> FindViolations(const std::vector<nlohmann::json>& nodes,
                                        const std::vector<nlohmann::json>& pods);

}  // namespace tessera::chaos
