// The volume populator of restores (issue 30, item 5): a claim whose
// spec.dataSourceRef is {apiGroup: backup.berth.io, kind: Backup, name: B}
// and whose annotation backup.berth.io/source-volume names a volume of B's
// manifest ("<namespace>/<claim>", as the backup controller names them) is
// filled from B's repository before it is bound (the provisioner's hook,
// controllers/volume/populator.h):
//
//   CreateEmpty("berth-restore-<claim uid>", the volume's size) on the node
//   the claim's volume goes to (same driver: berth-csi is node-local) →
//   Repository::RestoreVolume into its published block device (verified
//   chunks, holes skipped: the new volume reads as zeros) → unpublish and
//   unstage, the volume kept → the provisioner clones it into the claim's
//   volume (with the mode-change parameter: a filesystem from its raw
//   device) → Release deletes it.
//
// A filesystem claim's backed-up volume is the raw image of its filesystem,
// so the clone mounts as it was. Populate starts over each time (CreateEmpty
// deletes an earlier volume of the same name first).
//
// Progress and failures are kept per claim uid in a RestoreTracker the
// Restore controller reads (status.progress.bytesDone; a population that
// fails for good, e.g. a corrupt chunk, ends its restore PartiallyFailed).
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "apiserver/api.h"
#include "controllers/backup/data_mover.h"
#include "controllers/volume/populator.h"
#include "nlohmann/json.hpp"

namespace berth::controllers {

// On a restored claim: the volume of the backup's manifest it is filled from.
inline constexpr char kAnnSourceVolume[] = "backup.berth.io/source-volume";
// The mover's volume a claim is filled through: "berth-restore-<claim uid>".
std::string RestoreVolumeName(const std::string& claim_uid);

// The repository directory of `backup`'s storage location
// (spec.storageLocation; "": the default location). FAILED_PRECONDITION
// naming what is missing.
absl::StatusOr<std::string> BackupRepositoryPath(apiserver::Api& registry, const nlohmann::json& backup);

// What the populations of restored claims have done, by claim uid: written
// by BackupPopulator, read by the Restore controller. In memory: after a
// restart a population starts over and reports afresh.
class RestoreTracker {
 public:
  struct Entry {
    int64_t bytes_done = 0;
    int64_t total_bytes = 0;
    // The last population's error (OK while it runs or once it is done).
    absl::Status error;
    // The error cannot go away by trying again (DATA_LOSS: a corrupt chunk;
    // NOT_FOUND: a chunk, the backup or its volume is missing).
    bool permanent = false;
  };
  void Progress(const std::string& claim_uid, int64_t done, int64_t total) ABSL_LOCKS_EXCLUDED(mu_);
  void Failed(const std::string& claim_uid, absl::Status error) ABSL_LOCKS_EXCLUDED(mu_);
  void Forget(const std::string& claim_uid) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<Entry> Get(const std::string& claim_uid) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

class BackupPopulator : public VolumePopulator {
 public:
  // `registry` (Backups and their locations are read from it), `mover` and
  // `tracker` (may be null) outlive the populator.
  BackupPopulator(apiserver::Api& registry, DataMover& mover, RestoreTracker* tracker);

  // VolumePopulator
  bool Serves(const DataSourceRef& ref) const override;
  // The Backup exists and is Completed or PartiallyFailed, its location
  // names a path, and the claim names its source volume.
  absl::Status Check(const PopulationRequest& request) override;
  absl::StatusOr<::csi::v1::VolumeContentSource> Populate(const PopulationRequest& request) override;
  std::map<std::string, std::string> Parameters() const override;
  absl::Status Release(const PopulationRequest& request) override;

 private:
  struct Source {
    std::string backup;
    std::string volume;
    std::string repository;  // the location's path
  };
  absl::StatusOr<Source> SourceOf(const PopulationRequest& request);

  apiserver::Api& registry_;
  DataMover& mover_;
  RestoreTracker* tracker_;
};

}  // namespace berth::controllers
