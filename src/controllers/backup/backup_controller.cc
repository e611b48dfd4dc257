// The backup controller: handlers, locations, a backup's life cycle (start,
// interruption, expiry, deletion). Taking a backup: backup_run.cc.
#include "controllers/backup/backup_controller.h"

#include <algorithm>
#include <utility>

#include "absl/strings/strip.h"
#include "api/quantity.h"
#include "api/selector.h"
#include "api/types/core_pod.h"
#include "api/types/fields.h"
#include "client/object.h"
#include "client/writes.h"
#include "common/hash.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "controllers/snapshot/snapshotter.h"
#include "spdlog/spdlog.h"

#include "controllers/backup/backup_controller_internal.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
using nlohmann::json;

BackupController::BackupController(apiserver::Api& registry, Informer& backups, Informer& locations,
                                   Informer& snapshots, DataMover& mover, HookRunner* hooks, Options options)
    : registry_(registry),
      backups_(backups),
      locations_(locations),
      snapshots_(snapshots),
      mover_(mover),
      hooks_(hooks),
      options_(options),
      clock_(options.clock != nullptr ? *options.clock : RealClock()),
      events_(registry, "backup-controller"),
      queue_(WorkQueue::Options{.clock = &clock_}),
      location_queue_(WorkQueue::Options{.clock = &clock_}) {}

BackupController::~BackupController() { Stop(); }

void BackupController::RegisterHandlers() {
  auto backup_changed = [this](const json& b) { queue_.Add(Name(b)); };
  backups_.AddHandlers({.on_add = backup_changed,
                        .on_update = [backup_changed](const json&, const json& b) { backup_changed(b); },
                        .on_delete = nullptr});
  auto location_changed = [this](const json& l) { location_queue_.Add(Name(l)); };
  locations_.AddHandlers({.on_add = location_changed,
                          .on_update =
                              [location_changed](const json& before, const json& after) {
                                // Our own status writes need no second check.
                                if (Field(before, "spec") != Field(after, "spec")) location_changed(after);
                              },
                          .on_delete = nullptr});
  // A running backup waits for its snapshots to be ready.
  auto snapshot_changed = [this](const json& s) {
    if (Labels(s).count(kLabelBackupUid) == 0) return;
    absl::MutexLock lock(&mu_);
    ++snapshot_events_;
    snapshots_changed_.SignalAll();
  };
  snapshots_.AddHandlers({.on_add = snapshot_changed,
                          .on_update = [snapshot_changed](const json&, const json& s) { snapshot_changed(s); },
                          .on_delete = snapshot_changed});
}

void BackupController::Start() {
  StartWorkers(workers_, options_.workers, queue_, "backup", [this](const std::string& k) { return SyncBackup(k); });
  StartWorkers(workers_, 1, location_queue_, "backup storage location",
               [this](const std::string& k) { return SyncLocation(k); });
}

void BackupController::Stop() {
  queue_.ShutDown();
  location_queue_.ShutDown();
  {
    absl::MutexLock lock(&mu_);
    snapshots_changed_.SignalAll();
  }
  for (auto& w : workers_) w.join();
  workers_.clear();
}

// ---- Locations ----

absl::StatusOr<json> BackupController::Location(const std::string& name) {
  if (!name.empty()) {
    auto l = locations_.GetByKey(name);
    if (!l) return absl::NotFoundError(StrCat("backup storage location \"", name, "\" not found"));
    return *l;
  }
  for (auto& l : locations_.List()) {
    if (Field(Field(l, "spec"), "default") == true) return l;
  }
  return absl::NotFoundError(
      "no backup storage location is named and none is the default (berth up --backup-location DIR makes one)");
}

absl::StatusOr<std::unique_ptr<backup::Repository>> BackupController::OpenRepository(const json& location,
                                                                                     bool create) {
  const std::string path = Str(location, {"spec", "config", "path"});
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(
        StrCat("backup storage location ", Name(location), " has no absolute config.path"));
  }
  auto repo = backup::Repository::Open(path, clock_);
  if (repo.ok() || !absl::IsNotFound(repo.status()) || !create) return repo;
  if (Str(location, {"spec", "accessMode"}) == "ReadOnly") return repo;
  return backup::Repository::Create(path, options_.repository_options, clock_);
}

absl::Status BackupController::SyncLocation(const std::string& name) {
  auto l = locations_.GetByKey(name);
  if (!l || Deleting(*l)) return absl::OkStatus();
  auto repo = OpenRepository(*l, /*create=*/true);
  const std::string now = Rfc3339(clock_.Now());
  BERTH_RETURN_IF_ERROR(EditStatus(registry_, Locations(), *l, [&](json& s) {
    if (repo.ok()) {
      s["phase"] = "Available";
      s.erase("message");
    } else {
      s["phase"] = "Unavailable";
      s["message"] = std::string(repo.status().message());
    }
    s["lastValidationTime"] = now;
  }));
  if (!repo.ok() && Str(*l, {"status", "phase"}) != "Unavailable") {
    events_.Record(*l, "Warning", "BackupStorageLocationUnavailable", std::string(repo.status().message()));
  }
  location_queue_.AddAfter(name, options_.location_period);
  if (!repo.ok()) return absl::OkStatus();
  return SyncFromRepository(*l, **repo);
}

// Velero's backup sync: a backup in the repository that this API does not
// know (another berth up wrote it, or this one lost its store) becomes a
// Completed Backup object, so it can be restored. A backup being deleted
// has lost its manifest before its object goes, so none comes back.
absl::Status BackupController::SyncFromRepository(const json& location, backup::Repository& repo) {
  BERTH_ASSIGN_OR_RETURN(std::vector<std::string> names, repo.ListBackups());
  absl::Status result;
  for (const auto& name : names) {
    // A Backup this sync made carries kAnnFromRepository; one it made but
    // could not give its status yet (a crash in between) gets it now.
    auto live = registry_.Get(Backups(), "", name);
    if (live.ok() && (Annotation(*live, kAnnFromRepository).empty() || !Str(*live, {"status", "phase"}).empty())) {
      continue;
    }
    if (!live.ok() && !absl::IsNotFound(live.status())) {
      result.Update(live.status());
      continue;
    }
    auto manifest = repo.ReadManifest(name);
    if (!manifest.ok()) {
      result.Update(manifest.status());
      continue;
    }
    json spec = json::object();
    for (const auto& o : manifest->objects) {
      if (o.value("kind", "") == "Backup" && Str(o, {"metadata", "name"}) == name) spec = Field(o, "spec");
    }
    if (!spec.is_object()) spec = json::object();
    spec["storageLocation"] = Name(location);
    json volumes = json::array();
    int64_t total = 0;
    for (const auto& v : manifest->volumes) {
      auto [ns, claim] = SplitKey(v.name);
      volumes.push_back({{"namespace", ns},
                         {"persistentVolumeClaim", claim},
                         {"sizeBytes", v.size_bytes},
                         {"phase", kPhaseCompleted},
                         {"snapshotName", ""}});
      if (!v.base_backup.empty()) volumes.back()["baseBackup"] = v.base_backup;
      total += v.size_bytes;
    }
    if (!live.ok()) {
      json b = {{"apiVersion", "backup.berth.io/v1"},
                {"kind", "Backup"},
                {"metadata",
                 {{"name", name},
                  {"labels", {{"backup.berth.io/storage-location", Name(location)}}},
                  {"annotations", {{kAnnFromRepository, "true"}}}}},
                {"spec", spec}};
      live = registry_.Create(Backups(), "", b);
      if (!live.ok()) {
        if (!absl::IsAlreadyExists(live.status())) result.Update(live.status());
        continue;
      }
    }
    const json& created = *live;
    const absl::Time taken = absl::FromUnixNanos(manifest->created_unix_nanos);
    // The backup worker adds its finalizer meanwhile: a conflict is retried
    // here, not after the location's backoff.
    absl::Status written;
    for (int attempt = 0; attempt < 5; ++attempt) {
      written = EditStatus(registry_, Backups(), created, [&](json& s) {
        s["phase"] = kPhaseCompleted;
        s["startTimestamp"] = Rfc3339(taken);
        s["completionTimestamp"] = Rfc3339(taken);
        s["expiration"] = Rfc3339(taken + ttl_or_default(spec));
        s["progress"] = {{"totalItems", static_cast<int64_t>(manifest->objects.size())},
                         {"itemsBackedUp", static_cast<int64_t>(manifest->objects.size())},
                         {"totalBytes", total},
                         {"bytesDone", total}};
        s["volumes"] = volumes;
      });
      if (!absl::IsAborted(written)) break;
    }
    result.Update(written);
    spdlog::info("backup {} found in location {}: added", name, Name(location));
  }
  return result;
}

// ---- Backups ----

absl::Status BackupController::SyncBackup(const std::string& name) {
  // From the store, not the cache: a cache a step behind would show a
  // backup this worker just finished as New or InProgress, and the sync
  // would take it again or fail it as interrupted.
  auto b = registry_.Get(Backups(), "", name);
  if (!b.ok()) return absl::IsNotFound(b.status()) ? absl::OkStatus() : b.status();
  if (Deleting(*b)) return Delete(*b);
  if (!HasFinalizer(*b, kBackupFinalizer)) {
    // Added before anything exists that its removal must clean up.
    return EditFinalizer(registry_, Backups(), *b, kBackupFinalizer, true);
  }
  const std::string phase = Str(*b, {"status", "phase"});
  // Found in a repository: its location's sync writes its status.
  if (phase.empty() && !Annotation(*b, kAnnFromRepository).empty()) return absl::OkStatus();
  if (phase.empty() || phase == kPhaseNew) {
    std::vector<std::string> errors;
    BERTH_RETURN_IF_ERROR(Validate(*b, errors));
    const absl::Time now = clock_.Now();
    if (!errors.empty()) {
      events_.Record(*b, "Warning", "FailedValidation", absl::StrJoin(errors, "; "));
      return EditStatus(registry_, Backups(), *b, [&](json& s) {
        s["phase"] = kPhaseFailedValidation;
        s["validationErrors"] = errors;
        s["completionTimestamp"] = Rfc3339(now);
        s["expiration"] = Rfc3339(now + kDefaultTtl);
      });
    }
    // A backup waits for the repository's garbage collection instead of
    // failing for it (Velero queues a backup behind its repository's
    // maintenance): the shared lock is taken before the run starts, and the
    // run keeps it until its manifest is written.
    backup::RepositoryHold hold;
    if (auto location = Location(Str(*b, {"spec", "storageLocation"})); location.ok()) {
      if (auto repo = OpenRepository(*location, /*create=*/true); repo.ok()) {
        auto held = (*repo)->HoldShared(StrCat("start backup ", name));
        if (absl::IsUnavailable(held.status())) return WaitForRepository(*b, held.status());
        if (held.ok()) hold = std::move(*held);
      }  // else the run fails, saying why
    }
    const absl::Duration ttl = ttl_or_default(Field(*b, "spec"));
    BERTH_RETURN_IF_ERROR(EditStatus(registry_, Backups(), *b, [&](json& s) {
      s["phase"] = kPhaseInProgress;
      s["startTimestamp"] = Rfc3339(now);
      s["expiration"] = Rfc3339(now + ttl);
    }));
    auto fresh = registry_.Get(Backups(), "", name);
    if (!fresh.ok()) return fresh.status();
    events_.Record(*fresh, "Normal", "BackupStarted", StrCat("Backup ", name, " started"));
    absl::Status taken = TakeBackup(*fresh, std::move(hold));
    if (!taken.ok()) {
      // The run ended without writing its outcome (a status write failed):
      // the retry must say why, not that berth up stopped.
      absl::MutexLock lock(&mu_);
      failed_runs_[Uid(*fresh)] = std::string(taken.message());
    }
    return taken;
  }
  // The run happens inside this very sync, and a key is never synced twice
  // at once: a backup found InProgress is one a stopped process was taking.
  if (phase == kPhaseInProgress) {
    std::string reason = "berth up stopped while the backup was in progress";
    {
      absl::MutexLock lock(&mu_);
      if (auto it = failed_runs_.find(Uid(*b)); it != failed_runs_.end()) reason = it->second;
    }
    return Interrupted(*b, reason);
  }
  // A failed backup keeps no snapshot (idempotent: retries a cleanup that
  // failed when the backup did).
  if (phase == kPhaseFailed) BERTH_RETURN_IF_ERROR(CleanUpFailed(*b));
  if (Terminal(phase)) return Expire(*b);
  return absl::OkStatus();
}

absl::Status BackupController::Validate(const json& backup, std::vector<std::string>& errors) {
  const json& spec = Field(backup, "spec");
  if (std::string t = Str(spec, {"ttl"}); !t.empty()) {
    auto d = ParseGoDuration(t);
    if (!d.ok() || *d <= absl::ZeroDuration())
      errors.push_back(StrCat("spec.ttl \"", t, "\" is not a positive duration"));
  }
  if (Field(spec, "labelSelector").is_object()) {
    if (auto s = api::LabelSelector::FromJson(Field(spec, "labelSelector")); !s.ok()) {
      errors.push_back(StrCat("spec.labelSelector: ", s.status().message()));
    }
  }
  auto location = Location(Str(spec, {"storageLocation"}));
  if (!location.ok()) {
    errors.push_back(std::string(location.status().message()));
  } else if (Str(*location, {"spec", "accessMode"}) == "ReadOnly") {
    errors.push_back(StrCat("backup storage location ", Name(*location), " is ReadOnly"));
  }
  if (auto s = backup::ValidateBackupName(Name(backup)); !s.ok()) {
    errors.push_back(StrCat("the name cannot name a backup in a repository: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status BackupController::WaitForRepository(const json& backup, const absl::Status& busy) {
  spdlog::debug("backup {} waits: {}", Name(backup), std::string(busy.message()));
  // Recorded at every look: the recorder turns the repeats into one event
  // with a count.
  // "cannot start backup b: garbage collection is running; retry": the
  // retry is this controller's.
  events_.Record(backup, "Normal", "WaitingForRepository",
                 StrCat(absl::StripSuffix(busy.message(), "; retry"), ": the backup starts when it is done"));
  queue_.AddAfter(Name(backup), options_.repository_busy_retry);
  return absl::OkStatus();
}

absl::Status BackupController::Interrupted(const json& backup, const std::string& reason) {
  spdlog::warn("backup {} is InProgress but not running: marking it Failed ({})", Name(backup), reason);
  events_.Record(backup, "Warning", "BackupFailed", reason);
  BERTH_RETURN_IF_ERROR(EditStatus(registry_, Backups(), backup, [&](json& s) {
    s["phase"] = kPhaseFailed;
    s["failureReason"] = reason;
    s["completionTimestamp"] = Rfc3339(clock_.Now());
    s["errors"] = s.value("errors", int64_t{0}) + 1;
  }));
  {
    absl::MutexLock lock(&mu_);
    failed_runs_.erase(Uid(backup));
  }
  return CleanUpFailed(backup);
}

absl::Status BackupController::CleanUpFailed(const json& backup) {
  if (Field(Field(backup, "status"), "snapshotsRemoved") == true) return absl::OkStatus();
  BERTH_RETURN_IF_ERROR(RemoveSnapshots(backup));
  return EditStatus(registry_, Backups(), backup, [](json& s) { s["snapshotsRemoved"] = true; });
}

absl::Status BackupController::RemoveSnapshots(const json& backup) {
  const json& vols = Field(Field(backup, "status"), "volumes");
  if (vols.is_array()) {
    for (const auto& v : vols) {
      // The mover's volume of an interrupted run, if any (Cleanup finds
      // it by asking for it again; nothing there is fine).
      if (!Str(v, {"snapshotHandle"}).empty() && Str(v, {"phase"}).empty()) {
        const json& size = Field(v, "sizeBytes");
        absl::Status st =
            mover_.Cleanup({Str(v, {"driver"}), Str(v, {"node"}), MoverName(backup, Str(v, {"persistentVolume"}))},
                           Str(v, {"snapshotHandle"}), size.is_number_integer() ? size.get<int64_t>() : 0);
        if (!st.ok()) return st;
      }
    }
  }
  // Group snapshots go whole (their members cannot be deleted one by one).
  json groups = Field(Field(backup, "status"), "groupSnapshots");
  if (groups.is_array()) {
    for (const auto& g : groups) BERTH_RETURN_IF_ERROR(DeleteGroup(g));
  }
  api::LabelSelector selector;
  BERTH_ASSIGN_OR_RETURN(selector, api::LabelSelector::Parse(StrCat(kLabelBackupUid, "=", Uid(backup))));
  BERTH_ASSIGN_OR_RETURN(auto snaps, registry_.List(Snapshots(), "", LabelsOnly(selector)));
  absl::Status result;
  for (const auto& s : snaps.items) {
    if (Deleting(s)) continue;
    auto del = registry_.Delete(Snapshots(), Ns(s), Name(s));
    if (!del.ok() && !absl::IsNotFound(del.status())) result.Update(del.status());
  }
  return result;
}

absl::Status BackupController::DeleteGroup(const json& g) {
  if (g.value("deleted", false)) return absl::OkStatus();
  const std::string driver = Str(g, {"driver"}), node = Str(g, {"node"});
  std::string id = Str(g, {"groupSnapshotId"});
  std::vector<std::string> snapshots, volumes;
  for (const auto& m : Field(g, "members")) {
    volumes.push_back(Str(m, {"volumeHandle"}));
    if (!Str(m, {"snapshotHandle"}).empty()) snapshots.push_back(Str(m, {"snapshotHandle"}));
  }
  if (id.empty() || snapshots.size() != volumes.size()) {
    // Asked for but not recorded (a crash in between): asking again by
    // name returns it if it was made (and makes it if not, to go at once).
    auto again = mover_.CreateGroupSnapshot(driver, node, Str(g, {"name"}), volumes);
    if (!again.ok()) return absl::IsNotFound(again.status()) ? absl::OkStatus() : again.status();
    id = again->group_snapshot_id;
    snapshots.clear();
    for (const auto& [volume, member] : again->members) snapshots.push_back(member.first);
  }
  return mover_.DeleteGroupSnapshot(driver, node, id, snapshots);
}

absl::Status BackupController::DropSuperseded(const json& backup) {
  const json& vols = Field(Field(backup, "status"), "volumes");
  if (!vols.is_array()) return absl::OkStatus();
  std::set<std::string> pvs;
  for (const auto& v : vols) {
    if (Str(v, {"phase"}) == kPhaseCompleted && !Str(v, {"snapshotHandle"}).empty())
      pvs.insert(Str(v, {"persistentVolume"}));
  }
  const auto done = ParseRfc3339(Str(backup, {"status", "completionTimestamp"}));
  absl::Status result;
  for (const auto& other : backups_.List()) {
    if (Uid(other) == Uid(backup)) continue;
    const auto other_done = ParseRfc3339(Str(other, {"status", "completionTimestamp"}));
    if (done && other_done && *other_done > *done) continue;  // newer than this one
    const json& ovols = Field(Field(other, "status"), "volumes");
    if (!ovols.is_array()) continue;
    bool changed = false;
    json updated = ovols;
    for (auto& ov : updated) {
      if (pvs.count(Str(ov, {"persistentVolume"})) == 0 || Str(ov, {"snapshotName"}).empty()) continue;
      auto del = registry_.Delete(Snapshots(), Str(ov, {"namespace"}), Str(ov, {"snapshotName"}));
      if (!del.ok() && !absl::IsNotFound(del.status())) {
        result.Update(del.status());
        continue;
      }
      ov["snapshotName"] = "";
      changed = true;
    }
    // A group goes once every member volume has a newer base.
    json groups = Field(Field(other, "status"), "groupSnapshots");
    bool groups_changed = false;
    if (groups.is_array()) {
      for (auto& g : groups) {
        if (g.value("deleted", false)) continue;
        bool all = true;
        for (const auto& m : Field(g, "members")) all = all && pvs.count(Str(m, {"persistentVolume"})) > 0;
        if (!all) continue;
        if (absl::Status st = DeleteGroup(g); !st.ok()) {
          result.Update(st);
          continue;
        }
        g["deleted"] = true;
        groups_changed = true;
        for (auto& ov : updated) {
          if (Str(ov, {"groupSnapshot"}) == Str(g, {"name"})) {
            ov["snapshotHandle"] = "";
            changed = true;
          }
        }
      }
    }
    if (changed || groups_changed) {
      result.Update(EditStatus(registry_, Backups(), other, [&](json& s) {
        s["volumes"] = updated;
        if (groups_changed) s["groupSnapshots"] = groups;
      }));
    }
  }
  return result;
}

absl::Status BackupController::Expire(const json& backup) {
  auto expiration = ParseRfc3339(Str(backup, {"status", "expiration"}));
  if (!expiration) return absl::OkStatus();
  const absl::Time now = clock_.Now();
  if (now < *expiration) {
    queue_.AddAfter(Name(backup), *expiration - now);
    return absl::OkStatus();
  }
  events_.Record(backup, "Normal", "BackupExpired", StrCat("Backup ", Name(backup), " expired; deleting it"));
  apiserver::DeleteOptions only_this;
  only_this.uid = Uid(backup);
  auto del = registry_.Delete(Backups(), "", Name(backup), only_this);
  if (!del.ok() && !absl::IsNotFound(del.status())) return del.status();
  return absl::OkStatus();
}

absl::Status BackupController::Delete(const json& backup) {
  if (!HasFinalizer(backup, kBackupFinalizer)) return absl::OkStatus();
  if (Str(backup, {"status", "phase"}) != kPhaseDeleting) {
    BERTH_RETURN_IF_ERROR(EditStatus(registry_, Backups(), backup, [](json& s) { s["phase"] = kPhaseDeleting; }));
  }
  BERTH_RETURN_IF_ERROR(RemoveSnapshots(backup));
  auto location = Location(Str(backup, {"spec", "storageLocation"}));
  if (location.ok() && Str(*location, {"spec", "accessMode"}) != "ReadOnly") {
    auto repo = OpenRepository(*location, /*create=*/false);
    if (repo.ok()) {
      absl::Status removed = (*repo)->DeleteBackup(Name(backup));
      if (!removed.ok() && !absl::IsNotFound(removed)) return removed;
      // Chunks no other backup references go now; while another backup
      // runs the sweep waits (UNAVAILABLE: retried with backoff).
      auto gc = (*repo)->Gc();
      if (!gc.ok()) return gc.status();
      spdlog::info("backup {} deleted: {} chunk(s), {} removed from the repository", Name(backup), gc->chunks_removed,
                   FormatByteSizeApprox(gc->bytes_removed));
    } else if (!absl::IsNotFound(repo.status())) {
      return repo.status();
    }
  } else if (!location.ok()) {
    events_.Record(
        backup, "Warning", "BackupDeleted",
        StrCat("its storage location is gone: the repository keeps its data (", location.status().message(), ")"));
  }
  return EditFinalizer(registry_, Backups(), backup, kBackupFinalizer, false);
}

}  // namespace berth::controllers
