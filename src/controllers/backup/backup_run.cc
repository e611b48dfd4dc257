// Taking one backup: selection, hooks and snapshots, the data path, the
// manifest and the outcome (backup_controller.h).
#include "controllers/backup/backup_controller.h"

#include <algorithm>
#include <utility>

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

absl::Status BackupController::Select(Run& run) {
  const json& spec = Field(run.backup, "spec");
  std::vector<std::string> included = Strings(Field(spec, "includedNamespaces"));
  const std::vector<std::string> excluded = Strings(Field(spec, "excludedNamespaces"));
  const bool all = included.empty() || std::find(included.begin(), included.end(), "*") != included.end();
  auto in_scope = [&](const std::string& ns) {
    if (std::find(excluded.begin(), excluded.end(), ns) != excluded.end()) return false;
    return all || std::find(included.begin(), included.end(), ns) != included.end();
  };
  api::LabelSelector selector;
  if (Field(spec, "labelSelector").is_object()) {
    BERTH_ASSIGN_OR_RETURN(selector, api::LabelSelector::FromJson(Field(spec, "labelSelector")));
  }

  std::set<std::string> claim_keys;  // "ns/name", in order of first use
  std::vector<std::string> claim_order;
  auto want_claim = [&](const std::string& ns, const std::string& name) {
    if (claim_keys.insert(StrCat(ns, "/", name)).second) claim_order.push_back(StrCat(ns, "/", name));
  };
  BERTH_ASSIGN_OR_RETURN(auto pods, registry_.List(K("pods"), "", LabelsOnly(selector)));
  for (auto& pod : pods.items) {
    if (!in_scope(Ns(pod))) continue;
    const json& volumes = Field(Field(pod, "spec"), "volumes");
    if (volumes.is_array()) {
      for (const auto& v : volumes) {
        if (std::string c = PodVolumeClaim(pod, v); !c.empty()) want_claim(Ns(pod), c);
      }
    }
    run.pods.push_back(std::move(pod));
  }
  // Claims the selector names directly (Velero applies it to every resource).
  BERTH_ASSIGN_OR_RETURN(auto claims, registry_.List(K("persistentvolumeclaims"), "", LabelsOnly(selector)));
  for (const auto& c : claims.items) {
    if (in_scope(Ns(c))) want_claim(Ns(c), Name(c));
  }

  for (const auto& key : claim_order) {
    auto [ns, name] = SplitKey(key);
    auto claim = registry_.Get(K("persistentvolumeclaims"), ns, name);
    if (!claim.ok()) {
      run.warnings.push_back(StrCat("claim ", key, ": ", claim.status().message()));
      continue;
    }
    const std::string pv_name = Str(*claim, {"spec", "volumeName"});
    if (Str(*claim, {"status", "phase"}) != "Bound" || pv_name.empty()) {
      run.warnings.push_back(StrCat("claim ", key, " is not Bound: its volume is not backed up"));
      run.claims_and_pvs.push_back(ForManifest(*claim));
      continue;
    }
    auto pv = registry_.Get(K("persistentvolumes"), "", pv_name);
    if (!pv.ok()) {
      run.warnings.push_back(StrCat("claim ", key, ": volume ", pv_name, ": ", pv.status().message()));
      continue;
    }
    Volume v;
    v.key = key;
    v.claim = *claim;
    v.pv = *pv;
    v.driver = Str(*pv, {"spec", "csi", "driver"});
    v.volume_handle = Str(*pv, {"spec", "csi", "volumeHandle"});
    run.claims_and_pvs.push_back(ForManifest(*claim));
    run.claims_and_pvs.push_back(ForManifest(*pv));
    if (v.driver.empty() || v.volume_handle.empty()) {
      run.warnings.push_back(StrCat("claim ", key, ": volume ", pv_name, " is not a CSI volume: not backed up"));
      continue;
    }
    // Deterministic, so a restarted controller finds what this run made.
    v.snapshot_name = StrCat("berth-backup-", Sha256Hex(StrCat(Uid(run.backup), "/", Uid(*claim))).substr(0, 16));
    run.volumes.push_back(std::move(v));
  }
  run.items_total = static_cast<int64_t>(run.pods.size() + run.claims_and_pvs.size());
  return absl::OkStatus();
}

absl::Status BackupController::Snapshot(Run& run) {
  // Claims of one driver on one node are cut together when the driver has
  // group snapshots: one consistency point for all of them (berth-csi
  // freezes every mounted member, clones them all, thaws).
  std::map<std::pair<std::string, std::string>, std::vector<Volume*>> places;
  for (auto& v : run.volumes) {
    const std::string node = VolumeNode(v.pv);
    if (!node.empty()) places[{v.driver, node}].push_back(&v);
  }
  for (auto& [place, members] : places) {
    if (members.size() < 2) continue;
    const auto& [driver, node] = place;
    auto has = mover_.HasGroupSnapshots(driver, node);
    if (!has.ok() || !*has) continue;
    json entry = {
        {"driver", driver},
        {"node", node},
        {"name", StrCat("berth-backup-", Sha256Hex(StrCat(Uid(run.backup), "/", driver, "/", node)).substr(0, 16))},
        {"members", json::array()}};
    std::vector<std::string> handles;
    for (Volume* v : members) {
      entry["members"].push_back({{"persistentVolume", Name(v->pv)}, {"volumeHandle", v->volume_handle}});
      handles.push_back(v->volume_handle);
    }
    run.groups.push_back(entry);
    WriteProgress(run, true);  // the plan first: an interrupted run's cleanup finds it by name
    BERTH_ASSIGN_OR_RETURN(auto group, mover_.CreateGroupSnapshot(driver, node, entry["name"], handles));
    json& recorded = run.groups.back();
    recorded["groupSnapshotId"] = group.group_snapshot_id;
    for (size_t i = 0; i < members.size(); ++i) {
      const auto& [snapshot_id, size] = group.members.at(members[i]->volume_handle);
      recorded["members"][i]["snapshotHandle"] = snapshot_id;
      members[i]->snapshot_handle = snapshot_id;
      members[i]->size_bytes = size;
      members[i]->node = node;
      members[i]->group = recorded["name"];
      members[i]->snapshot_name.clear();
    }
    WriteProgress(run, true);
  }
  for (auto& v : run.volumes) {
    if (!v.group.empty()) continue;
    json snap = {{"apiVersion", "snapshot.storage.k8s.io/v1"},
                 {"kind", "VolumeSnapshot"},
                 {"metadata",
                  {{"name", v.snapshot_name},
                   {"namespace", Ns(v.claim)},
                   {"labels", {{kLabelBackupName, Name(run.backup)}, {kLabelBackupUid, Uid(run.backup)}}}}},
                 {"spec", {{"source", {{"persistentVolumeClaimName", Name(v.claim)}}}}}};
    auto created = registry_.Create(Snapshots(), Ns(v.claim), snap);
    if (!created.ok() && !absl::IsAlreadyExists(created.status())) {
      return absl::Status(created.status().code(),
                          StrCat("snapshot of claim ", v.key, ": ", created.status().message()));
    }
  }
  return WaitForSnapshots(run);
}

absl::Status BackupController::WaitForSnapshots(Run& run) {
  const absl::Time deadline = clock_.Now() + options_.snapshot_timeout;
  while (true) {
    int64_t seen;
    {
      absl::MutexLock lock(&mu_);
      seen = snapshot_events_;
    }
    bool all_ready = true;
    for (auto& v : run.volumes) {
      if (!v.snapshot_handle.empty()) continue;
      auto snap = snapshots_.Get(Ns(v.claim), v.snapshot_name);
      if (!snap) {
        all_ready = false;
        continue;
      }
      if (const json& err = Field(Field(*snap, "status"), "error"); err.is_object()) {
        return absl::FailedPreconditionError(StrCat("snapshot of claim ", v.key, " failed: ", Str(err, {"message"})));
      }
      const std::string content_name = Str(*snap, {"status", "boundVolumeSnapshotContentName"});
      if (Field(Field(*snap, "status"), "readyToUse") != true || content_name.empty()) {
        all_ready = false;
        continue;
      }
      auto content = registry_.Get(Contents(), "", content_name);
      if (!content.ok()) return content.status();
      v.snapshot_handle = Str(*content, {"status", "snapshotHandle"});
      const json& size = Field(Field(*content, "status"), "restoreSize");
      v.size_bytes = size.is_number_integer() ? size.get<int64_t>() : 0;
      v.node = Annotation(*content, kAnnSnapshotNode);
      if (v.size_bytes <= 0) {
        auto q = api::Quantity::Parse(Str(v.pv, {"spec", "capacity", "storage"}));
        if (q.ok()) v.size_bytes = q->Value();
      }
      if (v.snapshot_handle.empty()) all_ready = false;
    }
    if (all_ready) return absl::OkStatus();
    if (clock_.Now() >= deadline) {
      return absl::DeadlineExceededError(
          StrCat("the snapshots were not ready within ", FormatGoDuration(options_.snapshot_timeout)));
    }
    absl::MutexLock lock(&mu_);
    if (queue_.shutting_down()) return absl::CancelledError("stopping");
    if (snapshot_events_ == seen) snapshots_changed_.WaitWithTimeout(&mu_, absl::Seconds(1));
  }
}

void BackupController::WriteProgress(Run& run, bool force) {
  const absl::Time now = clock_.Now();
  if (!force && now - run.last_progress < options_.progress_period) return;
  run.last_progress = now;
  absl::Status st = EditStatus(registry_, Backups(), run.backup, [&](json& s) {
    s["progress"] = {{"totalItems", run.items_total},
                     {"itemsBackedUp", run.items_done},
                     {"totalBytes", run.total_bytes},
                     {"bytesDone", run.done_bytes}};
    s["volumes"] = run.VolumesStatus();
    s["groupSnapshots"] = run.groups;
  });
  if (!st.ok()) spdlog::debug("backup {}: progress: {}", Name(run.backup), st.ToString());
}

absl::Status BackupController::MoveVolume(Run& run, Volume& v) {
  // The base: the newest finished backup of this volume (same PV) in the
  // same location whose snapshot is still kept and whose manifest holds it.
  std::string base_handle;
  std::optional<backup::Manifest> base_manifest;
  {
    absl::Time newest = absl::InfinitePast();
    for (const auto& other : backups_.List()) {
      const std::string phase = Str(other, {"status", "phase"});
      if (Uid(other) == Uid(run.backup) || (phase != kPhaseCompleted && phase != kPhasePartiallyFailed)) continue;
      if (Str(other, {"spec", "storageLocation"}) != Str(run.backup, {"spec", "storageLocation"})) continue;
      const json& vols = Field(Field(other, "status"), "volumes");
      if (!vols.is_array()) continue;
      for (const auto& ov : vols) {
        if (Str(ov, {"persistentVolume"}) != Name(v.pv) || Str(ov, {"phase"}) != kPhaseCompleted ||
            Str(ov, {"snapshotHandle"}).empty() ||
            (Str(ov, {"snapshotName"}).empty() && Str(ov, {"groupSnapshot"}).empty())) {
          continue;
        }
        auto done = ParseRfc3339(Str(other, {"status", "completionTimestamp"}));
        if (!done || *done <= newest) continue;
        if (!Str(ov, {"snapshotName"}).empty()) {
          auto snap = snapshots_.Get(Str(ov, {"namespace"}), Str(ov, {"snapshotName"}));
          if (!snap || Field(Field(*snap, "status"), "readyToUse") != true) continue;
        }
        auto manifest = run.repo->ReadManifest(Name(other));
        if (!manifest.ok() || manifest->FindVolume(v.key) == nullptr) continue;
        newest = *done;
        base_handle = Str(ov, {"snapshotHandle"});
        base_manifest = std::move(*manifest);
        v.base_backup = Name(other);
      }
    }
  }

  std::vector<backup::ByteRange> ranges;
  auto changed = mover_.ChangedRanges(v.driver, v.node, base_handle, v.snapshot_handle);
  if (!changed.ok() && !base_handle.empty() && !absl::IsUnimplemented(changed.status())) {
    run.warnings.push_back(StrCat("volume ", v.key, ": changes since backup ", v.base_backup, " unknown (",
                                  changed.status().message(), "): taking the allocated ranges"));
    base_handle.clear();
    base_manifest.reset();
    v.base_backup.clear();
    changed = mover_.ChangedRanges(v.driver, v.node, "", v.snapshot_handle);
  }
  if (changed.ok()) {
    ranges = std::move(*changed);
  } else if (absl::IsUnimplemented(changed.status())) {
    // No changed-block tracking: read it all; the repository deduplicates.
    ranges = {{0, v.size_bytes}};
    base_manifest.reset();
    v.base_backup.clear();
  } else {
    return changed.status();
  }

  BERTH_ASSIGN_OR_RETURN(auto dev, mover_.ExposeSnapshot({v.driver, v.node, MoverName(run.backup, Name(v.pv))},
                                                         v.snapshot_handle, v.size_bytes));
  const int64_t before = run.done_bytes;
  auto stats = run.writer->AddVolume({.name = v.key,
                                      .fd = dev->fd(),
                                      .size_bytes = v.size_bytes,
                                      .ranges = std::move(ranges),
                                      .base = base_manifest ? &*base_manifest : nullptr},
                                     [&](int64_t done, int64_t) {
                                       run.done_bytes = before + std::min(done, v.size_bytes);
                                       WriteProgress(run, false);
                                     });
  absl::Status closed = dev->Close();
  run.done_bytes = before + v.size_bytes;
  if (!stats.ok()) return stats.status();
  v.bytes_read = stats->bytes_read;
  v.bytes_added = stats->bytes_added;
  return closed;
}

absl::Status BackupController::TakeBackup(const json& backup, backup::RepositoryHold hold) {
  Run run;
  run.backup = backup;
  const std::string name = Name(backup);
  // Whatever ends the run, its outcome is written; a failure before the
  // manifest leaves no snapshot and no mover volume behind.
  auto fail = [&](const absl::Status& why) -> absl::Status {
    run.writer.reset();  // abandons the backup: no manifest
    const std::string reason = std::string(why.message());
    events_.Record(run.backup, "Warning", "BackupFailed", reason);
    // The outcome first, with what this run made (the last progress write
    // may not have gone through): a cleanup that fails is retried by the
    // sync of a Failed backup, which removes the same.
    BERTH_RETURN_IF_ERROR(EditStatus(registry_, Backups(), run.backup, [&](json& s) {
      s["phase"] = kPhaseFailed;
      s["failureReason"] = reason;
      s["completionTimestamp"] = Rfc3339(clock_.Now());
      s["errors"] = static_cast<int64_t>(run.errors.size()) + 1;
      s["warnings"] = static_cast<int64_t>(run.warnings.size());
      s["volumes"] = run.VolumesStatus();
      s["groupSnapshots"] = run.groups;
    }));
    json made = run.backup;
    made["status"]["volumes"] = run.VolumesStatus();
    made["status"]["groupSnapshots"] = run.groups;
    return CleanUpFailed(made);
  };

  auto location = Location(Str(backup, {"spec", "storageLocation"}));
  if (!location.ok()) return fail(location.status());
  run.location_name = Name(*location);
  auto repo = OpenRepository(*location, /*create=*/true);
  if (!repo.ok()) {
    return fail(absl::Status(repo.status().code(),
                             StrCat("backup storage location ", run.location_name, ": ", repo.status().message())));
  }
  run.repo = std::move(*repo);
  if (absl::Status st = Select(run); !st.ok()) return fail(st);

  // Hooks take typed pods, and run only in running ones (Velero skips the
  // others: there is no container to run them in).
  std::vector<api::types::Pod> typed;
  for (const auto& p : run.pods) {
    if (Str(p, {"status", "phase"}) != "Running") continue;
    auto t = api::types::Decode<api::types::Pod>(p);
    if (!t.ok()) return fail(t.status());
    typed.push_back(std::move(*t));
  }
  bool any_hook = false;
  for (const auto& p : typed) {
    for (HookPhase ph : {HookPhase::kPre, HookPhase::kPost}) {
      auto h = ParseHook(p, ph);
      any_hook = any_hook || !h.ok() || h->has_value();
    }
  }
  if (any_hook && hooks_ == nullptr)
    return fail(absl::FailedPreconditionError("pods have backup hooks but no hook runner is configured"));

  // Pre hooks, the snapshots, post hooks: the window the applications are
  // quiesced in is as short as the snapshots take to cut.
  std::vector<api::types::Pod> reached;
  absl::Status pre = any_hook ? RunHooks(*hooks_, typed, HookPhase::kPre, &run.warnings, &reached) : absl::OkStatus();
  absl::Status snapped = pre.ok() ? Snapshot(run) : absl::OkStatus();
  absl::Status post = absl::OkStatus();
  if (any_hook) post = RunHooks(*hooks_, pre.ok() ? typed : reached, HookPhase::kPost, &run.warnings);
  if (!pre.ok()) return fail(pre);
  if (!snapped.ok()) return fail(snapped);
  if (!post.ok()) return fail(post);
  for (const auto& v : run.volumes) run.total_bytes += v.size_bytes;
  WriteProgress(run, true);  // records the snapshots: an interrupted run's cleanup needs them

  auto writer = run.repo->StartBackup(name, std::move(hold));
  if (!writer.ok()) return fail(writer.status());
  run.writer = std::move(*writer);
  // The Backup itself, so another berth up reading this repository knows it.
  run.writer->AddObject(ForManifest(run.backup));
  for (const auto& p : run.pods) run.writer->AddObject(ForManifest(p));
  for (const auto& o : run.claims_and_pvs) run.writer->AddObject(o);
  run.items_done = run.items_total;

  for (auto& v : run.volumes) {
    absl::Status st = MoveVolume(run, v);
    if (st.ok()) {
      v.phase = kPhaseCompleted;
    } else {
      if (queue_.shutting_down()) return st;  // stopping: the next start finds it InProgress
      v.phase = kPhaseFailed;
      v.message = std::string(st.message());
      run.errors.push_back(StrCat("volume ", v.key, ": ", st.message()));
      events_.Record(run.backup, "Warning", "VolumeBackupFailed", run.errors.back());
    }
    WriteProgress(run, true);
  }
  auto manifest = run.writer->Commit();
  if (!manifest.ok()) return fail(manifest.status());
  run.writer.reset();

  // A failed volume's snapshot is no base for anything.
  for (auto& v : run.volumes) {
    if (v.phase == kPhaseCompleted) continue;
    auto del = registry_.Delete(Snapshots(), Ns(v.claim), v.snapshot_name);
    if (!del.ok() && !absl::IsNotFound(del.status())) run.warnings.push_back(std::string(del.status().message()));
    v.snapshot_name.clear();
  }
  const bool partial = !run.errors.empty() || !run.warnings.empty();
  const std::string phase = run.errors.empty() ? kPhaseCompleted : kPhasePartiallyFailed;
  BERTH_RETURN_IF_ERROR(EditStatus(registry_, Backups(), run.backup, [&](json& s) {
    s["phase"] = phase;
    s["completionTimestamp"] = Rfc3339(clock_.Now());
    s["errors"] = static_cast<int64_t>(run.errors.size());
    s["warnings"] = static_cast<int64_t>(run.warnings.size());
    if (partial) {
      json problems = json::array();
      for (const auto& e : run.errors) problems.push_back(e);
      for (const auto& w : run.warnings) problems.push_back(w);
      s["problems"] = problems;
    }
    s["progress"] = {{"totalItems", run.items_total},
                     {"itemsBackedUp", run.items_done},
                     {"totalBytes", run.total_bytes},
                     {"bytesDone", run.total_bytes}};
    s["volumes"] = run.VolumesStatus();
    s["groupSnapshots"] = run.groups;
  }));
  int64_t added = 0;
  for (const auto& v : run.volumes) added += v.bytes_added;
  events_.Record(run.backup, phase == kPhaseCompleted ? "Normal" : "Warning", "Backup" + phase,
                 StrCat("Backup ", name, " ", phase, ": ", run.volumes.size(), " volume(s), ", run.pods.size(),
                        " pod(s), ", FormatByteSizeApprox(added), " added to the repository"));
  auto fresh = registry_.Get(Backups(), "", name);
  if (fresh.ok()) BERTH_RETURN_IF_ERROR(DropSuperseded(*fresh));
  queue_.Add(name);  // schedules the expiry
  return absl::OkStatus();
}

}  // namespace berth::controllers
