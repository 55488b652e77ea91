// JSON merge patch (RFC 7386): how the API-server stand-in applies an
// `application/merge-patch+json` body. It lives beside the stand-in, not in
// the kube library: the client only builds such bodies, it never applies one.
#pragma once

#include <nlohmann/json.hpp>

namespace tessera::testing {

// Returns `target` with `patch` applied: objects merge recursively, a null
// member removes the key, anything else (arrays, scalars) replaces.
nlohmann::json ApplyMergePatch(const nlohmann::json& target, const nlohmann::json& patch);

}  // namespace tessera::testing
