// Structural schemas of the kinds berth serves: which fields exist, their
// JSON types, and how lists merge under a strategic merge patch.
//
// A schema is a tree of nodes built with the small constructors below:
//
//   SchemaPtr claim_spec = Obj({
//       {"accessModes", Arr(Str())},
//       {"resources", Obj({{"requests", Map(Qty())}, {"limits", Map(Qty())}})},
//       {"volumeName", Str()},
//   });
//
// CheckSchema walks an object against its kind's schema and refuses unknown
// fields and wrongly typed values with the JSON path of the first offender,
// the way Kubernetes' strict decoding does (HTTP 400). Semantic rules
// (required fields, enums, immutability) live in validation.h.
//
// Thread-safety: schemas are immutable after construction; everything here
// is safe to call concurrently.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "api/kinds.h"
#include "nlohmann/json.hpp"

namespace berth::api {

struct Schema;
using SchemaPtr = std::shared_ptr<const Schema>;

struct Schema {
  enum class Type {
    kAny,  // anything (free-form fields such as a container's probes)
    kString,
    kInt,     // JSON integer
    kNumber,  // JSON number
    kBool,
    kQuantity,     // "5Gi" or a number (validated as a Kubernetes quantity)
    kIntOrString,  // 8080 or "http"
    kTime,         // RFC 3339 string ("2024-01-02T03:04:05Z")
    kBase64,       // base64 string (Secret data)
    kObject,       // fixed fields
    kArray,        // elements of `elem`
    kMap,          // string keys, values of `elem`
  };
  Type type = Type::kAny;
  std::map<std::string, SchemaPtr, std::less<>> fields;  // kObject
  SchemaPtr elem;                                        // kArray, kMap
  // kArray under strategic merge patch: elements are merged by this key
  // ("name" for containers and volumes, "type" for conditions). Empty:
  // the list is replaced as a whole, unless `merge_primitives`.
  std::string merge_key;
  bool merge_primitives = false;  // kArray of scalars merged as a set (finalizers)
};

SchemaPtr AnyValue();
SchemaPtr Str();
SchemaPtr Int();
SchemaPtr Num();
SchemaPtr Bool();
SchemaPtr Qty();
SchemaPtr IntOrStr();
SchemaPtr Time();
SchemaPtr Base64();
SchemaPtr Obj(std::vector<std::pair<std::string, SchemaPtr>> fields);
// Arr(elem) replaces on patch; Arr(elem, "name") merges by key.
SchemaPtr Arr(SchemaPtr elem, std::string merge_key = "");
SchemaPtr PrimitiveSet(SchemaPtr elem);  // scalars merged as a set on patch
SchemaPtr Map(SchemaPtr value);

// Shared pieces.
SchemaPtr ObjectMetaSchema();     // metadata of every object
SchemaPtr LabelSelectorSchema();  // matchLabels / matchExpressions
SchemaPtr NodeSelectorSchema();   // nodeSelectorTerms (PV nodeAffinity, pod affinity)

// The schema of a whole object of `kind` (apiVersion, kind, metadata and the
// kind's own fields). Defined for every kind in AllKinds().
const Schema& SchemaFor(const KindInfo& kind);

// OK, or INVALID_ARGUMENT with reason BadRequest (see errors.h):
//   unknown field "spec.acessModes"
//   spec.capacity.storage: quantities must match the regular expression ...
//   json: cannot unmarshal string into Go value of type int: spec.replicas
absl::Status CheckSchema(const nlohmann::json& object, const Schema& schema);

// A JSON value's type as Go's decoder names it in errors: string, bool,
// number, array, object or null.
const char* JsonTypeName(const nlohmann::json& v);

}  // namespace berth::api
