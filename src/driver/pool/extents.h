// Extent maps of pool images: which byte ranges of an image hold data, and
// which ranges differ between two images, from the filesystem's block map
// (FIEMAP) rather than from the data.
//
// Snapshots on a reflink pool are FICLONE copies: a block that nobody wrote
// since the clone is the same physical block in both files. Comparing the
// two files' extent maps (logical -> physical) therefore finds every range
// written in between without reading a byte. On a pool that cannot reflink
// every copied block is a new physical block, so the maps prove nothing and
// the candidate ranges are compared by content instead (same answer, O(data)).
//
//   Fd base(open(base_image)), target(open(target_image));
//   auto b = ReadExtentMap(base.get(), base_image);
//   auto t = ReadExtentMap(target.get(), target_image);
//   std::vector<ByteRange> changed = DiffExtentMaps(*b, *t, size);
//   if (!reflink) changed = *ConfirmByContent(base.get(), target.get(), changed);
//
// Thread-safety: functions only; safe to call concurrently on different or
// the same (read-only) descriptors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace berth::driver {

// One run of written data: bytes [logical, logical + length) of a file live
// at [physical, physical + length) of the filesystem's device.
struct Extent {
  int64_t logical = 0;
  int64_t physical = 0;
  int64_t length = 0;
  // False when the filesystem cannot say where the bytes live (inline,
  // encoded or delayed-allocation extents, or a filesystem without FIEMAP):
  // such an extent never compares equal to another.
  bool physical_known = true;

  bool operator==(const Extent&) const = default;
};

// A byte range [offset, offset + length), length > 0.
struct ByteRange {
  int64_t offset = 0;
  int64_t length = 0;

  int64_t end() const { return offset + length; }
  bool operator==(const ByteRange&) const = default;
};

// The extents of the open regular file `fd` that hold written data, sorted
// by logical offset, not overlapping, clipped to the file's size. Holes and
// unwritten (fallocated, never written: they read as zeros) extents are left
// out. Dirty pages are flushed first (FIEMAP_FLAG_SYNC) so the map shows
// what the file holds now. A filesystem without FIEMAP (tmpfs) is mapped with
// SEEK_DATA/SEEK_HOLE, every extent with physical_known = false. `what`
// names the file in messages.
absl::StatusOr<std::vector<Extent>> ReadExtentMap(int fd, const std::string& what);

// The logical ranges of `extents` (sorted, as ReadExtentMap returns them),
// adjacent ranges merged, clipped to [0, size).
std::vector<ByteRange> AllocatedRanges(const std::vector<Extent>& extents, int64_t size);

// The ranges of [0, size) where `base` and `target` (sorted extent maps of
// two files) are not proven to hold the same bytes, adjacent ranges merged:
// where one has data and the other none (a hole reads as zeros, so data
// written over a hole and data discarded since both count), and where both
// have data at different physical blocks or at blocks whose place is
// unknown. Ranges that are holes in both, or the same physical blocks in
// both, are unchanged. A superset of the bytes that differ; exact when
// target was cloned from base (or both from one file) by reflink.
std::vector<ByteRange> DiffExtentMaps(const std::vector<Extent>& base, const std::vector<Extent>& target, int64_t size);

// The block size of content comparison: the allocation unit of the pool
// filesystems (XFS, ext4 and btrfs default to 4 KiB) and a multiple of any
// block device's logical sector.
inline constexpr int64_t kCompareBlockSize = 4096;

// Reads `candidates` (sorted, non-overlapping) from both open files, which
// read as zeros past their ends, and returns the kCompareBlockSize blocks
// whose bytes differ, adjacent blocks merged, each range clipped to its
// candidate. For pools that cannot reflink. I/O errors are returned.
absl::StatusOr<std::vector<ByteRange>> ConfirmByContent(int base_fd, int target_fd,
                                                        const std::vector<ByteRange>& candidates,
                                                        const std::string& what);

}  // namespace berth::driver
