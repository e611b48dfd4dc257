// Restores of workloads (issue 30, item 5; Velero's restore controller, for
// berth's API): a Restore (backup.berth.io/v1, cluster-scoped;
// docs/backup.md, "Restore") brings the pods and claims of a Backup back,
// into the same or mapped namespaces, onto a chosen node or wherever the
// scheduler puts them.
//
//   New ──validate──▶ FailedValidation (status.validationErrors)
//    │   spec.backupName, or spec.scheduleName → the newest Completed or
//    │   PartiallyFailed backup labelled with that schedule (recorded on the
//    │   Restore, annotation backup.berth.io/backup-name, so a restart does
//    │   not pick a newer one); the Backup Completed or PartiallyFailed; its
//    │   location exists; namespaceMapping's names valid; targetNode a Node
//    ▼
//   InProgress: the manifest read from the location's repository; per
//    │   restored namespace (mapped) the Namespace, then every claim that
//    │   has a volume in the manifest, then the pods — see RestoredClaim and
//    │   RestoredPod. Existing objects are never overwritten (as Velero): a
//    │   name taken by an object this restore did not create is a warning
//    │   and skipped.
//    ▼ once every restored claim is Bound (the provisioner binds a claim
//    │   only after its volume was filled from the backup: BackupPopulator)
//   Completed (no errors) | PartiallyFailed (errors: an object refused, a
//   claim whose volume cannot be filled) | Failed (status.failureReason:
//   the repository or the manifest cannot be read)
//
// Progress: status.progress.totalItems/itemsRestored count the claims and
// pods; totalBytes is the sum of the restored volumes' sizes, bytesDone
// what their populations wrote (a bound claim counts whole). Events on the
// Restore say what happened.
//
// Restart-safe: nothing is remembered between syncs. Every object created
// is labelled with the restore (backup.berth.io/restore-name) and named as
// in the backup, so a sync after a crash finds what exists and goes on.
//
// Thread-safety: Start/Stop from one thread; syncs run on the workers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "apiserver/api.h"
#include "client/events.h"
#include "client/informer.h"
#include "client/workqueue.h"
#include "common/clock.h"
#include "controllers/backup/backup_populator.h"
#include "nlohmann/json.hpp"

namespace berth::controllers {

// On everything a restore creates: the Restore's and the Backup's names
// (Velero's velero.io/restore-name and velero.io/backup-name).
inline constexpr char kLabelRestoreName[] = "backup.berth.io/restore-name";
inline constexpr char kLabelRestoredBackup[] = "backup.berth.io/backup-name";
// On a Restore given a scheduleName: the backup it restores.
inline constexpr char kAnnRestoreBackup[] = "backup.berth.io/backup-name";

// How one restore maps the backed-up objects.
struct RestoreMapping {
  std::string restore;                            // the Restore's name
  std::string backup;                             // the Backup's name
  std::map<std::string, std::string> namespaces;  // spec.namespaceMapping: old → new
  std::string target_node;                        // spec.targetNode ("": the scheduler's choice)

  std::string Namespace(const std::string& ns) const;
};

// The claim to create for backed-up `claim` (the JSON the backup stored):
// in the mapped namespace, its name, labels (plus the restore's) and the
// annotations that are not the binder's, provisioner's or scheduler's;
// spec.storageClassName, accessModes, resources, volumeMode and selector
// kept; volumeName, dataSource and status dropped; spec.dataSourceRef the
// Backup and annotation backup.berth.io/source-volume `volume` (its volume
// in the manifest), and with a target node
// volume.kubernetes.io/selected-node.
nlohmann::json RestoredClaim(const nlohmann::json& claim, const std::string& volume, const RestoreMapping& mapping);

// The pod to create for backed-up `pod`: in the mapped namespace, with its
// name, labels (plus the restore's), annotations and spec, minus
// spec.nodeName (the scheduler places it) and whatever the API server or
// another controller set (uid, resourceVersion, creationTimestamp,
// ownerReferences, managedFields, finalizers, deletion, status); with a
// target node, nodeSelector kubernetes.io/hostname=<node>.
nlohmann::json RestoredPod(const nlohmann::json& pod, const RestoreMapping& mapping);

struct RestoreInformers {
  client::Informer& restores;
  client::Informer& backups;
  client::Informer& claims;  // restored claims: their binding ends a restore
};

class RestoreController {
 public:
  struct Options {
    int workers = 2;
    // How often a running restore writes its progress.
    absl::Duration progress_period = absl::Seconds(2);
    // What the populations did (BackupPopulator's); null: bytesDone counts
    // bound claims only and a failing population never ends a restore.
    const RestoreTracker* tracker = nullptr;
    Clock* clock = nullptr;  // null: the real clock
  };
  RestoreController(apiserver::Api& registry, RestoreInformers informers, Options options);
  ~RestoreController();  // Stop()

  void RegisterHandlers();
  void Start();
  void Stop();

  // One reconcile of Restore `name` (public for tests).
  absl::Status Sync(const std::string& name);

 private:
  struct Outcome;  // what one pass over the manifest found

  // Validation errors (empty: valid); `backup` is set to the backup to
  // restore when it is found.
  absl::StatusOr<std::vector<std::string>> Validate(const nlohmann::json& restore, std::string& backup);
  absl::Status Run(const nlohmann::json& restore);
  absl::StatusOr<Outcome> RestoreObjects(const nlohmann::json& restore, const RestoreMapping& mapping,
                                         const std::vector<nlohmann::json>& objects,
                                         const std::map<std::string, int64_t>& volume_sizes);
  // Creates `object` unless its name is taken: true when it exists as this
  // restore's (created now or before), false (a warning recorded) when
  // another object holds the name.
  absl::StatusOr<bool> CreateOrFind(const nlohmann::json& restore, const api::KindInfo& kind,
                                    const nlohmann::json& object, Outcome& outcome);
  absl::Status Finish(const nlohmann::json& restore, const std::string& phase, const std::string& failure,
                      const std::function<void(nlohmann::json&)>& more = nullptr);

  apiserver::Api& registry_;
  RestoreInformers informers_;
  const Options options_;
  Clock& clock_;
  client::EventRecorder events_;
  client::WorkQueue queue_;
  std::vector<std::thread> workers_;
};

}  // namespace berth::controllers
