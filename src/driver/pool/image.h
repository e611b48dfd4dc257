// Operations on image files: sparse creation, growth, and copies that share
// blocks where the filesystem allows (reflink) or copy only data otherwise.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace berth::driver {

// Creates `path` (which must not exist) as a sparse file of `size` bytes and
// fsyncs it. ALREADY_EXISTS if it exists.
absl::Status CreateSparseImage(const std::string& path, int64_t size);

// Copies `src` to the new file `dst`. With `reflink`, FICLONE shares all
// blocks (constant time); otherwise only the data extents are copied
// (SEEK_DATA/SEEK_HOLE + copy_file_range, O(data)) and holes stay holes.
// The copy is fsynced. `dst` is removed again if the copy fails.
absl::Status CopyImage(const std::string& src, const std::string& dst, bool reflink);

// Grows `path` to `size` bytes (never shrinks) and fsyncs it.
absl::Status GrowImage(const std::string& path, int64_t size);

// The apparent size of `path`.
absl::StatusOr<int64_t> ImageSize(const std::string& path);

// Whether files in `dir` can be reflinked (tries FICLONE on two scratch
// files there, which are removed again).
absl::StatusOr<bool> ProbeReflink(const std::string& dir);

}  // namespace berth::driver
