// Manifests in and out: YAML (or JSON, which is YAML) to JSON objects, and
// JSON objects to YAML for `-o yaml`.
//
// Scalars resolve the way Kubernetes' own YAML reader (sigs.k8s.io/yaml on
// go-yaml v2, YAML 1.1) resolves them: unquoted true/false/yes/no/on/off are
// booleans, unquoted numbers are numbers, null/~/empty is null, and anything
// quoted is a string. The encoder quotes every string that would otherwise
// read back as something else, so Decode(Encode(x)) == x.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace berth::api {

// Every non-empty document of a multi-document stream ("---" separated);
// `kind: List` (or any *List with items) is expanded into its items.
// INVALID_ARGUMENT with the parser's line and column for malformed input,
// or when a document is not a mapping.
absl::StatusOr<std::vector<nlohmann::json>> DecodeManifests(std::string_view text);

// Block-style YAML of `value` (ends with a newline).
std::string EncodeYaml(const nlohmann::json& value);

}  // namespace berth::api
