// How `berth get` (and edit, patch, apply -o) print objects: kubectl's
// output formats (-o wide|yaml|json|name|jsonpath=...|custom-columns=...),
// --sort-by, several kinds in one listing.
//
// Example:
//   auto format = OutputFormat::Parse("custom-columns=NAME:.metadata.name");
//   std::string text = PrintObjects({{kind, items}}, {.format = *format}, absl::Now());
//
// Thread-safety: stateless functions over immutable values.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "api/kinds.h"
#include "cli/jsonpath.h"
#include "nlohmann/json.hpp"

namespace berth::cli {

struct CustomColumn {
  std::string header;  // as written: "NAME"
  std::string path;    // ".metadata.name" (kubectl's relaxed JSONPath)
};

// "NAME:.metadata.name,PHASE:.status.phase" (kubectl's custom-columns
// spec); INVALID_ARGUMENT for a column without header or path.
absl::StatusOr<std::vector<CustomColumn>> ParseCustomColumns(std::string_view spec);

struct OutputFormat {
  enum Type { kTable, kWide, kYaml, kJson, kName, kJsonPath, kCustomColumns } type = kTable;
  std::optional<JsonPathTemplate> jsonpath;  // kJsonPath
  std::vector<CustomColumn> columns;         // kCustomColumns

  // "" | wide | yaml | json | name | jsonpath=TEMPLATE | jsonpath='...' |
  // custom-columns=SPEC; kubectl's error for anything else.
  static absl::StatusOr<OutputFormat> Parse(std::string_view text);
  bool structured() const { return type == kYaml || type == kJson; }
};

// Sorts by the value `expr` selects in each object ("{.metadata.name}" or
// ".spec.capacity.storage"): numbers numerically, quantities ("10Gi") by
// size, times and other strings as text; objects without the field first.
// INVALID_ARGUMENT for a malformed expression.
absl::Status SortObjects(std::vector<nlohmann::json>& objects, std::string_view expr);

// The objects of one kind in a listing.
struct KindObjects {
  const api::KindInfo* kind;
  std::vector<nlohmann::json> items;
};

struct PrintOptions {
  OutputFormat format;
  bool with_namespace = false;  // -A: a NAMESPACE column
  bool with_kind = false;       // several kinds asked for: NAME is kind/name
  bool single = false;          // one object asked for by name: not a List
  bool headers = true;          // table headers (off for later watch lines)
};

// The text for `groups` in `options.format`. Tables: one per kind, a blank
// line between them. yaml/json: the object (single) or a v1 List of every
// object, `{"apiVersion":"v1","kind":"List","items":[],"metadata":
// {"resourceVersion":""}}` when empty, as kubectl prints it.
std::string PrintObjects(const std::vector<KindObjects>& groups, const PrintOptions& options, absl::Time now);

// The v1 List kubectl prints for several objects.
nlohmann::json ListOf(std::vector<nlohmann::json> items);

}  // namespace berth::cli
