// Content-addressed chunk storage: <dir>/<hash[0:2]>/<hash>.zst.
//
// A chunk is a piece of a volume (at most kMaxChunkSize bytes) stored once,
// named by the SHA-256 of its uncompressed bytes, as one zstd frame (with the
// content size and zstd's own checksum in the frame header). A chunk file is
// never modified once in place: Put writes a temporary file beside it
// (".<hash>.zst.tmp-<random>"), fsyncs it and renames it into place, so a
// crash leaves either no chunk or a whole one, plus perhaps a temporary file
// that the repository's GC removes. The rename becomes durable when the
// directory is fsynced: SyncDirs, which the backup writer calls for every
// directory holding a chunk its manifest references before it writes the
// manifest (one fsync per directory instead of one per chunk).
//
// Thread-safe: no mutable state; concurrent Puts of the same content both
// succeed (the second rename replaces identical bytes).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace berth::backup {

class ChunkStore {
 public:
  // `dir` holds the 256 two-hex-digit subdirectories (CreateLayout makes
  // them). `zstd_level` is the compression level for new chunks.
  ChunkStore(std::string dir, int zstd_level);

  // Makes `dir` and its 256 subdirectories and fsyncs them.
  static absl::Status CreateLayout(const std::string& dir);

  // The path of chunk `hash` (which must satisfy IsChunkHash).
  std::string PathOf(std::string_view hash) const;
  // The subdirectory holding chunk `hash`.
  std::string DirOf(std::string_view hash) const;

  struct PutResult {
    std::string hash;
    bool added = false;        // false: the chunk was already stored (dedup)
    int64_t stored_bytes = 0;  // compressed size written (0 when not added)
  };
  // Stores `content` (at most kMaxChunkSize bytes) unless a chunk with its
  // hash exists. Durable once SyncDirs({DirOf(hash)}) returns.
  absl::StatusOr<PutResult> Put(std::string_view content) const;

  // The content of chunk `hash`, verified: NOT_FOUND if the chunk is missing,
  // DATA_LOSS (naming the chunk) if it does not decompress to content of at
  // most `max_size` bytes whose SHA-256 is `hash`.
  absl::StatusOr<std::string> Get(std::string_view hash, int64_t max_size) const;

  // Whether chunk `hash` exists (not verified).
  absl::StatusOr<bool> Exists(std::string_view hash) const;

  // fsyncs each directory in `dirs` (paths from DirOf).
  static absl::Status SyncDirs(const std::set<std::string>& dirs);

 private:
  const std::string dir_;
  const int zstd_level_;
};

}  // namespace berth::backup
