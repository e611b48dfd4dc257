// Kubernetes' defaults and validation rules for the kinds berth serves.
//
// The API server runs, for every write: CheckSchema (unknown fields, types)
// → Normalize (canonical quantities, Secret stringData) → ApplyDefaults →
// Validate (required fields, enums, names, immutable fields). Messages use
// Kubernetes' wording, e.g.
//   PersistentVolumeClaim "data" is invalid: spec.accessModes: Required value
//   PersistentVolume "pv1" is invalid: spec.persistentvolumesource: Forbidden:
//     spec.persistentvolumesource is immutable after creation
//
// Thread-safety: stateless; safe to call concurrently.
#pragma once

#include "absl/status/status.h"
#include "api/kinds.h"
#include "api/schema.h"
#include "nlohmann/json.hpp"

namespace berth::api {

// Canonical quantities everywhere the schema says Qty ("1.5Gi" → "1536Mi",
// numbers → strings); Secret stringData folded into base64 data.
void Normalize(const KindInfo& kind, nlohmann::json& object);

// Kubernetes' defaults (PVC volumeMode Filesystem, PV reclaim Retain,
// StorageClass reclaimPolicy Delete / volumeBindingMode Immediate, CSIDriver
// attachRequired true ...). Idempotent.
void ApplyDefaults(const KindInfo& kind, nlohmann::json& object);

// Validates `object` as a create (`old` == nullptr) or as an update of `old`.
// INVALID_ARGUMENT (reason Invalid, HTTP 422) listing every field error.
absl::Status Validate(const KindInfo& kind, const nlohmann::json& object, const nlohmann::json* old);

}  // namespace berth::api
