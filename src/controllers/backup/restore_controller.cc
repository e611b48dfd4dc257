#include "controllers/backup/restore_controller.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_join.h"
#include "api/names.h"
#include "backup/repository.h"
#include "client/object.h"
#include "client/writes.h"
#include "common/status.h"
#include "common/strings.h"
#include "controllers/volume/pv_binder.h"  // kAnnSelectedNode
#include "spdlog/spdlog.h"

namespace berth::controllers {

using client::Field;
using client::K;
using client::Name;
using client::Ns;
using client::Str;
using nlohmann::json;

namespace {

constexpr char kGroup[] = "backup.berth.io";
constexpr char kHostnameLabel[] = "kubernetes.io/hostname";

const api::KindInfo& Restores() { return K("restores", kGroup); }

bool Terminal(const std::string& phase) {
  return phase == "FailedValidation" || phase == "Completed" || phase == "PartiallyFailed" || phase == "Failed";
}

bool Restorable(const json& backup) {
  const std::string phase = Str(backup, {"status", "phase"});
  return phase == "Completed" || phase == "PartiallyFailed";
}

// Annotations a claim's old life left, which would mislead the binder, the
// provisioner or the scheduler about the new one (Velero resets the same).
bool SystemAnnotation(const std::string& key) {
  for (const char* prefix : {"pv.kubernetes.io/", "volume.kubernetes.io/", "volume.beta.kubernetes.io/",
                             "volume.berth.io/", "backup.berth.io/"}) {
    if (key.starts_with(prefix)) return true;
  }
  return false;
}

// The restore's labels on top of the object's own.
json Labels(const json& object, const RestoreMapping& mapping) {
  json labels = Field(Field(object, "metadata"), "labels");
  if (!labels.is_object()) labels = json::object();
  labels[kLabelRestoreName] = mapping.restore;
  labels[kLabelRestoredBackup] = mapping.backup;
  return labels;
}

// A restore's backup: spec.backupName, or the one recorded for its schedule.
std::string BackupOf(const json& restore) {
  std::string name = Str(restore, {"spec", "backupName"});
  return name.empty() ? client::Annotation(restore, kAnnRestoreBackup) : name;
}

std::string Key(const json& o) { return Ns(o).empty() ? Name(o) : StrCat(Ns(o), "/", Name(o)); }

// API errors that retrying the same object will not change: the object is
// counted as an error of the restore instead of holding it up.
bool Refused(const absl::Status& st) {
  return absl::IsInvalidArgument(st) || absl::IsFailedPrecondition(st) || absl::IsPermissionDenied(st) ||
         absl::IsOutOfRange(st);
}

}  // namespace

std::string RestoreMapping::Namespace(const std::string& ns) const {
  auto it = namespaces.find(ns);
  return it == namespaces.end() ? ns : it->second;
}

json RestoredClaim(const json& claim, const std::string& volume, const RestoreMapping& mapping) {
  const json& meta = Field(claim, "metadata");
  json out = {{"apiVersion", "v1"}, {"kind", "PersistentVolumeClaim"}};
  out["metadata"] = {{"name", Str(meta, {"name"})},
                     {"namespace", mapping.Namespace(Str(meta, {"namespace"}))},
                     {"labels", Labels(claim, mapping)}};
  json annotations = json::object();
  if (const json& a = Field(meta, "annotations"); a.is_object()) {
    for (const auto& [k, v] : a.items()) {
      if (!SystemAnnotation(k)) annotations[k] = v;
    }
  }
  annotations[kAnnSourceVolume] = volume;
  if (!mapping.target_node.empty()) annotations[kAnnSelectedNode] = mapping.target_node;
  out["metadata"]["annotations"] = std::move(annotations);
  json spec = json::object();
  const json& old_spec = Field(claim, "spec");
  for (const char* key : {"storageClassName", "accessModes", "resources", "volumeMode"}) {
    if (const json& v = Field(old_spec, key); !v.is_null()) spec[key] = v;
  }
  spec["dataSourceRef"] = {{"apiGroup", kGroup}, {"kind", "Backup"}, {"name", mapping.backup}};
  out["spec"] = std::move(spec);
  return out;
}

json RestoredPod(const json& pod, const RestoreMapping& mapping) {
  json out = pod;
  out.erase("status");
  json& meta = out["metadata"];
  for (const char* key : {"uid", "resourceVersion", "creationTimestamp", "ownerReferences", "managedFields",
                          "finalizers", "deletionTimestamp", "deletionGracePeriodSeconds", "generation", "selfLink"}) {
    meta.erase(key);
  }
  meta["namespace"] = mapping.Namespace(Str(pod, {"metadata", "namespace"}));
  meta["labels"] = Labels(pod, mapping);
  json& spec = out["spec"];
  if (spec.is_object()) spec.erase("nodeName");
  if (!mapping.target_node.empty()) {
    if (!spec["nodeSelector"].is_object()) spec["nodeSelector"] = json::object();
    spec["nodeSelector"][kHostnameLabel] = mapping.target_node;
  }
  return out;
}

struct RestoreController::Outcome {
  int64_t total_items = 0;
  int64_t items_restored = 0;
  int64_t total_bytes = 0;
  int64_t bytes_done = 0;
  int64_t claims_waiting = 0;  // restored claims not Bound yet (and not failed for good)
  std::vector<std::string> warnings;
  std::vector<std::string> errors;
};

RestoreController::RestoreController(apiserver::Api& registry, RestoreInformers informers, Options options)
    : registry_(registry),
      informers_(informers),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : RealClock()),
      events_(registry, "berth-restore-controller"),
      queue_(client::WorkQueue::Options{
          .base_delay = absl::Seconds(1), .max_delay = absl::Minutes(5), .clock = options_.clock}) {}

RestoreController::~RestoreController() { Stop(); }

void RestoreController::RegisterHandlers() {
  informers_.restores.AddHandlers({
      .on_add = [this](const json& o) { queue_.Add(Name(o)); },
      .on_update = [this](const json&, const json& o) { queue_.Add(Name(o)); },
      .on_delete = nullptr,
  });
  // A restored claim that binds may end its restore.
  auto claim_changed = [this](const json& o) {
    if (std::string r = Str(o, {"metadata", "labels", kLabelRestoreName}); !r.empty()) queue_.Add(r);
  };
  informers_.claims.AddHandlers({
      .on_add = claim_changed,
      .on_update = [claim_changed](const json&, const json& o) { claim_changed(o); },
      .on_delete = nullptr,
  });
}

void RestoreController::Start() {
  client::StartWorkers(workers_, options_.workers, queue_, "restore controller",
                       [this](const std::string& name) { return Sync(name); });
}

void RestoreController::Stop() {
  queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

absl::StatusOr<std::vector<std::string>> RestoreController::Validate(const json& restore, std::string& backup_name) {
  std::vector<std::string> errors;
  const json& spec = Field(restore, "spec");
  const std::string schedule = Str(spec, {"scheduleName"});
  backup_name = BackupOf(restore);
  if (backup_name.empty() && schedule.empty()) {
    errors.push_back("either spec.backupName or spec.scheduleName must be set");
  } else if (backup_name.empty()) {
    // Velero's rule: the newest backup of the schedule that can be restored.
    std::vector<json> candidates = informers_.backups.Select([&](const json& b) {
      return Str(b, {"metadata", "labels", "backup.berth.io/schedule-name"}) == schedule && Restorable(b);
    });
    auto started = [](const json& b) {
      std::string t = Str(b, {"status", "startTimestamp"});
      return std::make_pair(t.empty() ? Str(b, {"metadata", "creationTimestamp"}) : t, Name(b));
    };
    auto newest = std::max_element(candidates.begin(), candidates.end(),
                                   [&](const json& a, const json& b) { return started(a) < started(b); });
    if (newest == candidates.end()) {
      errors.push_back(StrCat("no Completed or PartiallyFailed backup of schedule \"", schedule, "\""));
    } else {
      backup_name = Name(*newest);
    }
  }
  if (!backup_name.empty()) {
    auto backup = registry_.Get(K("backups", kGroup), "", backup_name);
    if (!backup.ok() && !absl::IsNotFound(backup.status())) return backup.status();
    if (!backup.ok()) {
      errors.push_back(StrCat("backup \"", backup_name, "\" not found"));
    } else if (!Restorable(*backup)) {
      const std::string phase = Str(*backup, {"status", "phase"});
      errors.push_back(StrCat("backup \"", backup_name, "\" is ", phase.empty() ? "New" : phase,
                              ": only a Completed or PartiallyFailed backup can be restored"));
    } else if (auto path = BackupRepositoryPath(registry_, *backup); !path.ok()) {
      errors.push_back(std::string(path.status().message()));
    }
  }
  if (const json& m = Field(spec, "namespaceMapping"); m.is_object()) {
    for (const auto& [from, to] : m.items()) {
      const std::string field = StrCat("spec.namespaceMapping[", from, "]");
      if (absl::Status st = api::ValidateDns1123Label(field, from); !st.ok()) errors.emplace_back(st.message());
      if (!to.is_string()) {
        errors.push_back(StrCat(field, ": must be a namespace name"));
      } else if (absl::Status st = api::ValidateDns1123Label(field, to.get<std::string>()); !st.ok()) {
        errors.emplace_back(st.message());
      }
    }
  }
  if (std::string node = Str(spec, {"targetNode"}); !node.empty()) {
    auto got = registry_.Get(K("nodes"), "", node);
    if (!got.ok() && !absl::IsNotFound(got.status())) return got.status();
    if (!got.ok()) errors.push_back(StrCat("spec.targetNode: node \"", node, "\" not found"));
  }
  return errors;
}

absl::Status RestoreController::Finish(const json& restore, const std::string& phase, const std::string& failure,
                                       const std::function<void(json&)>& more) {
  const std::string now = client::Rfc3339(clock_.Now());
  return client::EditStatus(registry_, Restores(), restore, [&](json& status) {
    status["phase"] = phase;
    if (!Terminal(phase)) return;
    status["completionTimestamp"] = now;
    if (!failure.empty()) status["failureReason"] = failure;
    if (more) more(status);
  });
}

absl::Status RestoreController::Sync(const std::string& name) {
  auto stored = registry_.Get(Restores(), "", name);
  if (!stored.ok()) return absl::IsNotFound(stored.status()) ? absl::OkStatus() : stored.status();
  json restore = std::move(*stored);
  const std::string phase = Str(restore, {"status", "phase"});
  if (client::Deleting(restore) || Terminal(phase)) return absl::OkStatus();
  if (phase.empty() || phase == "New") {
    std::string backup;
    BERTH_ASSIGN_OR_RETURN(const std::vector<std::string> errors, Validate(restore, backup));
    if (!errors.empty()) {
      events_.Record(restore, "Warning", "FailedValidation", absl::StrJoin(errors, "; "));
      return Finish(restore, "FailedValidation", "", [&](json& status) { status["validationErrors"] = errors; });
    }
    if (Str(restore, {"spec", "backupName"}).empty() && client::Annotation(restore, kAnnRestoreBackup) != backup) {
      // Chosen once: a restart must not pick a newer backup of the schedule.
      BERTH_RETURN_IF_ERROR(
          client::MutateObject(registry_, Restores(), restore, apiserver::Subresource::kMain, [&](json& obj) {
            obj["metadata"]["annotations"][kAnnRestoreBackup] = backup;
            return true;
          }));
      return absl::OkStatus();  // the update queues the restore again
    }
    const std::string now = client::Rfc3339(clock_.Now());
    BERTH_RETURN_IF_ERROR(client::EditStatus(registry_, Restores(), restore, [&](json& status) {
      status["phase"] = "InProgress";
      status["startTimestamp"] = now;
    }));
    events_.Record(restore, "Normal", "Started", StrCat("restoring backup ", backup));
    stored = registry_.Get(Restores(), "", name);
    if (!stored.ok()) return absl::IsNotFound(stored.status()) ? absl::OkStatus() : stored.status();
    restore = std::move(*stored);
  }
  return Run(restore);
}

absl::Status RestoreController::Run(const json& restore) {
  RestoreMapping mapping;
  mapping.restore = Name(restore);
  mapping.backup = BackupOf(restore);
  mapping.target_node = Str(restore, {"spec", "targetNode"});
  if (const json& m = Field(Field(restore, "spec"), "namespaceMapping"); m.is_object()) {
    for (const auto& [from, to] : m.items()) {
      if (to.is_string()) mapping.namespaces[from] = to.get<std::string>();
    }
  }
  auto fail = [&](const absl::Status& st) {
    const std::string reason = StrCat("reading backup ", mapping.backup, ": ", st.message());
    events_.Record(restore, "Warning", "Failed", reason);
    return Finish(restore, "Failed", reason);
  };
  auto backup = registry_.Get(K("backups", kGroup), "", mapping.backup);
  if (!backup.ok()) return absl::IsNotFound(backup.status()) ? fail(backup.status()) : backup.status();
  auto path = BackupRepositoryPath(registry_, *backup);
  if (!path.ok()) return fail(path.status());
  auto repo = backup::Repository::Open(*path);
  if (!repo.ok()) return fail(repo.status());
  auto manifest = (*repo)->ReadManifest(mapping.backup);
  if (!manifest.ok()) return fail(manifest.status());
  std::map<std::string, int64_t> sizes;
  for (const auto& v : manifest->volumes) sizes[v.name] = v.size_bytes;
  BERTH_ASSIGN_OR_RETURN(Outcome outcome, RestoreObjects(restore, mapping, manifest->objects, sizes));

  auto counts = [&](json& status) {
    status["progress"] = {{"totalItems", outcome.total_items},
                          {"itemsRestored", outcome.items_restored},
                          {"totalBytes", outcome.total_bytes},
                          {"bytesDone", outcome.bytes_done}};
    status["errors"] = static_cast<int64_t>(outcome.errors.size());
    status["warnings"] = static_cast<int64_t>(outcome.warnings.size());
  };
  if (outcome.claims_waiting > 0) {
    BERTH_RETURN_IF_ERROR(client::EditStatus(registry_, Restores(), restore, counts));
    queue_.AddAfter(Name(restore), options_.progress_period);
    return absl::OkStatus();
  }
  // Done: say what went wrong, once, then the phase.
  for (const auto& w : outcome.warnings) events_.Record(restore, "Warning", "RestoreWarning", w);
  for (const auto& e : outcome.errors) events_.Record(restore, "Warning", "RestoreError", e);
  const std::string phase = outcome.errors.empty() ? "Completed" : "PartiallyFailed";
  events_.Record(
      restore, outcome.errors.empty() ? "Normal" : "Warning", phase,
      StrCat("restored ", outcome.items_restored, " of ", outcome.total_items, " items of backup ", mapping.backup,
             " (", outcome.errors.size(), " errors, ", outcome.warnings.size(), " warnings)"));
  return Finish(restore, phase, "", counts);
}

absl::StatusOr<bool> RestoreController::CreateOrFind(const json& restore, const api::KindInfo& kind, const json& object,
                                                     Outcome& outcome) {
  const std::string ns = Ns(object);
  auto created = registry_.Create(kind, ns, object);
  if (created.ok()) return true;
  const std::string what = StrCat(kind.kind, " ", Key(object));
  if (Refused(created.status())) {
    outcome.errors.push_back(StrCat(what, ": ", created.status().message()));
    return false;
  }
  if (!absl::IsAlreadyExists(created.status())) return created.status();
  auto existing = registry_.Get(kind, ns, Name(object));
  if (!existing.ok()) return existing.status();  // gone meanwhile: the next sync creates it
  if (Str(*existing, {"metadata", "labels", kLabelRestoreName}) == Name(restore)) return true;  // ours, from before
  outcome.warnings.push_back(StrCat(what, " exists already: not restored (existing objects are not overwritten)"));
  return false;
}

absl::StatusOr<RestoreController::Outcome> RestoreController::RestoreObjects(
    const json& restore, const RestoreMapping& mapping, const std::vector<json>& objects,
    const std::map<std::string, int64_t>& volume_sizes) {
  Outcome outcome;
  const json& included = Field(Field(restore, "spec"), "includedNamespaces");
  auto wanted = [&](const json& o) {
    if (!included.is_array() || included.empty()) return true;
    return std::any_of(included.begin(), included.end(), [&](const json& ns) { return ns == "*" || ns == Ns(o); });
  };
  std::vector<const json*> claims, pods;
  std::set<std::string> namespaces;
  for (const json& o : objects) {
    const std::string kind = Str(o, {"kind"});
    if ((kind != "PersistentVolumeClaim" && kind != "Pod") || Ns(o).empty() || !wanted(o)) continue;
    (kind == "Pod" ? pods : claims).push_back(&o);
    namespaces.insert(mapping.Namespace(Ns(o)));
  }
  for (const std::string& ns : namespaces) {
    json object = {{"apiVersion", "v1"},
                   {"kind", "Namespace"},
                   {"metadata", {{"name", ns}, {"labels", {{kLabelRestoreName, mapping.restore}}}}}};
    auto created = registry_.Create(K("namespaces"), "", object);
    // One that exists is simply used (Velero's behaviour too).
    if (!created.ok() && !absl::IsAlreadyExists(created.status())) {
      if (!Refused(created.status())) return created.status();
      outcome.errors.push_back(StrCat("Namespace ", ns, ": ", created.status().message()));
    }
  }
  for (const json* claim : claims) {
    const std::string volume = StrCat(Ns(*claim), "/", Name(*claim));
    auto size = volume_sizes.find(volume);
    if (size == volume_sizes.end()) {
      outcome.errors.push_back(
          StrCat("PersistentVolumeClaim ", volume, " has no volume in backup ", mapping.backup, ": not restored"));
      continue;
    }
    ++outcome.total_items;
    outcome.total_bytes += size->second;
    const json object = RestoredClaim(*claim, volume, mapping);
    BERTH_ASSIGN_OR_RETURN(const bool ours, CreateOrFind(restore, K("persistentvolumeclaims"), object, outcome));
    if (!ours) continue;
    ++outcome.items_restored;
    // Its state now, from the cache (the claim handler brings us back when
    // it changes); a claim created a moment ago is simply not bound yet.
    std::shared_ptr<const json> now = informers_.claims.GetSharedByKey(Key(object));
    if (now && Str(*now, {"status", "phase"}) == "Bound") {
      outcome.bytes_done += size->second;
      continue;
    }
    const std::optional<RestoreTracker::Entry> filled =
        now && options_.tracker != nullptr ? options_.tracker->Get(client::Uid(*now)) : std::nullopt;
    if (filled && filled->permanent) {
      outcome.errors.push_back(
          StrCat("PersistentVolumeClaim ", Key(object), ": its volume cannot be filled: ", filled->error.message()));
      continue;
    }
    if (filled) outcome.bytes_done += std::min(filled->bytes_done, size->second);
    ++outcome.claims_waiting;
  }
  for (const json* pod : pods) {
    ++outcome.total_items;
    BERTH_ASSIGN_OR_RETURN(const bool ours, CreateOrFind(restore, K("pods"), RestoredPod(*pod, mapping), outcome));
    if (ours) ++outcome.items_restored;
  }
  return outcome;
}

}  // namespace berth::controllers
