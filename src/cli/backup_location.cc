#include "cli/backup_location.h"

#include <filesystem>
#include <system_error>

#include "api/kinds.h"
#include "api/types/backup.h"
#include "backup/repository.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::cli {

namespace fs = std::filesystem;
using nlohmann::json;
namespace types = ::berth::api::types;

absl::StatusOr<std::string> BackupLocationPath(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("--backup-location: a directory is required");
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  if (ec) return absl::InvalidArgumentError(StrCat("--backup-location ", dir, ": ", ec.message()));
  std::string out = p.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

absl::StatusOr<std::string> EnsureBackupLocation(apiserver::Api& api, const std::string& dir) {
  BERTH_ASSIGN_OR_RETURN(const std::string path, BackupLocationPath(dir));
  std::string did;
  absl::StatusOr<std::unique_ptr<backup::Repository>> repo = backup::Repository::Open(path);
  if (absl::IsNotFound(repo.status())) {
    repo = backup::Repository::Create(path);
    did = StrCat("created a backup repository in ", path);
  } else {
    did = StrCat("backup repository in ", path);
  }
  if (!repo.ok()) {
    return absl::Status(repo.status().code(), StrCat("--backup-location ", path, ": ", repo.status().message()));
  }

  const api::KindInfo& kind = *api::FindResource(types::kBackupGroup, "backupstoragelocations");
  auto existing = api.Get(kind, "", "default");
  if (existing.ok()) {
    const std::string theirs =
        existing->value("spec", json::object()).value("config", json::object()).value("path", std::string());
    if (theirs != path) {
      return StrCat(did, "; BackupStorageLocation default is left as it is, at ",
                    theirs.empty() ? "<no path>" : theirs);
    }
    return StrCat(did, " (BackupStorageLocation default)");
  }
  if (!absl::IsNotFound(existing.status())) return existing.status();
  types::BackupStorageLocation bsl;
  bsl.api_version = std::string(types::kBackupApiVersion);
  bsl.kind = std::string(types::BackupStorageLocation::kKind);
  bsl.metadata.name = "default";
  bsl.spec.provider = "filesystem";
  bsl.spec.config["path"] = path;
  bsl.spec.default_ = true;
  auto created = api.Create(kind, "", types::Encode(bsl));
  if (absl::IsInvalidArgument(created.status())) {
    // Another location is the default (the API allows one): keep it so.
    bsl.spec.default_ = false;
    auto plain = api.Create(kind, "", types::Encode(bsl));
    if (plain.ok()) {
      return StrCat(did, " (BackupStorageLocation default, not the default location: ", created.status().message(),
                    ")");
    }
  }
  if (!created.ok() && !absl::IsAlreadyExists(created.status())) {
    return absl::Status(created.status().code(),
                        StrCat("creating BackupStorageLocation default: ", created.status().message()));
  }
  return StrCat(did, " (BackupStorageLocation default, the default location)");
}

}  // namespace berth::cli
