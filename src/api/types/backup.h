// backup.berth.io/v1: BackupStorageLocation, Backup, Restore and Schedule,
// berth's own kinds for backups of workloads to a repository (issue 30).
// Field names and phases are Velero's (velero.io/v1, pkg/apis/velero/v1)
// so its users recognise them; berth's additions are marked. Velero's
// other fields are not modeled (and not served: the schema refuses them).
//
// Conventions, as in Velero's Go types: durations are Go duration strings
// ("720h0m0s", common/units.h ParseGoDuration), times RFC 3339 strings with
// "" meaning unset, counters plain integers (0 and absent are the same).
// Every status is written by its controller through the /status
// subresource; a status nobody has written is empty (phase "" is New).
//
//   Backup backup;
//   backup.metadata.name = "nightly";
//   backup.spec.included_namespaces = {"shop"};
//   backup.spec.label_selector.match_labels["app"] = "db";
//   backup.spec.ttl = "24h0m0s";
//
// Thread-safety: value types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "api/types/fields.h"
#include "api/types/meta.h"

namespace berth::api::types {

inline constexpr std::string_view kBackupGroup = "backup.berth.io";
inline constexpr std::string_view kBackupApiVersion = "backup.berth.io/v1";
// Set by the Schedule controller on the backups it creates.
inline constexpr std::string_view kScheduleNameLabel = "backup.berth.io/schedule-name";
// Added by the backup controller; removed once the backup's repository
// copy, its kept snapshots and its unreferenced chunks are gone.
inline constexpr std::string_view kBackupRepositoryFinalizer = "backup.berth.io/repository";
// Velero's default time to live of a backup.
inline constexpr std::string_view kDefaultBackupTtl = "720h0m0s";

// ---- BackupStorageLocation (resource backupstoragelocations, short name bsl)

struct BackupStorageLocationSpec {
  std::string provider;     // "filesystem", the only one
  StringMap config;         // path: the repository's directory (absolute, canonical)
  bool default_ = false;    // `default`: used by backups naming no location; at most one
  std::string access_mode;  // ReadWrite (default) | ReadOnly (restores only)
  Unknown unknown;
  static constexpr auto Fields() {
    using T = BackupStorageLocationSpec;
    return std::tuple{Always("provider", &T::provider), F("config", &T::config), F("default", &T::default_),
                      F("accessMode", &T::access_mode)};
  }
  bool operator==(const BackupStorageLocationSpec&) const = default;
};

struct BackupStorageLocationStatus {
  std::string phase;  // Available | Unavailable
  std::string last_validation_time;
  std::string message;  // berth: why Unavailable
  Unknown unknown;
  static constexpr auto Fields() {
    using T = BackupStorageLocationStatus;
    return std::tuple{F("phase", &T::phase), F("lastValidationTime", &T::last_validation_time),
                      F("message", &T::message)};
  }
  bool operator==(const BackupStorageLocationStatus&) const = default;
};

struct BackupStorageLocation {
  static constexpr std::string_view kKind = "BackupStorageLocation";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  BackupStorageLocationSpec spec;
  BackupStorageLocationStatus status;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = BackupStorageLocation;
    return std::tuple_cat(ObjectFields<T>(), std::tuple{Always("spec", &T::spec), F("status", &T::status)});
  }
  bool operator==(const BackupStorageLocation&) const = default;

  // config.path, "" when unset.
  std::string Path() const {
    auto it = spec.config.find("path");
    return it == spec.config.end() ? "" : it->second;
  }
  bool ReadOnly() const { return spec.access_mode == "ReadOnly"; }
};

// ---- Backup (resource backups)

struct BackupSpec {
  std::vector<std::string> included_namespaces;  // empty or ["*"]: all
  std::vector<std::string> excluded_namespaces;
  LabelSelector label_selector;  // selects pods (empty: all); their claims go with them
  std::string ttl;               // Go duration; defaulted to 720h0m0s on create
  std::string storage_location;  // BSL name; "": the default location
  Unknown unknown;
  static constexpr auto Fields() {
    using T = BackupSpec;
    return std::tuple{F("includedNamespaces", &T::included_namespaces),
                      F("excludedNamespaces", &T::excluded_namespaces), F("labelSelector", &T::label_selector),
                      F("ttl", &T::ttl), F("storageLocation", &T::storage_location)};
  }
  bool operator==(const BackupSpec&) const = default;
};

struct BackupProgress {
  int64_t total_items = 0;
  int64_t items_backed_up = 0;
  int64_t total_bytes = 0;  // berth
  int64_t bytes_done = 0;   // berth
  Unknown unknown;
  static constexpr auto Fields() {
    using T = BackupProgress;
    return std::tuple{F("totalItems", &T::total_items), F("itemsBackedUp", &T::items_backed_up),
                      F("totalBytes", &T::total_bytes), F("bytesDone", &T::bytes_done)};
  }
  bool operator==(const BackupProgress&) const = default;
};

// berth: what happened to one volume of the backup.
struct BackupVolumeStatus {
  std::string namespace_;  // `namespace`, the claim's
  std::string persistent_volume_claim;
  std::string persistent_volume;
  std::string driver;
  std::string node;
  std::string volume_handle;
  std::string snapshot_name;    // the VolumeSnapshot taken for the backup
  std::string snapshot_handle;  // the driver's id of it
  int64_t size_bytes = 0;
  std::string phase;  // New | InProgress | Completed | Failed
  int64_t bytes_read = 0;
  int64_t bytes_added = 0;     // new chunk bytes written to the repository
  std::string base_backup;     // the backup an incremental copy started from
  std::string group_snapshot;  // the group snapshot it was cut in (status.groupSnapshots[].name)
  std::string message;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = BackupVolumeStatus;
    return std::tuple{F("namespace", &T::namespace_),
                      F("persistentVolumeClaim", &T::persistent_volume_claim),
                      F("persistentVolume", &T::persistent_volume),
                      F("driver", &T::driver),
                      F("node", &T::node),
                      F("volumeHandle", &T::volume_handle),
                      F("snapshotName", &T::snapshot_name),
                      F("snapshotHandle", &T::snapshot_handle),
                      F("sizeBytes", &T::size_bytes),
                      F("phase", &T::phase),
                      F("bytesRead", &T::bytes_read),
                      F("bytesAdded", &T::bytes_added),
                      F("baseBackup", &T::base_backup),
                      F("groupSnapshot", &T::group_snapshot),
                      F("message", &T::message)};
  }
  bool operator==(const BackupVolumeStatus&) const = default;
};

// berth: a CSI group snapshot a backup cut its claims of one node in.
struct BackupGroupSnapshotMember {
  std::string persistent_volume;
  std::string volume_handle;
  std::string snapshot_handle;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = BackupGroupSnapshotMember;
    return std::tuple{F("persistentVolume", &T::persistent_volume), F("volumeHandle", &T::volume_handle),
                      F("snapshotHandle", &T::snapshot_handle)};
  }
  bool operator==(const BackupGroupSnapshotMember&) const = default;
};

struct BackupGroupSnapshot {
  std::string driver;
  std::string node;
  std::string name;               // the CreateVolumeGroupSnapshot name
  std::string group_snapshot_id;  // "" until the driver answered
  bool deleted = false;           // superseded or cleaned up
  std::vector<BackupGroupSnapshotMember> members;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = BackupGroupSnapshot;
    return std::tuple{F("driver", &T::driver),   F("node", &T::node),
                      F("name", &T::name),       F("groupSnapshotId", &T::group_snapshot_id),
                      F("deleted", &T::deleted), F("members", &T::members)};
  }
  bool operator==(const BackupGroupSnapshot&) const = default;
};

struct BackupStatus {
  // New | FailedValidation | InProgress | Completed | PartiallyFailed |
  // Failed | Deleting
  std::string phase;
  std::vector<std::string> validation_errors;
  std::string start_timestamp;
  std::string completion_timestamp;
  std::string expiration;
  BackupProgress progress;
  int64_t errors = 0;
  int64_t warnings = 0;
  std::string failure_reason;
  std::vector<BackupVolumeStatus> volumes;           // berth
  std::vector<std::string> problems;                 // berth: each error and warning of a PartiallyFailed backup
  bool snapshots_removed = false;                    // berth: a failed backup's snapshots are gone
  std::vector<BackupGroupSnapshot> group_snapshots;  // berth
  Unknown unknown;
  static constexpr auto Fields() {
    using T = BackupStatus;
    return std::tuple{F("phase", &T::phase),
                      F("validationErrors", &T::validation_errors),
                      F("startTimestamp", &T::start_timestamp),
                      F("completionTimestamp", &T::completion_timestamp),
                      F("expiration", &T::expiration),
                      F("progress", &T::progress),
                      F("errors", &T::errors),
                      F("warnings", &T::warnings),
                      F("failureReason", &T::failure_reason),
                      F("volumes", &T::volumes),
                      F("problems", &T::problems),
                      F("snapshotsRemoved", &T::snapshots_removed),
                      F("groupSnapshots", &T::group_snapshots)};
  }
  bool operator==(const BackupStatus&) const = default;
};

struct Backup {
  static constexpr std::string_view kKind = "Backup";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  BackupSpec spec;
  BackupStatus status;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = Backup;
    return std::tuple_cat(ObjectFields<T>(), std::tuple{Always("spec", &T::spec), F("status", &T::status)});
  }
  bool operator==(const Backup&) const = default;
};

// ---- Restore (resource restores)

struct RestoreSpec {
  std::string backup_name;    // required unless schedule_name
  std::string schedule_name;  // the newest Completed backup of that schedule
  std::vector<std::string> included_namespaces;
  StringMap namespace_mapping;  // old namespace -> new
  std::string target_node;      // berth: the node of every restored volume; "": the scheduler's choice
  Unknown unknown;
  static constexpr auto Fields() {
    using T = RestoreSpec;
    return std::tuple{F("backupName", &T::backup_name), F("scheduleName", &T::schedule_name),
                      F("includedNamespaces", &T::included_namespaces), F("namespaceMapping", &T::namespace_mapping),
                      F("targetNode", &T::target_node)};
  }
  bool operator==(const RestoreSpec&) const = default;
};

struct RestoreProgress {
  int64_t total_items = 0;
  int64_t items_restored = 0;
  int64_t total_bytes = 0;  // berth
  int64_t bytes_done = 0;   // berth
  Unknown unknown;
  static constexpr auto Fields() {
    using T = RestoreProgress;
    return std::tuple{F("totalItems", &T::total_items), F("itemsRestored", &T::items_restored),
                      F("totalBytes", &T::total_bytes), F("bytesDone", &T::bytes_done)};
  }
  bool operator==(const RestoreProgress&) const = default;
};

struct RestoreStatus {
  // New | FailedValidation | InProgress | Completed | PartiallyFailed | Failed
  std::string phase;
  std::vector<std::string> validation_errors;
  std::string start_timestamp;
  std::string completion_timestamp;
  RestoreProgress progress;
  int64_t errors = 0;
  int64_t warnings = 0;
  std::string failure_reason;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = RestoreStatus;
    return std::tuple{F("phase", &T::phase),
                      F("validationErrors", &T::validation_errors),
                      F("startTimestamp", &T::start_timestamp),
                      F("completionTimestamp", &T::completion_timestamp),
                      F("progress", &T::progress),
                      F("errors", &T::errors),
                      F("warnings", &T::warnings),
                      F("failureReason", &T::failure_reason)};
  }
  bool operator==(const RestoreStatus&) const = default;
};

struct Restore {
  static constexpr std::string_view kKind = "Restore";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  RestoreSpec spec;
  RestoreStatus status;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = Restore;
    return std::tuple_cat(ObjectFields<T>(), std::tuple{Always("spec", &T::spec), F("status", &T::status)});
  }
  bool operator==(const Restore&) const = default;
};

// ---- Schedule (resource schedules)

struct ScheduleSpec {
  std::string schedule;  // 5-field cron, "@every <duration>", "@daily"... (common/cron.h)
  BackupSpec template_;  // `template`: the spec of each backup
  bool paused = false;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = ScheduleSpec;
    return std::tuple{Always("schedule", &T::schedule), F("template", &T::template_), F("paused", &T::paused)};
  }
  bool operator==(const ScheduleSpec&) const = default;
};

struct ScheduleStatus {
  std::string phase;  // New | Enabled | FailedValidation
  std::vector<std::string> validation_errors;
  std::string last_backup;  // when the newest backup was created
  Unknown unknown;
  static constexpr auto Fields() {
    using T = ScheduleStatus;
    return std::tuple{F("phase", &T::phase), F("validationErrors", &T::validation_errors),
                      F("lastBackup", &T::last_backup)};
  }
  bool operator==(const ScheduleStatus&) const = default;
};

struct Schedule {
  static constexpr std::string_view kKind = "Schedule";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  ScheduleSpec spec;
  ScheduleStatus status;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = Schedule;
    return std::tuple_cat(ObjectFields<T>(), std::tuple{Always("spec", &T::spec), F("status", &T::status)});
  }
  bool operator==(const Schedule&) const = default;
};

extern template absl::StatusOr<BackupStorageLocation> Decode<BackupStorageLocation>(const Json&);
extern template absl::StatusOr<Backup> Decode<Backup>(const Json&);
extern template absl::StatusOr<Restore> Decode<Restore>(const Json&);
extern template absl::StatusOr<Schedule> Decode<Schedule>(const Json&);
extern template Json Encode<BackupStorageLocation>(const BackupStorageLocation&);
extern template Json Encode<Backup>(const Backup&);
extern template Json Encode<Restore>(const Restore&);
extern template Json Encode<Schedule>(const Schedule&);

}  // namespace berth::api::types
