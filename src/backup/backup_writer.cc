// BackupWriter (repository.h): reading a volume's touched chunks, merging
// them with a base backup's extents, and committing the manifest.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
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

// The chunk indices `ranges` touch within a volume of `size` bytes, as
// sorted, merged, inclusive [first, last] intervals.
absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> TouchedChunks(const std::vector<ByteRange>& ranges,
                                                                       int64_t size, int64_t chunk_size) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const ByteRange& r : ranges) {
    if (r.offset < 0 || r.length < 0 || r.offset > size || r.length > size - r.offset) {
      return absl::InvalidArgumentError(
          StrCat("range (", r.offset, ", ", r.length, ") is outside the volume's ", size, " bytes"));
    }
    if (r.length == 0) continue;
    spans.emplace_back(r.offset / chunk_size, (r.offset + r.length - 1) / chunk_size);
  }
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& s : spans) {
    if (!merged.empty() && s.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, s.second);
    } else {
      merged.push_back(s);
    }
  }
  return merged;
}

bool Touched(const std::vector<std::pair<int64_t, int64_t>>& spans, int64_t index) {
  auto it = std::upper_bound(spans.begin(), spans.end(), std::make_pair(index, INT64_MAX));
  return it != spans.begin() && std::prev(it)->second >= index;
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
    // The base's chunk size, so its extents line up with the chunks re-read.
    volume.chunk_size = base->chunk_size;
    volume.base_backup = source.base->name;
  }
  const int64_t cs = volume.chunk_size;
  BERTH_ASSIGN_OR_RETURN(const auto spans, TouchedChunks(source.ranges, source.size_bytes, cs));

  VolumeStats stats;
  std::map<int64_t, Extent> extents;                // by offset
  std::vector<std::pair<int64_t, int64_t>> reread;  // base chunks the new size cuts, as spans
  if (base != nullptr) {
    for (const Extent& e : base->extents) {
      if (e.offset >= source.size_bytes || Touched(spans, e.offset / cs)) continue;
      if (e.length != std::min(cs, source.size_bytes - e.offset)) {
        // The volume was resized and this was, or now is, its last chunk.
        reread.emplace_back(e.offset / cs, e.offset / cs);
        continue;
      }
      BERTH_ASSIGN_OR_RETURN(const bool exists, repo_.chunks_.Exists(e.hash));
      if (!exists) {
        return absl::FailedPreconditionError(StrCat("chunk ", e.hash, " of base backup \"", source.base->name,
                                                    "\" is missing (garbage-collected?); take a full backup"));
      }
      extents[e.offset] = e;
      ++stats.chunks_inherited;
    }
  }
  std::vector<std::pair<int64_t, int64_t>> all = spans;
  all.insert(all.end(), reread.begin(), reread.end());
  std::sort(all.begin(), all.end());

  int64_t total = 0;
  for (const auto& [first, last] : all) {
    total += std::min(source.size_bytes, (last + 1) * cs) - first * cs;
  }
  ::posix_fadvise(source.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<int64_t> indices;
  for (const auto& [first, last] : all) {
    for (int64_t index = first; index <= last; ++index) indices.push_back(index);
  }

  // Chunks are independent: workers (the calling thread and up to three
  // more) take the next index, read, hash, compress and store it. A chunk is
  // CPU (SHA-256, zstd) then I/O (write, fsync), so even two workers overlap
  // one's fsync with the other's compression.
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
      const int64_t length = std::min(cs, source.size_bytes - offset);
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
    const int64_t length = std::min(cs, source.size_bytes - offset);
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
