// snapshot.storage.k8s.io/v1 (kubernetes-csi/external-snapshotter's
// client/apis/volumesnapshot/v1): VolumeSnapshot, VolumeSnapshotContent and
// VolumeSnapshotClass. Note the Go types' pointers: both statuses are
// pointers (absent until a controller writes one), and most status fields
// too. See fields.h for the rules.
//
// Thread-safety: value types.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "api/quantity.h"
#include "api/types/core.h"
#include "api/types/fields.h"
#include "api/types/meta.h"

namespace berth::api::types {

struct VolumeSnapshotError {
  std::optional<std::string> time;
  std::optional<std::string> message;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeSnapshotError;
    return std::tuple{F("time", &T::time), F("message", &T::message)};
  }
  bool operator==(const VolumeSnapshotError&) const = default;
};

struct VolumeSnapshotSource {
  std::optional<std::string> persistent_volume_claim_name;
  std::optional<std::string> volume_snapshot_content_name;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeSnapshotSource;
    return std::tuple{F("persistentVolumeClaimName", &T::persistent_volume_claim_name),
                      F("volumeSnapshotContentName", &T::volume_snapshot_content_name)};
  }
  bool operator==(const VolumeSnapshotSource&) const = default;
};

struct VolumeSnapshotSpec {
  VolumeSnapshotSource source;
  std::optional<std::string> volume_snapshot_class_name;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeSnapshotSpec;
    return std::tuple{Always("source", &T::source), F("volumeSnapshotClassName", &T::volume_snapshot_class_name)};
  }
  bool operator==(const VolumeSnapshotSpec&) const = default;
};

struct VolumeSnapshotStatus {
  std::optional<std::string> bound_volume_snapshot_content_name;
  std::optional<std::string> creation_time;
  std::optional<bool> ready_to_use;
  std::optional<Quantity> restore_size;
  std::optional<VolumeSnapshotError> error;
  std::optional<std::string> volume_group_snapshot_name;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeSnapshotStatus;
    return std::tuple{F("boundVolumeSnapshotContentName", &T::bound_volume_snapshot_content_name),
                      F("creationTime", &T::creation_time),
                      F("readyToUse", &T::ready_to_use),
                      F("restoreSize", &T::restore_size),
                      F("error", &T::error),
                      F("volumeGroupSnapshotName", &T::volume_group_snapshot_name)};
  }
  bool operator==(const VolumeSnapshotStatus&) const = default;
};

struct VolumeSnapshot {
  static constexpr std::string_view kKind = "VolumeSnapshot";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  VolumeSnapshotSpec spec;
  std::optional<VolumeSnapshotStatus> status;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeSnapshot;
    return std::tuple_cat(ObjectFields<T>(), std::tuple{Always("spec", &T::spec), F("status", &T::status)});
  }
  bool operator==(const VolumeSnapshot&) const = default;
};

struct VolumeSnapshotContentSource {
  std::optional<std::string> volume_handle;
  std::optional<std::string> snapshot_handle;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeSnapshotContentSource;
    return std::tuple{F("volumeHandle", &T::volume_handle), F("snapshotHandle", &T::snapshot_handle)};
  }
  bool operator==(const VolumeSnapshotContentSource&) const = default;
};

struct VolumeSnapshotContentSpec {
  ObjectReference volume_snapshot_ref;
  std::string deletion_policy;
  std::string driver;
  std::optional<std::string> volume_snapshot_class_name;
  VolumeSnapshotContentSource source;
  std::optional<std::string> source_volume_mode;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeSnapshotContentSpec;
    return std::tuple{Always("volumeSnapshotRef", &T::volume_snapshot_ref),
                      Always("deletionPolicy", &T::deletion_policy),
                      Always("driver", &T::driver),
                      F("volumeSnapshotClassName", &T::volume_snapshot_class_name),
                      Always("source", &T::source),
                      F("sourceVolumeMode", &T::source_volume_mode)};
  }
  bool operator==(const VolumeSnapshotContentSpec&) const = default;
};

struct VolumeSnapshotContentStatus {
  std::optional<std::string> snapshot_handle;
  std::optional<int64_t> creation_time;  // Unix nanoseconds
  std::optional<int64_t> restore_size;   // bytes
  std::optional<bool> ready_to_use;
  std::optional<VolumeSnapshotError> error;
  std::optional<std::string> volume_group_snapshot_handle;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeSnapshotContentStatus;
    return std::tuple{F("snapshotHandle", &T::snapshot_handle),
                      F("creationTime", &T::creation_time),
                      F("restoreSize", &T::restore_size),
                      F("readyToUse", &T::ready_to_use),
                      F("error", &T::error),
                      F("volumeGroupSnapshotHandle", &T::volume_group_snapshot_handle)};
  }
  bool operator==(const VolumeSnapshotContentStatus&) const = default;
};

struct VolumeSnapshotContent {
  static constexpr std::string_view kKind = "VolumeSnapshotContent";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  VolumeSnapshotContentSpec spec;
  std::optional<VolumeSnapshotContentStatus> status;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeSnapshotContent;
    return std::tuple_cat(ObjectFields<T>(), std::tuple{Always("spec", &T::spec), F("status", &T::status)});
  }
  bool operator==(const VolumeSnapshotContent&) const = default;
};

struct VolumeSnapshotClass {
  static constexpr std::string_view kKind = "VolumeSnapshotClass";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  std::string driver;
  StringMap parameters;
  std::string deletion_policy;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeSnapshotClass;
    return std::tuple_cat(ObjectFields<T>(), std::tuple{Always("driver", &T::driver), F("parameters", &T::parameters),
                                                        Always("deletionPolicy", &T::deletion_policy)});
  }
  bool operator==(const VolumeSnapshotClass&) const = default;
};

extern template absl::StatusOr<VolumeSnapshot> Decode<VolumeSnapshot>(const Json&);
extern template absl::StatusOr<VolumeSnapshotContent> Decode<VolumeSnapshotContent>(const Json&);
extern template absl::StatusOr<VolumeSnapshotClass> Decode<VolumeSnapshotClass>(const Json&);
extern template Json Encode<VolumeSnapshot>(const VolumeSnapshot&);
extern template Json Encode<VolumeSnapshotContent>(const VolumeSnapshotContent&);
extern template Json Encode<VolumeSnapshotClass>(const VolumeSnapshotClass&);

}  // namespace berth::api::types
