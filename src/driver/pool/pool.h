// A pool: a directory holding volume and snapshot images and their records.
//
//   <pool>/volumes/<vol-id>.img      sparse image of a volume
//   <pool>/volumes/<vol-id>.json     its record (records.h, atomic writes)
//   <pool>/snapshots/<snap-id>.img   snapshot image (a reflink or sparse copy)
//   <pool>/snapshots/<snap-id>.json
//   <pool>/groups/<group-id>.json    group snapshot record
//   <pool>/tmp/                      scratch, emptied at every start
//
// Creation writes the image under tmp/, renames it into place, then writes
// the record: an image without a record was never acknowledged and is removed
// at the next start. Deletion marks the record `deleting`, removes the image,
// then the record: a `deleting` record found at start is finished. The exact
// format is in docs/on-disk-format.md.
//
// Capacity is thick by default: images are sparse, but the sum of
// provisioned sizes (volumes + snapshots + creations in progress) may not
// exceed what the pool filesystem can hold for data — its size less a
// reserve for its own metadata — × the overprovision ratio (1: every volume
// and snapshot can be written in full). Below that limit, provisioning also
// stops (available 0, with a reason) where the space under the pool could
// run out: a pool image with holes on a host filesystem whose free space
// cannot cover what the image may still take, or, for an overprovisioned or
// directory pool, a pool filesystem past its high watermark. The rules are
// in docs/failure-semantics.md.
//
// Thread-safety: thread-safe. The pool serializes its own bookkeeping;
// callers serialize operations on the same ID (see OperationLocks) so that,
// e.g., a volume is not deleted while it is being snapshotted.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "driver/pool/records.h"

namespace berth::driver {

// Runs `clone` with the source made consistent (filesystems frozen) around
// it; the identity by default.
using Quiesce = std::function<absl::Status(const std::function<absl::Status()>& clone)>;

class Pool {
 public:
  struct Options {
    std::string dir;  // canonical absolute path
    double overprovision_ratio = 1.0;
    // The pool image whose filesystem `dir` is (canonical), or empty for a
    // directory pool. Its holes are what the pool may still take from the
    // host filesystem holding it.
    std::string image{};
    // Fraction of a filesystem's size past which it counts as nearly full
    // (Ceph's nearfull, Longhorn's minimal available space).
    double high_watermark = 0.9;
  };

  struct Capacity {
    int64_t total_bytes = 0;        // size of the pool filesystem
    int64_t reserved_bytes = 0;     // of it, kept for the filesystem's own metadata
    int64_t limit_bytes = 0;        // (total - reserved) × overprovision ratio
    int64_t provisioned_bytes = 0;  // volumes + snapshots + reservations
    // What a new volume or snapshot may take now: limit - provisioned, no
    // more than the host can back, 0 under pressure (>= 0).
    int64_t available_bytes = 0;
    int64_t used_bytes = 0;  // blocks actually used on the pool filesystem
    // The host filesystem under the pool image (image pools only).
    bool has_host = false;
    int64_t host_total_bytes = 0;
    int64_t host_free_bytes = 0;
    int64_t image_bytes = 0;            // the image's apparent size
    int64_t image_allocated_bytes = 0;  // of it, allocated on the host
    // What the image may still take from the host to hold what is
    // provisioned: 0 for a fully allocated image.
    int64_t host_owed_bytes = 0;
    // Why provisioning stopped short of the limit (empty when it did not):
    // PoolNearlyFull, HostNearlyFull or HostOvercommitted, and a sentence
    // naming the sizes.
    std::string pressure_reason;
    std::string pressure_message;
  };

  struct Health {
    bool healthy = true;
    std::string message;  // why not
  };

  struct NewVolume {
    std::string id;
    std::string name;
    int64_t capacity_bytes = 0;
    AccessType access_type = AccessType::kMount;
    std::string fs_type;
    std::map<std::string, std::string> parameters;
    std::string source_snapshot_id;  // at most one source
    std::string source_volume_id;
  };

  // Opens (creating the layout if needed) and repairs the pool: removes temp
  // files and images without records, finishes interrupted deletions, probes
  // reflink support.
  static absl::StatusOr<std::unique_ptr<Pool>> Open(const Options& options);

  const std::string& dir() const { return options_.dir; }
  bool reflink() const { return reflink_; }

  // True when the pool directory is still a writable directory.
  bool Writable() const;

  absl::StatusOr<Capacity> GetCapacity() const;

  // Whether the pool filesystem still takes writes: writable, and an fsync
  // of its scratch directory succeeds (a filesystem that shut down after an
  // I/O error, or remounted read-only, fails it).
  Health CheckHealth() const;

  std::string VolumeImagePath(const std::string& id) const;
  std::string SnapshotImagePath(const std::string& id) const;

  std::optional<VolumeRecord> GetVolume(const std::string& id) const;
  std::vector<VolumeRecord> ListVolumes() const;  // sorted by id
  std::optional<SnapshotRecord> GetSnapshot(const std::string& id) const;
  std::vector<SnapshotRecord> ListSnapshots() const;  // sorted by id
  std::optional<GroupSnapshotRecord> GetGroupSnapshot(const std::string& id) const;

  // Creates the volume's image (sparse, or a copy of the source grown to
  // capacity) and record. RESOURCE_EXHAUSTED when the capacity does not fit,
  // NOT_FOUND for a missing source, ALREADY_EXISTS if the ID is taken.
  absl::StatusOr<VolumeRecord> CreateVolume(const NewVolume& spec, const Quiesce& quiesce = {});

  // Removes image and record. OK if it does not exist.
  absl::Status DeleteVolume(const std::string& id);

  // Persists changed publication/node state of an existing volume.
  absl::Status UpdateVolume(const VolumeRecord& record);

  // Grows the image to `new_capacity` (never shrinks) and records it.
  // RESOURCE_EXHAUSTED if the growth does not fit.
  absl::StatusOr<VolumeRecord> ExpandVolume(const std::string& id, int64_t new_capacity);

  // Copies the source volume's image into a new snapshot.
  absl::StatusOr<SnapshotRecord> CreateSnapshot(const std::string& id, const std::string& name,
                                                const std::string& source_volume_id,
                                                const std::map<std::string, std::string>& params,
                                                const std::string& group_snapshot_id, const Quiesce& quiesce = {});
  absl::Status DeleteSnapshot(const std::string& id);

  absl::Status SaveGroupSnapshot(const GroupSnapshotRecord& record);
  absl::Status DeleteGroupSnapshot(const std::string& id);

 private:
  explicit Pool(Options options);
  absl::Status Load();
  // Reserves `bytes` of provisionable capacity; RESOURCE_EXHAUSTED if it
  // does not fit. Release with Unreserve.
  absl::Status Reserve(int64_t bytes, std::string_view what);
  void Unreserve(int64_t bytes);
  std::string Path(std::string_view sub) const;
  // Provisioned bytes, reservations included.
  int64_t ProvisionedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pool filesystem's own use (what its blocks in use exceed its
  // images' by), plus room for the metadata that writes and reflinks add.
  absl::Status MeasureMetadataReserve();

  const Options options_;
  bool reflink_ = false;
  int64_t metadata_reserve_ = 0;  // set by Open

  mutable absl::Mutex mu_;
  std::map<std::string, VolumeRecord> volumes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, SnapshotRecord> snapshots_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, GroupSnapshotRecord> groups_ ABSL_GUARDED_BY(mu_);
  int64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// The smallest multiple of 1 MiB that is >= bytes.
int64_t RoundUpToMiB(int64_t bytes);

}  // namespace berth::driver
