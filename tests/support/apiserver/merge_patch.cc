#include "apiserver/merge_patch.h"

namespace tessera::testing {

nlohmann::json ApplyMergePatch(const nlohmann::json& target, const nlohmann::json& patch) {
  if (!patch.is_object()) return patch;
  nlohmann::json result = target.is_object() ? target : nlohmann::json::object();
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    if (it.value().is_null()) {
      result.erase(it.key());
    } else {
      const nlohmann::json current = result.contains(it.key()) ? result[it.key()] : nlohmann::json();
      result[it.key()] = ApplyMergePatch(current, it.value());
    }
  }
  return result;
}

}  // namespace tessera::testing
