// The backup repository: deduplicated, compressed, verifiable backups of
// volumes and API objects on any mounted filesystem (a local disk, NFS, an
// object store mounted as a filesystem). Format: docs/on-disk-format.md,
// "Backup repository".
//
//   <root>/berth-backup.json         repository format record (written last by Create)
//   <root>/lock                      flock(2)ed: shared by writers and readers, exclusive by GC
//   <root>/chunks/ab/abcdef….zst     a chunk: zstd frame of content whose SHA-256 is its name
//   <root>/backups/<name>.json       a backup's manifest (manifest.h), written last
//
// Example (a first backup of the allocated ranges, then an incremental one
// of the ranges changed since):
//
//   auto repo = Repository::Create("/mnt/backups");           // or Open()
//   auto w = (*repo)->StartBackup("nightly-1");
//   (*w)->AddObject(pvc_json);
//   (*w)->AddVolume({.name = "pvc-1", .fd = fd, .size_bytes = size, .ranges = allocated});
//   (*w)->Commit();
//   auto base = (*repo)->ReadManifest("nightly-1");
//   auto w2 = (*repo)->StartBackup("nightly-2");
//   (*w2)->AddVolume({.name = "pvc-1", .fd = fd2, .size_bytes = size, .ranges = changed, .base = &*base});
//   (*w2)->Commit();
//   (*repo)->RestoreVolume("nightly-2", "pvc-1", "/dev/loop7");
//
// Crash safety. Chunks are immutable once in place and written atomically
// (chunk_store.h); a manifest is written (atomically) only after every chunk
// it references is durable. A crash therefore leaves earlier backups intact
// and at worst unreferenced chunks and temporary files, which Gc() removes.
//
// Concurrency. Writers, restores and Verify hold a shared flock on <root>/lock
// for their whole run; Gc() takes it exclusively (or fails UNAVAILABLE), so it
// never sweeps a chunk that a backup in progress wrote or deduplicated against
// but has not yet named in a manifest. This is as strong as the filesystem's
// flock: local filesystems and NFSv4 share it between hosts; a filesystem
// whose locks are per host must not run Gc() while another host writes.
// Repository is thread-safe; a BackupWriter is used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backup/chunk_store.h"
#include "backup/manifest.h"
#include "common/clock.h"
#include "common/fd.h"
#include "nlohmann/json.hpp"

namespace berth::backup {

// Version of the repository layout this code writes and the newest it opens.
inline constexpr int kRepositoryFormat = 1;

// 1 MiB: the unit an incremental backup re-reads around each changed range
// and the granularity of dedup. Smaller chunks add less per scattered write
// but make one file each (a 4 GiB volume is 4096 files at 1 MiB, 65536 at 64
// KiB) and one SHA-256 + zstd call each; 1 MiB is restic's and Kopia's
// average, and Longhorn's backup block is 2 MiB.
inline constexpr int64_t kDefaultChunkSize = int64_t{1} << 20;

struct RepositoryOptions {
  int64_t chunk_size = kDefaultChunkSize;  // for new volumes; a power of two in [kMinChunkSize, kMaxChunkSize]
  int zstd_level = 3;                      // zstd's default: ~300 MB/s per core, incompressible data passes fast
};

struct ByteRange {
  int64_t offset = 0;
  int64_t length = 0;
};

// Called with the bytes processed so far and the total to process; one call
// at a time, possibly from a worker thread of the call it reports on.
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

// A volume to back up.
struct VolumeSource {
  std::string name;  // unique within the backup
  int fd = -1;       // the volume's content (a snapshot); read with pread; not owned
  int64_t size_bytes = 0;
  // The ranges to read (any order, may overlap, need not be aligned; widened
  // to 4 KiB blocks). Without a base each chunk they touch is read whole.
  // Over a base, a chunk-sized window is read whole when a quarter of it
  // changed (or its extents would be cut in too many pieces); otherwise just
  // its changed blocks are read, packed with others into shared chunks, and
  // the base's extents are cut around them. Everything else comes from
  // `base` (an incremental backup) or is a hole (a first backup of allocated
  // ranges).
  std::vector<ByteRange> ranges;
  // The manifest of the backup to inherit untouched chunks from, which must
  // hold a volume of the same name; nullptr for a full backup. Not owned.
  const Manifest* base = nullptr;
};

struct VolumeStats {
  int64_t bytes_read = 0;        // bytes of the volume read (whole chunks and changed blocks)
  int64_t chunks_read = 0;       // chunk-sized windows read whole
  int64_t pieces_read = 0;       // runs of changed blocks read on their own (incremental only)
  int64_t chunks_added = 0;      // new chunk files written (whole chunks and packs of changed blocks)
  int64_t bytes_added = 0;       // their size on disk (compressed)
  int64_t chunks_deduped = 0;    // chunks already in the repository
  int64_t zero_chunks = 0;       // windows read whole that were all zeros: stored as holes
  int64_t chunks_inherited = 0;  // extents (whole or cut) taken from the base
};

class Repository;

// The repository's shared lock held ahead of a backup: a caller that must not
// fail while garbage collection runs waits for it (Repository::HoldShared is
// UNAVAILABLE until the collection ends) and hands it to StartBackup, which
// keeps it for the writer. Empty when default-constructed.
class RepositoryHold {
 public:
  RepositoryHold() = default;
  bool held() const { return lock_.ok(); }

 private:
  friend class Repository;
  RepositoryHold(Fd lock, std::string root) : lock_(std::move(lock)), root_(std::move(root)) {}

  Fd lock_;
  std::string root_;  // the repository it locks
};

// Writes one backup: chunks as volumes are added, the manifest at Commit().
// Destroying it without Commit() abandons the backup: no manifest is written,
// its new chunks stay unreferenced until Gc(). Holds the repository's shared
// lock from StartBackup until Commit or destruction. The Repository must
// outlive it. Not thread-safe.
class BackupWriter {
 public:
  ~BackupWriter();
  BackupWriter(const BackupWriter&) = delete;
  BackupWriter& operator=(const BackupWriter&) = delete;

  // Adds an API object (any JSON document) to the manifest.
  void AddObject(nlohmann::json object);

  // Reads and stores the chunks `source.ranges` touch (on the calling
  // thread and up to three workers, joined before it returns). A volume's
  // extents enter the manifest only when all its chunks are stored. On error
  // the volume is left out (its chunks become orphans) and the writer stays
  // usable. INVALID_ARGUMENT for a bad name, size, range or base;
  // FAILED_PRECONDITION when a chunk the base names is missing (the base was
  // garbage-collected: take a full backup); OUT_OF_RANGE when the source ends
  // before size_bytes; I/O errors as ErrnoStatus.
  absl::StatusOr<VolumeStats> AddVolume(const VolumeSource& source, const ProgressFn& progress = nullptr);

  // Makes every chunk durable, then writes the manifest atomically.
  // FAILED_PRECONDITION when called twice; ALREADY_EXISTS when a backup of
  // the same name was committed meanwhile.
  absl::StatusOr<Manifest> Commit();

 private:
  friend class Repository;
  BackupWriter(Repository& repo, Fd lock, Manifest manifest);

  Repository& repo_;
  Fd lock_;  // shared flock on <root>/lock; closed (released) at Commit
  Manifest manifest_;
  std::set<std::string> dirs_to_sync_;  // chunk directories holding referenced chunks
  bool committed_ = false;
};

struct RestoreOptions {
  // The target (a block device) is known to read as zeros already: holes
  // and all-zero blocks are skipped instead of zeroed. Regular files are
  // always truncated to zero first and so need nothing.
  bool target_is_zeroed = false;
};

struct RestoreStats {
  int64_t bytes_written = 0;  // data bytes written (holes and zero blocks excluded)
  int64_t chunks_read = 0;
};

struct ChunkProblem {
  std::string hash;
  absl::Status status;               // NOT_FOUND: missing; DATA_LOSS: corrupt (says how)
  std::vector<std::string> backups;  // the backups referencing the chunk, sorted
};

struct VerifyReport {
  int64_t backups_checked = 0;
  int64_t chunks_checked = 0;                                   // distinct chunks read
  int64_t bytes_checked = 0;                                    // their uncompressed size
  std::vector<ChunkProblem> problems;                           // sorted by hash
  std::vector<std::pair<std::string, absl::Status>> manifests;  // unreadable manifests: name, why

  bool ok() const { return problems.empty() && manifests.empty(); }
  // One line per problem, e.g. "chunk 3fa0… is corrupt: … (backups: a, b)".
  std::string Describe() const;
};

struct GcReport {
  int64_t backups = 0;               // manifests marked from
  int64_t chunks_kept = 0;           // referenced chunks
  int64_t chunks_removed = 0;        // unreferenced chunks deleted
  int64_t bytes_removed = 0;         // their size on disk
  int64_t temp_files_removed = 0;    // interrupted chunk and manifest writes
  std::vector<std::string> ignored;  // unknown files left alone in chunk directories
};

class Repository {
 public:
  // Makes a repository in `root` (created if missing). ALREADY_EXISTS if one
  // is there; FAILED_PRECONDITION if `root` holds anything else;
  // INVALID_ARGUMENT for bad options.
  static absl::StatusOr<std::unique_ptr<Repository>> Create(const std::string& root,
                                                            const RepositoryOptions& options = {},
                                                            Clock& clock = RealClock());
  // Opens the repository in `root`. NOT_FOUND if there is none;
  // FAILED_PRECONDITION if its format is newer than this code reads;
  // DATA_LOSS if its format record is malformed.
  static absl::StatusOr<std::unique_ptr<Repository>> Open(const std::string& root, Clock& clock = RealClock());

  const std::string& root() const { return root_; }
  int64_t chunk_size() const { return chunk_size_; }

  // Starts backup `name` (ValidateBackupName). ALREADY_EXISTS if a backup of
  // that name exists; UNAVAILABLE while Gc() runs, unless `hold` (from
  // HoldShared of this repository) already holds the shared lock;
  // INVALID_ARGUMENT for a hold of another repository.
  absl::StatusOr<std::unique_ptr<BackupWriter>> StartBackup(std::string_view name, RepositoryHold hold = {});

  // Takes the shared lock that backups, restores and verifies hold
  // (UNAVAILABLE while Gc() runs; `what` names the waiter in that error).
  absl::StatusOr<RepositoryHold> HoldShared(std::string_view what) const;

  // Names of committed backups, sorted.
  absl::StatusOr<std::vector<std::string>> ListBackups() const;

  // The manifest of backup `name`: NOT_FOUND if there is none, else as
  // ManifestFromJson.
  absl::StatusOr<Manifest> ReadManifest(std::string_view name) const;

  // Removes backup `name`'s manifest (durably). Its chunks stay until Gc().
  // NOT_FOUND if there is no such backup.
  absl::Status DeleteBackup(std::string_view name);

  // Writes volume `volume` of backup `backup` into `target`: a block device
  // at least the volume's size, or a regular file (created if missing,
  // truncated and left sparse where the volume has holes, fsynced). Each
  // chunk is verified before any of its bytes are written; the first bad
  // chunk stops the restore with DATA_LOSS (or NOT_FOUND when missing)
  // naming the chunk, the backup, the volume and the offset. The target then
  // holds only verified data and zeros but is incomplete: never use it.
  absl::StatusOr<RestoreStats> RestoreVolume(std::string_view backup, std::string_view volume,
                                             const std::string& target, const RestoreOptions& options = {},
                                             const ProgressFn& progress = nullptr);

  // Reads every chunk that backup `backup` (all backups if nullopt)
  // references and checks it. Problems are in the report, not the status;
  // the status fails only when verification could not run (NOT_FOUND for an
  // unknown backup, UNAVAILABLE while Gc() runs, I/O errors listing files).
  absl::StatusOr<VerifyReport> Verify(std::optional<std::string_view> backup = std::nullopt);

  // Removes chunks no manifest references, and temporary files of
  // interrupted writes. Mark and sweep under the exclusive lock: UNAVAILABLE
  // while any backup, restore or verify runs. Refuses to sweep (returns the
  // error, removing nothing) when any manifest cannot be read or parsed or
  // an unknown file sits among the manifests: what it would reference is
  // unknown.
  absl::StatusOr<GcReport> Gc();

 private:
  friend class BackupWriter;
  Repository(std::string root, int64_t chunk_size, int zstd_level, Clock& clock);

  // The shared (readers, writers) or exclusive (GC) lock, as an open fd.
  absl::StatusOr<Fd> Lock(bool exclusive, std::string_view what) const;
  std::string ManifestPath(std::string_view name) const;
  std::string BackupsDir() const;

  // Immutable after construction.
  const std::string root_;
  const int64_t chunk_size_;
  Clock& clock_;
  const ChunkStore chunks_;
};

}  // namespace berth::backup
