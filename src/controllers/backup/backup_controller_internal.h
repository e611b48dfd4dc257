// Shared by backup_controller.cc (syncs, locations, the life cycle) and
// backup_run.cc (taking one backup). Not for other users.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/selector.h"
#include "apiserver/api.h"
#include "backup/repository.h"
#include "client/object.h"
#include "client/writes.h"
#include "common/hash.h"
#include "common/strings.h"
#include "common/units.h"
#include "controllers/backup/backup_controller.h"
#include "nlohmann/json.hpp"

namespace berth::controllers::backup_internal {

using namespace ::berth::client;  // the controllers' own client library
using nlohmann::json;

inline constexpr char kPhaseNew[] = "New";
inline constexpr char kPhaseFailedValidation[] = "FailedValidation";
inline constexpr char kPhaseInProgress[] = "InProgress";
inline constexpr char kPhaseCompleted[] = "Completed";
inline constexpr char kPhasePartiallyFailed[] = "PartiallyFailed";
inline constexpr char kPhaseFailed[] = "Failed";
inline constexpr char kPhaseDeleting[] = "Deleting";

// Velero's default time to live.
inline constexpr absl::Duration kDefaultTtl = absl::Hours(720);

inline const api::KindInfo& Backups() { return K("backups", kBackupGroup); }
inline const api::KindInfo& Locations() { return K("backupstoragelocations", kBackupGroup); }
inline const api::KindInfo& Snapshots() { return K("volumesnapshots", "snapshot.storage.k8s.io"); }
inline const api::KindInfo& Contents() { return K("volumesnapshotcontents", "snapshot.storage.k8s.io"); }

inline bool Terminal(const std::string& phase) {
  return phase == kPhaseCompleted || phase == kPhasePartiallyFailed || phase == kPhaseFailed ||
         phase == kPhaseFailedValidation;
}

inline std::vector<std::string> Strings(const json& j) {
  std::vector<std::string> out;
  if (!j.is_array()) return out;
  for (const auto& s : j) {
    if (s.is_string()) out.push_back(s.get<std::string>());
  }
  return out;
}

inline std::map<std::string, std::string> Labels(const json& o) {
  std::map<std::string, std::string> out;
  const json& l = Field(Field(o, "metadata"), "labels");
  if (!l.is_object()) return out;
  for (auto it = l.begin(); it != l.end(); ++it) {
    if (it->is_string()) out[it.key()] = it->get<std::string>();
  }
  return out;
}

inline apiserver::ListOptions LabelsOnly(const api::LabelSelector& selector) {
  apiserver::ListOptions o;
  o.labels = selector;
  return o;
}

inline absl::Duration ttl_or_default(const json& spec) {
  if (std::string t = Str(spec, {"ttl"}); !t.empty()) {
    if (auto d = ParseGoDuration(t); d.ok() && *d > absl::ZeroDuration()) return *d;
  }
  return kDefaultTtl;
}

// The data mover's volume reading `pv`'s snapshot for `backup`.
inline std::string MoverName(const json& backup, const std::string& pv) {
  return StrCat("berth-backup-", Sha256Hex(StrCat(Uid(backup), "/", pv, "/mover")).substr(0, 16));
}

// The node a PV's required node affinity pins it to (one term naming one
// value, as a node-local driver's topology does), or "".
inline std::string VolumeNode(const json& pv) {
  const json& terms = Field(Field(Field(Field(pv, "spec"), "nodeAffinity"), "required"), "nodeSelectorTerms");
  if (!terms.is_array() || terms.size() != 1) return "";
  const json& exprs = Field(terms[0], "matchExpressions");
  if (!exprs.is_array() || exprs.size() != 1) return "";
  const json& values = Field(exprs[0], "values");
  if (Str(exprs[0], {"operator"}) != "In" || !values.is_array() || values.size() != 1 || !values[0].is_string()) {
    return "";
  }
  return values[0].get<std::string>();
}

// An object as it goes into a manifest: what was stored, minus what only
// the server's bookkeeping needs.
inline json ForManifest(json o) {
  if (o.contains("metadata") && o["metadata"].is_object()) o["metadata"].erase("managedFields");
  return o;
}

}  // namespace berth::controllers::backup_internal

namespace berth::controllers {

using namespace backup_internal;

struct BackupController::Volume {
  json claim;
  json pv;
  std::string key;  // "namespace/claim": the volume's name in the manifest
  std::string driver, node, volume_handle;
  std::string snapshot_name;  // VolumeSnapshot in the claim's namespace ("" in a group)
  std::string group;          // the group snapshot it was cut in ("" alone)
  std::string snapshot_handle;
  int64_t size_bytes = 0;
  std::string base_backup;
  std::string phase;  // "", Completed, Failed
  std::string message;
  int64_t bytes_read = 0, bytes_added = 0;

  json Status() const {
    json v = {{"namespace", Ns(claim)},
              {"persistentVolumeClaim", Name(claim)},
              {"persistentVolume", Name(pv)},
              {"driver", driver},
              {"node", node},
              {"volumeHandle", volume_handle},
              {"snapshotName", snapshot_name},
              {"snapshotHandle", snapshot_handle},
              {"sizeBytes", size_bytes},
              {"bytesRead", bytes_read},
              {"bytesAdded", bytes_added}};
    if (!phase.empty()) v["phase"] = phase;
    if (!base_backup.empty()) v["baseBackup"] = base_backup;
    if (!group.empty()) v["groupSnapshot"] = group;
    if (!message.empty()) v["message"] = message;
    return v;
  }
};

struct BackupController::Run {
  json backup;
  std::string location_name;
  std::unique_ptr<backup::Repository> repo;
  std::unique_ptr<backup::BackupWriter> writer;
  std::vector<json> pods;
  std::vector<json> claims_and_pvs;  // objects for the manifest besides the pods
  std::vector<Volume> volumes;
  // status.groupSnapshots: {driver, node, name, groupSnapshotId,
  // members: [{persistentVolume, volumeHandle, snapshotHandle}]}, each
  // recorded before it is asked for, so a crash leaves its name to clean up.
  json groups = json::array();
  std::vector<std::string> warnings;
  std::vector<std::string> errors;
  int64_t total_bytes = 0;
  int64_t done_bytes = 0;  // of the volumes finished, plus the current one's progress
  int64_t items_total = 0, items_done = 0;
  absl::Time last_progress = absl::InfinitePast();

  json VolumesStatus() const {
    json out = json::array();
    for (const auto& v : volumes) out.push_back(v.Status());
    return out;
  }
};

}  // namespace berth::controllers
