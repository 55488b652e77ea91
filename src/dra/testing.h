// Test helpers shared by src/dra's unit tests and tests/integration/dra.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::dra::testing {

// A Pod `ns`/`name` whose containers reference ResourceClaims: `containers`
// maps each container to the claims it names in resources.claims, and every
// claim is named directly in spec.resourceClaims (pod claim name == claim
// name). Callers add what else their case needs (uid, nodeName).
inline nlohmann::json PodUsingClaims(
    const std::string& ns, const std::string& name,
    const std::vector<std::pair<std::string, std::vector<std::string>>>& containers) {
  nlohmann::json entries = nlohmann::json::array(), list = nlohmann::json::array();
  std::set<std::string> seen;
  for (const auto& [container, claims] : containers) {
    nlohmann::json refs = nlohmann::json::array();
    for (const auto& c : claims) {
      refs.push_back({{"name", c}});
      if (seen.insert(c).second) entries.push_back({{"name", c}, {"resourceClaimName", c}});
    }
    list.push_back({{"name", container}, {"image", "cuda"}, {"resources", {{"claims", refs}}}});
  }
  return {{"metadata", {{"namespace", ns}, {"name", name}}},
          {"spec", {{"containers", list}, {"resourceClaims", entries}}}};
}

}  // namespace tessera::dra::testing
