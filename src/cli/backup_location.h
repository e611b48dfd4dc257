// `berth up --backup-location DIR`: the default BackupStorageLocation.
//
//   BERTH_ASSIGN_OR_RETURN(std::string note, EnsureBackupLocation(registry, "/srv/berth-backups"));
//
// Thread-safety: stateless.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "apiserver/api.h"

namespace berth::cli {

// `dir` as a BackupStorageLocation path: absolute (relative to the working
// directory), lexically normal, no trailing '/'. INVALID_ARGUMENT for "".
absl::StatusOr<std::string> BackupLocationPath(const std::string& dir);

// Makes `dir` (BackupLocationPath) hold a backup repository — created,
// with the directory, when there is none; opened (format checked) when
// there is — and makes the BackupStorageLocation "default" name it:
// {provider: filesystem, config: {path: dir}, default: true}, created when
// there is no "default". An existing "default" is the user's and is never
// changed; while another location is the default, "default" is created
// as an ordinary one. Returns a line for the user saying what was done.
// FAILED_PRECONDITION when `dir` holds something other than a repository
// (Repository::Create's rule), the repository's errors otherwise.
absl::StatusOr<std::string> EnsureBackupLocation(apiserver::Api& api, const std::string& dir);

}  // namespace berth::cli
