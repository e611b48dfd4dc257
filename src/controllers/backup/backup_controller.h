// Backups of workloads (issue 30; Velero's backup controller and node-agent
// data mover in one, for berth's API): a Backup (backup.berth.io/v1,
// cluster-scoped; docs/backup.md) selects pods by namespace and label, and
// takes them, their claims and the claims' volumes into the repository of
// its BackupStorageLocation.
//
//   New ──validate──▶ FailedValidation
//    │
//    ▼ InProgress: pre hooks → one VolumeSnapshot per claim (frozen by the
//    │   driver as it is cut) → post hooks → per volume: the changed-block
//    │   ranges (allocated ones for a first backup, those changed since the
//    │   volume's last backup when its snapshot is still kept, everything
//    │   for a driver without SnapshotMetadata) read from a volume cloned
//    │   from the snapshot (DataMover) into the repository → manifest.
//    ▼
//   Completed | PartiallyFailed (some volume or a Continue hook failed) | Failed
//
// Kept snapshots. A completed backup keeps its VolumeSnapshots as the base
// of the next backup of each volume; once a newer backup of a volume has
// completed, the older snapshot is deleted. A failed backup deletes its own.
//
// Crash safety. Every step is re-derived from stored objects: snapshots are
// named from the backup's and the claim's uids and labelled with the backup;
// the mover's volumes are named from them too. A Backup found InProgress
// that this process is not running was interrupted (berth up stopped or was
// killed): it ends Failed, as Velero does at a restart, and its snapshots and
// mover volumes are removed; the repository never holds its manifest (the
// manifest is written last), so earlier backups are untouched.
//
// Deletion and expiry. Each Backup carries the finalizer
// backup.berth.io/repository; deleting it (by hand, or at status.expiration
// = start + spec.ttl) removes its manifest, its kept snapshots and, through
// the repository's garbage collection, the chunks no other backup uses.
//
// BackupStorageLocations are checked here too: phase Available when the
// repository at spec.config.path opens (ReadWrite locations are created
// when the directory is empty), Unavailable with the reason otherwise. A
// backup found in a location's repository without a Backup object (another
// berth up wrote it) gets one, Completed (Velero's backup sync), so it can
// be restored here: the manifest holds the Backup object it was taken for.
//
// Thread-safety: Start/Stop from one thread; syncs run on the workers.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "apiserver/api.h"
#include "backup/repository.h"
#include "client/events.h"
#include "client/informer.h"
#include "client/workqueue.h"
#include "common/clock.h"
#include "controllers/backup/data_mover.h"
#include "controllers/backup/hooks.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library

inline constexpr char kBackupGroup[] = "backup.berth.io";
inline constexpr char kBackupFinalizer[] = "backup.berth.io/repository";
// On a backup's VolumeSnapshots: the Backup's name and uid.
inline constexpr char kLabelBackupName[] = "backup.berth.io/backup";
inline constexpr char kLabelBackupUid[] = "backup.berth.io/backup-uid";
// On a Backup made from a manifest found in a location's repository.
inline constexpr char kAnnFromRepository[] = "backup.berth.io/from-repository";

class BackupController {
 public:
  struct Options {
    int workers = 2;
    // How long all of a backup's snapshots may take to become ready.
    absl::Duration snapshot_timeout = absl::Minutes(10);
    // How often a running backup writes its progress.
    absl::Duration progress_period = absl::Seconds(1);
    // How often BackupStorageLocations are checked again.
    absl::Duration location_period = absl::Minutes(1);
    // How often a new backup waiting for its repository's garbage
    // collection looks again.
    absl::Duration repository_busy_retry = absl::Seconds(1);
    backup::RepositoryOptions repository_options = {};
    Clock* clock = nullptr;  // null: the real clock
  };

  // `hooks` may be null (pods' hook annotations are then an error).
  BackupController(apiserver::Api& registry, Informer& backups, Informer& locations, Informer& snapshots,
                   DataMover& mover, HookRunner* hooks, Options options);
  ~BackupController();  // Stop()

  void RegisterHandlers();
  void Start();
  void Stop();

  absl::Status SyncBackup(const std::string& name);
  absl::Status SyncLocation(const std::string& name);

 private:
  struct Volume;  // one claim being backed up
  struct Run;     // one backup being taken

  absl::Status SyncFromRepository(const nlohmann::json& location, backup::Repository& repo);
  absl::Status Validate(const nlohmann::json& backup, std::vector<std::string>& errors);
  // Runs the backup; `hold` is the repository's shared lock if the sync
  // took it (else the run takes it, failing while garbage collection runs).
  absl::Status TakeBackup(const nlohmann::json& backup, backup::RepositoryHold hold);
  // A new backup whose repository is being garbage-collected (`busy` says
  // so) looks again after Options::repository_busy_retry, with an event.
  absl::Status WaitForRepository(const nlohmann::json& backup, const absl::Status& busy);
  // Fails an InProgress backup no run of this process is taking: berth up
  // stopped during it, or this process's run ended without writing its
  // outcome (then `reason` is that run's error).
  absl::Status Interrupted(const nlohmann::json& backup, const std::string& reason);
  // Removes a failed backup's snapshots and mover volumes, once
  // (status.snapshotsRemoved).
  absl::Status CleanUpFailed(const nlohmann::json& backup);
  absl::Status Delete(const nlohmann::json& backup);
  absl::Status Expire(const nlohmann::json& backup);

  // The location `name` ("" = the default one) and its repository.
  absl::StatusOr<nlohmann::json> Location(const std::string& name);
  absl::StatusOr<std::unique_ptr<backup::Repository>> OpenRepository(const nlohmann::json& location, bool create);

  absl::Status Select(Run& run);
  absl::Status Snapshot(Run& run);
  absl::Status MoveVolume(Run& run, Volume& v);
  absl::Status WaitForSnapshots(Run& run);
  // Removes every snapshot and group snapshot of this backup and the
  // mover's volumes of it.
  absl::Status RemoveSnapshots(const nlohmann::json& backup);
  // Deletes the kept snapshots of older backups that `backup`'s volumes
  // supersede.
  absl::Status DropSuperseded(const nlohmann::json& backup);
  // Deletes a group snapshot recorded in a status (idempotent).
  absl::Status DeleteGroup(const nlohmann::json& group);
  void WriteProgress(Run& run, bool force);

  apiserver::Api& registry_;
  Informer& backups_;
  Informer& locations_;
  Informer& snapshots_;
  DataMover& mover_;
  HookRunner* hooks_;
  const Options options_;
  Clock& clock_;
  EventRecorder events_;
  WorkQueue queue_;
  WorkQueue location_queue_;
  std::vector<std::thread> workers_;

  absl::Mutex mu_;
  absl::CondVar snapshots_changed_;
  int64_t snapshot_events_ ABSL_GUARDED_BY(mu_) = 0;
  // uid → error of a run that ended without writing its outcome.
  std::map<std::string, std::string> failed_runs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::controllers
