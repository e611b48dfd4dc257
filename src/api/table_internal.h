// The parts of api/table.cc shared by its files: tolerant JSON access and
// the cells of each kind's row (table_cells.cc). Not for use outside
// src/api.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace berth::api::table_internal {

using Json = nlohmann::json;
using Cells = std::vector<Json>;
using FieldPath = std::initializer_list<std::string_view>;

// j[path[0]][path[1]]...; null when a step is missing or not an object.
const Json& At(const Json& j, FieldPath path);
// The array at `path`, or an empty one.
const Json& Items(const Json& j, FieldPath path);
// The string at `path`, or "".
std::string Str(const Json& j, FieldPath path);
int64_t AsInt(const Json& v);
// Serialized JSON that never throws, even for invalid UTF-8.
std::string Dump(const Json& v);

// One row of cells per kind, matching the kind's columns in table.cc.
Cells NamespaceCells(const Json& o, absl::Time now);
Cells LeaseCells(const Json& o, absl::Time now);
Cells NodeCells(const Json& o, absl::Time now);
Cells PersistentVolumeCells(const Json& o, absl::Time now);
Cells PersistentVolumeClaimCells(const Json& o, absl::Time now);
Cells PodCells(const Json& o, absl::Time now);
Cells SecretCells(const Json& o, absl::Time now);
Cells EventCells(const Json& o, absl::Time now);
Cells StorageClassCells(const Json& o, absl::Time now);
Cells VolumeAttachmentCells(const Json& o, absl::Time now);
Cells CSIDriverCells(const Json& o, absl::Time now);
Cells CSINodeCells(const Json& o, absl::Time now);
Cells CSIStorageCapacityCells(const Json& o, absl::Time now);
Cells VolumeSnapshotClassCells(const Json& o, absl::Time now);
Cells VolumeSnapshotCells(const Json& o, absl::Time now);
Cells VolumeSnapshotContentCells(const Json& o, absl::Time now);
Cells BackupStorageLocationCells(const Json& o, absl::Time now);
Cells BackupCells(const Json& o, absl::Time now);
Cells RestoreCells(const Json& o, absl::Time now);
Cells ScheduleCells(const Json& o, absl::Time now);
Cells DefaultCells(const Json& o, absl::Time now);

}  // namespace berth::api::table_internal
