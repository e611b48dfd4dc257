#include "backup/repository.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::backup {
namespace {

using nlohmann::json;

constexpr char kFormatFile[] = "berth-backup.json";
constexpr char kLockFile[] = "lock";
constexpr char kChunksDir[] = "chunks";
constexpr char kBackupsDir[] = "backups";
constexpr char kManifestSuffix[] = ".json";

bool IsTempName(std::string_view name) {
  return name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string_view::npos;
}

// Entries of `dir` other than "." and "..".
absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, StrCat("open directory ", dir));
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) return ErrnoStatus(err, StrCat("read directory ", dir));
  std::sort(names.begin(), names.end());
  return names;
}

// The backup a manifest file name stands for, or "" if it is not one.
std::string BackupOfFile(std::string_view file) {
  const std::string_view suffix = kManifestSuffix;
  if (file.size() <= suffix.size() || file.substr(file.size() - suffix.size()) != suffix) return "";
  std::string_view name = file.substr(0, file.size() - suffix.size());
  return ValidateBackupName(name).ok() ? std::string(name) : "";
}

absl::Status WriteAllAt(int fd, const char* data, int64_t length, int64_t offset, const std::string& what) {
  int64_t done = 0;
  while (done < length) {
    ssize_t n = ::pwrite(fd, data + done, static_cast<size_t>(length - done), offset + done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, StrCat("write ", what, " at ", offset + done));
    }
    done += n;
  }
  return absl::OkStatus();
}

// Zeroes [offset, offset + length) of a block device: discard-with-zeroes
// where the device has it, written zeros otherwise.
absl::Status ZeroRange(int fd, int64_t offset, int64_t length, const std::string& what) {
  if (length <= 0) return absl::OkStatus();
  if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length) == 0) return absl::OkStatus();
  static const std::string zeros(size_t{1} << 20, '\0');
  for (int64_t done = 0; done < length;) {
    const int64_t n = std::min<int64_t>(length - done, static_cast<int64_t>(zeros.size()));
    BERTH_RETURN_IF_ERROR(WriteAllAt(fd, zeros.data(), n, offset + done, what));
    done += n;
  }
  return absl::OkStatus();
}

}  // namespace

Repository::Repository(std::string root, int64_t chunk_size, int zstd_level, Clock& clock)
    : root_(std::move(root)),
      chunk_size_(chunk_size),
      clock_(clock),
      chunks_(StrCat(root_, "/", kChunksDir), zstd_level) {}

absl::StatusOr<std::unique_ptr<Repository>> Repository::Create(const std::string& root,
                                                               const RepositoryOptions& options, Clock& clock) {
  if (!IsValidChunkSize(options.chunk_size)) {
    return absl::InvalidArgumentError(StrCat("chunk size ", options.chunk_size, " is not a power of two in [",
                                             kMinChunkSize, ", ", kMaxChunkSize, "]"));
  }
  if (options.zstd_level < 1 || options.zstd_level > ZSTD_maxCLevel()) {
    return absl::InvalidArgumentError(StrCat("zstd level ", options.zstd_level, " is out of range"));
  }
  BERTH_RETURN_IF_ERROR(MakeDirs(root));
  const std::string format_path = StrCat(root, "/", kFormatFile);
  if (::access(format_path.c_str(), F_OK) == 0) {
    return absl::AlreadyExistsError(StrCat(root, " already holds a backup repository"));
  }
  // Only what an interrupted Create leaves may be there already.
  BERTH_ASSIGN_OR_RETURN(const auto entries, ListDir(root));
  for (const std::string& e : entries) {
    if (e != kLockFile && e != kChunksDir && e != kBackupsDir) {
      return absl::FailedPreconditionError(
          StrCat(root, " is not empty (", e, "); a backup repository needs a directory of its own"));
    }
  }
  BERTH_RETURN_IF_ERROR(ChunkStore::CreateLayout(StrCat(root, "/", kChunksDir)));
  BERTH_RETURN_IF_ERROR(MakeDirs(StrCat(root, "/", kBackupsDir)));
  const std::string lock_path = StrCat(root, "/", kLockFile);
  Fd lock(::open(lock_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0640));
  if (!lock.ok()) return ErrnoStatus(errno, StrCat("create ", lock_path));
  BERTH_RETURN_IF_ERROR(FsyncDir(root));
  // The format record last: its presence means the layout is complete.
  const json j = {{"format", kRepositoryFormat},
                  {"kind", "backup_repository"},
                  {"chunk_size", options.chunk_size},
                  {"zstd_level", options.zstd_level},
                  {"hash", "sha256"},
                  {"compression", "zstd"},
                  {"created_unix_nanos", absl::ToUnixNanos(clock.Now())}};
  BERTH_RETURN_IF_ERROR(WriteFileAtomic(format_path, j.dump(2) + "\n", 0640));
  return Open(root, clock);
}

absl::StatusOr<std::unique_ptr<Repository>> Repository::Open(const std::string& root, Clock& clock) {
  const std::string format_path = StrCat(root, "/", kFormatFile);
  absl::StatusOr<std::string> text = ReadFile(format_path);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(StrCat(root, " is not a berth backup repository (no ", kFormatFile, ")"));
  }
  if (!text.ok()) return text.status();
  int64_t chunk_size = 0;
  int level = 0;
  try {
    const json j = json::parse(*text);
    const int format = j.at("format").get<int>();
    if (format > kRepositoryFormat) {
      return absl::FailedPreconditionError(StrCat("backup repository ", root, " has format ", format,
                                                  "; this berth reads up to ", kRepositoryFormat,
                                                  " (made by a newer berth?)"));
    }
    if (format < 1 || j.at("kind").get<std::string>() != "backup_repository" ||
        j.at("hash").get<std::string>() != "sha256" || j.at("compression").get<std::string>() != "zstd") {
      throw std::invalid_argument("unexpected format, kind, hash or compression");
    }
    chunk_size = j.at("chunk_size").get<int64_t>();
    level = j.at("zstd_level").get<int>();
  } catch (const std::exception& e) {
    return absl::DataLossError(StrCat(format_path, " is malformed: ", e.what()));
  }
  if (!IsValidChunkSize(chunk_size) || level < 1 || level > ZSTD_maxCLevel()) {
    return absl::DataLossError(StrCat(format_path, " has a bad chunk size or zstd level"));
  }
  return std::unique_ptr<Repository>(new Repository(root, chunk_size, level, clock));
}

std::string Repository::BackupsDir() const { return StrCat(root_, "/", kBackupsDir); }

std::string Repository::ManifestPath(std::string_view name) const {
  return StrCat(root_, "/", kBackupsDir, "/", name, kManifestSuffix);
}

absl::StatusOr<Fd> Repository::Lock(bool exclusive, std::string_view what) const {
  const std::string path = StrCat(root_, "/", kLockFile);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.ok()) return ErrnoStatus(errno, StrCat("open ", path));
  while (::flock(fd.get(), (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) {
      return absl::UnavailableError(exclusive ? StrCat("cannot ", what,
                                                       ": a backup, restore or verify is using the repository; "
                                                       "retry when it is done")
                                              : StrCat("cannot ", what, ": garbage collection is running; retry"));
    }
    return ErrnoStatus(errno, StrCat("flock ", path));
  }
  return fd;
}

absl::StatusOr<RepositoryHold> Repository::HoldShared(std::string_view what) const {
  BERTH_ASSIGN_OR_RETURN(Fd lock, Lock(false, what));
  return RepositoryHold(std::move(lock), root_);
}

absl::StatusOr<std::unique_ptr<BackupWriter>> Repository::StartBackup(std::string_view name, RepositoryHold hold) {
  BERTH_RETURN_IF_ERROR(ValidateBackupName(name));
  if (hold.held() && hold.root_ != root_) {
    return absl::InvalidArgumentError(
        StrCat("start backup ", name, ": the lock held is of repository ", hold.root_, ", not ", root_));
  }
  Fd lock = std::move(hold.lock_);
  if (!lock.ok()) {
    BERTH_ASSIGN_OR_RETURN(lock, Lock(false, StrCat("start backup ", name)));
  }
  if (::access(ManifestPath(name).c_str(), F_OK) == 0) {
    return absl::AlreadyExistsError(StrCat("backup \"", name, "\" already exists"));
  }
  Manifest m;
  m.name = std::string(name);
  m.created_unix_nanos = absl::ToUnixNanos(clock_.Now());
  return std::unique_ptr<BackupWriter>(new BackupWriter(*this, std::move(lock), std::move(m)));
}

absl::StatusOr<std::vector<std::string>> Repository::ListBackups() const {
  BERTH_ASSIGN_OR_RETURN(const auto files, ListDir(BackupsDir()));
  std::vector<std::string> names;
  for (const std::string& f : files) {
    if (std::string name = BackupOfFile(f); !name.empty()) names.push_back(std::move(name));
  }
  return names;
}

absl::StatusOr<Manifest> Repository::ReadManifest(std::string_view name) const {
  BERTH_RETURN_IF_ERROR(ValidateBackupName(name));
  absl::StatusOr<std::string> text = ReadFile(ManifestPath(name));
  if (absl::IsNotFound(text.status())) return absl::NotFoundError(StrCat("no backup \"", name, "\""));
  if (!text.ok()) return text.status();
  return ManifestFromJson(*text, name);
}

absl::Status Repository::DeleteBackup(std::string_view name) {
  BERTH_RETURN_IF_ERROR(ValidateBackupName(name));
  const std::string path = ManifestPath(name);
  if (::access(path.c_str(), F_OK) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(StrCat("no backup \"", name, "\""));
    return ErrnoStatus(errno, StrCat("access ", path));
  }
  return RemoveFileDurably(path);
}

absl::StatusOr<RestoreStats> Repository::RestoreVolume(std::string_view backup, std::string_view volume,
                                                       const std::string& target, const RestoreOptions& options,
                                                       const ProgressFn& progress) {
  BERTH_ASSIGN_OR_RETURN(Fd lock, Lock(false, StrCat("restore from backup ", backup)));
  BERTH_ASSIGN_OR_RETURN(const Manifest m, ReadManifest(backup));
  const VolumeManifest* v = m.FindVolume(volume);
  if (v == nullptr) return absl::NotFoundError(StrCat("backup \"", backup, "\" has no volume \"", volume, "\""));

  Fd fd(::open(target.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.ok() && errno == ENOENT) fd = Fd(::open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.ok()) return ErrnoStatus(errno, StrCat("open ", target));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, StrCat("stat ", target));
  bool zeroed = options.target_is_zeroed;
  if (S_ISREG(st.st_mode)) {
    // Emptied, then sized: every byte a hole, so holes need no writing.
    if (::ftruncate(fd.get(), 0) != 0 || ::ftruncate(fd.get(), v->size_bytes) != 0) {
      return ErrnoStatus(errno, StrCat("truncate ", target));
    }
    zeroed = true;
  } else if (S_ISBLK(st.st_mode)) {
    uint64_t device_size = 0;
    if (::ioctl(fd.get(), BLKGETSIZE64, &device_size) != 0) return ErrnoStatus(errno, StrCat("size of ", target));
    if (static_cast<int64_t>(device_size) < v->size_bytes) {
      return absl::FailedPreconditionError(
          StrCat(target, " holds ", device_size, " bytes; volume \"", volume, "\" needs ", v->size_bytes));
    }
  } else {
    return absl::InvalidArgumentError(StrCat(target, " is neither a regular file nor a block device"));
  }

  constexpr int64_t kBlock = 4096;
  static const std::string zero_block(kBlock, '\0');
  RestoreStats stats;
  const int64_t total = v->size_bytes;
  int64_t pos = 0;  // everything before is restored
  // The last few chunks read, newest first: an incremental backup's slices
  // alternate between a window's base chunk and the pack of changed blocks
  // cut into it, so each is read and verified once.
  constexpr size_t kCachedChunks = 4;
  std::vector<std::pair<std::string, std::shared_ptr<const std::string>>> cache;
  for (const Extent& e : v->extents) {
    if (!zeroed) BERTH_RETURN_IF_ERROR(ZeroRange(fd.get(), pos, e.offset - pos, target));
    std::shared_ptr<const std::string> chunk;
    for (auto it = cache.begin(); it != cache.end(); ++it) {
      if (it->first == e.hash) {
        chunk = it->second;
        std::rotate(cache.begin(), it, it + 1);
        break;
      }
    }
    if (chunk == nullptr) {
      absl::StatusOr<std::string> data = chunks_.Get(e.hash, v->chunk_size);
      if (data.ok() && static_cast<int64_t>(data->size()) < e.chunk_offset + e.length) {
        data = absl::DataLossError(
            StrCat("chunk ", e.hash, " holds ", data->size(), " bytes, the extent needs ", e.chunk_offset + e.length));
      }
      if (!data.ok()) {
        return absl::Status(data.status().code(),
                            StrCat(data.status().message(), " (backup \"", backup, "\", volume \"", volume,
                                   "\", offset ", e.offset, "); restore stopped, ", target, " is incomplete"));
      }
      ++stats.chunks_read;
      chunk = std::make_shared<const std::string>(std::move(*data));
      cache.emplace(cache.begin(), e.hash, chunk);
      if (cache.size() > kCachedChunks) cache.pop_back();
    } else if (static_cast<int64_t>(chunk->size()) < e.chunk_offset + e.length) {
      return absl::DataLossError(StrCat("chunk ", e.hash, " holds ", chunk->size(), " bytes, the extent at ", e.offset,
                                        " needs ", e.chunk_offset + e.length, " (backup \"", backup, "\", volume \"",
                                        volume, "\"); restore stopped, ", target, " is incomplete"));
    }
    const char* const data = chunk->data() + e.chunk_offset;
    // Skip zero blocks when the target reads as zeros: keeps files sparse.
    for (int64_t off = 0; off < e.length;) {
      int64_t n = std::min(kBlock, e.length - off);
      const bool zero = zeroed && std::memcmp(data + off, zero_block.data(), n) == 0;
      if (!zero) {
        // Coalesce the run of non-zero blocks into one write.
        int64_t end = off + n;
        while (end < e.length) {
          const int64_t m2 = std::min(kBlock, e.length - end);
          if (zeroed && std::memcmp(data + end, zero_block.data(), m2) == 0) break;
          end += m2;
        }
        n = end - off;
        BERTH_RETURN_IF_ERROR(WriteAllAt(fd.get(), data + off, n, e.offset + off, target));
        stats.bytes_written += n;
      }
      off += n;
    }
    pos = e.offset + e.length;
    if (progress) progress(pos, total);
  }
  if (!zeroed) BERTH_RETURN_IF_ERROR(ZeroRange(fd.get(), pos, v->size_bytes - pos, target));
  if (::fsync(fd.get()) != 0) return ErrnoStatus(errno, StrCat("fsync ", target));
  if (progress) progress(total, total);
  return stats;
}

std::string VerifyReport::Describe() const {
  std::string out;
  for (const auto& [name, status] : manifests) {
    out += StrCat("backup \"", name, "\": ", status.message(), "\n");
  }
  for (const ChunkProblem& p : problems) {
    std::string backups;
    for (const std::string& b : p.backups) backups += (backups.empty() ? "" : ", ") + b;
    out += StrCat(p.status.message(), " (referenced by backups: ", backups, ")\n");
  }
  return out;
}

absl::StatusOr<VerifyReport> Repository::Verify(std::optional<std::string_view> backup) {
  BERTH_ASSIGN_OR_RETURN(Fd lock, Lock(false, "verify"));
  std::vector<std::string> names;
  if (backup.has_value()) {
    BERTH_RETURN_IF_ERROR(ValidateBackupName(*backup));
    names.emplace_back(*backup);
  } else {
    BERTH_ASSIGN_OR_RETURN(names, ListBackups());
  }
  VerifyReport report;
  struct Ref {
    int64_t max_size = 0;  // the largest chunk size of a volume naming it
    int64_t needed = 0;    // the furthest byte an extent names
    std::set<std::string> backups;
  };
  std::map<std::string, Ref> refs;
  for (const std::string& name : names) {
    absl::StatusOr<Manifest> m = ReadManifest(name);
    if (!m.ok()) {
      if (backup.has_value() && absl::IsNotFound(m.status())) return m.status();
      report.manifests.emplace_back(name, m.status());
      continue;
    }
    ++report.backups_checked;
    for (const VolumeManifest& v : m->volumes) {
      for (const Extent& e : v.extents) {
        Ref& ref = refs[e.hash];
        ref.max_size = std::max(ref.max_size, v.chunk_size);
        ref.needed = std::max(ref.needed, e.chunk_offset + e.length);
        ref.backups.insert(name);
      }
    }
  }
  for (const auto& [hash, ref] : refs) {
    absl::StatusOr<std::string> data = chunks_.Get(hash, ref.max_size);
    if (data.ok() && static_cast<int64_t>(data->size()) < ref.needed) {
      data = absl::DataLossError(
          StrCat("chunk ", hash, " holds ", data->size(), " bytes, an extent needs ", ref.needed, " (truncated?)"));
    }
    if (data.ok()) {
      ++report.chunks_checked;
      report.bytes_checked += static_cast<int64_t>(data->size());
      continue;
    }
    if (!absl::IsNotFound(data.status()) && !absl::IsDataLoss(data.status())) {
      return data.status();  // an I/O error says nothing about the chunk
    }
    ++report.chunks_checked;
    report.problems.push_back({hash, data.status(), {ref.backups.begin(), ref.backups.end()}});
  }
  return report;
}

absl::StatusOr<GcReport> Repository::Gc() {
  BERTH_ASSIGN_OR_RETURN(Fd lock, Lock(true, "collect garbage"));
  GcReport report;
  // Mark. Any doubt about what a manifest references stops the GC here,
  // before anything is removed.
  std::set<std::string> live;
  std::vector<std::string> temp_manifests;
  BERTH_ASSIGN_OR_RETURN(const auto files, ListDir(BackupsDir()));
  for (const std::string& f : files) {
    if (IsTempName(f)) {
      temp_manifests.push_back(f);  // an interrupted commit: under the lock, nobody is writing it
      continue;
    }
    const std::string name = BackupOfFile(f);
    if (name.empty()) {
      return absl::FailedPreconditionError(StrCat("garbage collection refused: unknown file ", BackupsDir(), "/", f,
                                                  " among the manifests; move it away"));
    }
    absl::StatusOr<Manifest> m = ReadManifest(name);
    if (!m.ok()) {
      return absl::Status(m.status().code(),
                          StrCat("garbage collection refused: ", m.status().message(), "; nothing was removed"));
    }
    ++report.backups;
    for (const VolumeManifest& v : m->volumes) {
      for (const Extent& e : v.extents) live.insert(e.hash);
    }
  }
  // Sweep.
  const std::string chunks_dir = StrCat(root_, "/", kChunksDir);
  BERTH_ASSIGN_OR_RETURN(const auto subdirs, ListDir(chunks_dir));
  for (const std::string& sub : subdirs) {
    const std::string dir = StrCat(chunks_dir, "/", sub);
    if (sub.size() != 2 || !IsChunkHash(sub + std::string(62, '0'))) {
      report.ignored.push_back(dir);
      continue;
    }
    BERTH_ASSIGN_OR_RETURN(const auto names, ListDir(dir));
    bool changed = false;
    for (const std::string& n : names) {
      const std::string path = StrCat(dir, "/", n);
      const bool is_chunk =
          n.size() == 64 + 4 && n.ends_with(".zst") && IsChunkHash(n.substr(0, 64)) && n.substr(0, 2) == sub;
      if (is_chunk && live.contains(n.substr(0, 64))) {
        ++report.chunks_kept;
        continue;
      }
      if (!is_chunk && !IsTempName(n)) {
        report.ignored.push_back(path);
        continue;
      }
      struct stat st {};
      const int64_t size = ::lstat(path.c_str(), &st) == 0 ? st.st_size : 0;
      if (::unlink(path.c_str()) != 0) {
        if (errno == ENOENT) continue;
        return ErrnoStatus(errno, StrCat("remove ", path));
      }
      changed = true;
      if (is_chunk) {
        ++report.chunks_removed;
        report.bytes_removed += size;
      } else {
        ++report.temp_files_removed;
      }
    }
    if (changed) BERTH_RETURN_IF_ERROR(FsyncDir(dir));
  }
  for (const std::string& f : temp_manifests) {
    BERTH_RETURN_IF_ERROR(RemoveFileDurably(StrCat(BackupsDir(), "/", f)));
    ++report.temp_files_removed;
  }
  return report;
}

}  // namespace berth::backup
