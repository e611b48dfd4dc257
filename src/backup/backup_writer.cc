// BackupWriter (repository.h): reading a volume's changed ranges (whole
// chunks, or small changed blocks packed together), cutting a base backup's
// extents around them, and committing the manifest.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "backup/repository.h"
#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::backup {
namespace {

bool AllZero(std::string_view data) {
  // memcmp against the data shifted by one: zero iff the first byte is zero
  // and every byte equals its neighbour.
  return data.empty() || (data[0] == 0 && std::memcmp(data.data(), data.data() + 1, data.size() - 1) == 0);
}

// Reads exactly `length` bytes at `offset`. OUT_OF_RANGE if the source ends
// first.
absl::Status PreadFull(int fd, char* buf, int64_t length, int64_t offset, std::string_view volume) {
  int64_t done = 0;
  while (done < length) {
    ssize_t n = ::pread(fd, buf + done, static_cast<size_t>(length - done), offset + done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, StrCat("read volume \"", volume, "\" at ", offset + done));
    }
    if (n == 0) {
      return absl::OutOfRangeError(
          StrCat("volume \"", volume, "\" ends at ", offset + done, ", before its stated size"));
    }
    done += n;
  }
  return absl::OkStatus();
}

constexpr int64_t kBlock = 4096;

// An incremental backup re-reads a chunk-sized window whole when its changed
// bytes reach 1/kWholeWindowShare of it, or when cutting its base extents
// around the changes would leave more than kMaxSlicesPerWindow extents in it
// (which also compacts a window many incremental backups have cut).
// Otherwise only the changed blocks are read and packed into shared chunks.
constexpr int64_t kWholeWindowShare = 4;
constexpr size_t kMaxSlicesPerWindow = 32;

// `ranges` checked against a volume of `size` bytes, widened to 4 KiB
// blocks (clipped at the end), sorted and merged.
absl::StatusOr<std::vector<ByteRange>> ChangedBlocks(const std::vector<ByteRange>& ranges, int64_t size) {
  std::vector<ByteRange> blocks;
  for (const ByteRange& r : ranges) {
    if (r.offset < 0 || r.length < 0 || r.offset > size || r.length > size - r.offset) {
      return absl::InvalidArgumentError(
          StrCat("range (", r.offset, ", ", r.length, ") is outside the volume's ", size, " bytes"));
    }
    if (r.length == 0) continue;
    const int64_t begin = r.offset / kBlock * kBlock;
    const int64_t end = std::min(size, (r.offset + r.length + kBlock - 1) / kBlock * kBlock);
    blocks.push_back({begin, end - begin});
  }
  std::sort(blocks.begin(), blocks.end(), [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  std::vector<ByteRange> merged;
  for (const ByteRange& b : blocks) {
    if (!merged.empty() && b.offset <= merged.back().offset + merged.back().length) {
      merged.back().length =
          std::max(merged.back().offset + merged.back().length, b.offset + b.length) - merged.back().offset;
    } else {
      merged.push_back(b);
    }
  }
  return merged;
}

// `extents` minus the sorted, non-overlapping `cut` ranges: the pieces left,
// each a slice of its extent's chunk.
std::vector<Extent> CutAround(const std::vector<Extent>& extents, const std::vector<ByteRange>& cut) {
  std::vector<Extent> out;
  auto c = cut.begin();
  for (const Extent& e : extents) {
    int64_t pos = e.offset;
    const int64_t end = e.offset + e.length;
    while (c != cut.end() && c->offset + c->length <= pos) ++c;
    for (auto k = c; k != cut.end() && k->offset < end && pos < end; ++k) {
      if (k->offset > pos) {
        out.push_back({pos, k->offset - pos, e.hash, e.chunk_offset + (pos - e.offset)});
      }
      pos = std::max(pos, k->offset + k->length);
    }
    if (pos < end) out.push_back({pos, end - pos, e.hash, e.chunk_offset + (pos - e.offset)});
  }
  return out;
}

}  // namespace

BackupWriter::BackupWriter(Repository& repo, Fd lock, Manifest manifest)
    : repo_(repo), lock_(std::move(lock)), manifest_(std::move(manifest)) {}

BackupWriter::~BackupWriter() = default;  // closing lock_ releases the shared lock

void BackupWriter::AddObject(nlohmann::json object) { manifest_.objects.push_back(std::move(object)); }

absl::StatusOr<VolumeStats> BackupWriter::AddVolume(const VolumeSource& source, const ProgressFn& progress) {
  if (committed_) return absl::FailedPreconditionError("backup already committed");
  if (source.name.empty()) return absl::InvalidArgumentError("volume name is empty");
  if (manifest_.FindVolume(source.name) != nullptr) {
    return absl::InvalidArgumentError(StrCat("volume \"", source.name, "\" is already in this backup"));
  }
  if (source.size_bytes < 0) return absl::InvalidArgumentError("volume size is negative");
  if (source.fd < 0) return absl::InvalidArgumentError("volume source has no file descriptor");

  VolumeManifest volume;
  volume.name = source.name;
  volume.size_bytes = source.size_bytes;
  volume.chunk_size = repo_.chunk_size_;
  const VolumeManifest* base = nullptr;
  if (source.base != nullptr) {
    base = source.base->FindVolume(source.name);
    if (base == nullptr) {
      return absl::InvalidArgumentError(
          StrCat("base backup \"", source.base->name, "\" has no volume \"", source.name, "\""));
    }
    // The base's chunk size, so its extents line up with the windows re-read.
    volume.chunk_size = base->chunk_size;
    volume.base_backup = source.base->name;
  }
  const int64_t cs = volume.chunk_size;
  const int64_t size = source.size_bytes;
  BERTH_ASSIGN_OR_RETURN(const std::vector<ByteRange> changed, ChangedBlocks(source.ranges, size));

  std::set<int64_t> whole;                            // chunk-sized windows read whole
  std::map<int64_t, std::vector<ByteRange>> windows;  // an incremental's changed blocks by window
  if (base == nullptr) {
    for (const ByteRange& r : changed) {
      for (int64_t w = r.offset / cs; w * cs < r.offset + r.length; ++w) whole.insert(w);
    }
  } else {
    for (const ByteRange& r : changed) {
      for (int64_t pos = r.offset; pos < r.offset + r.length;) {
        const int64_t end = std::min(r.offset + r.length, (pos / cs + 1) * cs);
        windows[pos / cs].push_back({pos, end - pos});
        pos = end;
      }
    }
    // A resized volume: the window of the old or new end, whichever is
    // first, is re-read whole (its last extent's length changes).
    if (base->size_bytes != size) {
      const int64_t w = std::min(base->size_bytes, size) / cs;
      if (w * cs < size) whole.insert(w);
    }
    // Base extents by window, to count how cut a window would be.
    std::map<int64_t, size_t> base_extents;
    for (const Extent& e : base->extents) {
      for (int64_t w = e.offset / cs; w * cs < e.offset + e.length; ++w) ++base_extents[w];
    }
    for (const auto& [w, pieces] : windows) {
      int64_t bytes = 0;
      for (const ByteRange& p : pieces) bytes += p.length;
      const auto b = base_extents.find(w);
      const size_t slices = (b == base_extents.end() ? 0 : b->second) + 2 * pieces.size();
      if (bytes * kWholeWindowShare >= std::min(cs, size - w * cs) || slices > kMaxSlicesPerWindow) whole.insert(w);
    }
  }
  std::vector<ByteRange> pieces;  // changed blocks read on their own
  for (const auto& [w, in_window] : windows) {
    if (!whole.contains(w)) pieces.insert(pieces.end(), in_window.begin(), in_window.end());
  }

  VolumeStats stats;
  std::map<int64_t, Extent> extents;  // by offset
  if (base != nullptr) {
    // The base's extents, minus what is read again: whole windows, changed
    // blocks, anything past the end.
    std::vector<ByteRange> cut;
    for (const auto& [w, in_window] : windows) {
      if (whole.contains(w)) continue;
      cut.insert(cut.end(), in_window.begin(), in_window.end());
    }
    for (int64_t w : whole) cut.push_back({w * cs, cs});
    cut.push_back({size, INT64_MAX - size});
    std::sort(cut.begin(), cut.end(), [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
    std::set<std::string> checked;
    for (Extent& e : CutAround(base->extents, cut)) {
      if (checked.insert(e.hash).second) {
        BERTH_ASSIGN_OR_RETURN(const bool exists, repo_.chunks_.Exists(e.hash));
        if (!exists) {
          return absl::FailedPreconditionError(StrCat("chunk ", e.hash, " of base backup \"", source.base->name,
                                                      "\" is missing (garbage-collected?); take a full backup"));
        }
      }
      ++stats.chunks_inherited;
      const int64_t offset = e.offset;
      extents[offset] = std::move(e);
    }
  }

  const std::vector<int64_t> indices(whole.begin(), whole.end());
  int64_t total = 0;
  for (int64_t w : indices) total += std::min(cs, size - w * cs);
  for (const ByteRange& p : pieces) total += p.length;
  ::posix_fadvise(source.fd, 0, 0, POSIX_FADV_SEQUENTIAL);

  // Whole windows are independent: workers (the calling thread and up to
  // three more) take the next index, read, hash, compress and store it. A
  // chunk is CPU (SHA-256, zstd) then I/O (write, fsync), so even two workers
  // overlap one's fsync with the other's compression.
  struct Result {
    bool zero = false;
    ChunkStore::PutResult put;
  };
  std::vector<Result> results(indices.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  absl::Mutex mu;  // serializes `progress` and guards the two below
  absl::Status first_error;
  int64_t done = 0;
  auto work = [&] {
    std::string buf(static_cast<size_t>(cs), '\0');
    while (!failed.load()) {
      const size_t i = next.fetch_add(1);
      if (i >= indices.size()) return;
      const int64_t offset = indices[i] * cs;
      const int64_t length = std::min(cs, size - offset);
      absl::Status st = PreadFull(source.fd, buf.data(), length, offset, source.name);
      const std::string_view content(buf.data(), static_cast<size_t>(length));
      if (st.ok()) {
        results[i].zero = AllZero(content);
        if (!results[i].zero) {
          absl::StatusOr<ChunkStore::PutResult> put = repo_.chunks_.Put(content);
          if (put.ok()) {
            results[i].put = std::move(*put);
          } else {
            st = put.status();
          }
        }
      }
      absl::MutexLock lock(&mu);
      if (!st.ok()) {
        if (first_error.ok()) first_error = st;
        failed.store(true);
        return;
      }
      done += length;
      if (progress) progress(done, total);
    }
  };
  const size_t helpers =
      std::min<size_t>({3, std::max(1u, std::thread::hardware_concurrency()) - 1, indices.size() / 2});
  std::vector<std::thread> threads;
  for (size_t t = 0; t < helpers; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  {
    absl::MutexLock lock(&mu);
    if (!first_error.ok()) return first_error;
  }

  std::set<std::string> dirs;
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t offset = indices[i] * cs;
    const int64_t length = std::min(cs, size - offset);
    stats.bytes_read += length;
    ++stats.chunks_read;
    Result& r = results[i];
    if (r.zero) {
      ++stats.zero_chunks;
      continue;
    }
    if (r.put.added) {
      ++stats.chunks_added;
      stats.bytes_added += r.put.stored_bytes;
    } else {
      ++stats.chunks_deduped;
    }
    // Also for a deduplicated chunk: its writer may not have fsynced its
    // directory yet.
    dirs.insert(repo_.chunks_.DirOf(r.put.hash));
    extents[offset] = Extent{offset, length, std::move(r.put.hash)};
  }

  // The changed blocks outside whole windows, in volume order, packed into
  // chunks of up to chunk_size bytes; each becomes a slice of its pack. Read
  // ahead of use: scattered 4 KiB reads one at a time would wait on the disk
  // for each.
  if (!pieces.empty()) {
    ::posix_fadvise(source.fd, 0, 0, POSIX_FADV_RANDOM);
    constexpr size_t kReadAhead = 512;
    size_t advised = 0;
    std::string pack;
    std::vector<Extent> packed;  // slices of `pack`, hash unset
    auto flush = [&]() -> absl::Status {
      if (pack.empty()) return absl::OkStatus();
      BERTH_ASSIGN_OR_RETURN(ChunkStore::PutResult put, repo_.chunks_.Put(pack));
      if (put.added) {
        ++stats.chunks_added;
        stats.bytes_added += put.stored_bytes;
      } else {
        ++stats.chunks_deduped;
      }
      dirs.insert(repo_.chunks_.DirOf(put.hash));
      for (Extent& e : packed) {
        e.hash = put.hash;
        const int64_t offset = e.offset;
        extents[offset] = std::move(e);
      }
      pack.clear();
      packed.clear();
      return absl::OkStatus();
    };
    std::string buf;
    for (size_t i = 0; i < pieces.size(); ++i) {
      for (; advised < pieces.size() && advised < i + kReadAhead; ++advised) {
        ::posix_fadvise(source.fd, pieces[advised].offset, pieces[advised].length, POSIX_FADV_WILLNEED);
      }
      const ByteRange& p = pieces[i];
      buf.resize(static_cast<size_t>(p.length));
      BERTH_RETURN_IF_ERROR(PreadFull(source.fd, buf.data(), p.length, p.offset, source.name));
      stats.bytes_read += p.length;
      ++stats.pieces_read;
      if (!AllZero(buf)) {  // all zeros: a hole, cut from the base above
        if (static_cast<int64_t>(pack.size() + buf.size()) > cs) BERTH_RETURN_IF_ERROR(flush());
        packed.push_back({p.offset, p.length, "", static_cast<int64_t>(pack.size())});
        pack += buf;
      }
      done += p.length;
      if (progress) progress(done, total);
    }
    BERTH_RETURN_IF_ERROR(flush());
  }

  volume.extents.reserve(extents.size());
  for (auto& [offset, e] : extents) volume.extents.push_back(std::move(e));
  BERTH_RETURN_IF_ERROR(ValidateVolume(volume));
  dirs_to_sync_.insert(dirs.begin(), dirs.end());
  manifest_.volumes.push_back(std::move(volume));
  return stats;
}

absl::StatusOr<Manifest> BackupWriter::Commit() {
  if (committed_) return absl::FailedPreconditionError("backup already committed");
  // Every referenced chunk durable before the manifest names it.
  BERTH_RETURN_IF_ERROR(ChunkStore::SyncDirs(dirs_to_sync_));
  const std::string path = repo_.ManifestPath(manifest_.name);
  if (::access(path.c_str(), F_OK) == 0) {
    return absl::AlreadyExistsError(StrCat("backup \"", manifest_.name, "\" was committed meanwhile"));
  }
  BERTH_RETURN_IF_ERROR(WriteFileAtomic(path, ManifestToJson(manifest_), 0640));
  committed_ = true;
  lock_ = Fd();
  return manifest_;
}

}  // namespace berth::backup
