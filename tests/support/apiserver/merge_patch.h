// JSON merge patch (RFC 7386), the `application/merge-patch+json` body the
// client sends to change annotations and labels, and that the API-server
// stand-in applies.
#pragma once

#include <nlohmann/json.hpp>

namespace tessera::kube {

// Returns `target` with `patch` applied: objects merge recursively, a null
// member removes the key, anything else (arrays, scalars) replaces.
nlohmann::json ApplyMergePatch(const nlohmann::json& target, const nlohmann::json& patch);

// The merge patch that sets (or, for std::nullopt-like null values, removes)
// `metadata.<field>` entries: {"metadata":{"<field>":{k:v,...}}}.
nlohmann::json MetadataMapPatch(const char* field, const nlohmann::json& entries);

}  // namespace tessera::kube
