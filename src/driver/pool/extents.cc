#include "driver/pool/extents.h"

#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/status.h"
#include "common/strings.h"

namespace berth::driver {
namespace {

// Extents FIEMAP returns per call: 1024 × 56 bytes, a 56 KiB buffer. An image
// written in a few large runs needs one call; a fragmented one pages.
constexpr unsigned kFiemapBatch = 1024;

// Flags under which fe_physical does not name the bytes' own blocks: data
// kept in metadata, compressed or encrypted, or not yet allocated.
constexpr uint32_t kPhysicalUnknownFlags = FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC | FIEMAP_EXTENT_ENCODED |
                                           FIEMAP_EXTENT_DATA_ENCRYPTED | FIEMAP_EXTENT_NOT_ALIGNED |
                                           FIEMAP_EXTENT_DATA_INLINE | FIEMAP_EXTENT_DATA_TAIL;

// Appends `e` to `out`, joined to the last extent when it continues it both
// logically and physically (the filesystem may report one run in pieces).
void AppendExtent(std::vector<Extent>& out, const Extent& e) {
  if (e.length <= 0) return;
  if (!out.empty()) {
    Extent& last = out.back();
    if (last.logical + last.length == e.logical && last.physical_known && e.physical_known &&
        last.physical + last.length == e.physical) {
      last.length += e.length;
      return;
    }
  }
  out.push_back(e);
}

// Appends [offset, end) to `out`, merged with the last range when adjacent.
void AppendRange(std::vector<ByteRange>& out, int64_t offset, int64_t end) {
  if (end <= offset) return;
  if (!out.empty() && out.back().end() == offset) {
    out.back().length = end - out.back().offset;
    return;
  }
  out.push_back({offset, end - offset});
}

// The data runs of `fd` from SEEK_DATA/SEEK_HOLE, for filesystems without
// FIEMAP. Where the bytes live is unknown, so nothing compares equal.
absl::StatusOr<std::vector<Extent>> SeekDataMap(int fd, int64_t size, const std::string& what) {
  std::vector<Extent> out;
  off_t pos = 0;
  while (pos < size) {
    off_t data = ::lseek(fd, pos, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // only a hole remains
      return ErrnoStatus(errno, StrCat("seek data in ", what));
    }
    off_t hole = ::lseek(fd, data, SEEK_HOLE);
    if (hole < 0) return ErrnoStatus(errno, StrCat("seek hole in ", what));
    hole = std::min<off_t>(hole, size);
    out.push_back({.logical = data, .physical = 0, .length = hole - data, .physical_known = false});
    pos = hole;
  }
  return out;
}

// Reads exactly `n` bytes at `offset` unless the file ends first; the rest
// of `buf` is zeroed (a file reads as zeros past its end, like a hole).
absl::Status ReadFully(int fd, char* buf, int64_t n, int64_t offset, const std::string& what) {
  int64_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, buf + done, static_cast<size_t>(n - done), static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, StrCat("read ", what));
    }
    if (r == 0) break;
    done += r;
  }
  std::memset(buf + done, 0, static_cast<size_t>(n - done));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Extent>> ReadExtentMap(int fd, const std::string& what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, StrCat("stat ", what));
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(StrCat(what, " is not a regular file"));
  const int64_t size = st.st_size;

  std::vector<char> buf(sizeof(struct fiemap) + kFiemapBatch * sizeof(struct fiemap_extent));
  auto* map = reinterpret_cast<struct fiemap*>(buf.data());
  std::vector<Extent> out;
  int64_t start = 0;
  bool first = true;
  while (start < size) {
    std::memset(buf.data(), 0, buf.size());
    map->fm_start = static_cast<uint64_t>(start);
    map->fm_length = static_cast<uint64_t>(size - start);
    // Flush once, before the first call: delayed allocations get their
    // blocks, so the map is the data as written.
    map->fm_flags = first ? FIEMAP_FLAG_SYNC : 0;
    map->fm_extent_count = kFiemapBatch;
    if (::ioctl(fd, FS_IOC_FIEMAP, map) != 0) {
      if (first && (errno == EOPNOTSUPP || errno == ENOTTY)) return SeekDataMap(fd, size, what);
      return ErrnoStatus(errno, StrCat("map extents of ", what));
    }
    first = false;
    if (map->fm_mapped_extents == 0) break;
    bool last = false;
    for (uint32_t i = 0; i < map->fm_mapped_extents; ++i) {
      const struct fiemap_extent& fe = map->fm_extents[i];
      last = last || (fe.fe_flags & FIEMAP_EXTENT_LAST) != 0;
      int64_t logical = static_cast<int64_t>(fe.fe_logical);
      int64_t physical = static_cast<int64_t>(fe.fe_physical);
      int64_t end = std::min<int64_t>(logical + static_cast<int64_t>(fe.fe_length), size);
      // An extent that began before `start` was partly seen already.
      if (logical < start) {
        physical += start - logical;
        logical = start;
      }
      if (end <= logical) continue;
      start = end;
      // Fallocated space that was never written reads as zeros: no data.
      if (fe.fe_flags & FIEMAP_EXTENT_UNWRITTEN) continue;
      AppendExtent(out, {.logical = logical,
                         .physical = physical,
                         .length = end - logical,
                         .physical_known = (fe.fe_flags & kPhysicalUnknownFlags) == 0});
    }
    if (last) break;
  }
  return out;
}

std::vector<ByteRange> AllocatedRanges(const std::vector<Extent>& extents, int64_t size) {
  std::vector<ByteRange> out;
  for (const Extent& e : extents) {
    AppendRange(out, std::max<int64_t>(e.logical, 0), std::min(e.logical + e.length, size));
  }
  return out;
}

std::vector<ByteRange> DiffExtentMaps(const std::vector<Extent>& base, const std::vector<Extent>& target,
                                      int64_t size) {
  // One sweep over the union of both maps' boundaries. Between two
  // consecutive boundaries each file is either a hole or inside one extent,
  // so the whole stretch is changed or unchanged as a piece.
  std::vector<ByteRange> out;
  size_t i = 0;
  size_t j = 0;
  int64_t pos = 0;
  while (pos < size) {
    while (i < base.size() && base[i].logical + base[i].length <= pos) ++i;
    while (j < target.size() && target[j].logical + target[j].length <= pos) ++j;
    const Extent* b = i < base.size() && base[i].logical <= pos ? &base[i] : nullptr;
    const Extent* t = j < target.size() && target[j].logical <= pos ? &target[j] : nullptr;
    if (b == nullptr && t == nullptr && i == base.size() && j == target.size()) break;  // holes to the end
    int64_t next = size;
    if (b != nullptr) {
      next = std::min(next, b->logical + b->length);
    } else if (i < base.size()) {
      next = std::min(next, base[i].logical);
    }
    if (t != nullptr) {
      next = std::min(next, t->logical + t->length);
    } else if (j < target.size()) {
      next = std::min(next, target[j].logical);
    }
    bool changed;
    if (b == nullptr || t == nullptr) {
      changed = b != t;  // data on one side only (both null: a hole in both)
    } else {
      // Both extents are contiguous over [pos, next): the same physical
      // block at pos means the same blocks throughout.
      changed = !b->physical_known || !t->physical_known ||
                b->physical + (pos - b->logical) != t->physical + (pos - t->logical);
    }
    if (changed) AppendRange(out, pos, next);
    pos = next;
  }
  return out;
}

absl::StatusOr<std::vector<ByteRange>> ConfirmByContent(int base_fd, int target_fd,
                                                        const std::vector<ByteRange>& candidates,
                                                        const std::string& what) {
  constexpr int64_t kChunk = int64_t{1} << 20;  // read 1 MiB at a time from each file
  std::vector<char> a(kChunk);
  std::vector<char> b(kChunk);
  std::vector<ByteRange> out;
  for (const ByteRange& c : candidates) {
    for (int64_t pos = c.offset; pos < c.end();) {
      const int64_t n = std::min(kChunk, c.end() - pos);
      BERTH_RETURN_IF_ERROR(ReadFully(base_fd, a.data(), n, pos, StrCat("base of ", what)));
      BERTH_RETURN_IF_ERROR(ReadFully(target_fd, b.data(), n, pos, StrCat("target of ", what)));
      for (int64_t block = pos; block < pos + n;) {
        const int64_t block_end = std::min((block / kCompareBlockSize + 1) * kCompareBlockSize, pos + n);
        if (std::memcmp(a.data() + (block - pos), b.data() + (block - pos), static_cast<size_t>(block_end - block)) !=
            0) {
          AppendRange(out, block, block_end);
        }
        block = block_end;
      }
      pos += n;
    }
  }
  return out;
}

}  // namespace berth::driver
