// Human-readable tables of objects, with the columns Kubernetes prints
// (kubectl get): PVC "NAME STATUS VOLUME CAPACITY ACCESS MODES STORAGECLASS
// AGE", and so on per kind. The API server returns them as meta.k8s.io/v1
// Table objects (what kubectl asks for with `Accept: ...;as=Table`); the
// berth CLI renders the same tables as text.
//
// Thread-safety: stateless; safe to call concurrently.
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "api/kinds.h"
#include "nlohmann/json.hpp"

namespace berth::api {

struct TableColumn {
  std::string name;    // "Name", "Status", "Access Modes"
  std::string type;    // "string", "integer", "date"
  std::string format;  // "name" for the name column, else ""
  std::string description;
  int priority = 0;  // > 0: shown only with -o wide
};

// The columns for `kind` (priority 0 first, then the wide ones).
std::vector<TableColumn> TableColumns(const KindInfo& kind);

// One row of cells for `object`, matching TableColumns(kind) one to one.
// Cells are strings or integers as Kubernetes emits them; the age cell is a
// string like "5m" relative to `now`. Never includes Secret data.
std::vector<nlohmann::json> TableCells(const KindInfo& kind, const nlohmann::json& object, absl::Time now);

// kubectl's short duration: "45s", "5m", "3h", "2d", "3d4h", "2y".
std::string HumanDuration(absl::Duration d);

// A meta.k8s.io/v1 Table of `objects`. Each row carries the object's
// metadata as a PartialObjectMetadata (kubectl uses it for -A and -w).
nlohmann::json BuildTable(const KindInfo& kind, const std::vector<nlohmann::json>& objects, absl::Time now,
                          const std::string& resource_version);

// The table as text the way kubectl prints it: upper-case headers, columns
// separated by three spaces, <none> for empty cells. `wide` includes the
// priority > 0 columns; `with_namespace` adds a NAMESPACE column first.
// Rows of cells aligned as kubectl's tabwriter does (minwidth 6, padding
// 3, the last column unpadded); each line ends in '\n'.
std::string Tabulate(const std::vector<std::vector<std::string>>& lines);

std::string RenderTable(const nlohmann::json& table, bool wide, bool with_namespace, bool with_headers = true);

}  // namespace berth::api
