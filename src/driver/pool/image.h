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

// Creates `path` (which must not exist) with all `size` bytes allocated
// (fallocate: unwritten extents, so it is quick and reads as zeros) and
// fsyncs it. On btrfs the file is made NOCOW first, so that a write never
// needs a new block. RESOURCE_EXHAUSTED when the filesystem cannot hold it,
// FAILED_PRECONDITION when it cannot preallocate at all; `path` is removed
// again on any error.
absl::Status CreateAllocatedImage(const std::string& path, int64_t size);

// Allocates every hole of `path` up to its size (fallocate mode 0 keeps
// data and changes nothing where blocks exist), then fsyncs. Errors as
// CreateAllocatedImage; the file keeps whatever was allocated before.
absl::Status AllocateImage(const std::string& path);

// Bytes of `path` that the filesystem holding it has allocated (st_blocks).
absl::StatusOr<int64_t> AllocatedBytes(const std::string& path);

// Copies `src` to the new file `dst`. With `reflink`, FICLONE shares all
// blocks (constant time); otherwise only the data extents are copied
// (SEEK_DATA/SEEK_HOLE + copy_file_range, O(data)) and holes stay holes.
// The copy is fsynced. `dst` is removed again if the copy fails.
absl::Status CopyImage(const std::string& src, const std::string& dst, bool reflink);

// Grows `path` to `size` bytes (never shrinks) and fsyncs it. With
// `allocate`, the added range is allocated as by CreateAllocatedImage, and
// the file keeps its old size if that fails.
absl::Status GrowImage(const std::string& path, int64_t size, bool allocate = false);

// The apparent size of `path`.
absl::StatusOr<int64_t> ImageSize(const std::string& path);

// Space of the filesystem holding a directory, as an unprivileged writer
// sees it (f_bavail: root's reserved blocks are not counted as free).
struct HostSpace {
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
};
absl::StatusOr<HostSpace> StatHost(const std::string& dir);

// Whether files in `dir` can be reflinked (tries FICLONE on two scratch
// files there, which are removed again).
absl::StatusOr<bool> ProbeReflink(const std::string& dir);

}  // namespace berth::driver
