// The durable records of a pool: volumes, snapshots and group snapshots.
// Their JSON form is specified in docs/on-disk-format.md (format 1).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace berth::driver {

inline constexpr int kRecordFormat = 1;

enum class AccessType { kMount, kBlock };

// A ControllerPublishVolume that succeeded.
struct Publication {
  std::string node_id;
  bool readonly = false;
  bool operator==(const Publication&) const = default;
};

// A NodePublishVolume that succeeded.
struct PublishedTarget {
  std::string path;
  bool readonly = false;
  bool operator==(const PublishedTarget&) const = default;
};

struct VolumeRecord {
  std::string id;
  std::string name;
  int64_t capacity_bytes = 0;
  AccessType access_type = AccessType::kMount;
  std::string fs_type;  // mount volumes: the filesystem made at first stage
  std::map<std::string, std::string> parameters;
  std::string source_snapshot_id;
  std::string source_volume_id;
  int64_t created_unix_nanos = 0;
  std::vector<Publication> publications;
  // Node state: the staging path while staged, the loop device of a staged
  // block volume, and the targets it is published at.
  std::string staging_path;
  std::string block_device;
  std::vector<PublishedTarget> targets;
  // Filesystem state of a mount volume: `formatting` is set before mkfs runs
  // and `formatted` once it completed (or the image came from a formatted
  // source). A volume that is formatted is never formatted again; one whose
  // mkfs was interrupted never held data and is formatted afresh.
  bool formatting = false;
  bool formatted = false;
  // The volume size the filesystem was last made or grown for; a staged
  // volume whose filesystem is smaller than the volume is grown at stage.
  int64_t fs_bytes = 0;
  // Set before the image is removed; a record found so at start is finished.
  bool deleting = false;

  bool operator==(const VolumeRecord&) const = default;
};

struct SnapshotRecord {
  std::string id;
  std::string name;
  std::string source_volume_id;
  int64_t size_bytes = 0;
  AccessType access_type = AccessType::kMount;  // of the source, for restores
  std::string fs_type;
  std::map<std::string, std::string> parameters;
  std::string group_snapshot_id;
  int64_t created_unix_nanos = 0;
  bool formatted = false;  // the source held a filesystem berth made
  bool deleting = false;

  bool operator==(const SnapshotRecord&) const = default;
};

struct GroupSnapshotRecord {
  std::string id;
  std::string name;
  std::vector<std::string> source_volume_ids;
  std::vector<std::string> snapshot_ids;
  std::map<std::string, std::string> parameters;
  int64_t created_unix_nanos = 0;

  bool operator==(const GroupSnapshotRecord&) const = default;
};

std::string ToJson(const VolumeRecord& r);
std::string ToJson(const SnapshotRecord& r);
std::string ToJson(const GroupSnapshotRecord& r);

// DATA_LOSS for malformed JSON or missing fields, FAILED_PRECONDITION for a
// format newer than this build understands.
absl::StatusOr<VolumeRecord> VolumeFromJson(const std::string& json);
absl::StatusOr<SnapshotRecord> SnapshotFromJson(const std::string& json);
absl::StatusOr<GroupSnapshotRecord> GroupSnapshotFromJson(const std::string& json);

}  // namespace berth::driver
