#include "controllers/backup/backup_populator.h"

#include <utility>

#include "absl/strings/str_replace.h"

#include "backup/repository.h"
#include "client/object.h"
#include "common/status.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {
namespace {

using client::K;
using client::Str;
using nlohmann::json;

constexpr char kBackupGroup[] = "backup.berth.io";

bool BackupRestorable(const json& backup) {
  const std::string phase = Str(backup, {"status", "phase"});
  return phase == "Completed" || phase == "PartiallyFailed";
}

}  // namespace

std::string RestoreVolumeName(const std::string& claim_uid) { return StrCat("berth-restore-", claim_uid); }

void RestoreTracker::Progress(const std::string& claim_uid, int64_t done, int64_t total) {
  absl::MutexLock lock(&mu_);
  Entry& e = entries_[claim_uid];
  e.bytes_done = done;
  e.total_bytes = total;
  e.error = absl::OkStatus();
  e.permanent = false;
}

void RestoreTracker::Failed(const std::string& claim_uid, absl::Status error) {
  absl::MutexLock lock(&mu_);
  Entry& e = entries_[claim_uid];
  e.permanent = absl::IsDataLoss(error) || absl::IsNotFound(error);
  e.error = std::move(error);
}

void RestoreTracker::Forget(const std::string& claim_uid) {
  absl::MutexLock lock(&mu_);
  entries_.erase(claim_uid);
}

std::optional<RestoreTracker::Entry> RestoreTracker::Get(const std::string& claim_uid) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(claim_uid);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::string> BackupRepositoryPath(apiserver::Api& registry, const json& backup) {
  const std::string location = Str(backup, {"spec", "storageLocation"});
  json bsl;
  if (location.empty()) {
    BERTH_ASSIGN_OR_RETURN(apiserver::ListPage page, registry.List(K("backupstoragelocations", kBackupGroup), "", {}));
    for (auto& l : page.items) {
      if (client::Field(client::Field(l, "spec"), "default") == true) bsl = std::move(l);
    }
    if (bsl.is_null()) {
      return absl::FailedPreconditionError(
          StrCat("backup ", client::Name(backup), " names no storage location and there is no default one"));
    }
  } else {
    auto got = registry.Get(K("backupstoragelocations", kBackupGroup), "", location);
    if (!got.ok()) {
      return absl::FailedPreconditionError(
          StrCat("storage location ", location, " of backup ", client::Name(backup), ": ", got.status().message()));
    }
    bsl = std::move(*got);
  }
  std::string path = Str(bsl, {"spec", "config", "path"});
  if (path.empty()) {
    return absl::FailedPreconditionError(StrCat("storage location ", client::Name(bsl), " has no config.path"));
  }
  return path;
}

BackupPopulator::BackupPopulator(apiserver::Api& registry, DataMover& mover, RestoreTracker* tracker)
    : registry_(registry), mover_(mover), tracker_(tracker) {}

bool BackupPopulator::Serves(const DataSourceRef& ref) const {
  return ref.api_group == kBackupGroup && ref.kind == "Backup";
}

std::map<std::string, std::string> BackupPopulator::Parameters() const {
  // The filled volume is a block volume; a filesystem claim is its clone
  // mounted as the filesystem it holds.
  return {{kAllowModeChangeParameter, "true"}};
}

absl::StatusOr<BackupPopulator::Source> BackupPopulator::SourceOf(const PopulationRequest& request) {
  const auto& ref = request.claim.spec.data_source_ref;
  if (!ref) return absl::InvalidArgumentError("the claim has no dataSourceRef");
  Source out;
  out.backup = ref->name;
  out.volume = request.claim.metadata.Annotation(kAnnSourceVolume);
  if (out.volume.empty()) {
    return absl::InvalidArgumentError(
        StrCat("the claim names no volume of backup ", out.backup, " (annotation ", kAnnSourceVolume, ")"));
  }
  auto backup = registry_.Get(K("backups", kBackupGroup), "", out.backup);
  if (!backup.ok()) {
    return absl::FailedPreconditionError(StrCat("backup ", out.backup, ": ", backup.status().message()));
  }
  if (!BackupRestorable(*backup)) {
    return absl::FailedPreconditionError(
        StrCat("backup ", out.backup, " is ",
               Str(*backup, {"status", "phase"}).empty() ? std::string("New") : Str(*backup, {"status", "phase"}),
               ", not Completed or PartiallyFailed"));
  }
  BERTH_ASSIGN_OR_RETURN(out.repository, BackupRepositoryPath(registry_, *backup));
  return out;
}

absl::Status BackupPopulator::Check(const PopulationRequest& request) { return SourceOf(request).status(); }

absl::StatusOr<::csi::v1::VolumeContentSource> BackupPopulator::Populate(const PopulationRequest& request) {
  const std::string& uid = request.claim.metadata.uid;
  auto fill = [&]() -> absl::StatusOr<::csi::v1::VolumeContentSource> {
    BERTH_ASSIGN_OR_RETURN(const Source source, SourceOf(request));
    BERTH_ASSIGN_OR_RETURN(auto repo, backup::Repository::Open(source.repository));
    BERTH_ASSIGN_OR_RETURN(const backup::Manifest manifest, repo->ReadManifest(source.backup));
    const backup::VolumeManifest* volume = manifest.FindVolume(source.volume);
    if (volume == nullptr) {
      return absl::NotFoundError(StrCat("backup ", source.backup, " holds no volume ", source.volume));
    }
    if (request.size_bytes > 0 && volume->size_bytes > request.size_bytes) {
      // The driver would make the clone as big as its source anyway; a
      // claim asking for less than it held is a mistake worth naming.
      return absl::InvalidArgumentError(StrCat("volume ", source.volume, " of backup ", source.backup, " holds ",
                                               volume->size_bytes, " bytes, more than the claim's ",
                                               request.size_bytes));
    }
    if (tracker_ != nullptr) tracker_->Progress(uid, 0, volume->size_bytes);
    BERTH_ASSIGN_OR_RETURN(
        auto device,
        mover_.CreateEmpty({.driver = request.driver, .node = request.node, .name = RestoreVolumeName(uid)},
                           volume->size_bytes));
    // The published device is open in `device`; its path, reopened through
    // the descriptor, is the block device itself.
    const std::string target = StrCat("/proc/self/fd/", device->fd());
    // Not `target_is_zeroed`: CSI does not promise a new volume reads as
    // zeros (a thick LVM volume holds what the disk held), so the backup's
    // holes are zeroed too — a hole punched, where the device can, which
    // costs berth-csi's sparse volumes nothing.
    auto restored = repo->RestoreVolume(source.backup, source.volume, target, {.target_is_zeroed = false},
                                        [&](int64_t done, int64_t total) {
                                          if (tracker_ != nullptr) tracker_->Progress(uid, done, total);
                                        });
    if (!restored.ok()) {
      // The repository names the target; ours is a descriptor's path, which
      // says nothing to whoever reads the claim's events.
      std::string message(restored.status().message());
      absl::StrReplaceAll({{target, StrCat("volume ", RestoreVolumeName(uid))}}, &message);
      return absl::Status(restored.status().code(), message);
    }
    const backup::RestoreStats& stats = *restored;
    device->KeepVolume();
    BERTH_RETURN_IF_ERROR(device->Close());  // fsyncs, unpublishes, unstages
    spdlog::info("restore: filled volume {} ({}) on node {} from {}/{}: {} bytes written", RestoreVolumeName(uid),
                 device->volume_id(), request.node, source.backup, source.volume, stats.bytes_written);
    if (tracker_ != nullptr) tracker_->Progress(uid, volume->size_bytes, volume->size_bytes);
    ::csi::v1::VolumeContentSource out;
    out.mutable_volume()->set_volume_id(device->volume_id());
    return out;
  };
  auto out = fill();
  if (!out.ok() && tracker_ != nullptr) tracker_->Failed(uid, out.status());
  return out;
}

absl::Status BackupPopulator::Release(const PopulationRequest& request) {
  const MoverVolume target{
      .driver = request.driver, .node = request.node, .name = RestoreVolumeName(request.claim.metadata.uid)};
  // Filled and closed: its id is on the claim.
  if (std::string id = request.claim.metadata.Annotation(kAnnPopulatedVolume); !id.empty()) {
    return mover_.DeleteVolume(target, id);
  }
  // Interrupted: whatever is left is found by the request that made it,
  // which needs the volume's size; at least 1 byte fits any volume left.
  int64_t size = 1;
  if (auto source = SourceOf(request); source.ok()) {
    if (auto repo = backup::Repository::Open(source->repository); repo.ok()) {
      if (auto manifest = (*repo)->ReadManifest(source->backup); manifest.ok()) {
        if (const backup::VolumeManifest* v = manifest->FindVolume(source->volume)) size = v->size_bytes;
      }
    }
  }
  return mover_.Cleanup(target, "", size);
}

}  // namespace berth::controllers
