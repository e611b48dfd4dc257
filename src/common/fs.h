// Filesystem helpers with crash-safe semantics.
//
// WriteFileAtomic is the only way berth writes durable state: write a temp
// file beside the target, fsync it, rename it over the target, fsync the
// directory (leveldb's SetCurrentFile). A crash at any point leaves either
// the old or the new content, plus possibly a temp file named
// ".<name>.tmp-*" that RemoveTempFiles() cleans at the next start.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace berth {

// Durably replaces `path` with `content` (mode `mode`).
absl::Status WriteFileAtomic(const std::string& path, std::string_view content, mode_t mode = 0600);

// The whole content of `path`. NOT_FOUND if it does not exist.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// fsync of a directory, making renames and unlinks in it durable.
absl::Status FsyncDir(const std::string& dir);

// Removes `path` (a file) and fsyncs its directory. OK if it did not exist.
absl::Status RemoveFileDurably(const std::string& path);

// mkdir -p with `mode` for the directories it creates.
absl::Status MakeDirs(const std::string& path, mode_t mode = 0750);

// Narrows an existing `path` that grants its group or others any access to
// owner-only (a directory to 0700, anything else to its owner bits & 0600).
// Returns the mode it had when it narrowed it, for the caller to warn about;
// nullopt when it was already private or does not exist. Symlinks are never
// followed (lchmod does not exist: a symlink is reported as private).
absl::StatusOr<std::optional<mode_t>> NarrowToOwner(const std::string& path);

// Removes files named ".*.tmp-*" (left by an interrupted WriteFileAtomic)
// directly inside `dir`; returns how many were removed.
absl::StatusOr<int> RemoveTempFiles(const std::string& dir);

// True when `path` is an absolute, lexically normal path (no ".", "..",
// "//" or trailing "/").
bool IsCanonicalAbsolutePath(std::string_view path);

// Checks that `path` is canonical (see above), strictly inside `root`
// (itself canonical), and that no existing component below `root` is a
// symlink. Components that do not exist yet are allowed. INVALID_ARGUMENT
// naming the problem otherwise.
absl::Status CheckPathInside(const std::string& root, const std::string& path);

// True if `dir` is a directory with no entries.
absl::StatusOr<bool> IsEmptyDir(const std::string& dir);

}  // namespace berth
