// Backup manifests: what one backup holds, as written to
// <repo>/backups/<name>.json (docs/on-disk-format.md, "Backup repository").
//
// A manifest names the backup, when it was taken, the API objects backed up
// (opaque JSON documents, kept as given) and, per volume, its size, its chunk
// size and its extents: (offset, length, chunk hash, offset in the chunk) for
// every stored piece of the volume. A full backup's extents are whole
// chunk-aligned chunks (format 1); an incremental one also cuts its base's
// extents around small changed ranges and stores those ranges packed
// together in shared chunks, an extent naming its slice (format 2).
// Whatever no extent covers is a hole and restores as zeros.
//
//   Manifest m;
//   m.name = "nightly-1";
//   m.volumes.push_back({.name = "pvc-1", .size_bytes = 8 << 20, .chunk_size = 1 << 20});
//   std::string text = ManifestToJson(m);
//   absl::StatusOr<Manifest> back = ManifestFromJson(text, "nightly-1");
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace berth::backup {

// The newest manifest format this code reads and writes. Format 1: every
// extent a whole chunk at a chunk-aligned offset. Format 2 adds slices
// (Extent::chunk_offset, any offset and length); a manifest is written as
// format 1 whenever it has none, so older readers read full backups.
inline constexpr int kManifestFormat = 2;

// Chunk sizes a volume may use: powers of two in [kMinChunkSize,
// kMaxChunkSize]. The bound also caps what a reader allocates for one chunk.
inline constexpr int64_t kMinChunkSize = int64_t{64} << 10;
inline constexpr int64_t kMaxChunkSize = int64_t{16} << 20;

// One stored piece of a volume: `length` bytes at `offset`, whose content is
// bytes [chunk_offset, chunk_offset + length) of the chunk named `hash`
// (lower-case hex SHA-256 of the chunk's uncompressed bytes).
struct Extent {
  int64_t offset = 0;
  int64_t length = 0;
  std::string hash;
  int64_t chunk_offset = 0;

  // True if the extent is its chunk whole: format 1's only kind.
  bool WholeChunk(int64_t chunk_size, int64_t volume_size) const;

  friend bool operator==(const Extent&, const Extent&) = default;
};

struct VolumeManifest {
  std::string name;  // the caller's name for the volume (a claim's), unique in its backup
  int64_t size_bytes = 0;
  int64_t chunk_size = 0;
  // The backup whose extents this one inherited ("" for a full backup).
  // Informational: the extents below are complete on their own.
  std::string base_backup;
  // Sorted by offset, non-overlapping, inside the volume; each a slice of
  // at most chunk_size bytes of its chunk.
  std::vector<Extent> extents;

  // Bytes the extents cover (the volume's non-hole part).
  int64_t StoredBytes() const;
};

struct Manifest {
  std::string name;
  int64_t created_unix_nanos = 0;
  std::vector<nlohmann::json> objects;  // opaque to the repository
  std::vector<VolumeManifest> volumes;

  // The volume named `name`, or nullptr.
  const VolumeManifest* FindVolume(std::string_view volume_name) const;
};

// OK if `name` may name a backup: 1-253 characters of [A-Za-z0-9._-],
// starting with a letter or digit (so never ".", "..", a hidden or temporary
// file, or anything with a '/'). INVALID_ARGUMENT saying why otherwise.
// Backup names become file names only after passing this check.
absl::Status ValidateBackupName(std::string_view name);

// True if `chunk_size` is a power of two in [kMinChunkSize, kMaxChunkSize].
bool IsValidChunkSize(int64_t chunk_size);

// True if `hash` is 64 lower-case hex digits.
bool IsChunkHash(std::string_view hash);

// Checks a volume's invariants (above); INVALID_ARGUMENT naming the first
// broken one.
absl::Status ValidateVolume(const VolumeManifest& v);

// The manifest as JSON: format 1 when every extent is a whole chunk, else 2.
std::string ManifestToJson(const Manifest& m);

// Parses and validates a manifest read from the file of backup
// `expected_name`. FAILED_PRECONDITION for a format newer than this code
// reads; DATA_LOSS for anything malformed (truncated, wrong kind, a name that
// is not the file's, broken extents), naming the backup.
absl::StatusOr<Manifest> ManifestFromJson(std::string_view text, std::string_view expected_name);

}  // namespace berth::backup
