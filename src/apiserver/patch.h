// The three PATCH flavours of the Kubernetes API:
//   application/merge-patch+json           RFC 7386 JSON merge patch
//   application/json-patch+json            RFC 6902 JSON patch
//   application/strategic-merge-patch+json strategic merge patch: a merge
//     patch in which lists with a merge key (containers by name, conditions
//     by type ...) merge element by element, primitive sets (finalizers)
//     union, and the directives $patch (replace/delete/merge), $retainKeys,
//     $deleteFromPrimitiveList/<field> and $setElementOrder/<field> apply.
//     The merge keys come from the kind's schema (api/schema.h).
//
// Thread-safety: stateless; safe to call concurrently.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "api/schema.h"
#include "nlohmann/json.hpp"

namespace berth::apiserver {

enum class PatchType { kMerge, kJson, kStrategic, kApply };

// From a Content-Type; INVALID_ARGUMENT (415) for anything else.
absl::StatusOr<PatchType> ParsePatchType(std::string_view content_type);

// The patched object. BadRequest for a malformed patch or a JSON patch
// operation that does not apply (missing path, failed test).
absl::StatusOr<nlohmann::json> ApplyPatch(const nlohmann::json& original, std::string_view patch, PatchType type,
                                          const api::Schema& schema);

}  // namespace berth::apiserver
