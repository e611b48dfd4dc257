// The data path of backups and restores (issue 30): a volume's bytes read
// from, or written into, its CSI driver on the node that holds it, through
// CSI calls only — the way Velero's data mover reads a snapshot through a
// volume cloned from it, here without a pod:
//
//   backup   CreateVolume(block, from the snapshot) → NodeStageVolume →
//            NodePublishVolume onto a file under the node's kubelet root →
//            pread the published block device → unpublish, unstage, delete.
//   restore  CreateVolume(block, empty) → stage, publish → write the backup
//            into it → unpublish, unstage; the claim's volume is then
//            created as a clone of it (CreateVolume with a volume content
//            source) and the block volume deleted.
//
// A filesystem volume's snapshot is read as the raw device it is: the
// temporary volume asks for a block volume from a filesystem snapshot (and
// the restored claim's volume for a filesystem from a block volume), which
// drivers refuse by default (Kubernetes guards volume mode changes); the
// requests carry kAllowModeChangeParameter so berth-csi allows it for these
// calls only. A repository is trusted like the node's disks: its bytes are
// mounted as a filesystem after a restore.
//
// Names are deterministic (the caller's), so every step is idempotent: a
// crash at any line leaves a volume, a staging or a publication that
// Cleanup() of the same name removes (it learns the volume's ID by asking
// CreateVolume again, which returns the existing volume).
//
//   DataMover mover(directory, {.work_dir = [&](const std::string& node) { ... }});
//   auto dev = mover.ExposeSnapshot({.driver = d, .node = n, .name = "berth-backup-<uid>"}, handle, size);
//   pread((*dev)->fd(), ...);
//   (*dev)->Close();  // or mover.Cleanup(target) after a crash
//
// Thread-safety: DataMover is thread-safe; a Device is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backup/repository.h"
#include "client/drivers.h"
#include "common/fd.h"
#include "csi/driver_client.h"

namespace berth::controllers {

// A CreateVolume parameter berth-csi reads: "true" lets a block volume be
// made from a filesystem volume's snapshot or clone and the reverse.
inline constexpr char kAllowModeChangeParameter[] = "csi.berth.io/allow-volume-mode-change";

// A temporary volume of the mover.
struct MoverVolume {
  std::string driver;
  std::string node;  // the node whose driver holds it
  std::string name;  // CreateVolume name; also names its staging directories
};

class DataMover {
 public:
  struct Options {
    // A directory inside `node`'s kubelet root (berth-csi accepts staging
    // and target paths only there) where the mover stages its volumes.
    std::function<absl::StatusOr<std::string>(const std::string& node)> work_dir;
    absl::Duration rpc_timeout = absl::ZeroDuration();  // zero: the call's default
  };

  // A volume staged and published as a block device, open for reading and
  // writing. Close() undoes the publication and staging and, unless the
  // volume was kept, deletes it; the destructor does the same, logging
  // errors.
  class Device {
   public:
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    int fd() const { return fd_.get(); }
    int64_t size_bytes() const { return size_bytes_; }
    const std::string& volume_id() const { return volume_id_; }
    // Close() leaves the volume in place (a restore's volume, to be cloned).
    void KeepVolume() { keep_ = true; }
    // fsyncs what was written, then unpublishes, unstages and (unless
    // kept) deletes the volume.
    absl::Status Close();

   private:
    friend class DataMover;
    Device(DataMover& mover, MoverVolume target, std::string volume_id, std::string staging, std::string publish, Fd fd,
           int64_t size_bytes);

    DataMover& mover_;
    MoverVolume target_;
    std::string volume_id_, staging_, publish_;
    Fd fd_;
    int64_t size_bytes_;
    bool keep_ = false;
    bool closed_ = false;
  };

  DataMover(client::DriverDirectory& directory, Options options);

  // The snapshot `snapshot_handle` as a block device, read-only.
  absl::StatusOr<std::unique_ptr<Device>> ExposeSnapshot(const MoverVolume& target, const std::string& snapshot_handle,
                                                         int64_t size_bytes);
  // A new, empty block volume of `size_bytes` (reads as zeros) to restore
  // into. An earlier volume of the same name is deleted first, so a retried
  // restore never starts on a half-written one.
  absl::StatusOr<std::unique_ptr<Device>> CreateEmpty(const MoverVolume& target, int64_t size_bytes);

  // Removes what an interrupted ExposeSnapshot/CreateEmpty of `target` may
  // have left: publication, staging, and the volume (found through the
  // same CreateVolume request: `snapshot_handle` for an exposed snapshot,
  // "" for an empty volume of `size_bytes`). Idempotent; OK when nothing is
  // left.
  absl::Status Cleanup(const MoverVolume& target, const std::string& snapshot_handle, int64_t size_bytes);
  // Deletes a volume the mover kept (after the clone was made).
  absl::Status DeleteVolume(const MoverVolume& target, const std::string& volume_id);

  // Group snapshots (CSI GroupController), for claims one backup takes
  // together. Whether the driver for `node` offers them:
  absl::StatusOr<bool> HasGroupSnapshots(const std::string& driver, const std::string& node);
  struct GroupSnapshot {
    std::string group_snapshot_id;
    // source volume id → (snapshot id, size in bytes)
    std::map<std::string, std::pair<std::string, int64_t>> members;
  };
  // CreateVolumeGroupSnapshot `name` of `volume_ids` (idempotent by name:
  // asking again returns the existing group).
  absl::StatusOr<GroupSnapshot> CreateGroupSnapshot(const std::string& driver, const std::string& node,
                                                    const std::string& name,
                                                    const std::vector<std::string>& volume_ids);
  // DeleteVolumeGroupSnapshot; NOT_FOUND is success.
  absl::Status DeleteGroupSnapshot(const std::string& driver, const std::string& node, const std::string& group_id,
                                   const std::vector<std::string>& snapshot_ids);

  // The ranges a changed-block tracking answer names, from the driver's
  // SnapshotMetadata service: the allocated ranges of `snapshot_handle`
  // (base empty) or those changed since `base_handle`. UNIMPLEMENTED when
  // the driver does not serve it (the caller reads everything).
  absl::StatusOr<std::vector<backup::ByteRange>> ChangedRanges(const std::string& driver, const std::string& node,
                                                               const std::string& base_handle,
                                                               const std::string& snapshot_handle);

 private:
  absl::StatusOr<std::unique_ptr<csi::DriverClient>> Client(const std::string& driver, const std::string& node);
  absl::StatusOr<std::string> CreateVolume(const csi::DriverClient& csi, const MoverVolume& target,
                                           const std::string& snapshot_handle, int64_t size_bytes);
  absl::StatusOr<std::unique_ptr<Device>> Expose(const MoverVolume& target, const std::string& volume_id,
                                                 int64_t size_bytes, bool read_only);
  absl::Status Teardown(const MoverVolume& target, const std::string& volume_id, bool delete_volume);
  absl::StatusOr<std::pair<std::string, std::string>> Paths(const MoverVolume& target);
  // The deadline of a GroupController call (no call layer wraps them).
  absl::Duration GroupCallTimeout() const;

  client::DriverDirectory& directory_;
  const Options options_;
};

}  // namespace berth::controllers
